"""The fault suite: the trial's faults replayed on the real test cluster
against one real ``mirage daemon`` process, with two users' chains of the example job
(train.sbatch, train.py, mirage_handoff.py, as shipped) mid-flight throughout.

In order, while both chains train at a deep lead (fixed-lead at 90 s on 2-minute
segments: a successor starts about 30 s into its predecessor, so every transition is a
handoff):
1. owner checks and socket abuse: a chain from another user's directory, an until-file
   that already exists as a link to a root-owned file, a raw request whose ``cwd`` is
   ``/root``, a script that is an unreadable link; an oversized line, garbage, a claim
   to be root, a cancel of the other user's chain;
2. ``kill -9`` of the daemon, restarted as running.md says (its readiness wait);
3. slurmctld stopped, then started again;
4. slurmdbd stopped (squeue answers, sacct does not), then started again;
5. the database's filesystem full (a real 16 MiB tmpfs), then freed;
6. a second ``kill -9``;
7. the late signal: as each chain's until-file appears, its running segment gets USR1
   again and again (Slurm's warning or a late handoff arriving as the training ends).

Checked for each fault as it happens: the status the daemon gives is true (the controller
or accounting unreachable, the database not writable, its chains all there); checked at
the end: no token submitted twice, no chain lost (both COMPLETED by their until-file, the
last job COMPLETED in sacct), the training continuous (each segment resumes at the step its
predecessor last checkpointed, DONE at the end), at most two segments of a chain alive.
A report (per fault what happened; per transition the predecessor's exit after its
successor's start) is printed and written to ``$MIRAGE_FAULT_REPORT`` when set.

Marked slurm_slow (``make slurm-slow``: about 12 minutes, the cluster to itself).
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import json
import os
import pwd
import secrets
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from mirage.slurm.cli_backend import CliSlurmClient
from tests.slurm.cluster_control import restart_cluster, stop_daemon
from tests.slurm.conftest import LAB, MirageDaemon, jobs_by_token, log_steps, until
from tests.slurm.test_docs import USERS, USERS_SCRIPT, runnable_venv

pytestmark = [pytest.mark.slurm, pytest.mark.slurm_slow]

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "deploy" / "examples"
LEAD_S = 90
LIMIT_MIN = "2"
#: about 6 minutes of training at TRAIN_STEP_S: longer than the faults take, so that
#: every fault finds both chains mid-flight
STEPS = 7200
STEP_S = "0.05"
SEGMENTS = 40
#: a predecessor's exit after its successor's start: its checkpoint (well under a second
#: for the example's model), the successor's helper's squeue and scancel, Slurm's seconds
HANDOFF_BOUND_S = 10
CHAINS_DEADLINE_S = 1200
TMPFS_SIZE = "16m"
#: the system's Python runs the raw socket client as a test user (stdlib only)
RAW_CLIENT = """
import json, socket, sys
s = socket.socket(socket.AF_UNIX)
s.settimeout(60)
s.connect(sys.argv[1])
s.sendall(sys.stdin.buffer.read())
s.shutdown(socket.SHUT_WR)
out = b""
while True:
    b = s.recv(65536)
    if not b:
        break
    out += b
