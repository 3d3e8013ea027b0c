"""The users' socket against hostile input: identities, bad strings, sbatch's option
abbreviations, quotas, oversized, slow, nested and concurrent requests, the socket file."""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import os
import socket
import socketserver
import stat
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from mirage.daemon import api as api_module
from mirage.daemon.api import (
    MAX_CONNECTIONS,
    MAX_CONNECTIONS_PER_UID,
    MAX_REQUEST,
    Api,
    ApiServer,
    RequestError,
    _Slots,
    call,
    read_request,
    request_limit,
)
from mirage.daemon.chains import ChainSpecError, split_options
from mirage.daemon.config import Config, DaemonSection
from tests.unit.daemon_support import make_store

SCRIPT = b"#!/bin/bash\n#SBATCH --time=10\ntrue\n"
NOBODY = 65534


def register(script: bytes = SCRIPT, **fields: Any) -> dict[str, Any]:
    req: dict[str, Any] = {
        "op": "register",
        "script_b64": base64.b64encode(script).decode(),
        "script_path": "job.sbatch",
        "sbatch_args": ["-p", "gpu"],
        "segments": 2,
        "cwd": "/tmp",
        "environ": {"PATH": "/usr/bin"},
    }
    req.update(fields)
    return req


def make_api(tmp_path: Path, **daemon: Any) -> Api:
    return Api(make_store(tmp_path), config=Config(daemon=DaemonSection(**daemon)))


def as_root(monkeypatch: pytest.MonkeyPatch) -> None:
    """The daemon's euid is 0 (as under systemd), for identity.py's resolution too."""
    monkeypatch.setattr(os, "geteuid", lambda: 0)


def as_user(monkeypatch: pytest.MonkeyPatch, uid: int = 1000) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: uid)


# ---- 1. who may register ------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["never", "auto"])
def test_a_daemon_not_submitting_as_owner_takes_only_its_own_uid(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    as_user(monkeypatch, NOBODY)  # a per-user daemon ("auto" and not root: as itself)
    api = make_api(tmp_path, run_as_owner=mode)
    got = api.handle(register(), 33, 33)
    assert got == {
        "ok": False,
        "error": f"this daemon submits as uid {NOBODY}; only uid {NOBODY} may register chains",
    }
    assert api.handle({"op": "list"}, 0, 0)["chains"] == []
    assert api.handle(register(), NOBODY, NOBODY)["ok"]


def test_a_root_daemon_with_never_takes_no_other_uid(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    as_root(monkeypatch)
    api = make_api(tmp_path, run_as_owner="never")
    got = api.handle(register(), NOBODY, NOBODY)
    assert "only uid 0 may register" in got["error"]


@pytest.mark.parametrize("mode", ["auto", "always"])
def test_a_daemon_submitting_as_owner_takes_any_user(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    as_root(monkeypatch)
    got = make_api(tmp_path, run_as_owner=mode).handle(register(), NOBODY, NOBODY)
    assert got["ok"], got


def test_root_chains_need_allow_root_chains(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    as_root(monkeypatch)
    got = make_api(tmp_path).handle(register(), 0, 0)
    assert not got["ok"] and "allow_root_chains = true" in got["error"]
    assert make_api(tmp_path, allow_root_chains=True).handle(register(), 0, 0)["ok"]


# ---- 2. strings a process or the file system will get -------------------------------------


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"until_file": "done\x00"}, "--until-file contains a NUL byte"),
        ({"name": "a\x00b"}, "--name contains a NUL byte"),
        ({"cwd": "/tmp/x\x00y"}, "the working directory contains a NUL byte"),
        ({"script_path": "j\x00.sbatch"}, "the script path contains a NUL byte"),
        ({"sbatch_args": ["--mem=\x004G"]}, "contains a NUL byte"),
        ({"sbatch_args": ["-p", "gpu\x00"]}, "contains a NUL byte"),
        ({"environ": {"K\x00": "v"}}, "contains a NUL byte"),
        ({"environ": {"K": "v\x00w"}}, "the value of environment variable K contains a NUL"),
        ({"environ": {"": "v"}}, "empty or contains '='"),
        ({"environ": {"A=B": "v"}}, "empty or contains '='"),
        ({"environ": {"K": "\ud800"}}, "not encodable"),
        ({"until_file": 7}, "until_file must be a string"),
        ({"segments": True}, "segments must be an integer"),
    ],
)
def test_strings_that_cannot_reach_a_process_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fields: dict[str, Any], message: str
) -> None:
    as_root(monkeypatch)
    api = make_api(tmp_path)
    got = api.handle(register(**fields), NOBODY, NOBODY)
    assert not got["ok"] and message in got["error"], got
    assert api.handle({"op": "list"}, 0, 0)["chains"] == []


