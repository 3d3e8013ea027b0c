"""Slurm's value syntax, read and written in one place: durations, GRES and TRES, times.

Every part of Mirage that meets these values (the command-line parsers, the daemon's
sbatch options, trace readers, profile capture, the simulator's answers) uses this
module, so that a form Slurm prints is understood the same way everywhere.

- durations: ``MM``, ``MM:SS``, ``HH:MM:SS``, ``D-HH``, ``D-HH:MM``, ``D-HH:MM:SS``
  (``--time``, ``TimeLimit``, ``MaxTime``, ``Elapsed``), and scontrol's ``30 sec``;
- GRES: ``gpu:4``, ``gpu:a100:4``, ``gres/gpu:a100:4``, ``gres:gpu:4``,
  ``gpu:a100:4(S:0-1)``, ``gpu:2(IDX:0,1)``, ``gres/gpu=4``; TRES:
  ``cpu=4,mem=16G,node=1,billing=4,gres/gpu=2`` (typed ``gres/gpu:a100=2`` too);
- times: Slurm's ``2026-11-26T23:21:03`` (in a given zone, UTC by default) and the ISO
  dates and times Mirage's own options take (:func:`parse_when`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, tzinfo

#: What Slurm prints where a duration has no limit (upper case; compared so).
NO_LIMIT = frozenset({"", "UNLIMITED", "INFINITE", "PARTITION_LIMIT", "NONE", "N/A"})
#: What Slurm prints for a time not (yet) known (upper case; compared so).
NO_TIME = frozenset({"", "N/A", "UNKNOWN", "NONE", "(NULL)"})

_DAY_S = 86400
# scontrol show config's durations with a unit word: "BatchStartTimeout = 10 sec"
_WORD_DURATION = re.compile(r"(\d+)\s*(sec|min)", re.ASCII)
_SLURM_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d", re.ASCII)
# a comma that separates GRES, not one inside "(IDX:0,1)"
_GRES_SPLIT = re.compile(r",(?![^(]*\))")


class SlurmSyntaxError(ValueError):
    """A value is not in the Slurm form it should have (the message names it)."""


def digits(text: str) -> bool:
    """ASCII digits only: ``str.isdigit`` also takes "²", which ``int`` refuses."""
    return text.isascii() and text.isdigit()


# ---------------------------------------------------------------------------- durations


def parse_duration(text: str, *, bare_unit_s: int = 60) -> int:
    """A Slurm duration in seconds: ``MM``, ``MM:SS``, ``HH:MM:SS``, ``D-HH``, ``D-HH:MM``,
    ``D-HH:MM:SS``. A bare number counts in ``bare_unit_s`` (minutes, as sbatch's --time
    reads it; 1 for sacct's Elapsed in seconds). SlurmSyntaxError for anything else,
    ``UNLIMITED`` included (see :func:`parse_limit`)."""
    t = text.strip()
    day_text, dash, rest = t.rpartition("-") if "-" in t else ("", "", t)
    parts = rest.split(":")
    if (dash and not digits(day_text)) or len(parts) > 3 or not all(map(digits, parts)):
        raise SlurmSyntaxError(f"not a Slurm duration: {text!r}")
    nums = [int(p) for p in parts]
    if dash:  # D-H, D-H:M, D-H:M:S
        nums += [0] * (3 - len(nums))
        return int(day_text) * _DAY_S + nums[0] * 3600 + nums[1] * 60 + nums[2]
    if len(nums) == 1:
        return nums[0] * bare_unit_s
    if len(nums) == 2:
        return nums[0] * 60 + nums[1]
    return nums[0] * 3600 + nums[1] * 60 + nums[2]


def parse_limit(text: str, *, bare_unit_s: int = 60) -> int | None:
    """A limit as Slurm prints it: a duration (:func:`parse_duration`), ``N sec``/``N min``
    as scontrol shows some of its configuration, or None where there is no limit
    (``UNLIMITED``, ``INFINITE``, ``Partition_Limit``, ``NONE``, ``N/A``, empty)."""
    t = text.strip()
    if t.upper() in NO_LIMIT:
        return None
    m = _WORD_DURATION.fullmatch(t)
    if m:
        return int(m[1]) * (1 if m[2] == "sec" else 60)
    return parse_duration(t, bare_unit_s=bare_unit_s)


def format_duration(seconds: int | None) -> str:
    """Seconds as Slurm writes a duration, ``D-HH:MM:SS`` (``UNLIMITED`` for None)."""
    if seconds is None:
        return "UNLIMITED"
    if seconds < 0:
        raise ValueError(f"a duration cannot be negative ({seconds} s)")
    days, rest = divmod(int(seconds), _DAY_S)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{days}-{hours:02d}:{minutes:02d}:{secs:02d}"


# ----------------------------------------------------------------------------- GRES, TRES


@dataclass(frozen=True)
class Gres:
    """One generic resource of a GRES list: ``gpu:a100:4`` -> ("gpu", "a100", 4)."""

    name: str
    kind: str
    count: int


def parse_gres(spec: str | None) -> list[Gres]:
    """A GRES list (sbatch's ``--gres``, squeue's ``tres_per_node``, a node's ``Gres``).

    Each item is ``[gres:|gres/]name[:type][:count]`` or ``name=count``, maybe followed by
    the sockets or indexes in parentheses; no count means 1. ``(null)`` is no GRES."""
    out = []
    for raw in _GRES_SPLIT.split(spec or ""):
        item = re.sub(r"\(.*\)$", "", re.sub(r"^gres[:/]", "", raw.strip()))
        fields = item.replace("=", ":").split(":")
        if not fields[0]:
            continue
        counted = len(fields) > 1 and digits(fields[-1])
        kind = ":".join(fields[1:-1] if counted else fields[1:])
        out.append(Gres(fields[0], kind, int(fields[-1]) if counted else 1))
    return out


def gres_gpus(spec: str | None) -> int | None:
    """The GPUs a GRES list names (``gpu`` alone is 1); None when it names none."""
    gpus = [g.count for g in parse_gres(spec) if g.name == "gpu"]
    return sum(gpus) if gpus else None


def gpu_gres(count: int, like: str | None = None) -> str:
    """``gpu:<count>``, with the GPU type ``like`` names if it names one (``gpu:a100:2``
    -> ``gpu:a100:<count>``): a new size keeps the type the job asked for."""
    kinds = [g.kind for g in parse_gres(like) if g.name == "gpu" and g.kind]
    return f"gpu:{kinds[0]}:{count}" if kinds else f"gpu:{count}"


def sbatch_gres(args: Sequence[str]) -> str | None:
    """The ``--gres`` value among sbatch options (the last one: sbatch's own rule)."""
    found: str | None = None
    for i, arg in enumerate(args):
        if arg.startswith("--gres="):
            found = arg.removeprefix("--gres=")
        elif arg == "--gres" and i + 1 < len(args):
            found = args[i + 1]
    return found


#: The sbatch options that size a job's tasks and their CPUs (long, short).
_TASK_OPTIONS = (("--ntasks", "-n"), ("--ntasks-per-node", ""), ("--cpus-per-task", "-c"))


def cpu_task_args(nodes: int, cpus_per_node: int) -> list[str]:
    """sbatch options for ``cpus_per_node`` CPUs on each of ``nodes`` nodes, as one task
    per node (a process that uses threads, a training loop's usual form)."""
    return [f"--ntasks={nodes}", "--ntasks-per-node=1", f"--cpus-per-task={cpus_per_node}"]


def without_task_args(args: Sequence[str]) -> list[str]:
    """``args`` less every task and CPU-per-task option (``--ntasks=4``, ``-n 4``, ``-n4``,
    ``--cpus-per-task 8``, ``-c8``...): what :func:`cpu_task_args` replaces."""
    out: list[str] = []
    skip = False
    for arg in args:
        if skip:
            skip = False
            continue
        for long, short in _TASK_OPTIONS:
            if arg == long or (short and arg == short):
                skip = True  # the value is the next word
                break
            if arg.startswith(long + "=") or (short and arg.startswith(short) and arg != short):
                break
        else:
            out.append(arg)
    return out


def parse_tres(tres: str) -> dict[str, str]:
    """``cpu=1,mem=1000M,gres/gpu=4`` -> {"cpu": "1", "mem": "1000M", "gres/gpu": "4"}
    (items without ``=`` left out)."""
    out: dict[str, str] = {}
    for part in tres.split(","):
        key, sep, val = part.partition("=")
        if sep and key.strip():
            out[key.strip()] = val.strip()
    return out


def tres_count(tres: Mapping[str, str], key: str) -> int | None:
    """One TRES's count (``node``, ``cpu``); None when absent or not a whole number."""
    value = tres.get(key, "")
    return int(value) if digits(value) else None


def tres_gpus(tres: Mapping[str, str]) -> int | None:
    """GPUs in a TRES list: ``gres/gpu``, else the sum of the typed ``gres/gpu:<type>``
    (Slurm accounts a typed request under both); None when it names no GPU."""
    total = tres_count(tres, "gres/gpu")
    if total is not None:
        return total
    typed = [int(v) for k, v in tres.items() if k.startswith("gres/gpu:") and digits(v)]
    return sum(typed) if typed else None


# ---------------------------------------------------------------------------------- times


def parse_slurm_time(value: str, zone: tzinfo = UTC) -> int | None:
    """Slurm's ``2026-11-26T23:21:03`` in ``zone`` (its controller's; UTC where Mirage's
    runner sets TZ=UTC) -> epoch seconds; None for ``Unknown``, ``N/A``, ``None``,
    ``(null)`` or empty. A local time that occurs twice is read as its first occurrence."""
    text = value.strip()
    if text.upper() in NO_TIME:
        return None
    if not _SLURM_TIME.fullmatch(text):
        raise SlurmSyntaxError(f"not a Slurm time: {value!r}")
    try:
        when = datetime.strptime(text, "%Y-%m-%dT%H:%M:%S")
    except ValueError:  # the right shape, but no such day or hour
        raise SlurmSyntaxError(f"not a Slurm time: {value!r}") from None
    return int(when.replace(tzinfo=zone).timestamp())


def format_slurm_time(epoch: int) -> str:
    """Epoch seconds as Slurm reads a time (sacct's -S/-E), in UTC."""
    return datetime.fromtimestamp(epoch, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S")


def parse_when(text: str, tz: str) -> int:
    """An ISO date or time (``2023-03-01``, ``2023-03-01T12:00``, with or without an
    offset) as epoch seconds; naive ones are read in zone ``tz``. ValueError, naming the
    text, for anything else."""
    import pandas as pd  # here: the daemon imports this module and never needs pandas

    try:
        when = pd.Timestamp(text)
    except ValueError as exc:
        raise ValueError(f"not an ISO date or time: {text!r}") from exc
    if pd.isna(when):
        raise ValueError(f"not an ISO date or time: {text!r}")
    if when.tzinfo is None:
        when = when.tz_localize(tz)
    return int(when.timestamp())