print(out.decode(errors="replace").strip())
"""


@dataclass
class Suite:
    top: Path
    daemon: MirageDaemon
    venv: Path
    state: Path
    work: dict[str, Path]
    since: int
    client: CliSlurmClient = field(default_factory=lambda: CliSlurmClient(timeout=60.0))
    chains: dict[str, str] = field(default_factory=dict)  # user -> chain id
    report: list[str] = field(default_factory=list)
    outages: list[tuple[str, int, int]] = field(default_factory=list)  # (what, from, to)
    #: in the chains' names: jobs of an earlier run (sacct lists them) are not this run's
    tag: str = field(default_factory=lambda: secrets.token_hex(3))

    def say(self, line: str) -> None:
        self.report.append(line)

    @property
    def socket(self) -> str:
        return str(self.daemon.sock_dir / "mirage.sock")

    def user_env(self, user: str) -> dict[str, str]:
        return {
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "LANG": "C.UTF-8",
            "HOME": str(self.work[user]),
            "MIRAGE_PYTHON": str(self.venv / "bin" / "python"),
            "TRAIN_STEPS": str(STEPS),
            "TRAIN_STEP_S": STEP_S,
            "TRAIN_EVERY": "1000000",  # every resume is a handoff's checkpoint
        }

    def as_user(self, user: str, argv: list[str], cwd: Path, stdin: bytes = b"") -> tuple[int, str]:
        env = [f"{k}={v}" for k, v in self.user_env(user).items()]
        res = subprocess.run(
            ["runuser", "-u", user, "--", "env", "-i", *env, *argv],
            input=stdin, capture_output=True, timeout=120, check=False, cwd=cwd,
        )  # fmt: skip
        return res.returncode, (res.stdout + res.stderr).decode(errors="replace").strip()

    def mirage(self, user: str, *args: str, cwd: Path | None = None) -> tuple[int, str]:
        argv = [str(self.venv / "bin" / "mirage"), *args[:2], "--config", str(self.daemon.config)]
        return self.as_user(user, [*argv, *args[2:]], cwd or self.work[user])

    def submit(
        self,
        user: str,
        script: str = "train.sbatch",
        cwd: Path | None = None,
        until_file: str = "checkpoints/DONE",
        name: str = "",
    ) -> tuple[int, str]:
        return self.mirage(
            user, "chain", "submit", script, "--segments", str(SEGMENTS),
            "--until-file", until_file, "--name", name or f"{user[-3:]}{self.tag}", "--json", "--",
            f"--time={LIMIT_MIN}", "--gres=gpu:1", "--signal=B:USR1@15", "--export=ALL",
            cwd=cwd,
        )  # fmt: skip

    def raw(self, user: str, payload: bytes) -> str:
        python = "/usr/bin/python3"
        _, out = self.as_user(user, [python, "-I", "-c", RAW_CLIENT, self.socket], Path("/"),
                              payload)  # fmt: skip
        return out

    def status(self) -> dict[str, Any]:
        return dict(self.daemon.cli("status"))

    def chain(self, user: str) -> dict[str, Any]:
        rows = {r["id"]: r for r in self.daemon.cli("status", "--all")["chains"]}
        return dict(rows[self.chains[user]])


def _mount_tmpfs(where: Path) -> None:
    where.mkdir(parents=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={TMPFS_SIZE},mode=0700", "tmpfs",
                    str(where)], check=True, timeout=30)  # fmt: skip


@pytest.fixture
def suite() -> Iterator[Suite]:
    if os.geteuid() != 0:
        pytest.skip("needs root: test users, a tmpfs, the cluster's daemons")
    if not (REPO / ".venv" / "bin" / "python").exists():
        pytest.skip("no .venv with torch")
    res = subprocess.run([str(USERS_SCRIPT)], capture_output=True, text=True, timeout=60,
                         check=False)  # fmt: skip
    assert res.returncode == 0, res.stderr
    top = Path(tempfile.mkdtemp(prefix="mirage-faults-", dir="/tmp"))
    top.chmod(0o755)
    work = {}
    for user in USERS:
        w = top / user
        shutil.copytree(EXAMPLES, w)
        pw = pwd.getpwnam(user)
        for p in [w, *w.rglob("*")]:
            os.chown(p, pw.pw_uid, pw.pw_gid)
        work[user] = w
    state = top / "daemon" / "state"
    _mount_tmpfs(state)
    daemon = MirageDaemon(top / "daemon", "faults", state_dir=str(state), run_as_owner="always",
                          poll_interval_s=5, lease_ttl_s=15, backoff_max_s=10)  # fmt: skip
    daemon.set_lead(LEAD_S)
    daemon.config.chmod(0o644)
    daemon.sock_dir.chmod(0o755)
    s = Suite(top, daemon, runnable_venv(top), state, work, int(time.time()) - 5)
    try:
        yield s
    finally:
        daemon.stop()
        live = [j.job_id for js in jobs_by_token(daemon, s.client, s.since).values() for j in js
                if not j.state.is_finished]  # fmt: skip
        if live:
            s.client.cancel(live)
        subprocess.run(["umount", "-l", str(state)], check=False, timeout=30)
        shutil.rmtree(daemon.sock_dir, ignore_errors=True)
        out = os.environ.get("MIRAGE_FAULT_REPORT")
        if out:
            Path(out).write_text("\n".join(s.report) + "\n")
        with contextlib.suppress(OSError):
            shutil.copytree(top / "daemon", Path(tempfile.gettempdir()) / "mirage-faults-last",
                            dirs_exist_ok=True, ignore=shutil.ignore_patterns("state"))  # fmt: skip
        shutil.rmtree(top, ignore_errors=True)


def ready(s: Suite, timeout: float = 60) -> float:
    """running.md's readiness wait: the socket exists and ``mirage status`` answers."""
    began = time.monotonic()

    def answers() -> bool:
        if not Path(s.socket).is_socket():
            return False
        return subprocess.run(
            [str(REPO / ".venv" / "bin" / "mirage"), "status", "--config", str(s.daemon.config)],
            capture_output=True, timeout=30, check=False,
        ).returncode == 0  # fmt: skip

    until(answers, timeout, "the daemon answers", every=0.2)
    return time.monotonic() - began


