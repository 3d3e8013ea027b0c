"""The daemon's state: SQLAlchemy 2.x typed models, the engine factory, migrations, the lease.

Tables (all times integer epoch seconds, from the daemon's clock):

- ``chains``: one registered training run: its owner, the snapshot every segment is
  submitted from (script bytes and hash, working directory, export policy and
  environment, sbatch options), its end (``--segments N`` = at most N
  jobs, and/or ``--until-file``), its state and the policy's latest answer.
- ``submissions``: the exactly-once ledger. A row is written and COMMITTED with a fresh
  token (state INTENT) before sbatch runs; the token goes to Slurm in ``--comment`` and in
  the job name. Then SUBMITTED (sbatch returned an id), UNKNOWN (sbatch timed out or the
  controller went away mid-call: the job may exist), ADOPTED (an INTENT/UNKNOWN whose
  token was later found in squeue/sacct), LOST (not found after ``unknown_timeout_s``
  of successful polls: it never reached Slurm; only then may the segment be submitted
  again, under a new token) or REJECTED (sbatch refused it: no job exists).
- ``segments``: one per Slurm job that belongs to a chain (from a SUBMITTED/ADOPTED
  submission): its job id, what Slurm last said, and what Mirage concluded.
- ``events``: one row per decision or action, with its inputs and reason (JSON).
- ``leases``: one row per cluster; the daemon that holds an unexpired lease acts.
- ``daemon_state``: small key/value facts (the accounting cursor).

SQLite (WAL mode, in the state directory) by default; PostgreSQL by URL. The schema is
created and upgraded by Alembic (``mirage/daemon/migrations``), ``upgrade head`` at start.
"""

from __future__ import annotations

import enum
import functools
import json
import logging
import os
import random
import re
import secrets
import socket
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Engine,
    Enum,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    String,
    Text,
    case,
    create_engine,
    event,
    insert,
    select,
    update,
)
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column, sessionmaker

log = logging.getLogger(__name__)

#: A job's token: "mg" + 16 hex digits, carried in --comment ("mirage:<token>") and in the
#: job name ("<name>.<token>").
TOKEN_PREFIX = "mg"


P = ParamSpec("P")
R = TypeVar("R")

#: Set only inside :func:`seeded_ids` (a simulated run): ids from a seeded generator.
_SEEDED: ContextVar[random.Random | None] = ContextVar("mirage_seeded_ids", default=None)


def _hex(nbytes: int) -> str:
    seeded = _SEEDED.get()
    return seeded.randbytes(nbytes).hex() if seeded is not None else secrets.token_hex(nbytes)


@contextmanager
def seeded_ids(seed: int) -> Iterator[None]:
    """Chain ids and tokens from a generator seeded with ``seed`` while inside: for
    simulated runs (the demo, the replays), whose daemon orders a cycle's submissions, and
    so the simulator's job ids and ties, by them. A run is then reproducible to the job.
    Never for a real daemon: two daemons on one database would draw the same ids."""
    token = _SEEDED.set(random.Random(seed))
    try:
        yield
    finally:
        _SEEDED.reset(token)


def reproducible(fn: Callable[P, R]) -> Callable[P, R]:
    """``fn`` run under :func:`seeded_ids` (seed 0): a simulated run's entry point."""

    @functools.wraps(fn)
    def run(*args: P.args, **kwargs: P.kwargs) -> R:
        with seeded_ids(0):
            return fn(*args, **kwargs)

    return run


def new_token() -> str:
    return TOKEN_PREFIX + _hex(8)


def new_chain_id() -> str:
    return "c" + _hex(5)


class ChainState(enum.Enum):
    ACTIVE = "ACTIVE"  # segments are being run
    COMPLETED = "COMPLETED"  # its N segments ran, or the completion marker was written
    STOPPED = "STOPPED"  # a segment ended in a way that needs the user (FAILED, OOM, ...)
    CANCELLED = "CANCELLED"  # the user cancelled it
    FAILED = "FAILED"  # Mirage could not go on (sbatch refused the successor repeatedly)

    @property
    def is_final(self) -> bool:
        return self is not ChainState.ACTIVE


