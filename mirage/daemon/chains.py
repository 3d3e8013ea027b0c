"""Registering a chain: the snapshot every segment is submitted from.

At registration Mirage keeps the script's bytes (and their SHA-256), the working
directory, the export policy (and, for ``--export=ALL``, the environment of the
registering shell, as sbatch itself would have taken it), and the sbatch options. The
options Mirage manages itself are taken out of the passthrough list:

- ``--time/-t`` (the chain's time limit; the last segment may get a shorter one),
  ``--partition/-p``, ``--nodes/-N``, ``--gres``, ``--chdir/-D``, ``--export``;
- refused: ``--comment`` and ``--job-name/-J`` (they carry Mirage's token),
  ``--dependency/-d``, ``--hold/-H``, ``--array/-a``, ``--wrap``, ``--parsable``,
  ``--test-only`` (they would break the chain's bookkeeping).

``#SBATCH`` lines of the script give the time limit, partition, nodes and GPUs when the
command line does not (the command line wins, as in sbatch).
"""

from __future__ import annotations

import hashlib
import os
import pwd
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from mirage.daemon.store import Chain, ChainState, new_chain_id
from mirage.sim.backend import gres_gpus
from mirage.slurm.parse import digits


class ChainSpecError(ValueError):
    """The chain cannot be registered as asked (the message says why and what to do)."""


REFUSED = {
    "--comment": "Mirage puts its token in the comment",
    "--job-name": "Mirage puts its token in the job name (use --name)",
    "-J": "Mirage puts its token in the job name (use --name)",
    "--dependency": "Mirage orders the segments itself",
    "-d": "Mirage orders the segments itself",
    "--hold": "Mirage submits each segment when it is due",
    "-H": "Mirage submits each segment when it is due",
    "--array": "a chain's segment is one job, not an array",
    "-a": "a chain's segment is one job, not an array",
    "--wrap": "a chain needs a batch script",
    "--parsable": "Mirage reads sbatch's answer itself",
    "--test-only": "Mirage asks for estimates itself",
}
#: option -> the chain field it sets
MANAGED = {
    "--time": "time",
    "-t": "time",
    "--partition": "partition",
    "-p": "partition",
    "--nodes": "nodes",
    "-N": "nodes",
    "--gres": "gres",
    "--chdir": "chdir",
    "-D": "chdir",
    "--export": "export",
}
_FLAGS = {"--hold", "-H", "--parsable", "--test-only"}
#: In the script's #SBATCH lines these are harmless: the command line overrides them.
OVERRIDDEN_IN_SCRIPT = frozenset({"--comment", "--job-name", "-J"})


#: Bounds of a chain request (beyond them it is a typo, and too big for the database).
MAX_SEGMENTS = 100_000
MAX_TIME_LIMIT_S = 366 * 86400
MAX_NODES = 1_000_000
MAX_GPUS_PER_NODE = 1024


def parse_time_limit(text: str) -> int:
    """Slurm's time formats: M, M:S, H:M:S, D-H, D-H:M, D-H:M:S -> seconds."""
    t = text.strip()
    days = 0
    if "-" in t:
        d, _, t = t.partition("-")
        if not digits(d):
            raise ChainSpecError(f"invalid time limit {text!r}")
        days = int(d)
        parts = t.split(":")
        if not all(digits(p) for p in parts) or len(parts) > 3:
            raise ChainSpecError(f"invalid time limit {text!r}")
        nums = [int(p) for p in parts] + [0] * (3 - len(parts))
        return days * 86400 + nums[0] * 3600 + nums[1] * 60 + nums[2]
    parts = t.split(":")
    if not t or not all(digits(p) for p in parts) or len(parts) > 3:
        raise ChainSpecError(f"invalid time limit {text!r} (use e.g. 2-00:00:00 or 240)")
    nums = [int(p) for p in parts]
    if len(nums) == 1:
        return nums[0] * 60
    if len(nums) == 2:
        return nums[0] * 60 + nums[1]
    return nums[0] * 3600 + nums[1] * 60 + nums[2]


@dataclass
class SbatchSpec:
    managed: dict[str, str] = field(default_factory=dict)
    rest: list[str] = field(default_factory=list)