def kill_and_restart(s: Suite, n: int) -> None:
    d = s.daemon
    assert d.proc is not None and d.proc.poll() is None, d.tail()
    before = {u: s.chain(u)["segment"] for u in s.chains}
    d.proc.send_signal(signal.SIGKILL)
    d.proc.wait(10)
    stale = Path(s.socket).exists()
    d.start()
    took = ready(s)
    after = {u: s.chain(u) for u in s.chains}
    assert all(a["state"] == "ACTIVE" for a in after.values()), after
    s.say(
        f"- kill -9 #{n}: the stale socket was {'left' if stale else 'gone'}; the restarted "
        f"daemon answered after {took:.1f} s; both chains ACTIVE, at segments "
        f"{before} before, { ({u: a['segment'] for u, a in after.items()}) } after"
    )


def owner_checks(s: Suite) -> None:
    alice, bob = USERS
    s.say("- owner checks at registration (as the test users, through the socket):")
    other = s.work[bob]
    other.chmod(0o755)  # alice may read bob's folder but not write it
    rc, out = s.submit(alice, cwd=other, name="intruder")
    assert rc != 0 and "cannot be written by you" in out, out
    s.say(f"  - {alice} from {bob}'s directory: refused: {_last_line(out)}")
    link = s.work[alice] / "already-done"
    link.symlink_to("/etc/hostname")
    rc, out = s.submit(alice, until_file="already-done", name="stale")
    assert rc != 0 and "exists already" in out, out
    s.say(f"  - until-file already there (a link to a root-owned file): refused: {_last_line(out)}")
    script = (s.work[alice] / "train.sbatch").read_bytes()
    req = {"op": "register", "script_b64": base64.b64encode(script).decode(),
           "script_path": "/root/train.sbatch", "sbatch_args": ["--time=2"], "segments": 2,
           "until_file": None, "name": "rootcwd", "cwd": "/root", "environ": {}}  # fmt: skip
    out = s.raw(alice, json.dumps(req).encode() + b"\n")
    assert '"ok": false' in out and "cannot be entered by you" in out, out
    s.say(f"  - raw request with cwd /root: refused: {_answer(out)}")
    secret = s.top / "secret"
    secret.mkdir(mode=0o700)
    (secret / "job.sbatch").write_text("#!/bin/sh\ntrue\n")
    (s.work[alice] / "link.sbatch").symlink_to(secret / "job.sbatch")
    rc, out = s.submit(alice, script="link.sbatch", name="unreadable")
    assert rc != 0 and "does not exist" not in out and "ermission" in out, out
    s.say(f"  - script an unreadable link: refused: {_last_line(out)}")


def socket_abuse(s: Suite) -> None:
    alice, bob = USERS
    s.say("- socket abuse:")
    out = s.raw(alice, b'{"op": "status", "pad": "' + b"x" * (3 * 1024 * 1024) + b'"}\n')
    assert '"ok": false' in out and "larger than" in out, out
    s.say(f"  - a 3 MiB line: answered {_answer(out)}")
    out = s.raw(alice, b"\x00\xffnot json at all\n")
    assert '"ok": false' in out, out
    s.say(f"  - garbage: answered {_answer(out)}")
    out = s.raw(alice, json.dumps({"op": "list", "uid": 0, "user": "root"}).encode() + b"\n")
    listed = json.loads(out)
    assert listed["ok"] and {c["id"] for c in listed["chains"]} == {s.chains[alice]}, out
    s.say(f"  - a claim to be root (uid 0 in the request): {alice} still sees only her chain")
    out = s.raw(alice, json.dumps({"op": "cancel", "chain_id": s.chains[bob]}).encode() + b"\n")
    assert '"ok": false' in out and "of yours" in out, out
    s.say(f"  - {alice} cancelling {bob}'s chain: refused: {_answer(out)}")
    assert "larger than" in s.daemon.log.read_text(), s.daemon.tail()
    assert s.chain(bob)["state"] == "ACTIVE"


def _last_line(out: str) -> str:
    return out.strip().splitlines()[-1] if out.strip() else "(nothing)"


