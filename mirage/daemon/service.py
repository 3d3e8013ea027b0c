"""Running the daemon: APScheduler triggers ``cycle``; systemd's notify and watchdog.

One APScheduler 3.x ``BlockingScheduler`` interval job calls ``Daemon.cycle(now)`` every
``poll_interval_s`` with ``max_instances=1`` and ``coalesce=True``: a cycle never runs
twice at once. APScheduler drops an overrunning or missed run silently (a log line at
most); Mirage counts them in ``mirage_cycles_skipped_total{why="overrun"|"missed"}``.

systemd (``Type=notify``): ``READY=1`` once the database is migrated and the lease code
runs; ``WATCHDOG=1`` only after a cycle *finished*, and only if the previous finished
cycle is at most three intervals old (``WatchdogSec`` should be three intervals too):
a hung cycle (a stuck sbatch, a dead database) gets the daemon restarted; a controller
outage does not (the cycle finishes, with an error counted), nor does a cycle that failed
as a whole but could record that (``mirage_cycle_failures_total``, ``mirage status``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import time
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

from mirage.daemon.config import Config
from mirage.daemon.core import Daemon
from mirage.daemon.store import Store, database_url

log = logging.getLogger(__name__)


class StartupError(Exception):
    """The daemon's database or socket cannot be used: nothing was started."""


class Notifier:
    """sd_notify, a no-op outside systemd (NOTIFY_SOCKET unset) or without sdnotify."""

    def __init__(self) -> None:
        self._n: Any = None
        try:
            import sdnotify

            self._n = sdnotify.SystemdNotifier()
        except ImportError:  # pragma: no cover - optional dependency
            log.info("sdnotify not installed: no systemd notifications")

    def notify(self, state: str) -> None:
        if self._n is not None:
            self._n.notify(state)


class Watchdog:
    """Feeds systemd only after a cycle finished within three intervals of the last one."""

    def __init__(self, interval_s: int, notifier: Notifier, clock: Callable[[], float]) -> None:
        self.interval_s = interval_s
        self.notifier = notifier
        self.clock = clock
        self.last_finished: float | None = None
        self.fed = 0

    def cycle_finished(self) -> bool:
        now = self.clock()
        ok = self.last_finished is None or now - self.last_finished <= 3 * self.interval_s
        self.last_finished = now
        if ok:
            self.notifier.notify("WATCHDOG=1")
            self.fed += 1
        return ok


#: At most one cycle woken by users' requests per this many seconds: a loop of requests
#: must not turn into back-to-back squeue and sacct calls on the controller.
WAKE_MIN_GAP_S = 15.0


class Wakeups:
    """When a cycle woken by a request may run: at once, or WAKE_MIN_GAP_S after the
    last woken one (requests in between share it)."""

    def __init__(self, clock: Callable[[], float], gap_s: float = WAKE_MIN_GAP_S) -> None:
        self.clock = clock
        self.gap_s = gap_s
        self.last: float | None = None

    def delay(self) -> float:
        now = self.clock()
        at = now if self.last is None else max(now, self.last + self.gap_s)
        self.last = at
        return at - now


def serve_metrics(daemon: Daemon, config: Config) -> None:
    """Start the Prometheus exporter (port 0: none). A port that cannot be bound (in use,
    perhaps taken by another local user, or an address this host lacks) is logged as an
    error and the daemon runs on without metrics: provisioning matters more, and the
    scrape target's absence is what monitoring sees."""
    if not config.metrics.port:
        return
    where = f"{config.metrics.address}:{config.metrics.port}"
    try:
        daemon.metrics.serve(config.metrics.address, config.metrics.port)
    except OSError as exc:
        log.error("cannot serve metrics on %s: %s; running without metrics", where, exc)