class SubmissionState(enum.Enum):
    INTENT = "INTENT"
    SUBMITTED = "SUBMITTED"
    UNKNOWN = "UNKNOWN"
    ADOPTED = "ADOPTED"
    LOST = "LOST"
    REJECTED = "REJECTED"

    @property
    def unresolved(self) -> bool:
        return self in (SubmissionState.INTENT, SubmissionState.UNKNOWN)

    @property
    def has_job(self) -> bool:
        return self in (SubmissionState.SUBMITTED, SubmissionState.ADOPTED)


class Base(DeclarativeBase):
    pass


class Chain(Base):
    __tablename__ = "chains"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    name: Mapped[str] = mapped_column(String(128))
    cluster: Mapped[str] = mapped_column(String(64), default="")
    owner: Mapped[str] = mapped_column(String(64), index=True)
    uid: Mapped[int] = mapped_column(Integer)
    gid: Mapped[int] = mapped_column(Integer)
    groups: Mapped[list[int]] = mapped_column(JSON, default=list)  # supplementary gids
    state: Mapped[ChainState] = mapped_column(
        Enum(ChainState, native_enum=False, length=16), default=ChainState.ACTIVE, index=True
    )
    reason: Mapped[str] = mapped_column(Text, default="")
    # snapshot taken at registration; every segment is submitted from it
    script: Mapped[bytes] = mapped_column(LargeBinary, deferred=True)
    script_sha256: Mapped[str] = mapped_column(String(64))
    script_path: Mapped[str] = mapped_column(Text, default="")  # for humans only
    chdir: Mapped[str] = mapped_column(Text)
    export: Mapped[str] = mapped_column(Text, default="ALL")
    environment: Mapped[dict[str, str]] = mapped_column(JSON, default=dict, deferred=True)
    sbatch_args: Mapped[list[str]] = mapped_column(JSON, default=list)
    partition: Mapped[str | None] = mapped_column(String(64), nullable=True)
    time_limit_s: Mapped[int] = mapped_column(Integer)
    nodes: Mapped[int] = mapped_column(Integer, default=1)
    gpus_per_node: Mapped[int] = mapped_column(Integer, default=0)
    gres: Mapped[str | None] = mapped_column(String(128), nullable=True)
    # the end: at most N segments (jobs; None = until the marker), and/or a marker path
    segments_target: Mapped[int | None] = mapped_column(Integer, nullable=True)
    until_file: Mapped[str | None] = mapped_column(Text, nullable=True)
    trained_s: Mapped[int] = mapped_column(Integer, default=0)
    next_index: Mapped[int] = mapped_column(Integer, default=0)  # the next segment's k
    # how long before its limit the chain's last segment that ended on its own ended (0:
    # it ran to its limit); NULL until one has (advance.record_early_end, [policy]
    # presubmit_only_limit_bound)
    early_end_s: Mapped[int | None] = mapped_column(Integer, nullable=True)
    # the policy that decides it, and the configured one it stands in for when that one
    # is set aside ("" when the configured one decides; why: ``note``)
    policy: Mapped[str] = mapped_column(String(64), default="")
    fallback_for: Mapped[str] = mapped_column(String(64), default="")
    rejections: Mapped[int] = mapped_column(Integer, default=0)
    # the policy's latest answer for the pending transition (for `mirage status`)
    decided_at: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    predicted_start: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    predicted_low: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    predicted_high: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    # sbatch --test-only's answer for the successor not yet submitted, and for which k
    slurm_estimate: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    slurm_estimate_for: Mapped[int | None] = mapped_column(Integer, nullable=True)
    # This chain's own trouble, kept apart from every other chain's (the cycle goes on for
    # them): the last error in its decision, submission or bookkeeping, when, and how many
    # so far; cleared ("") by its next step that succeeds.
    error: Mapped[str] = mapped_column(Text, default="")
    error_at: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    errors: Mapped[int] = mapped_column(Integer, default=0)
    # Why the chain is not being pre-submitted as its policy would (a fallback and its
    # reason, the last segment running, ...); "" when nothing needs saying.
    note: Mapped[str] = mapped_column(Text, default="")
    # `chain submit --plan`: the plan request (the work, scaling, overhead, candidates),
    # the shape chosen, its predicted completion and interval, and the segment it was
    # made for (mirage.daemon.replan); None for a chain registered with a shape of its own
    plan: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    created_at: Mapped[int] = mapped_column(BigInteger)
    updated_at: Mapped[int] = mapped_column(BigInteger)

    @property
    def planned_cpus_per_node(self) -> int:
        """A planned CPU shape's CPUs per node (they are in the chain's sbatch options,
        not in a column of their own); 0 for any other chain."""
        return int(((self.plan or {}).get("shape") or {}).get("cpus_per_node", 0))