def test_nul_in_the_scripts_directives_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    as_root(monkeypatch)
    script = b"#!/bin/bash\n#SBATCH --time=10\n#SBATCH --partition=a\x00b\ntrue\n"
    got = make_api(tmp_path).handle(register(script, sbatch_args=[]), NOBODY, NOBODY)
    assert not got["ok"] and "NUL" in got["error"] and "partition" in got["error"]


def test_script_larger_than_max_script_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    as_root(monkeypatch)
    api = make_api(tmp_path, max_script_bytes=100)
    big = SCRIPT + b"#" * 100 + b"\n"
    got = api.handle(register(big), NOBODY, NOBODY)
    assert got == {
        "ok": False,
        "error": f"the script is {len(big)} bytes, more than the 100 this daemon takes "
        "(max_script_bytes in the [daemon] section of its configuration)",
    }
    assert api.handle(register(), NOBODY, NOBODY)["ok"]


# ---- 3. sbatch's own reading of the options -----------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ["--test"],
        ["--test-o"],
        ["--dep=afterok:1"],
        ["--comm=x"],
        ["--job-n=y"],
        ["--j", "y"],  # sbatch takes "--j" for --job-name: no length floor is safe
        ["--wra=id"],
        ["--ar=0-3"],
        ["--hol"],
        ["--pars"],
        ["--pa=x"],  # ambiguous to sbatch, but a prefix of --parsable all the same
        ["-vJx"],  # letters run together: -v -J x
        ["-Ja=b"],
        ["-vH"],
        ["-Ov", "-d", "1"],
        ["-vsa", "0-3"],
    ],
)
def test_abbreviated_and_bundled_refused_options_are_refused(args: list[str]) -> None:
    with pytest.raises(ChainSpecError, match="not allowed"):
        split_options(args)


@pytest.mark.parametrize("args", [["--tim=99:00:00"], ["--ch=/x"], ["--part=gpu"], ["--nod=2"]])
def test_abbreviated_managed_options_must_be_written_in_full(args: list[str]) -> None:
    with pytest.raises(ChainSpecError, match="write the option in full"):
        split_options(args)


def test_bundled_short_options_are_read_as_sbatch_reads_them() -> None:
    spec = split_options(["-vt60", "-vpgpu", "-Aproj_Jd", "-vv", "--time-min=10", "-p=x"])
    assert spec.managed == {"time": "60", "partition": "x"}
    # -A takes the rest of its word as its value: the J and d in it are not options
    assert spec.rest == ["-v", "-v", "-Aproj_Jd", "-vv", "--time-min=10"]


def test_script_lines_may_abbreviate_the_options_the_command_line_overrides() -> None:
    allowed = frozenset({"--comment", "--job-name", "-J"})
    spec = split_options(["--comm=x", "--job-n", "y", "-vJz", "--time=5"], allowed=allowed)
    assert spec.managed == {"time": "5"}
    with pytest.raises(ChainSpecError, match="--dependency"):
        split_options(["--dep=afterok:1"], allowed=allowed, where="script's #SBATCH lines")