def _answer(out: str) -> str:
    try:
        return str(json.loads(out).get("error"))
    except (ValueError, AttributeError):
        return out[:200]


def slurmctld_outage(s: Suite) -> None:
    began = int(time.time())
    stop_daemon(LAB / "run" / "slurmctld.pid", "slurmctld")
    try:
        until(lambda: s.status()["slurm"].get("reachable") is False, 60,
              "status says the controller is unreachable", every=2)  # fmt: skip
        slurm = s.status()["slurm"]
        said = str(slurm.get("error") or "")[:120]
        assert all(s.chain(u)["state"] == "ACTIVE" for u in s.chains)
        time.sleep(20)
    finally:
        restart_cluster()
    until(lambda: s.status()["slurm"].get("reachable") is True, 90,
          "status says the controller is back", every=2)  # fmt: skip
    ended = int(time.time())
    s.outages.append(("slurmctld", began, ended))
    s.say(f"- slurmctld down {ended - began} s: status said unreachable ({said!r}); "
          "both chains stayed ACTIVE; reachable again after the restart")  # fmt: skip


def slurmdbd_outage(s: Suite) -> None:
    began = int(time.time())
    tokens_before = len(jobs_by_token(s.daemon, s.client, s.since))
    stop_daemon(LAB / "run" / "slurmdbd.pid", "slurmdbd")
    try:

        def accounting_down() -> bool:
            slurm = s.status()["slurm"]
            acc = slurm.get("accounting") or {}
            return slurm.get("reachable") is True and acc.get("reachable") is False

        until(accounting_down, 60, "status says accounting is unreachable", every=2)
        rows = {u: s.chain(u) for u in s.chains}

        def submitted_meanwhile() -> bool:
            segs = sum(len(_segments_of(s, u)) for u in s.chains)
            return segs > sum(r["segment"] or 0 for r in rows.values()) + 1

        with contextlib.suppress(AssertionError):
            until(submitted_meanwhile, 90, "a successor submitted during the outage", every=3)
        meanwhile = sum(len(_segments_of(s, u)) for u in s.chains) - sum(
            r["segment"] for r in rows.values()
        )
    finally:
        restart_cluster()
    until(lambda: (s.status()["slurm"].get("accounting") or {}).get("reachable") is True, 90,
          "status says accounting is back", every=2)  # fmt: skip
    ended = int(time.time())
    s.outages.append(("slurmdbd", began, ended))
    tokens_after = len(jobs_by_token(s.daemon, s.client, s.since))
    s.say(f"- slurmdbd down {ended - began} s: status said controller reachable, accounting "
          f"unreachable; segments submitted meanwhile: the chains went on ({meanwhile} beyond "
          f"the current ones); tokens {tokens_before} -> {tokens_after}")  # fmt: skip


def disk_full(s: Suite) -> None:
    began = int(time.time())
    filler = s.state / "filler"
    with filler.open("wb") as f, contextlib.suppress(OSError):
        while True:
            f.write(b"\0" * (1 << 20))
            f.flush()
    try:
        until(lambda: (s.status().get("database") or {}).get("writable") is False, 90,
              "status says the database is not writable", every=2)  # fmt: skip
        db = s.status()["database"]
        rc, out = s.submit(USERS[0], name="while-full")
        assert rc != 0 and "database is full" in out, out
        metrics = s.daemon.metrics()
        assert metrics.get("mirage_database_writable") == 0, metrics
    finally:
        filler.unlink()
    until(lambda: (s.status().get("database") or {}).get("writable") is True, 60,
          "status says the database is writable again", every=2)  # fmt: skip
    ended = int(time.time())
    s.outages.append(("disk full", began, ended))
    s.say(f"- database disk full {ended - began} s: status said {str(db.get('error'))[:80]!r}; "
          f"a registration answered {_last_line(out)!r}; mirage_database_writable 0; "
          "writable again once freed")  # fmt: skip


