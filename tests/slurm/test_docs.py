"""The docs, followed on the real test cluster (issue #23 item 8: docs that a test follows).

What runs are the guides' ``sh test`` blocks (``tests/slurm/docs_blocks.py``), as written:

1. the admin guide's, as root from the checkout, in document order
   (``docs/admin/install.md``, ``configuration.md``, ``running.md``): the ``mirage`` link,
   the configuration, the ls6 models, the example job for users, the trained policy
   (``default = "xgb"``, ``cluster = "ls6"``), the daemon started without systemd;
2. then the researchers' (``docs/users/chain-ready-job.md``, ``chains.md``) as
   mirage-alice and mirage-bob at once, each in a working directory of their own
   (``runuser -u USER -- bash -euo pipefail -c BLOCK``): the example job copied as shipped
   and registered with ``--segments 4 --until-file checkpoints/DONE``, then watched.

Not run: the install guide's first block (a fresh venv and ``pip install``; a plain ``sh``
block) and every ``systemctl`` block. ``/opt/mirage/venv`` is instead a symlink to the
checkout's ``.venv``, or, when the test users cannot execute its interpreter (a pyenv
Python under root's 0700 home), to a venv of the system's Python of the same version that
reads the checkout's site-packages: what users run must be runnable by them.

The host is left untouched: everything runs in one private mount namespace
(``unshare -m``, entered with ``nsenter``) where fresh directories are bound over
/etc/mirage, /var/lib/mirage, /run/mirage, /opt/mirage and /usr/local/bin. A mount point
missing on the host is made in an overlay of its parent that only the namespace sees (its
subdirectories bound back over it, so that munge's socket still connects).

Slurm runs the jobs outside the namespace (slurmd): the users' working directories are
under /tmp (0755, each the user's own), and ``MIRAGE_PYTHON``, exported in the users'
environment before their blocks as the user guide says, is a Python visible outside it
(the checkout's, or the system-Python venv above); chains register with ``--export=ALL``,
so it reaches every segment.

Scaled for a test, outside the docs' blocks: the users' environment has
``SBATCH_TIMELIMIT=2`` (2-minute segments instead of the script's 2 hours: ``mirage chain
submit`` honours it as sbatch does) and TRAIN_STEPS/TRAIN_STEP_S sized for about 2.5
segments; the daemon polls every 5 s (``poll_interval_s``, set after the configuration
guide's blocks). While the chains run, root keeps the cluster busy with filler jobs
(``sbatch --wrap 'sleep 90' --gres=gpu:4 -N1 -t 2``, a few pending at a time).

Checked: every chain ends COMPLETED; each Mirage token is on exactly one job in sacct (no
duplicate) and every job in a chain's directory carries one of its tokens; every segment
after the first resumed from a checkpoint (``resumed at step N``, N > 0); training wrote
``checkpoints/DONE``; ``mirage status --json`` names the policy in use for each chain.
Printed (``pytest -s``) and written to ``gaps.txt`` in the test's tmp dir: per chain and
transition, the gap (start of segment k+1 minus end of k, from sacct) and the policy.
The daemon is stopped and leftover jobs cancelled whatever happens.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import pwd
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.slurm.conftest import REPO, until
from tests.slurm.docs_blocks import blocks

pytestmark = pytest.mark.slurm

ADMIN_DOCS = ("docs/admin/install.md", "docs/admin/configuration.md", "docs/admin/running.md")
USER_DOCS = ("docs/users/chain-ready-job.md", "docs/users/chains.md")
USERS = ("mirage-alice", "mirage-bob")
USERS_SCRIPT = REPO / "scripts" / "slurm-testbed" / "users.sh"
#: namespace path -> the name of the fresh directory bound over it
MOUNTS = {
    "/etc/mirage": "etc-mirage",
    "/var/lib/mirage": "var-lib-mirage",
    "/run/mirage": "run-mirage",
    "/opt/mirage": "opt-mirage",
    "/usr/local/bin": "usr-local-bin",
}
#: the test's scaling, in the users' environment (see the module docstring)
SCALE_ENV = {"SBATCH_TIMELIMIT": "2", "TRAIN_STEPS": "2000", "TRAIN_STEP_S": "0.1"}
POLL_INTERVAL_S = 5
CHAINS_DEADLINE_S = 600
FILLERS_PENDING = 2
FILLER = ["--wrap", "sleep 90", "--gres=gpu:4", "-N1", "-t", "2"]
TOKEN = re.compile(r"\.(mg[0-9a-f]{16})$")
ROOT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

# Made in the namespace before anything runs: $1 the top directory, then pairs (mount
# point, fresh directory). The parent of a missing mount point gets an overlay (its
# subdirectories bound back over it: a Unix socket reached through an overlay refuses
# connections) in which the mount point is made.
SETUP = r"""
set -euo pipefail
top=$1; shift
shopt -s nullglob dotglob
declare -A overlaid=()
n=0
while [ $# -gt 0 ]; do
    target=$1 fresh=$2; shift 2
    if [ ! -d "$target" ]; then
        parent=$(dirname "$target")
        if [ -z "${overlaid[$parent]:-}" ]; then
            n=$((n + 1)); o=$top/ns/$n
            mkdir -p "$o/lower" "$o/upper" "$o/work"
            mount --rbind "$parent" "$o/lower"
            mount -t overlay overlay \
                -o "lowerdir=$o/lower,upperdir=$o/upper,workdir=$o/work" "$parent"
            for d in "$o/lower"/*/; do
                d=${d%/}
                [ -L "$d" ] || mount --rbind "$d" "$parent/${d##*/}"
            done
            overlaid[$parent]=1
        fi
        mkdir "$target"
    fi
    mount --bind "$fresh" "$target"