def test_abbreviations_are_refused_through_the_socket_api(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    as_root(monkeypatch)
    got = make_api(tmp_path).handle(register(sbatch_args=["--test"]), NOBODY, NOBODY)
    assert not got["ok"] and "abbreviates --test-only" in got["error"]
    script = b"#!/bin/bash\n#SBATCH --time=10\n#SBATCH --dep=afterok:1\ntrue\n"
    got = make_api(tmp_path).handle(register(script, sbatch_args=[]), NOBODY, NOBODY)
    assert not got["ok"] and "--dependency" in got["error"]


# ---- 4. active chains per user ------------------------------------------------------------


def test_active_chains_per_user_are_bounded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    as_root(monkeypatch)
    api = make_api(tmp_path, max_chains_per_user=2)
    first = api.handle(register(), NOBODY, NOBODY)
    assert first["ok"] and api.handle(register(), NOBODY, NOBODY)["ok"]
    got = api.handle(register(), NOBODY, NOBODY)
    assert not got["ok"]
    assert "you have 2 active chains" in got["error"]
    assert "is 2 (max_chains_per_user" in got["error"]
    assert api.handle(register(), 33, 33)["ok"]  # another user's quota is theirs
    assert api.handle({"op": "cancel", "chain_id": first["chain_id"]}, NOBODY, NOBODY)["ok"]
    assert api.handle(register(), NOBODY, NOBODY)["ok"]  # an ended chain does not count


# ---- 5. the socket's own limits -----------------------------------------------------------


def raw(path: Path, data: bytes, timeout: float = 20.0) -> bytes:
    """Send bytes as they are; the answer line (b"" when none)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        sock.connect(str(path))
        sock.sendall(data)
        buf = b""
        while not buf.endswith(b"\n"):
            got = sock.recv(65536)
            if not got:
                break
            buf += got
        return buf


def test_request_limit_fits_the_largest_script() -> None:
    assert request_limit(1_048_576) == MAX_REQUEST == 2 * 1024 * 1024
    assert request_limit(4 * 1_048_576) > 4 * 1_048_576 * 4 // 3


def test_largest_script_registers_through_the_socket(server: tuple[ApiServer, Path]) -> None:
    _srv, path = server
    head = SCRIPT
    script = head + b"#" * (1_048_576 - len(head) - 1) + b"\n"
    environ = {f"VAR{i}": "x" * 100 for i in range(500)}  # a 50 KiB environment
    got = call(path, register(script, environ=environ))
    assert got["ok"], got


def test_oversized_request_is_answered_not_buffered(server: tuple[ApiServer, Path]) -> None:
    _srv, path = server
    got = call(path, {"op": "list", "pad": "x" * (3 * 1024 * 1024)})
    assert got == {"ok": False, "error": f"the request is larger than {MAX_REQUEST} bytes"}
    assert call(path, {"op": "status"})["ok"]


def test_request_deadline_is_for_the_whole_request() -> None:
    client, daemon_end = socket.socketpair()
    stop = threading.Event()

    def trickle() -> None:  # a byte every 0.1 s for 5 s: no single read ever waits long
        for _ in range(50):
            if stop.wait(0.1):
                return
            try:
                client.send(b" ")
            except OSError:
                return
        client.shutdown(socket.SHUT_WR)

    t = threading.Thread(target=trickle)
    t.start()
    started = time.monotonic()
    try:
        with pytest.raises(RequestError, match="did not arrive within"):
            read_request(daemon_end, MAX_REQUEST, deadline_s=0.5)
        assert time.monotonic() - started < 3
    finally:
        stop.set()
        t.join()
        client.close()
        daemon_end.close()


def test_trickling_client_is_dropped_by_the_server(server: tuple[ApiServer, Path]) -> None:
    srv, path = server
    srv.deadline_s = 0.5
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.connect(str(path))
        sock.settimeout(0.05)  # each wait for the answer is the pause between bytes
        started = time.monotonic()
        answer = b""
        while not answer and time.monotonic() - started < 5:
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                sock.send(b" ")  # (the server may have answered and closed meanwhile)
            with contextlib.suppress(TimeoutError):
                answer = sock.recv(4096)
    assert b"did not arrive within" in answer


def test_busy_beyond_the_connection_bounds(server: tuple[ApiServer, Path]) -> None:
    srv, path = server
    srv.slots = _Slots(MAX_CONNECTIONS, MAX_CONNECTIONS_PER_UID, exempt=frozenset())  # root too
    held = []
    try:
        for _ in range(4):  # one uid's share, each sending nothing
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.connect(str(path))
            held.append(sock)
        deadline = time.monotonic() + 10
        while srv.slots.in_use() < 4 and time.monotonic() < deadline:
            time.sleep(0.01)
        started = time.monotonic()
        got = call(path, {"op": "status"}, timeout=10)
        assert got == {"ok": False, "error": "the daemon is busy; try again in a moment"}
        assert time.monotonic() - started < 5  # at once, not after the others' deadline
    finally:
        for sock in held:
            sock.close()
    deadline = time.monotonic() + 10
    while srv.slots.in_use() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert call(path, {"op": "status"})["ok"]


def test_slots_bound_each_uid_and_the_total() -> None:
    slots = _Slots(total=6, per_uid=4)
    assert all(slots.take(1) for _ in range(4)) and not slots.take(1)
    assert slots.take(2) and slots.take(3) and not slots.take(4)  # 6 in all
    slots.give(1)
    assert slots.take(4) and not slots.take(1)
    assert slots.in_use() == 6
    assert slots.take(0) and slots.in_use() == 7  # root is never turned away


def test_the_client_sends_nothing_to_a_stranger_s_socket(
    server: tuple[ApiServer, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Requests carry the caller's environment: only root's or the caller's own daemon
    gets them, never a socket another user put in place."""
    _srv, path = server
    assert call(path, {"op": "list"})["ok"]  # served by this process: the caller (or root)
    monkeypatch.setattr(api_module, "peer_credentials", lambda _sock: (1, 54321, 54321))
    with pytest.raises(api_module.UntrustedServer, match="uid 54321, neither root nor you"):
        call(path, {"op": "list"})


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"[" * 200_000 + b"\n", "the request is nested too deeply"),
        (b"\xff\xfe\n", "the request is not JSON"),
        (b'{"op":"register","segments":' + b"9" * 5000 + b"}\n", "the request is not JSON"),
        (b"[1,2]\n", "a request is a JSON object with an 'op'"),
        (b'{"op":"show","chain_id":{"$ne":1}}\n', "no chain"),
        (b'{"op":"register"}\n', "bad register request"),
    ],
)
def test_odd_requests_get_an_answer_and_the_server_lives(
    server: tuple[ApiServer, Path], data: bytes, message: str
) -> None:
    _srv, path = server
    assert message.encode() in raw(path, data)
    assert call(path, {"op": "status"})["ok"]