class Submission(Base):
    __tablename__ = "submissions"

    token: Mapped[str] = mapped_column(String(32), primary_key=True)
    chain_id: Mapped[str] = mapped_column(ForeignKey("chains.id"), index=True)
    index: Mapped[int] = mapped_column(Integer)  # segment index k, from 0
    state: Mapped[SubmissionState] = mapped_column(
        Enum(SubmissionState, native_enum=False, length=16), index=True
    )
    time_limit_s: Mapped[int] = mapped_column(Integer)
    job_id: Mapped[str | None] = mapped_column(String(32), nullable=True)
    presubmitted: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[int] = mapped_column(BigInteger)
    resolved_at: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    error: Mapped[str] = mapped_column(Text, default="")


class Segment(Base):
    __tablename__ = "segments"
    __table_args__ = (Index("ix_segments_chain_index", "chain_id", "index"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    chain_id: Mapped[str] = mapped_column(ForeignKey("chains.id"))
    index: Mapped[int] = mapped_column(Integer)
    token: Mapped[str] = mapped_column(ForeignKey("submissions.token"), unique=True)
    job_id: Mapped[str] = mapped_column(String(32), index=True)
    submitted_at: Mapped[int] = mapped_column(BigInteger)
    presubmitted: Mapped[bool] = mapped_column(Boolean, default=False)
    predicted_start: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    # the 90% interval stated with that forecast (policies that give one): whether the
    # start falls inside is counted when the transition is recorded
    predicted_low: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    predicted_high: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    slurm_estimate: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    # what Slurm last said
    job_state: Mapped[str] = mapped_column(String(32), default="")
    reason: Mapped[str] = mapped_column(String(128), default="")
    start: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    end: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    time_limit_s: Mapped[int | None] = mapped_column(Integer, nullable=True)
    missing_since: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    # what Mirage did and concluded
    signalled_at: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    # a revocation's intent (committed before the hold and scancel): Mirage may have
    # cancelled this pending pre-submission; cleared if it started first
    revoke_at: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    cancelled_by_mirage: Mapped[bool] = mapped_column(Boolean, default=False)
    requeued: Mapped[bool] = mapped_column(Boolean, default=False)  # went back to PENDING
    outcome: Mapped[str | None] = mapped_column(String(16), nullable=True)  # states.Action
    finished: Mapped[bool] = mapped_column(Boolean, default=False, index=True)
    transition_recorded: Mapped[bool] = mapped_column(Boolean, default=False)
    # measured (mirage.daemon.timing): the restart overhead the job reported, and the
    # window both allocations were held as it took over (its predecessor's end - its start)
    restart_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    handoff_s: Mapped[int | None] = mapped_column(Integer, nullable=True)


class Event(Base):
    __tablename__ = "events"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    at: Mapped[int] = mapped_column(BigInteger, index=True)
    chain_id: Mapped[str | None] = mapped_column(String(32), nullable=True, index=True)
    kind: Mapped[str] = mapped_column(String(48))
    reason: Mapped[str] = mapped_column(Text, default="")
    data: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)


class Lease(Base):
    __tablename__ = "leases"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    holder: Mapped[str] = mapped_column(String(128))
    acquired_at: Mapped[int] = mapped_column(BigInteger)
    expires_at: Mapped[int] = mapped_column(BigInteger)


class DaemonState(Base):
    __tablename__ = "daemon_state"

    key: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[str] = mapped_column(Text)


# ---- engine --------------------------------------------------------------------------

DEFAULT_DB_NAME = "mirage.sqlite"


def database_url(url: str | None, state_dir: str | Path) -> str:
    """The configured URL, or SQLite in the state directory."""
    if url:
        return url
    return f"sqlite:///{Path(state_dir) / DEFAULT_DB_NAME}"


def make_engine(url: str) -> Engine:
    """An engine; SQLite gets WAL mode, a busy timeout and foreign keys."""
    if url.startswith("sqlite"):
        engine = create_engine(url, connect_args={"timeout": 30})

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
            cur = dbapi_conn.cursor()
            if ":memory:" not in url and url not in ("sqlite://", "sqlite:///"):
                cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.close()

        return engine
    return create_engine(url, pool_pre_ping=True)


def migrate(engine: Engine, revision: str = "head", *, downgrade: bool = False) -> None:
    """``alembic upgrade <revision>`` (or ``downgrade``) on this engine (run at every start)."""
    from alembic import command
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(Path(__file__).parent / "migrations"))
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        if downgrade:
            command.downgrade(cfg, revision)
        else:
            command.upgrade(cfg, revision)