done
touch "$top/ns/ready"
exec sleep infinity
"""


def sh(*argv: str, timeout: float = 60, env: dict[str, str] | None = None) -> str:
    """A command outside the namespace; its stdout (it must succeed)."""
    res = subprocess.run(
        argv, capture_output=True, text=True, timeout=timeout, check=False, env=env
    )
    assert res.returncode == 0, (argv, res.stdout, res.stderr)
    return res.stdout


class Namespace:
    """One private mount namespace, held by a sleeping process; commands enter it with
    nsenter (as root, or as a user through runuser), in a working directory."""

    def __init__(self, top: Path) -> None:
        self.top = top
        self.holder: subprocess.Popen[bytes] | None = None

    def fresh(self, mount_point: str) -> Path:
        """The directory bound over ``mount_point`` (its path outside the namespace)."""
        return self.top / "mnt" / MOUNTS[mount_point]

    def start(self) -> None:
        (self.top / "ns").mkdir()
        pairs: list[str] = []
        for point in MOUNTS:
            self.fresh(point).mkdir(parents=True)
            self.fresh(point).chmod(0o755)
            pairs += [point, str(self.fresh(point))]
        log = (self.top / "ns" / "setup.log").open("wb")
        self.holder = subprocess.Popen(
            [shutil.which("unshare") or "unshare", "--mount", "--propagation", "private",
             "--", "/bin/bash", "-c", SETUP, "setup", str(self.top), *pairs],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        ready = self.top / "ns" / "ready"
        until(lambda: ready.exists() or self.holder.poll() is not None, 30, "the namespace")  # type: ignore[union-attr]
        assert ready.exists(), (self.top / "ns" / "setup.log").read_text()

    def run(
        self,
        script: str,
        *,
        cwd: Path,
        env: dict[str, str],
        user: str | None = None,
        timeout: float = 120,
    ) -> subprocess.CompletedProcess[str]:
        assert self.holder is not None
        argv = [shutil.which("nsenter") or "nsenter", "-t", str(self.holder.pid), "-m",
                f"--wd={cwd}", "--"]  # fmt: skip
        if user is not None:
            argv += [shutil.which("runuser") or "runuser", "-u", user, "--"]
        argv += ["/bin/bash", "-euo", "pipefail", "-c", script]
        return subprocess.run(
            argv,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def processes(self) -> list[int]:
        """Every process in this namespace but its holder (all of them started here)."""
        if self.holder is None:
            return []
        try:
            ns = Path(f"/proc/{self.holder.pid}/ns/mnt").readlink()
        except OSError:
            return []
        out = []
        for p in Path("/proc").iterdir():
            if not p.name.isdigit() or int(p.name) == self.holder.pid:
                continue
            with contextlib.suppress(OSError):
                if (p / "ns" / "mnt").readlink() == ns:
                    out.append(int(p.name))
        return out

    def close(self) -> None:
        for pid in self.processes():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if self.holder is not None and self.holder.poll() is None:
            self.holder.kill()
            self.holder.wait(10)


def users_can_run(python: Path) -> bool:
    probe = ["runuser", "-u", USERS[0], "--", str(python), "-c", "import mirage, torch"]
    return subprocess.run(probe, capture_output=True, timeout=120, check=False).returncode == 0


def runnable_venv(top: Path) -> Path:
    """The checkout's venv when the test users can run it; else a venv of the system's
    Python of the same version, reading the checkout's site-packages, with a ``mirage``
    script as pip would write it."""
    venv = REPO / ".venv"
    if users_can_run(venv / "bin" / "python"):
        return venv
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    system = Path(f"/usr/bin/python{version}")
    if not system.exists():
        pytest.skip(f"the test users can execute neither {venv}'s Python nor {system}")
    shim = top / "venv"
    sh(str(system), "-m", "venv", "--without-pip", str(shim))
    site = next((venv / "lib").glob("python3.*/site-packages"))
    pth = shim / "lib" / f"python{version}" / "site-packages" / "mirage-checkout.pth"
    pth.write_text(f"import site; site.addsitedir({str(site)!r})\n")
    script = shim / "bin" / "mirage"
    script.write_text(
        f"#!{shim}/bin/python\nimport sys\nfrom mirage.cli import main\nsys.exit(main())\n"
    )
    script.chmod(0o755)
    assert users_can_run(shim / "bin" / "python"), f"{USERS[0]} cannot run {shim}"
    return shim


class Fillers:
    """Root's filler jobs keeping the cluster busy: a thread tops the queue up to
    ``pending`` waiting fillers every few seconds."""

    def __init__(self, workdir: Path, pending: int) -> None:
        self.workdir = workdir
        self.pending = pending
        self.name = f"mg-docs-fill-{os.getpid()}"
        self.ids: list[str] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="fillers", daemon=True)
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("SBATCH_", "SLURM_"))}

    def _tick(self) -> None:
        waiting = sh("squeue", "-h", "-n", self.name, "-t", "PENDING", "-o", "%i").split()
        for _ in range(self.pending - len(waiting)):
            out = sh(
                "sbatch", "--parsable", "-J", self.name, "--output=/dev/null",
                f"--chdir={self.workdir}", *FILLER, env=self.env,
            )  # fmt: skip
            self.ids.append(out.strip().split(";")[0])

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._tick()
            except (AssertionError, subprocess.SubprocessError) as exc:
                self.errors.append(str(exc))
            self._stop.wait(3)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(60)
        if self.ids:
            subprocess.run(["scancel", *self.ids], capture_output=True, timeout=60, check=False)


@dataclass
class Run:
    """One run of the docs: the namespace, the users' directories and environments."""

    ns: Namespace
    workdirs: dict[str, Path]
    user_env: dict[str, str]
    root_env: dict[str, str]
    since: int
    log: list[str] = field(default_factory=list)

    def say(self, text: str) -> None:
        print(text, flush=True)
        self.log.append(text)

    def root(self, script: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return self.ns.run(script, cwd=REPO, env=self.root_env, timeout=timeout)

    def user(
        self, user: str, script: str, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        return self.ns.run(
            script, cwd=self.workdirs[user], env=self.user_env, user=user, timeout=timeout
        )

    def json_of(self, res: subprocess.CompletedProcess[str]) -> Any:
        assert res.returncode == 0, (res.args[-1], res.stdout, res.stderr, self.daemon_log())
        return json.loads(res.stdout)

    def daemon_log(self, n: int = 40) -> str:
        path = self.ns.fresh("/var/lib/mirage") / "daemon.log"
        with contextlib.suppress(OSError):
            return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
        return "(no daemon log)"


def run_block(run: Run, doc: str, block: str, user: str | None = None) -> None:
    who = user or "root"
    res = run.root(block) if user is None else run.user(user, block)
    out = "\n".join(f"    {line}" for line in (res.stdout + res.stderr).splitlines())
    run.say(f"--- {doc} as {who}:\n{block.rstrip()}\n  ->\n{out}")
    assert res.returncode == 0, (
        f"{doc}: a block failed as {who} (rc {res.returncode}):\n{block}\n"
        f"{res.stdout}\n{res.stderr}\n{run.daemon_log()}"
    )


def researcher(run: Run, user: str) -> None:
    for doc in USER_DOCS:
        for block in blocks((REPO / doc).read_text()):
            run_block(run, doc, block, user)


def stop_daemon(run: Run) -> None:
    """As the running guide says: kill the pid in /run/mirage/daemon.pid (SIGTERM)."""
    pid_file = run.ns.fresh("/run/mirage") / "daemon.pid"
    with contextlib.suppress(OSError, ValueError):
        pid = int(pid_file.read_text())
        if pid in run.ns.processes():
            os.kill(pid, signal.SIGTERM)
            with contextlib.suppress(AssertionError):
                until(lambda: pid not in run.ns.processes(), 30, "the daemon to stop")


def cancel_leftovers(workdirs: dict[str, Path]) -> None:
    """Every job still queued whose working directory is one of the users'."""
    out = subprocess.run(
        ["squeue", "-h", "-o", "%i %Z"], capture_output=True, text=True, timeout=60, check=False
    ).stdout
    dirs = {str(d) for d in workdirs.values()}
    ids = [
        line.split()[0] for line in out.splitlines() if line.split()[1:] and line.split()[1] in dirs
    ]
    if ids:
        subprocess.run(["scancel", *ids], capture_output=True, timeout=60, check=False)


@pytest.fixture
def docs_run(tmp_path: Path) -> Iterator[Run]:
    if os.geteuid() != 0:
        pytest.skip("needs root: a mount namespace, and commands as the test users")
    res = subprocess.run(
        [str(USERS_SCRIPT)], capture_output=True, text=True, timeout=60, check=False
    )
    assert res.returncode == 0, res.stderr
    top = Path(tempfile.mkdtemp(prefix="mg-docs-", dir="/tmp"))
    top.chmod(0o755)
    ns = Namespace(top)
    workdirs = {}
    for user in USERS:
        w = top / user
        w.mkdir()
        pw = pwd.getpwnam(user)
        os.chown(w, pw.pw_uid, pw.pw_gid)
        workdirs[user] = w
    (top / "fill").mkdir()
    run = Run(ns, workdirs, {}, {}, int(time.time()) - 60)
    try:
        ns.start()
        venv = runnable_venv(top)
        (ns.fresh("/opt/mirage") / "venv").symlink_to(venv)
        run.root_env = {"PATH": ROOT_PATH, "HOME": "/root", "LANG": "C.UTF-8"}
        run.user_env = {
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "LANG": "C.UTF-8",
            "MIRAGE_PYTHON": str(venv / "bin" / "python"),
            **SCALE_ENV,
        }
        yield run
    finally:
        stop_daemon(run)
        log = ns.fresh("/var/lib/mirage") / "daemon.log"
        with contextlib.suppress(OSError):
            shutil.copy(log, tmp_path / "daemon.log")
        ns.close()
        cancel_leftovers(workdirs)
        shutil.rmtree(top, ignore_errors=True)


def sacct_jobs(since: int) -> list[dict[str, str]]:
    """Every job (allocations only) since ``since``: id, name, user, state, epoch times,
    working directory."""
    fields = ["JobID", "JobName", "User", "State", "Start", "End", "WorkDir"]
    env = {**os.environ, "SLURM_TIME_FORMAT": "%s"}
    start = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(since))
    out = sh("sacct", "-X", "-n", "-P", "-a", "-S", start, "-o", ",".join(fields), env=env)
    return [dict(zip(fields, line.split("|"), strict=False)) for line in out.splitlines() if line]


def gap_table(chains: dict[str, dict[str, Any]], jobs: dict[str, dict[str, str]]) -> list[str]:
    lines = [f"{'chain':<12} {'owner':<13} {'transition':<11} {'jobs':<13} {'gap (s)':>8}  policy"]
    for cid, c in chains.items():
        segs = sorted(c["show"]["segments_run"], key=lambda g: g["index"])
        for pred, succ in itertools.pairwise(segs):
            p, n = jobs[pred["job_id"]], jobs[succ["job_id"]]
            gap = int(n["Start"]) - int(p["End"])
            lines.append(
                f"{cid:<12} {c['owner']:<13} {pred['index'] + 1} -> {succ['index'] + 1:<6} "
                f"{p['JobID'] + '->' + n['JobID']:<13} {gap:>8}  {c['policy']}"
            )
    return lines


def test_the_docs_run_as_written(docs_run: Run, tmp_path: Path) -> None:
    run = docs_run
    began = time.monotonic()
    # 1. the admin: install, configure, run (as root, from the checkout, in order)
    for doc in ADMIN_DOCS:
        if doc == "docs/admin/running.md":  # the test's scaling: a cycle every 5 s
            config = run.ns.fresh("/etc/mirage") / "mirage.toml"
            text = re.sub(
                r"(?m)^poll_interval_s = .*$",
                f"poll_interval_s = {POLL_INTERVAL_S}",
                config.read_text(),
            )
            config.write_text(text)
        for block in blocks((REPO / doc).read_text()):
            run_block(run, doc, block)
    # the documented log names users' jobs: not readable by them (the trial found it 0644)
    log_mode = (run.ns.fresh("/var/lib/mirage") / "daemon.log").stat().st_mode
    assert log_mode & 0o077 == 0, oct(log_mode)
    start_line = next((ln for ln in run.daemon_log(200).splitlines() if " started: " in ln), "")
    run.say(f"daemon start line: {start_line}")

    # 2. the researchers, both at once
    with ThreadPoolExecutor(len(USERS)) as pool:
        for f in [pool.submit(researcher, run, user) for user in USERS]:
            f.result()
    fillers = Fillers(run.ns.top / "fill", FILLERS_PENDING)
    fillers.start()
    try:
        chains = watch_until_ended(run)
    finally:
        fillers.stop()
    run.say(f"filler jobs: {len(fillers.ids)}; errors: {fillers.errors[:3]}")
    check_and_report(run, chains, tmp_path)
    run.say(f"test runtime: {time.monotonic() - began:.0f} s")


def watch_until_ended(run: Run) -> dict[str, dict[str, Any]]:
    """Each user's chain (``mirage chain list --json --all`` as its owner) until none is
    ACTIVE; the policy ``mirage status --json`` (as root) names for each while it runs."""
    chains: dict[str, dict[str, Any]] = {}
    deadline = time.monotonic() + CHAINS_DEADLINE_S
    next_status = 0.0
    while True:
        for user in USERS:
            rows = run.json_of(run.user(user, "mirage chain list --json --all"))
            assert len(rows) == 1, (user, rows)
            chains.setdefault(rows[0]["id"], {"owner": user, "policy": ""}).update(row=rows[0])
        if time.monotonic() >= next_status:
            status = run.json_of(run.root("mirage status --json --all"))
            for r in status["chains"]:
                # while it runs: an ended chain keeps no note
                if r["id"] in chains and r.get("policy_used") and r["state"] == "ACTIVE":
                    chains[r["id"]]["status"] = r
            next_status = time.monotonic() + 15
        states = {cid: c["row"]["state"] for cid, c in chains.items()}
        if "ACTIVE" not in states.values():
            return chains
        if time.monotonic() > deadline:
            raise AssertionError(
                f"chains still active after {CHAINS_DEADLINE_S}s: {states}\n{run.daemon_log()}"
            )
        time.sleep(5)


def check_and_report(run: Run, chains: dict[str, dict[str, Any]], tmp_path: Path) -> None:
    status = run.json_of(run.root("mirage status --json --all"))
    for r in status["chains"]:
        if r["id"] in chains:
            # an ended chain keeps no note (nothing is pre-submitted any more): the policy
            # and its note are checked as status showed them while the chain ran
            assert r["state"] != "COMPLETED" or r["note"] == "", r
            chains[r["id"]].setdefault("status", r)
    for cid, c in chains.items():
        assert c["row"]["state"] == "COMPLETED", (cid, c["row"], run.daemon_log())
        c["show"] = run.json_of(run.user(c["owner"], f"mirage chain show {cid} --json"))
        st = c["status"]
        assert st["policy_used"] in ("xgb", "reactive"), st
        assert st["policy_used"] == "xgb" or (st["fallback"] == "xgb" and st["note"]), st
        c["policy"] = st["policy"] + (f" [note: {st['note']}]" if st["note"] else "")
    tokens = {x["token"]: cid for cid, c in chains.items() for x in c["show"]["submissions"]}
    dirs = {str(run.workdirs[c["owner"]]): cid for cid, c in chains.items()}

    def accounted() -> list[dict[str, str]] | None:
        jobs = [j for j in sacct_jobs(run.since) if j["WorkDir"] in dirs]
        ended = all(j["State"] not in ("PENDING", "RUNNING", "REQUEUED") for j in jobs)
        seen = {m[1] for j in jobs if (m := TOKEN.search(j["JobName"]))}
        return jobs if ended and set(tokens) <= seen else None

    until(lambda: accounted() is not None, 90, "every segment finished in sacct")
    jobs = accounted()
    assert jobs is not None
    by_token: dict[str, list[str]] = {}
    for j in jobs:
        m = TOKEN.search(j["JobName"])
        assert m and tokens.get(m[1]) == dirs[j["WorkDir"]], ("a job no chain made", j)
        by_token.setdefault(m[1], []).append(j["JobID"])
    dupes = {t: ids for t, ids in by_token.items() if len(ids) != 1}
    assert not dupes, f"tokens on more than one job: {dupes}"
    by_id = {j["JobID"]: j for j in jobs}
    for cid, c in chains.items():
        w = run.workdirs[c["owner"]]
        segs = sorted(c["show"]["segments_run"], key=lambda g: g["index"])
        assert len(segs) >= 2, (cid, segs)
        for g in segs[1:]:
            text = (w / f"slurm-{g['job_id']}.out").read_text()
            m = re.search(r"resumed at step (\d+)", text)
            assert m and int(m[1]) > 0, (cid, g["job_id"], text)
        assert (w / "checkpoints" / "DONE").exists(), (cid, sorted(p.name for p in w.iterdir()))
        run.say(f"{cid} ({c['owner']}): {len(segs)} segments, {c['row']['reason']}")
    table = gap_table(chains, by_id)
    run.say("\n".join(["per-transition gaps (start of k+1 minus end of k, sacct):", *table]))
    (tmp_path / "gaps.txt").write_text("\n".join(table) + "\n")
    (tmp_path / "run.log").write_text("\n".join(run.log) + "\n")