class LateSignals:
    """USR1 to a chain's running segment again and again once its until-file exists."""

    def __init__(self, s: Suite) -> None:
        self.s = s
        self.sent: dict[str, int] = {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.is_set():
            for user, w in self.s.work.items():
                if (w / "checkpoints" / "DONE").exists() and self.sent.get(user, 0) < 20:
                    for job in self._running(user):
                        subprocess.run(["scancel", "--batch", "--signal=USR1", job],
                                       capture_output=True, timeout=30, check=False)  # fmt: skip
                        self.sent[user] = self.sent.get(user, 0) + 1
            time.sleep(0.1)

    def _running(self, user: str) -> list[str]:
        out = subprocess.run(["squeue", "-h", "-u", user, "-t", "R", "-o", "%i"],
                             capture_output=True, text=True, timeout=30, check=False)  # fmt: skip
        return out.stdout.split()

    def __enter__(self) -> LateSignals:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(10)


def _segments_of(s: Suite, user: str) -> list[dict[str, Any]]:
    shown = s.daemon.cli("chain", "show", s.chains[user])
    return sorted(shown["segments_run"], key=lambda g: g["index"])


def _during(outages: list[tuple[str, int, int]], t: int) -> str:
    return next((what for what, a, b in outages if a - 30 <= t <= b + 30), "")


def check_chain(s: Suite, user: str) -> list[str]:
    """The end checks of one chain; its transitions' lines for the report."""
    c = s.chain(user)
    where = f"{user}: {c['state']} {c.get('reason')}"
    assert c["state"] == "COMPLETED" and "completion marker" in str(c.get("reason")), where
    w = s.work[user]
    assert (w / "checkpoints" / "DONE").read_text() == f"{STEPS}\n", where
    segs = _segments_of(s, user)
    acct = {j.job_id: j for js in jobs_by_token(s.daemon, s.client, s.since).values() for j in js}
    jobs = [acct[g["job_id"]] for g in segs]
    assert jobs[-1].state.name == "COMPLETED", (jobs[-1].state, where)
    spans = [(j.start, j.end) for j in jobs if j.start is not None and j.end is not None]
    alive = max(sum(1 for a, b in spans if a <= t < b) for t, _ in spans)
    assert alive <= 2, where
    logs = [(w / f"slurm-{j.job_id}.out").read_text(errors="replace") for j in jobs]
    last = 0
    for (resumed, ended), log in zip(map(log_steps, logs), logs, strict=True):
        if resumed is None:
            assert "signalled before training started" in log or "took over" in log, log
            continue
        assert resumed == last, (resumed, last, where, log)
        assert ended is not None and ended >= resumed, where
        last = ended
    assert last == STEPS, where
    lines = []
    for pred, succ in itertools.pairwise(jobs):
        assert pred.end is not None and succ.start is not None
        window = pred.end - succ.start
        fault = _during(s.outages, succ.start)
        if not fault:
            assert window <= HANDOFF_BOUND_S, (pred.job_id, succ.job_id, window, where)
        note = f" (during the {fault})" if fault else ""
        lines.append(f"  - {pred.job_id} -> {succ.job_id}: predecessor exited "
                     f"{window:+d} s after its successor's start{note}")  # fmt: skip
    return [f"- {user}'s chain: {len(jobs)} segments, alive at once at most {alive}, resumed "
            f"where each predecessor checkpointed, DONE at step {last}, last job "
            f"{jobs[-1].state.name}:", *lines]  # fmt: skip


def test_the_trials_faults_with_chains_mid_flight(suite: Suite) -> None:
    s = suite
    s.daemon.start()
    s.say(f"- daemon up after {ready(s):.1f} s; fixed-lead {LEAD_S} s on {LIMIT_MIN}-minute "
          f"segments, {STEPS} steps per chain")  # fmt: skip
    for user in USERS:
        rc, out = s.submit(user)
        assert rc == 0, out
        s.chains[user] = json.loads(out)["chain_id"]
    until(lambda: all((s.chain(u)["segment"] or 0) >= 2 for u in USERS), 240,
          "both chains at their second segment", every=3)  # fmt: skip
    owner_checks(s)
    socket_abuse(s)
    kill_and_restart(s, 1)
    slurmctld_outage(s)
    slurmdbd_outage(s)
    disk_full(s)
    kill_and_restart(s, 2)
    with LateSignals(s) as late:
        until(lambda: all(s.chain(u)["state"] != "ACTIVE" for u in USERS), CHAINS_DEADLINE_S,
              "both chains end", every=5)  # fmt: skip
    s.say(f"- late USR1 after the until-file appeared: {late.sent or 'none'} signals sent")
    by_token = jobs_by_token(s.daemon, s.client, s.since)
    twice = {t: [j.job_id for j in js] for t, js in by_token.items() if len(js) > 1}
    assert not twice, twice
    shown = sum(len(_segments_of(s, u)) for u in USERS)
    assert len(by_token) == shown, (len(by_token), shown)
    s.say(f"- duplicates: none ({len(by_token)} tokens, {len(by_token)} jobs); lost chains: none")
    for user in USERS:
        s.report += check_chain(s, user)
    print("\n".join(s.report))
