"""The users' Unix socket: one JSON request per connection, the caller known by SO_PEERCRED.

The kernel tells the daemon who connected (uid, gid, pid of the peer: ``SO_PEERCRED``);
nothing the client sends about its identity is believed. A user sees and changes only
chains whose owner uid is theirs; root sees all. Chains registered here are owned by the
peer's uid, with its primary gid and supplementary groups from the group database.

Requests (one JSON object, newline-terminated; the answer likewise):

    {"op": "list"}                      -> {"ok": true, "chains": [...]}
    {"op": "show", "chain_id": "c…"}    -> {"ok": true, "chain": {...}}
    {"op": "status"}                    -> {"ok": true, "status": {...}}
    {"op": "cancel", "chain_id": "c…"}  -> {"ok": true, "was": "ACTIVE"}
    {"op": "plan", "work": "96h@4gpu", ...}  -> {"ok": true, "plan": {...}}
                                        (mirage.plan.request; on the daemon's last poll)
    {"op": "register", "script_b64": "…", "script_path": "…", "sbatch_args": [...],
     "segments": 6, "until_file": null, "name": null, "cwd": "/home/…",
     "environ": {...}, "plan": null}    -> {"ok": true, "chain_id": "c…"}
                                        ("plan": chain submit --plan's, stored as is)
    errors                              -> {"ok": false, "error": "…"}

Limits, so that no client holds the daemon: a request line is at most ``MAX_REQUEST``
bytes and must arrive whole within ``REQUEST_DEADLINE_S``; at most ``MAX_CONNECTIONS``
requests are served at once, ``MAX_CONNECTIONS_PER_UID`` of one uid (beyond, "busy" at
once). Registration: a uid may register only chains the daemon will really run as that
uid, uid 0 only with ``allow_root_chains``, and at most ``max_chains_per_user`` active ones.
"""

from __future__ import annotations

import base64
import contextlib
import errno
import json
import logging
import os
import pwd
import socket
import socketserver
import stat
import struct
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.exc import SQLAlchemyError

from mirage.daemon.chains import ChainSpecError, build_chain, check_limits
from mirage.daemon.config import Config
from mirage.daemon.identity import runs_as_owner
from mirage.daemon.ledger import register_chain
from mirage.daemon.status import list_chains, show_chain, status
from mirage.daemon.store import Chain, ChainState, Store, event_row
from mirage.profile.schema import Partition

log = logging.getLogger(__name__)