def test_a_failing_request_logs_its_traceback_at_debug_only(
    server: tuple[ApiServer, Path],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    srv, path = server

    def broken(request: Any, uid: int, gid: int) -> dict[str, Any]:
        raise RuntimeError("a bug")

    monkeypatch.setattr(srv.api, "handle", broken)
    with caplog.at_level(logging.DEBUG, logger=api_module.__name__):
        got = call(path, {"op": "status"})
    assert got == {"ok": False, "error": "internal error: RuntimeError"}
    traced = [r for r in caplog.records if r.exc_info]
    assert traced and all(r.levelno == logging.DEBUG for r in traced)
    assert any(r.levelno == logging.WARNING and "a bug" in r.getMessage() for r in caplog.records)
    monkeypatch.undo()
    assert call(path, {"op": "status"})["ok"]


# ---- 6. the socket file -------------------------------------------------------------------


def test_chmod_never_follows_a_link_put_in_the_sockets_place(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sockdir = Path(tempfile.mkdtemp(prefix="mirage-lnk-"))
    final = sockdir / "s.sock"
    victim = tmp_path / "victim"
    victim.write_text("secret")
    victim.chmod(0o600)
    bind = socketserver.UnixStreamServer.server_bind

    def bind_then_swap(self: socketserver.UnixStreamServer) -> None:
        bind(self)
        # another user with write access to the directory, right after the bind
        final.unlink(missing_ok=True)
        final.symlink_to(victim)

    monkeypatch.setattr(socketserver.UnixStreamServer, "server_bind", bind_then_swap)
    srv = ApiServer(final, Api(make_store(tmp_path)))
    srv.start()
    try:
        assert stat.S_IMODE(victim.stat().st_mode) == 0o600
        assert stat.S_ISSOCK(final.lstat().st_mode)
        assert stat.S_IMODE(final.lstat().st_mode) == 0o666
        assert sorted(p.name for p in sockdir.iterdir()) == ["s.sock"]  # no staging left
        assert call(final, {"op": "status"})["ok"]
    finally:
        srv.stop()
        final.unlink(missing_ok=True)
        sockdir.rmdir()


def test_a_file_in_the_sockets_place_is_not_replaced(tmp_path: Path) -> None:
    sockdir = Path(tempfile.mkdtemp(prefix="mirage-file-"))
    final = sockdir / "s.sock"
    final.write_text("not a socket")
    try:
        with pytest.raises(FileExistsError, match="not a socket"):
            ApiServer(final, Api(make_store(tmp_path)))
        assert final.read_text() == "not a socket"
        assert sorted(p.name for p in sockdir.iterdir()) == ["s.sock"]
    finally:
        final.unlink()
        sockdir.rmdir()


def test_a_stale_socket_is_replaced(tmp_path: Path) -> None:
    sockdir = Path(tempfile.mkdtemp(prefix="mirage-old-"))
    final = sockdir / "s.sock"
    old = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old.bind(str(final))
    old.close()
    srv = ApiServer(final, Api(make_store(tmp_path)))
    srv.start()
    try:
        assert call(final, {"op": "status"})["ok"]
    finally:
        srv.stop()
        sockdir.rmdir()


def test_a_raw_client_that_sends_an_oversized_line_whole_gets_the_answer(
    server: tuple[ApiServer, Path], caplog: pytest.LogCaptureFixture
) -> None:
    """A client that writes its whole line before it reads (a script's socat, a raw
    socket): the daemon answered and closed with the rest unread, the kernel reset the
    connection and the answer was lost, with nothing logged. Now it drains the rest
    briefly, so the answer arrives, and logs the refusal."""
    _srv, path = server
    line = json.dumps({"op": "list", "pad": "x" * (20 * 1024 * 1024)}).encode() + b"\n"
    with (
        caplog.at_level(logging.WARNING, logger="mirage.daemon.api"),
        socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock,
    ):
        sock.settimeout(30)
        sock.connect(str(path))
        sock.sendall(line)
        got = b""
        while not got.endswith(b"\n"):
            data = sock.recv(65536)
            assert data, got
            got += data
    assert json.loads(got) == {
        "ok": False,
        "error": f"the request is larger than {MAX_REQUEST} bytes",
    }
    assert any("refused: the request is larger than" in r.getMessage() for r in caplog.records)
