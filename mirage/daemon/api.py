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
    {"op": "register", "script_b64": "…", "script_path": "…", "sbatch_args": [...],
     "segments": 6, "until_file": null, "name": null, "cwd": "/home/…",
     "environ": {...}}                  -> {"ok": true, "chain_id": "c…"}
    errors                              -> {"ok": false, "error": "…"}
"""

from __future__ import annotations

import base64
import json
import logging
import os
import pwd
import socket
import socketserver
import struct
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sqlalchemy import select

from mirage.daemon.chains import ChainSpecError, build_chain
from mirage.daemon.core import register_chain
from mirage.daemon.status import list_chains, show_chain, status
from mirage.daemon.store import Chain, ChainState, Store, event_row

log = logging.getLogger(__name__)

MAX_REQUEST = 8 * 1024 * 1024  # a script and an environment fit easily


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
    ) -> None:
        self.store = store
        self.cluster = cluster
        self.clock = clock
        self.wake = wake

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
                now = int(self.clock())
                return {"ok": True, "status": status(self.store, now, own, cluster=self.cluster)}
            if op == "cancel":
                return self._cancel(str(request.get("chain_id")), own, uid)
            if op == "register":
                return self._register(request, uid, gid)
        except ChainSpecError as exc:
            return {"ok": False, "error": str(exc)}
        return {"ok": False, "error": f"unknown op {op!r}"}

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
        try:
            script = base64.b64decode(str(req["script_b64"]), validate=True)
            user = pwd.getpwuid(uid)
        except (KeyError, ValueError) as exc:
            return {"ok": False, "error": f"bad register request: {exc}"}
        args = req.get("sbatch_args", [])
        environ = req.get("environ", {})
        if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
            return {"ok": False, "error": "sbatch_args must be a list of strings"}
        if not isinstance(environ, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in environ.items()
        ):
            return {"ok": False, "error": "environ must map strings to strings"}
        segments = req.get("segments")
        if segments is not None and not isinstance(segments, int):
            return {"ok": False, "error": "segments must be an integer"}
        chain = build_chain(
            str(req.get("script_path", "script")),
            script,
            args,
            segments=segments,
            until_file=_opt_str(req.get("until_file")),
            name=_opt_str(req.get("name")),
            cwd=str(req.get("cwd") or user.pw_dir),
            environ=environ,
            uid=uid,
            gid=gid,
            groups=os.getgrouplist(user.pw_name, gid),
            cluster=self.cluster,
        )
        register_chain(self.store, chain, int(self.clock()), first_intent=False)
        if self.wake is not None:
            self.wake()
        return {"ok": True, "chain_id": chain.id}


def _opt_str(value: Any) -> str | None:
    return None if value is None else str(value)


class _Handler(socketserver.StreamRequestHandler):
    server: ApiServer
    timeout = 30  # a client that sends nothing does not hold a thread for long

    def handle(self) -> None:
        _pid, uid, gid = peer_credentials(self.connection)
        line = self.rfile.readline(MAX_REQUEST)
        try:
            request = json.loads(line)
        except ValueError:
            answer: dict[str, Any] = {"ok": False, "error": "not JSON"}
        else:
            try:
                answer = self.server.api.handle(request, uid, gid)
            except Exception as exc:  # a bug must not kill the server thread
                log.exception("api request failed")
                answer = {"ok": False, "error": f"internal error: {type(exc).__name__}"}
        self.wfile.write(json.dumps(answer).encode() + b"\n")


class ApiServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True

    def __init__(self, path: str | Path, api: Api) -> None:
        self.api = api
        self.path = Path(path)
        if self.path.is_socket():
            self.path.unlink()
        super().__init__(str(self.path), _Handler)
        # anyone may connect: who they are comes from SO_PEERCRED
        self.path.chmod(0o666)

    def start(self) -> threading.Thread:
        t = threading.Thread(target=self.serve_forever, name="mirage-api", daemon=True)
        t.start()
        return t

    def stop(self) -> None:
        self.shutdown()
        self.server_close()
        if self.path.is_socket():
            self.path.unlink()


def call(path: str | Path, request: dict[str, Any], timeout: float = 30.0) -> dict[str, Any]:
    """Send one request to the daemon's socket and return its answer."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        sock.connect(str(path))
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