#: The daemon's lease holder name, ``f"{hostname}:{pid}:{tag}"`` (``Daemon.__init__``).
_HOLDER = re.compile(r"(?P<host>[^:\s]+):(?P<pid>[1-9][0-9]{0,9}):(?P<tag>[0-9a-f]+)", re.ASCII)
#: Linux's largest pid_max (2**22): a larger "pid" is taken for a malformed name.
_PID_MAX = 4_194_304


@dataclass(frozen=True)
class LeaseInfo:
    """A held lease (:meth:`Store.lease_info`)."""

    holder: str
    acquired_at: int
    expires_at: int
    alive: bool | None  # None: the holder is on another host, or its name is not host:pid:tag


def holder_alive(holder: str) -> bool | None:
    """Whether the process named by a lease holder ``host:pid:tag`` is alive.

    True or False only for a holder on this host (its host is ``socket.gethostname()``):
    False when no process has its pid, True when one does (including one this process may
    not signal, and one that reused the pid: the lease is then waited out, never taken
    early). None for a holder on another host or a name not of that form.
    """
    m = _HOLDER.fullmatch(holder)
    if m is None or m["host"] != socket.gethostname():
        return None
    pid = int(m["pid"])
    if pid > _PID_MAX:
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


#: What SQLite and PostgreSQL say when the database cannot be written, and its words.
_UNWRITABLE = (
    ("database or disk is full", "full (its disk has no space left)"),
    ("no space left on device", "full (its disk has no space left)"),
    ("could not extend file", "full (its disk has no space left)"),
    ("disk quota exceeded", "full (its disk quota is used up)"),
    ("readonly database", "read-only"),
    ("read-only file system", "read-only"),
    ("read-only transaction", "read-only"),
)


def unwritable(exc: BaseException, path: str | None = None) -> str | None:
    """Why the database cannot be written ("full (...)", "read-only (...)"), when ``exc``
    says so or, for a SQLite file at ``path``, its filesystem does (SQLite in WAL mode on a
    read-only filesystem says only "unable to open database file"); None otherwise."""
    text = str(exc).lower()
    said = next((words for needle, words in _UNWRITABLE if needle in text), None)
    if said is not None or path is None:
        return said
    folder = Path(path).absolute().parent
    try:
        fs = os.statvfs(folder)
    except OSError:
        return None
    if fs.f_flag & os.ST_RDONLY:
        return "read-only (its filesystem is mounted read-only)"
    if fs.f_bavail == 0:
        return "full (its disk has no space left)"
    if not os.access(folder, os.W_OK):
        return "read-only (its directory cannot be written)"
    return None