def run_service(daemon: Daemon, config: Config) -> None:
    """Block: run cycles until SIGTERM/SIGINT."""
    from apscheduler.events import EVENT_JOB_MAX_INSTANCES, EVENT_JOB_MISSED, JobEvent
    from apscheduler.schedulers.blocking import BlockingScheduler

    interval = config.daemon.poll_interval_s
    notifier = Notifier()
    watchdog = Watchdog(interval, notifier, time.monotonic)
    serve_metrics(daemon, config)

    def tick() -> None:
        # A cycle that failed as a whole returns (counted and recorded, for `mirage
        # status`) and still feeds the watchdog: the daemon makes progress and a restart
        # would not help. Only a cycle that cannot even record that (the database is
        # gone) raises here, and the watchdog then restarts the daemon.
        try:
            report = daemon.cycle(int(time.time()))
        except Exception:
            log.exception("cycle failed and could not be recorded")
            return
        log.debug(
            "cycle: acted=%s skipped=%s reads=%d submitted=%d unknown=%d in %.3fs",
            report.acted,
            report.skipped or "",
            report.slurm_reads,
            len(report.submitted),
            len(report.unknown),
            report.duration_s,
        )
        watchdog.cycle_finished()

    def skipped(event: JobEvent) -> None:
        why = "overrun" if event.code == EVENT_JOB_MAX_INSTANCES else "missed"
        daemon.metrics.cycles_skipped.labels(why).inc()

    scheduler = BlockingScheduler(timezone="UTC")
    scheduler.add_listener(skipped, EVENT_JOB_MAX_INSTANCES | EVENT_JOB_MISSED)
    from mirage.daemon.api import Api, ApiServer
    from mirage.daemon.identity import owner_access_check

    woken = Wakeups(time.monotonic)

    def wake() -> None:  # a user registered or cancelled a chain: cycle soon
        import datetime as dt

        when = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=woken.delay())
        job = scheduler.get_job("cycle")
        if job is not None and job.next_run_time is not None and job.next_run_time <= when:
            return  # the regular cycle comes sooner: a wake never postpones it
        scheduler.modify_job("cycle", next_run_time=when)

    try:
        api = ApiServer(
            config.socket.path,
            Api(
                daemon.store,
                cluster=config.daemon.cluster,
                wake=wake,
                config=config,
                partitions=daemon.partitions,
                planner=daemon.planner.answer,
                marker_check=daemon.ctx.marker_check,
                database_health=daemon.database_health,
                access_check=owner_access_check(config),
            ),
        )
    except OSError as exc:
        raise StartupError(f"cannot open the socket {config.socket.path}: {exc}") from exc
    api.start()
    scheduler.add_job(
        tick,
        "interval",
        seconds=interval,
        max_instances=1,
        coalesce=True,
        misfire_grace_time=interval,
        id="cycle",
    )

    def stop(signum: int, _frame: FrameType | None) -> None:
        log.info("signal %d: stopping", signum)
        notifier.notify("STOPPING=1")
        scheduler.shutdown(wait=False)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    notifier.notify("READY=1")
    tick()  # the first cycle at once
    scheduler.start()
    api.stop()
    daemon.store.release_lease(config.daemon.cluster, daemon.holder)


@contextlib.contextmanager
def private_umask() -> Iterator[None]:
    """Files created inside are readable by their owner only (umask 077)."""
    old = os.umask(0o077)
    try:
        yield
    finally:
        os.umask(old)


def open_store(config: Config) -> Store:
    """The configured database, migrated to the current schema (``alembic upgrade head``).

    Raises StartupError, naming the database (password hidden), when it cannot be opened.
    """
    from pathlib import Path

    from alembic.util.exc import CommandError
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import SQLAlchemyError

    url = database_url(config.daemon.database_url, config.daemon.state_dir)
    try:
        if url.startswith("sqlite:///"):
            # users' scripts and environments (secrets among them) are stored there: the
            # folder and the files SQLite creates (database, -wal, -shm) are the daemon's
            # alone, whatever umask it was started with (systemd's UMask=0027 is stricter
            # than most shells' 022, but a hand-started daemon gets the shell's)
            folder = Path(url.removeprefix("sqlite:///")).parent
            folder.mkdir(mode=0o700, parents=True, exist_ok=True)
            with private_umask():
                return Store.open(url)
        return Store.open(url)
    except (OSError, SQLAlchemyError, CommandError) as exc:
        shown = make_url(url).render_as_string(hide_password=True)
        reason = str(getattr(exc, "orig", None) or exc).splitlines()[0]
        raise StartupError(f"cannot open the database {shown}: {reason}") from exc