def split_options(
    args: Sequence[str], *, allowed: frozenset[str] = frozenset(), where: str = "options"
) -> SbatchSpec:
    """Take Mirage's managed options out of an sbatch option list; refuse the forbidden ones.

    Options Mirage does not know pass through untouched (a bare word after one is its value).
    """
    spec = SbatchSpec()
    i = 0
    while i < len(args):
        arg = args[i]
        i += 1
        if not arg.startswith("-"):
            spec.rest.append(arg)  # the value of the pass-through option before it
            continue
        name, eq, value = arg.partition("=")
        if not eq and not name.startswith("--") and len(name) > 2:
            name, value, eq = name[:2], name[2:], "="  # -t60, -pgpu
        if name in REFUSED and name not in allowed:
            raise ChainSpecError(f"{name} (in the {where}) is not allowed: {REFUSED[name]}")
        if name not in MANAGED and name not in REFUSED:
            spec.rest.append(arg)
            continue
        if not eq and name not in _FLAGS:
            if i >= len(args):
                raise ChainSpecError(f"{name} needs a value")
            value = args[i]
            i += 1
        if name in MANAGED:
            spec.managed[MANAGED[name]] = value
    return spec


_DIRECTIVE = re.compile(rb"^#SBATCH\s+(.*)$")


def script_directives(script: bytes) -> list[str]:
    """The options of the script's leading ``#SBATCH`` lines (sbatch stops at the first command)."""
    out: list[str] = []
    for raw in script.splitlines():
        line = raw.strip()
        if not line or (line.startswith(b"#") and not line.startswith(b"#SBATCH")):
            continue
        m = _DIRECTIVE.match(line)
        if m is None:
            break
        text = m.group(1).split(b"#", 1)[0].decode("utf-8", errors="replace")
        out.extend(text.split())
    return out


def build_chain(
    script_path: str,
    script: bytes,
    sbatch_args: Sequence[str],
    *,
    segments: int | None,
    until_file: str | None,
    name: str | None,
    cwd: str,
    environ: Mapping[str, str],
    uid: int | None = None,
    gid: int | None = None,
    groups: Sequence[int] | None = None,
    cluster: str = "",
) -> Chain:
    """A new ACTIVE chain from the registering user's request (not stored yet)."""
    if until_file is not None and not until_file.strip():
        raise ChainSpecError("--until-file needs a path")
    if segments is None and until_file is None:
        raise ChainSpecError("give --segments N, --until-file PATH, or both")
    if segments is not None and not 1 <= segments <= MAX_SEGMENTS:
        raise ChainSpecError(f"--segments must be 1 to {MAX_SEGMENTS}")
    if not script.startswith(b"#!"):
        raise ChainSpecError(f"{script_path}: a batch script must start with #! (sbatch's rule)")
    cli = split_options(sbatch_args, where="sbatch options")
    directives = split_options(
        script_directives(script), allowed=OVERRIDDEN_IN_SCRIPT, where="script's #SBATCH lines"
    )
    managed = {**directives.managed, **cli.managed}
    if "time" not in managed:
        raise ChainSpecError(
            "the segments' time limit is needed: --time in the options or #SBATCH --time"
        )
    limit = parse_time_limit(managed["time"])
    if not 0 < limit <= MAX_TIME_LIMIT_S:
        raise ChainSpecError(f"the time limit must be positive and at most 366 days, got {limit} s")
    nodes_text = managed.get("nodes", "1").split("-")[0]
    if not digits(nodes_text) or not 1 <= int(nodes_text) <= MAX_NODES:
        raise ChainSpecError(f"--nodes {managed.get('nodes')!r}: a fixed node count is needed")
    chdir = managed.get("chdir", cwd)
    if not Path(chdir).is_absolute():
        chdir = str(Path(cwd) / chdir)
    export = managed.get("export", "ALL")
    env = dict(environ) if export.split(",")[0] == "ALL" else {}
    uid = os.getuid() if uid is None else uid
    gid = os.getgid() if gid is None else gid
    owner = pwd.getpwuid(uid).pw_name
    gres = managed.get("gres")
    if gres_gpus(gres) > MAX_GPUS_PER_NODE:
        raise ChainSpecError(f"--gres {gres!r}: more than {MAX_GPUS_PER_NODE} GPUs per node")
    return Chain(
        id=new_chain_id(),
        name=re.sub(r"[^A-Za-z0-9_.+-]", "_", name or Path(script_path).stem)[:64],
        cluster=cluster,
        owner=owner,
        uid=uid,
        gid=gid,
        groups=list(groups if groups is not None else os.getgroups()),
        state=ChainState.ACTIVE,
        reason="",
        script=script,
        script_sha256=hashlib.sha256(script).hexdigest(),
        script_path=str(Path(cwd) / script_path),
        chdir=chdir,
        export=export,
        environment=env,
        sbatch_args=cli.rest,
        partition=managed.get("partition"),
        time_limit_s=limit,
        nodes=int(nodes_text),
        gpus_per_node=gres_gpus(gres),
        gres=gres,
        segments_target=segments,
        until_file=until_file,
        trained_s=0,
        next_index=0,
        policy="",
        rejections=0,
    )
