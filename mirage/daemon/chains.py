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

sbatch parses its options with getopt_long, which takes any unambiguous prefix of a long
option (``--dep`` is ``--dependency``, ``--j`` is ``--job-name``) and letters run
together after one dash (``-vJx`` is ``-v -J x``): both are read as sbatch reads them.

Every string the daemon later hands to a process or to the filesystem is checked here:
exec, open and the environment take C strings, where a NUL byte cannot be.

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
from mirage.profile.schema import Partition
from mirage.slurm.syntax import (
    SlurmSyntaxError,
    digits,
    format_duration,
    gres_gpus,
    parse_duration,
)


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
#: Our long options, any prefix of which sbatch may take for one of them.
_LONG = tuple(sorted(o for o in (*REFUSED, *MANAGED) if o.startswith("--")))
#: sbatch's short options that take a value (22.05; ``k``'s is optional and attached). In
#: a word such as ``-vJx`` the letters before the first of these are flags, and the rest of
#: the word is its value. A letter not listed is scanned as a flag: at worst a value is
#: read as options and refused, never an option of ours let through as a value.
_SHORT_WITH_VALUE = frozenset("ABCDFGJLMNSabcdeikmnopqtwx")
#: In the script's #SBATCH lines these are harmless: the command line overrides them.
OVERRIDDEN_IN_SCRIPT = frozenset({"--comment", "--job-name", "-J"})


#: Bounds of a chain request (beyond them it is a typo, and too big for the database).
MAX_SEGMENTS = 100_000
MAX_TIME_LIMIT_S = 366 * 86400
MAX_NODES = 1_000_000
MAX_GPUS_PER_NODE = 1024


def parse_time_limit(text: str) -> int:
    """A chain's ``--time`` in seconds, read as sbatch reads it (a bare number: minutes)."""
    try:
        return parse_duration(text)
    except SlurmSyntaxError:
        raise ChainSpecError(f"invalid time limit {text!r} (use e.g. 2-00:00:00 or 240)") from None


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
        passed, name, value = _our_option(arg, allowed, where)
        if passed:
            spec.rest.append(passed)
        if not name:
            continue
        if value is None and name not in _FLAGS:
            if i >= len(args):
                raise ChainSpecError(f"{name} needs a value")
            value = args[i]
            i += 1
        if name in MANAGED:
            spec.managed[MANAGED[name]] = value or ""
    return spec


def _our_option(arg: str, allowed: frozenset[str], where: str) -> tuple[str, str, str | None]:
    """(what passes through to sbatch, the refused or managed option in ``arg`` or "",
    its attached value or None); refuses what is not allowed."""
    if arg.startswith("--"):
        typed, eq, value = arg.partition("=")
        name = _long_name(typed, allowed, where)
        if not name:
            return arg, "", None
        return "", name, value if eq else None
    flags, name, attached = _short_option(arg)
    if name in REFUSED and name not in allowed:
        raise ChainSpecError(f"{name} (in the {where}) is not allowed: {REFUSED[name]}")
    # "-p=gpu" has always been read as -p gpu here (sbatch would take "=gpu"): kept
    return flags, name, attached.removeprefix("=") or None


def _long_name(typed: str, allowed: frozenset[str], where: str) -> str:
    """The refused or managed option that ``typed`` is or abbreviates, or "" for none.

    getopt_long takes an abbreviation when it is unambiguous among ALL of sbatch's
    options, which Mirage does not list: so every prefix of one of ours counts as it (an
    ambiguous one sbatch refuses anyway). A refused option is refused; an abbreviated
    managed one too, since Mirage cannot tell which option sbatch would take it for.
    """
    if typed == "--":
        return ""  # the end of the options, or a bare "--=..." sbatch refuses itself
    exact = typed in REFUSED or typed in MANAGED
    hits = [typed] if exact else [o for o in _LONG if o.startswith(typed)]
    refused = [o for o in hits if o in REFUSED and o not in allowed]
    if refused:
        name = refused[0]
        why = REFUSED[name] if exact else f"it abbreviates {name}: {REFUSED[name]}"
        raise ChainSpecError(f"{typed} (in the {where}) is not allowed: {why}")
    if exact or not hits:
        return typed if exact else ""
    if all(o in REFUSED for o in hits):
        return hits[0]  # allowed here (a token carrier in the script's lines): ignored
    raise ChainSpecError(
        f"{typed} (in the {where}) abbreviates {' or '.join(hits)}: write the option in full"
    )