class Store:
    """Sessions on one database, and the lease."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.sessions = sessionmaker(engine, expire_on_commit=False)

    @property
    def sqlite_path(self) -> str | None:
        """The SQLite file's path (None: another database, or in memory)."""
        url = self.engine.url
        if url.get_backend_name() != "sqlite" or url.database in (None, "", ":memory:"):
            return None
        return url.database

    def unwritable(self, exc: BaseException) -> str | None:
        """:func:`unwritable` for this database."""
        return unwritable(exc, self.sqlite_path)

    @classmethod
    def open(cls, url: str, *, upgrade: bool = True) -> Store:
        engine = make_engine(url)
        if upgrade:
            migrate(engine)
        return cls(engine)

    @contextmanager
    def session(self) -> Iterator[Session]:
        """A session committed on success, rolled back on error."""
        with self.sessions() as s:
            try:
                yield s
                s.commit()
            except BaseException:
                s.rollback()
                raise

    # ---- lease -------------------------------------------------------------------

    def acquire_lease(self, name: str, holder: str, now: int, ttl_s: int) -> bool:
        """Take or renew the lease ``name`` for ``holder`` until ``now + ttl_s``.

        Atomic on SQLite and PostgreSQL alike: one conditional UPDATE (renew, or take an
        expired lease), else one INSERT that fails on the primary key if another holds it.

        An unexpired lease is taken at once, without waiting out its ``ttl_s``, only from a
        holder that is certainly dead: its name says it ran on this host
        (``socket.gethostname()``) as a process that no longer exists (``kill(pid, 0)``:
        no such process), e.g. a daemon killed with ``kill -9``. The take is one UPDATE
        conditional on the dead holder's exact name, so two daemons racing for it cannot
        both win. A holder on another host, one whose process lives (or may: ``EPERM``) and
        a name not of the daemon's ``host:pid:tag`` form are waited out as before.
        """
        acquired = case((Lease.holder == holder, Lease.acquired_at), else_=now)
        with self.engine.begin() as conn:
            res = conn.execute(
                update(Lease)
                .where(Lease.name == name)
                .where((Lease.holder == holder) | (Lease.expires_at < now))
                .values(holder=holder, acquired_at=acquired, expires_at=now + ttl_s)
            )
            if res.rowcount == 1:
                return True
            current = conn.execute(select(Lease.holder).where(Lease.name == name)).scalar()
        if current is not None:
            return self._take_from_dead(name, str(current), holder, now, ttl_s)
        try:
            with self.engine.begin() as conn:
                conn.execute(
                    insert(Lease).values(
                        name=name, holder=holder, acquired_at=now, expires_at=now + ttl_s
                    )
                )
        except IntegrityError:
            return False
        return True

    def _take_from_dead(self, name: str, dead: str, holder: str, now: int, ttl_s: int) -> bool:
        """Take the lease from ``dead`` if its process is certainly gone (see acquire_lease)."""
        if holder_alive(dead) is not False:
            return False
        with self.engine.begin() as conn:
            res = conn.execute(
                update(Lease)
                .where(Lease.name == name, Lease.holder == dead)
                .values(holder=holder, acquired_at=now, expires_at=now + ttl_s)
            )
        if res.rowcount != 1:
            return False  # another daemon took it first, or the holder renewed
        log.warning("lease %s held by dead process %s: taken over", name, dead)
        return True

    def release_lease(self, name: str, holder: str) -> None:
        with self.engine.begin() as conn:
            conn.execute(
                update(Lease).where(Lease.name == name, Lease.holder == holder).values(expires_at=0)
            )

    def lease_holder(self, name: str, now: int) -> str | None:
        info = self.lease_info(name, now)
        return None if info is None else info.holder

    def lease_info(self, name: str, now: int) -> LeaseInfo | None:
        """Who holds the lease ``name`` at ``now``, or None when nobody does (never taken,
        released, or expired: any daemon may take it).

        ``holder`` is the daemon's ``host:pid:tag``; ``acquired_at`` when that holder took
        it (a renewal keeps it), ``expires_at`` when it lapses unless renewed (epoch
        seconds). ``alive``: True when the holder runs on this host and its process exists
        (or cannot be signalled: another user's), False when it ran on this host and its
        process is gone (a daemon started now takes the lease at once), None when that
        cannot be told (another host, or a holder name not of the ``host:pid:tag`` form).
        """
        with self.engine.connect() as conn:
            row = conn.execute(select(Lease).where(Lease.name == name)).first()
        if row is None or row.expires_at < now:
            return None
        holder = str(row.holder)
        return LeaseInfo(
            holder=holder,
            acquired_at=int(row.acquired_at),
            expires_at=int(row.expires_at),
            alive=holder_alive(holder),
        )

    # ---- small helpers ----------------------------------------------------------------

    def get_value(self, key: str) -> str | None:
        with self.sessions() as s:
            row = s.get(DaemonState, key)
            return None if row is None else row.value

    def set_value(self, key: str, value: str) -> None:
        with self.session() as s:
            row = s.get(DaemonState, key)
            if row is None:
                s.add(DaemonState(key=key, value=value))
            else:
                row.value = value


def event_row(
    at: int, kind: str, chain_id: str | None = None, reason: str = "", **data: Any
) -> Event:
    """An events row; ``data`` must be JSON-serialisable (checked now, not at flush)."""
    json.dumps(data)
    return Event(at=at, chain_id=chain_id, kind=kind, reason=reason, data=data)