#: The largest request line: a script of max_script_bytes (1 MiB by default) is 1.34 MiB
#: in base64, which leaves about 680 KiB for the environment snapshot and the options (a
#: login shell's environment is a few KiB). A larger max_script_bytes raises it to match.
MAX_REQUEST = 2 * 1024 * 1024
#: Room beside the base64 script when max_script_bytes is raised (as under the default).
_REQUEST_ROOM = MAX_REQUEST - 4 * ((1_048_576 + 2) // 3)
#: The whole request must have arrived by then (not each read: a client trickling a byte
#: now and then would hold its thread for ever).
REQUEST_DEADLINE_S = 30.0
#: Requests served at once, in all and of one uid; beyond, the client is told "busy" at
#: once (each request holds a thread until it is answered or its deadline passes).
MAX_CONNECTIONS = 16
MAX_CONNECTIONS_PER_UID = 4


def request_limit(max_script_bytes: int) -> int:
    """The largest request line for this script limit (MAX_REQUEST, or more for a larger one)."""
    return max(MAX_REQUEST, 4 * ((max_script_bytes + 2) // 3) + _REQUEST_ROOM)


#: How long and how much a refused request's rest is read and dropped (``_Handler._drain``).
DRAIN_S, DRAIN_BYTES = 2.0, 64 * 1024 * 1024


class RequestError(Exception):
    """The request could not be read or decoded (the message is the client's answer)."""


def peer_credentials(sock: socket.socket) -> tuple[int, int, int]:
    """(pid, uid, gid) of the process at the other end of a Unix socket (Linux)."""
    raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, uid, gid = struct.unpack("3i", raw)
    return pid, uid, gid


class Api:
    """The operations, given the caller's uid (from the kernel, never from the request)."""

    def __init__(
        self,
        store: Store,
        *,
        cluster: str = "default",
        clock: Callable[[], float] = time.time,
        wake: Callable[[], None] | None = None,
        config: Config | None = None,
        partitions: Callable[[int], Sequence[Partition]] | None = None,
        planner: Callable[[Mapping[str, Any], str], dict[str, Any]] | None = None,
        marker_check: Callable[[Chain], bool | None] | None = None,
        database_health: Callable[[], dict[str, Any]] | None = None,
        access_check: Callable[[Chain], str] | None = None,
    ) -> None:
        # why a new chain's owner cannot use its directory or until-file, checked as them
        self.access_check = access_check
        # whether the daemon could record its last cycle (it runs in this process)
        self.database_health = database_health
        self.store = store
        # whether a chain's until-file exists, checked as its owner (the daemon's check)
        self.marker_check = marker_check
        # the cluster's partitions (default, MaxTime), to refuse what would pend forever
        self.partitions = partitions
        # plans on the daemon's last poll (mirage.daemon.planning.Planner.answer)
        self.planner = planner
        self.cluster = cluster
        self.clock = clock
        self.wake = wake
        # The daemon's own configuration: who its chains run as, and the limits. (Without
        # one, the defaults: run_as_owner "auto", no root chains.)
        self.config = config if config is not None else Config()
        # count and insert as one step, so parallel requests cannot pass the quota together
        self._register_lock = threading.Lock()

    def handle(self, request: Any, uid: int, gid: int) -> dict[str, Any]:
        if not isinstance(request, dict) or not isinstance(request.get("op"), str):
            return {"ok": False, "error": "a request is a JSON object with an 'op'"}
        own = None if uid == 0 else uid
        op = request["op"]
        try:
            if op == "list":
                return {"ok": True, "chains": list_chains(self.store, own)}
            if op == "show":
                data = show_chain(self.store, str(request.get("chain_id")), own)
                if data is None:
                    return {"ok": False, "error": f"no chain {request.get('chain_id')} of yours"}
                return {"ok": True, "chain": data}
            if op == "status":
                return {"ok": True, "status": self._status(own)}
            if op == "cancel":
                return self._cancel(str(request.get("chain_id")), own, uid)
            if op == "register":
                return self._register(request, uid, gid)
            if op == "plan":
                return self._plan(request, uid)
        except ChainSpecError as exc:
            return {"ok": False, "error": str(exc)}
        except SQLAlchemyError as exc:
            why = self.store.unwritable(exc)
            if why is None:
                raise
            log.warning("request of uid %d: the database is %s: %s", uid, why, exc)
            return {
                "ok": False,
                "error": f"the daemon's database is {why}: nothing was changed; tell your "
                "admin (mirage status shows it too)",
            }
        return {"ok": False, "error": f"unknown op {op!r}"}

    def _status(self, own: int | None) -> dict[str, Any]:
        answer = status(self.store, int(self.clock()), own, cluster=self.cluster)
        if self.database_health is not None:
            answer["database"] = self.database_health()
        return answer

    def _cancel(self, chain_id: str, own: int | None, uid: int) -> dict[str, Any]:
        now = int(self.clock())
        with self.store.session() as s:
            q = select(Chain).where(Chain.id == chain_id)
            c = s.scalars(q if own is None else q.where(Chain.uid == own)).first()
            if c is None:
                return {"ok": False, "error": f"no chain {chain_id} of yours"}
            was = c.state.value
            if c.state is ChainState.ACTIVE:
                c.state = ChainState.CANCELLED
                c.reason = "cancelled by its owner" if c.uid == uid else f"cancelled by uid {uid}"
                c.updated_at = now
                s.add(event_row(now, "chain.cancel", c.id, "socket", uid=uid))
        if self.wake is not None:
            self.wake()
        return {"ok": True, "was": was}

    def _register(self, req: dict[str, Any], uid: int, gid: int) -> dict[str, Any]:
        refused = self._refused_registrant(uid)
        if refused:
            return {"ok": False, "error": refused}
        try:
            script = _script(req)
            user = pwd.getpwuid(uid)
            fields = {k: _opt_str(req, k) for k in ("script_path", "until_file", "name", "cwd")}
        except (KeyError, ValueError) as exc:
            return {"ok": False, "error": f"bad register request: {exc}"}
        limit = self.config.daemon.max_script_bytes
        if len(script) > limit:
            return {"ok": False, "error": _too_big(len(script), limit)}
        args = req.get("sbatch_args", [])
        environ = req.get("environ", {})
        if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
            return {"ok": False, "error": "sbatch_args must be a list of strings"}
        if not isinstance(environ, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in environ.items()
        ):
            return {"ok": False, "error": "environ must map strings to strings"}
        segments = req.get("segments")
        if segments is not None and (not isinstance(segments, int) or isinstance(segments, bool)):
            return {"ok": False, "error": "segments must be an integer"}
        plan = req.get("plan")
        if plan is not None and not isinstance(plan, dict):
            return {"ok": False, "error": "plan must be a JSON object (chain submit --plan)"}
        chain = build_chain(
            fields["script_path"] or "script",
            script,
            args,
            segments=segments,
            until_file=fields["until_file"],
            name=fields["name"],
            cwd=fields["cwd"] or user.pw_dir,
            environ=environ,
            uid=uid,
            gid=gid,
            groups=os.getgrouplist(user.pw_name, gid),
            cluster=self.cluster,
        )
        chain.plan = plan
        if self.partitions is not None:
            check_limits(chain, self.partitions(int(self.clock())))
        refused = (self.access_check(chain) if self.access_check else "") or (
            self._stale_until_file(chain)
        )
        if refused:
            return {"ok": False, "error": refused}
        with self._register_lock:
            over = self._over_quota(uid)
            if over:
                return {"ok": False, "error": over}
            register_chain(self.store, chain, int(self.clock()), first_intent=False)
        if self.wake is not None:
            self.wake()
        return {"ok": True, "chain_id": chain.id}

    def _stale_until_file(self, chain: Chain) -> str:
        """Why the chain's until-file refuses it (it is there already), or "". The chain
        would end COMPLETED after its first segment, whatever that segment trained."""
        if not chain.until_file or self.marker_check is None:
            return ""
        if self.marker_check(chain) is not True:
            return ""
        path = Path(chain.chdir) / chain.until_file
        return (
            f"the until-file {path} exists already (a finished or earlier run's, or a link): "
            "the chain would end after its first segment; remove it or name another"
        )

    def _plan(self, request: Mapping[str, Any], uid: int) -> dict[str, Any]:
        if self.planner is None:
            return {"ok": False, "error": "this daemon does not plan chains"}
        try:
            user = pwd.getpwuid(uid).pw_name
        except KeyError:
            user = str(uid)
        return self.planner(request, user)

    def _refused_registrant(self, uid: int) -> str:
        """Why ``uid`` may not register chains here, or "" when it may."""
        if not runs_as_owner(self.config):
            # Not submitting as the owner, the daemon runs every chain as itself: a chain
            # of another uid would run with the daemon's rights, not its registrant's.
            me = os.geteuid()
            if uid != me:
                return f"this daemon submits as uid {me}; only uid {me} may register chains"
            return ""
        if uid == 0 and not self.config.daemon.allow_root_chains:
            # submitting as owners, a chain of root's runs its jobs as root
            return (
                "chains of root (uid 0) are refused: set allow_root_chains = true in the "
                "[daemon] section of the daemon's configuration to allow them"
            )
        return ""

    def _over_quota(self, uid: int) -> str:
        """Why ``uid`` may register no more chains now, or "" when it may."""
        limit = self.config.daemon.max_chains_per_user
        with self.store.session() as s:
            q = select(func.count()).select_from(Chain)
            q = q.where(Chain.uid == uid, Chain.state == ChainState.ACTIVE)
            active = s.scalar(q) or 0
        if active < limit:
            return ""
        return (
            f"you have {active} active chains, the most this daemon takes per user is {limit} "
            "(max_chains_per_user in the [daemon] section of its configuration): cancel one "
            "or wait for one to end"
        )


def _script(req: dict[str, Any]) -> bytes:
    encoded = req["script_b64"]
    if not isinstance(encoded, str):
        raise ValueError("script_b64 must be a base64 string")
    return base64.b64decode(encoded, validate=True)


def _too_big(size: int, limit: int) -> str:
    return (
        f"the script is {size} bytes, more than the {limit} this daemon takes "
        "(max_script_bytes in the [daemon] section of its configuration)"
    )


def _opt_str(req: dict[str, Any], key: str) -> str | None:
    value = req.get(key)
    if value is not None and not isinstance(value, str):
        raise ValueError(f"{key} must be a string")
    return value


class _Slots:
    """The requests being served, in all and per uid: a bounded number, never a queue."""

    def __init__(self, total: int, per_uid: int, exempt: frozenset[int] = frozenset({0})) -> None:
        self.total = total
        self.per_uid = per_uid
        self.exempt = exempt  # never "busy": root (an admin's `mirage status`)
        self._lock = threading.Lock()
        self._by_uid: dict[int, int] = {}

    def take(self, uid: int) -> bool:
        with self._lock:
            mine = self._by_uid.get(uid, 0)
            full = sum(self._by_uid.values()) >= self.total or mine >= self.per_uid
            if full and uid not in self.exempt:
                return False
            self._by_uid[uid] = mine + 1
            return True

    def give(self, uid: int) -> None:
        with self._lock:
            left = self._by_uid.pop(uid) - 1
            if left:
                self._by_uid[uid] = left

    def in_use(self) -> int:
        with self._lock:
            return sum(self._by_uid.values())


def read_request(
    sock: socket.socket,
    limit: int,
    deadline_s: float = REQUEST_DEADLINE_S,
    clock: Callable[[], float] = time.monotonic,
) -> bytes:
    """One request line (without its newline; or all until the client's end of sending).

    Raises RequestError when it is longer than ``limit`` (without buffering the rest) or
    has not arrived whole within ``deadline_s`` of the first read.
    """
    end = clock() + deadline_s
    buf = bytearray()
    while True:
        left = end - clock()
        if left <= 0:
            raise RequestError(f"the request did not arrive within {deadline_s:.0f} s")
        sock.settimeout(left)
        try:
            data = sock.recv(65536)
        except TimeoutError:
            raise RequestError(f"the request did not arrive within {deadline_s:.0f} s") from None
        line, newline, _ = data.partition(b"\n")
        buf += line
        if len(buf) > limit:
            raise RequestError(f"the request is larger than {limit} bytes")
        if newline or not data:
            return bytes(buf)


def decode_request(line: bytes) -> Any:
    try:
        return json.loads(line)
    except RecursionError:  # json's C scanner recurses once per nesting level
        raise RequestError("the request is nested too deeply") from None
    except ValueError as exc:  # UnicodeDecodeError and too long integers included
        raise RequestError(f"the request is not JSON: {exc}") from None


class _Handler(socketserver.BaseRequestHandler):
    server: ApiServer
    request: socket.socket

    def handle(self) -> None:
        _pid, uid, gid = peer_credentials(self.request)
        if not self.server.slots.take(uid):
            self._answer({"ok": False, "error": "the daemon is busy; try again in a moment"})
            return
        try:
            self._answer(self._serve(uid, gid))
            if self.refused:
                self._drain()
        finally:
            self.server.slots.give(uid)

    refused = False  # the request was not read whole: the client may still be sending

    def _serve(self, uid: int, gid: int) -> dict[str, Any]:
        try:
            line = read_request(self.request, self.server.limit, self.server.deadline_s)
            request = decode_request(line)
        except RequestError as exc:
            log.warning("request of uid %d refused: %s", uid, exc)
            self.refused = True
            return {"ok": False, "error": str(exc)}
        except OSError as exc:  # the client went away: the answer will not reach it either
            return {"ok": False, "error": f"cannot read the request: {exc}"}
        try:
            return self.server.api.handle(request, uid, gid)
        except Exception as exc:  # a bug or odd input must not kill the server thread
            log.warning("request of uid %d failed: %r", uid, exc)  # repr: no forged lines
            log.debug("the failed request's traceback", exc_info=True)
            return {"ok": False, "error": f"internal error: {type(exc).__name__}"}

    def _drain(self) -> None:
        """Read and drop what the client still sends, briefly: a socket closed with unread
        data sends a reset, which may discard the answer before the client reads it."""
        with contextlib.suppress(OSError):
            self.request.shutdown(socket.SHUT_WR)
            end = time.monotonic() + DRAIN_S
            got = 0
            while got < DRAIN_BYTES and (left := end - time.monotonic()) > 0:
                self.request.settimeout(left)
                data = self.request.recv(65536)
                if not data:
                    return
                got += len(data)

    def _answer(self, answer: dict[str, Any]) -> None:
        try:
            self.request.settimeout(REQUEST_DEADLINE_S)  # a client that does not read
            self.request.sendall(json.dumps(answer).encode() + b"\n")
        except OSError as exc:
            log.debug("cannot answer a request: %s", exc)


class ApiServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True

    def __init__(self, path: str | Path, api: Api) -> None:
        self.api = api
        self.path = Path(path)
        self.limit = request_limit(api.config.daemon.max_script_bytes)
        self.deadline_s = REQUEST_DEADLINE_S
        self.slots = _Slots(MAX_CONNECTIONS, MAX_CONNECTIONS_PER_UID)
        _refuse_non_socket(self.path)
        # Bound and chmod'ed in a directory of our own (0700: nobody else can put a link in
        # the socket's place between the two), then renamed into place. A chmod of the path
        # in a directory others can write would follow a symbolic link put there after the
        # bind (as root: any file made 0666). fchmod before bind would need umask 0, which
        # is the whole process's (other threads' files). The staged path is 18 characters
        # longer than the directory's: AF_UNIX's 107-byte limit applies to it.
        private = Path(tempfile.mkdtemp(prefix=".mirage-", dir=self.path.parent))
        staged = private / "s"
        try:
            super().__init__(str(staged), _Handler)
            # anyone may connect: who they are comes from SO_PEERCRED
            staged.chmod(0o666)
            staged.rename(self.path)  # replaces a stale socket, never follows a link
            self.server_address = str(self.path)
        except BaseException:
            self.server_close()
            staged.unlink(missing_ok=True)
            raise
        finally:
            private.rmdir()

    def start(self) -> threading.Thread:
        t = threading.Thread(target=self.serve_forever, name="mirage-api", daemon=True)
        t.start()
        return t

    def stop(self) -> None:
        self.shutdown()
        self.server_close()
        if self.path.is_socket():
            self.path.unlink()


def _refuse_non_socket(path: Path) -> None:
    """Only a (stale) socket may be replaced: never a file, a link or a directory."""
    try:
        mode = path.lstat().st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(mode):
        raise FileExistsError(errno.EEXIST, "exists and is not a socket", str(path))


class UntrustedServer(ConnectionError):
    """The process listening at the socket is neither root nor the caller."""


def _check_server(sock: socket.socket, path: str | Path) -> None:
    """A request carries the caller's environment snapshot (its secrets among them): send
    it only to a daemon run by root (the system's) or by the caller (a per-user one), never
    to whatever another user put at a path in a folder they can write."""
    _pid, uid, _gid = peer_credentials(sock)
    if uid not in (0, os.getuid()):
        raise UntrustedServer(
            f"{path} is served by uid {uid}, neither root nor you: not sending a request"
        )


def call(path: str | Path, request: dict[str, Any], timeout: float = 30.0) -> dict[str, Any]:
    """Send one request to the daemon's socket and return its answer."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        sock.connect(str(path))
        _check_server(sock, path)
        # a daemon that stops reading (a request too large) has answered why: read that
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            sock.sendall(json.dumps(request).encode() + b"\n")
        chunks = []
        while True:
            data = sock.recv(65536)
            if not data:
                break
            chunks.append(data)
            if data.endswith(b"\n"):
                break
    answer = json.loads(b"".join(chunks))
    if not isinstance(answer, dict):
        raise ValueError("the daemon's answer is not a JSON object")
    return answer