def _short_option(arg: str) -> tuple[str, str, str]:
    """Split ``-vJx`` into ("-v", "-J", "x"): the flags before the first refused or managed
    letter, that letter's option and its attached value; (arg, "", "") when it has none."""
    for i, letter in enumerate(arg[1:], start=1):
        name = f"-{letter}"
        if name in REFUSED or name in MANAGED:
            return (arg[:i] if i > 1 else ""), name, arg[i + 1 :]
        if letter in _SHORT_WITH_VALUE:
            break  # the rest of the word is this option's value
    return arg, "", ""


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


def check_text(what: str, value: str) -> None:
    """Refuse a string that cannot become a C string for exec, open or the environment.

    Such a string would only fail later, in the daemon's cycle, as an exception that no
    error message reaches the user through (a NUL byte; a lone surrogate, which no file
    system encoding can write).
    """
    if "\0" in value:
        raise ChainSpecError(f"{what} contains a NUL byte")
    try:
        os.fsencode(value)
    except UnicodeEncodeError:
        raise ChainSpecError(f"{what} is not encodable text (a lone surrogate)") from None


def check_environment(environ: Mapping[str, str]) -> None:
    """The variables must be ones that execve can pass: NAME=value, NAME without '='."""
    for key, value in environ.items():
        if not key or "=" in key:
            raise ChainSpecError(f"environment variable name {key!r}: empty or contains '='")
        check_text(f"environment variable name {key!r}", key)
        check_text(f"the value of environment variable {key}", value)


def _check_request(
    script_path: str,
    cwd: str,
    *,
    until_file: str | None,
    name: str | None,
    sbatch_args: Sequence[str],
    environ: Mapping[str, str],
) -> None:
    check_text("the script path", script_path)
    check_text("the working directory", cwd)
    for label, value in (("--until-file", until_file), ("--name", name)):
        if value is not None:
            check_text(label, value)
    for arg in sbatch_args:
        check_text(f"the sbatch option {arg!r}", arg)
    check_environment(environ)


def _check_managed(managed: Mapping[str, str], where: str) -> None:
    # values read from the script's bytes reach sbatch's command line as options
    for key, value in managed.items():
        check_text(f"{where} {key} value {value!r}", value)


#: sbatch's input environment variables for the options Mirage manages (sbatch(1), "INPUT
#: ENVIRONMENT VARIABLES"): they override the script's #SBATCH lines, options override them.
INPUT_ENVIRONMENT = {"SBATCH_TIMELIMIT": "time", "SBATCH_PARTITION": "partition"}


def _from_environment(environ: Mapping[str, str]) -> dict[str, str]:
    return {opt: environ[var] for var, opt in INPUT_ENVIRONMENT.items() if environ.get(var)}


def check_limits(chain: Chain, partitions: Sequence[Partition]) -> None:
    """Refuse what Slurm would accept and never run: a partition the cluster lacks, or a
    time limit above the partition's MaxTime (it would pend forever, PartitionTimeLimit).
    ``partitions``: the cluster's, as read from it (none: nothing to check against)."""
    if not partitions:
        return
    names = [p.name for p in partitions]
    wanted = chain.partition.split(",") if chain.partition else []
    if not wanted:
        default = next((p for p in partitions if p.default), None)
        wanted = [default.name] if default is not None else []
    for name in wanted:
        part = next((p for p in partitions if p.name == name), None)
        if part is None:
            raise ChainSpecError(
                f"no partition {name!r} on this cluster; it has: {', '.join(names)}"
            )
        if part.max_time_s is not None and chain.time_limit_s > part.max_time_s:
            raise ChainSpecError(
                f"time limit {format_duration(chain.time_limit_s)} is over partition {name}'s "
                f"MaxTime {format_duration(part.max_time_s)}: the jobs would pend forever "
                "(PartitionTimeLimit); ask for at most that"
            )


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
    _check_request(
        script_path, cwd, until_file=until_file, name=name, sbatch_args=sbatch_args, environ=environ
    )
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
    # sbatch's order: its options, then its input environment variables, then #SBATCH lines
    managed = {**directives.managed, **_from_environment(environ), **cli.managed}
    _check_managed(directives.managed, "the script's #SBATCH")
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
    gpus = gres_gpus(gres) or 0
    if gpus > MAX_GPUS_PER_NODE:
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
        gpus_per_node=gpus,
        gres=gres,
        segments_target=segments,
        until_file=until_file,
        trained_s=0,
        next_index=0,
        policy="",
        rejections=0,
    )
