"""Pure parsers: Slurm command output (text) -> typed records. No I/O, no subprocesses.

Two JSON shapes exist for ``squeue --json`` / ``sacct --json``:

* **legacy** (Slurm 21.08/22.05, ``meta.plugin.type`` = ``openapi/v0.0.37``/``v0.0.38``):
  plain numbers (``NO_VAL``/``INFINITE`` sentinels, ``0`` = unset time), ``job_state`` a
  string, sacct ``state.current`` a string, ``exit_code.return_code`` a number;
* **data_parser** (23.02+, ``meta.plugin.data_parser`` = ``data_parser/v0.0.39`` ...):
  numbers become ``{"set": bool, "infinite": bool, "number": N}``, ``job_state`` and
  ``state.current`` become lists of strings, ``exit_code.status`` a list.

The shape is chosen from ``meta`` (data_parser name, plugin type, Slurm version); an
unrecognised ``meta`` raises :class:`SlurmParseError` rather than guessing.
"""

from __future__ import annotations

import json
import logging
import math
import re
import time
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from mirage.slurm import hostlist
from mirage.slurm.syntax import (
    SlurmSyntaxError,
    digits,
    gres_gpus,
    parse_slurm_time,
    parse_tres,
    tres_gpus,
)
from mirage.slurm.types import (
    JobState,
    QueueSnapshot,
    SlurmJob,
    SlurmParseError,
    SlurmUnreachableError,
    StartEstimate,
)

log = logging.getLogger(__name__)

Shape = Literal["legacy", "data_parser"]

#: data_parser plugin versions whose job records this module knows (23.02 ... 25.11).
KNOWN_DATA_PARSERS = frozenset({39, 40, 41, 42, 43, 44})
#: openapi plugin versions of the legacy (pre-23.02) CLI JSON.
KNOWN_LEGACY_OPENAPI = frozenset({37, 38})

# Slurm's "no value" / "infinite" sentinels (slurm.h): NO_VAL, INFINITE, and their 16/64-bit forms.
_SENTINELS = frozenset(
    {
        0xFFFFFFFE,
        0xFFFFFFFF,
        0xFFFE,
        0xFFFF,
        0xFFFFFFFFFFFFFFFE,
        0xFFFFFFFFFFFFFFFF,
    }
)

# Flags that Slurm reports instead of (22.05, one string) or beside (23.02+, a list) the
# base state and that we keep as the visible state, highest precedence first.
_FLAG_STATES: tuple[tuple[str, JobState], ...] = (
    ("COMPLETING", JobState.COMPLETING),
    ("STAGE_OUT", JobState.COMPLETING),
    ("SPECIAL_EXIT", JobState.SPECIAL_EXIT),
    ("REQUEUED", JobState.REQUEUED),
    ("REQUEUE_FED", JobState.REQUEUED),
    ("REQUEUE_HOLD", JobState.PENDING),
    ("RESV_DEL_HOLD", JobState.PENDING),
    ("RESIZING", JobState.RESIZING),
    ("STOPPED", JobState.STOPPED),
    ("REVOKED", JobState.REVOKED),
)
_STATE_ALIASES: dict[str, JobState] = {
    "COMPLETE": JobState.COMPLETED,
    "CANCELED": JobState.CANCELLED,
    "OOM": JobState.OUT_OF_MEMORY,
    "CONFIGURING": JobState.RUNNING,
    "SIGNALING": JobState.RUNNING,
    "POWER_UP_NODE": JobState.RUNNING,
}
_IGNORED_FLAGS = frozenset(
    {"CONFIGURING", "SIGNALING", "POWER_UP_NODE", "UPDATE_DB", "LAUNCH_FAILED", "RECONFIG_FAIL"}
)


def _perr(message: str, text: str = "") -> SlurmParseError:
    return SlurmParseError([], 0, text[:500], message)


# ---------------------------------------------------------------------------------- helpers


def _number(value: Any) -> int | None:
    """A Slurm number in either shape; unset, NO_VAL and INFINITE -> None.

    Values that are no integer at all (a non-numeric string, a list, and also the
    non-finite floats that ``Infinity``, ``NaN`` or ``1e400`` become in Python's JSON) are
    "unset" too, like this function always treated junk: every caller already has a
    meaning for None (unknown time, no priority, 0 CPUs...), and a required field
    (``job_id``) turns None into a SlurmParseError itself.
    """
    value = _unwrap(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            return None
        value = int(value)
    elif isinstance(value, str):
        text = value.strip()
        value = int(text) if digits(text) else None
    if not isinstance(value, int) or isinstance(value, bool):
        return None
    if value in _SENTINELS:
        return None
    return value


def _unwrap(value: Any) -> Any:
    """data_parser's ``{"set", "infinite", "number"}`` -> the number, or None if unset/INFINITE."""
    if isinstance(value, Mapping):
        if not value.get("set", False) or value.get("infinite", False):
            return None
        return value.get("number")
    return value


def _job_id(job: Mapping[str, Any], what: str) -> int:
    """A record's ``job_id``: a positive integer, else SlurmParseError for the whole document
    (a record we cannot name cannot be matched to Mirage's jobs: failing the poll is safer
    than silently dropping or truncating it, e.g. 12.7 -> job 12)."""
    raw = _unwrap(job.get("job_id"))
    if isinstance(raw, float) and math.isfinite(raw) and not raw.is_integer():
        raise _perr(f"{what} job with non-integer job_id {raw!r}")
    job_id = _number(raw)
    if job_id is None:
        raise _perr(f"{what} job without job_id: {dict(job)!r}"[:300])
    if job_id <= 0:
        raise _perr(f"{what} job with job_id {job_id} (Slurm job ids are > 0)")
    return job_id


def _epoch(value: Any) -> int | None:
    """An epoch time; 0 (Slurm's "unset") -> None."""
    n = _number(value)
    return n if n else None


def _minutes(value: Any) -> int | None:
    """A limit in minutes -> seconds. Negative -> None (unset/INFINITE): Slurm's limits are
    uint32, so a negative value can only be a sentinel printed as signed (-1 = INFINITE,
    -2 = NO_VAL), never a real limit of -60 s."""
    n = _number(value)
    return None if n is None or n < 0 else n * 60


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return ",".join(str(v) for v in value)
    return str(value)


def map_state(raw: str | Sequence[str]) -> tuple[JobState, str]:
    """Slurm state string(s) -> (JobState, raw text). Unknown -> UNKNOWN with a warning."""
    if isinstance(raw, str):
        tokens = [raw.strip()]
        raw_text = raw.strip()
    else:
        tokens = [str(t).strip() for t in raw]
        raw_text = ",".join(tokens)
    # sacct text form: "CANCELLED by 1000"
    tokens = [t.split(" ")[0].upper() for t in tokens if t]
    for flag, state in _FLAG_STATES:
        if flag in tokens:
            return state, raw_text
    for token in tokens:
        if token in JobState.__members__ and token != "UNKNOWN":
            return JobState[token], raw_text
        if token in _STATE_ALIASES and token not in _IGNORED_FLAGS:
            return _STATE_ALIASES[token], raw_text
    for token in tokens:
        if token in _STATE_ALIASES:
            return _STATE_ALIASES[token], raw_text
    _warn_unknown_state(",".join(tokens), raw_text)
    return JobState.UNKNOWN, raw_text


#: Unknown state strings already logged by this process. The warning repeated once per job
#: per poll would flood the log for as long as the state exists; once per process is
#: enough to notice. Keyed on the normalised tokens, so "X by 1000" / "X by 1001" count once.
#: (No metric here: parsers stay pure; the daemon counts UNKNOWN records itself.)
_WARNED_STATES: set[str] = set()


def _warn_unknown_state(key: str, raw_text: str) -> None:
    if key in _WARNED_STATES:
        return
    _WARNED_STATES.add(key)
    log.warning("unknown Slurm job state %r: mapped to UNKNOWN (logged once)", raw_text)


# ---------------------------------------------------------------------------- JSON shape


def _load_json(text: str | bytes, what: str) -> Mapping[str, Any]:
    try:
        doc = json.loads(text)
    except (ValueError, TypeError) as exc:
        raw = text.decode("utf-8", "replace") if isinstance(text, bytes) else str(text)
        raise _perr(f"{what}: not JSON ({exc})", raw) from exc
    if not isinstance(doc, Mapping):
        raise _perr(f"{what}: JSON top level is not an object")
    return doc


def slurm_version(meta: Mapping[str, Any]) -> str:
    """The Slurm release named in ``meta`` ("22.05.8"), or "".

    SlurmParseError when ``version`` holds something other than whole numbers
    (e.g. minor "05-rc1" or null): we would otherwise report or compare a made-up version."""
    for key in ("slurm", "Slurm"):
        block = meta.get(key)
        if isinstance(block, Mapping):
            release = block.get("release")
            if isinstance(release, str) and release:
                return release
            ver = block.get("version")
            if isinstance(ver, Mapping) and "major" in ver:
                major = _version_part(ver, "major")
                minor = _version_part(ver, "minor")
                micro = _version_part(ver, "micro")
                return f"{major}.{minor:02d}.{micro}"
    return ""


def _version_part(ver: Mapping[str, Any], key: str) -> int:
    """One of meta's version numbers (an int or a string of ASCII digits); absent -> 0."""
    value = ver.get(key, 0)
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    if isinstance(value, str) and digits(value):
        return int(value)
    raise _perr(f"Slurm JSON meta version {key} is not a number: {value!r}", json.dumps(ver))


def detect_shape(meta: Any) -> Shape:
    """Which JSON shape a document has, from its ``meta``; SlurmParseError if unknown."""
    if not isinstance(meta, Mapping):
        raise _perr("Slurm JSON has no meta object: cannot tell its shape")
    plugin = meta.get("plugin") or meta.get("plugins") or {}
    if not isinstance(plugin, Mapping):
        plugin = {}
    parser = _text(plugin.get("data_parser"))
    if parser:
        m = re.search(r"v0\.0\.(\d+)", parser)
        if m and int(m.group(1)) in KNOWN_DATA_PARSERS:
            return "data_parser"
        raise _perr(f"unknown Slurm JSON data_parser {parser!r}")
    ptype = _text(plugin.get("type"))
    m = re.fullmatch(r"openapi/v0\.0\.(\d+)", ptype)
    if m:
        if int(m.group(1)) in KNOWN_LEGACY_OPENAPI:
            return "legacy"
        if int(m.group(1)) in KNOWN_DATA_PARSERS:
            return "data_parser"
        raise _perr(f"unknown Slurm JSON plugin {ptype!r}")
    version = slurm_version(meta)
    m = re.match(r"(\d+)\.(\d+)", version)
    if m:
        major, minor = int(m.group(1)), int(m.group(2))
        if (major, minor) < (21, 8):
            raise _perr(f"Slurm {version} JSON is not supported")
        return "legacy" if (major, minor) < (23, 2) else "data_parser"
    raise _perr(f"cannot tell the Slurm JSON shape from meta {dict(meta)!r}")


_UNREACHABLE_JSON_ERROR = re.compile(
    r"slurm_load_jobs|slurm_persist_conn|contact|connect|database", re.IGNORECASE
)


#: slurmdbd's ESLURM_REST_EMPTY_RESULT: 22.05's sacct --json reports a window without
#: jobs as this error (exit status 0). It means "no jobs", not a failure.
_EMPTY_RESULT = 9003


def _only_empty_result(errors: Any) -> bool:
    return isinstance(errors, list) and all(
        isinstance(e, Mapping) and e.get("error_number") == _EMPTY_RESULT for e in errors
    )


def _jobs_list(doc: Mapping[str, Any], what: str) -> list[Mapping[str, Any]]:
    jobs = doc.get("jobs")
    if not isinstance(jobs, list) or not all(isinstance(j, Mapping) for j in jobs):
        raise _perr(f"{what}: no 'jobs' list")
    errors = doc.get("errors")
    if errors and not _only_empty_result(errors):
        # 22.05's squeue --json exits 0 with an empty job list and an "errors" entry
        # (source slurm_load_jobs) when slurmctld is down: that is not an empty queue.
        text = json.dumps(errors)
        if not jobs:
            if _UNREACHABLE_JSON_ERROR.search(text):
                raise SlurmUnreachableError([], 0, text, f"{what}: controller unreachable")
            raise _perr(f"{what} reported errors and no jobs: {text}", text)
        log.warning("%s reported errors: %s", what, text)
    return jobs


def _task_string(value: Any) -> str:
    """An array's pending task set: "3-5" as squeue prints it, or sacct 22.05's hex bitmap
    ("0x38" = tasks 3, 4, 5) turned into the same range form."""
    text = _text(value).strip()
    if not text.lower().startswith("0x"):
        return text
    try:
        bits = int(text, 16)
    except ValueError:
        return text
    tasks = [i for i in range(bits.bit_length()) if bits >> i & 1]
    ranges: list[str] = []
    i = 0
    while i < len(tasks):
        j = i
        while j + 1 < len(tasks) and tasks[j + 1] == tasks[j] + 1:
            j += 1
        ranges.append(str(tasks[i]) if i == j else f"{tasks[i]}-{tasks[j]}")
        i = j + 1
    return ",".join(ranges)


def _array_ids(
    job_id: int, array_job_id: int | None, task_id: int | None, task_string: str
) -> tuple[str, str | None, str | None]:
    """(job_id, array_job_id, array_task_id) as Mirage names them."""
    if array_job_id and task_id is not None:
        return f"{array_job_id}_{task_id}", str(array_job_id), str(task_id)
    if array_job_id and task_string:
        # pending remainder of an array: squeue prints it as 9_[3-5]
        return f"{array_job_id}_[{task_string}]", str(array_job_id), task_string
    return str(job_id), None, None


# ------------------------------------------------------------------------------ squeue


def _squeue_job(job: Mapping[str, Any]) -> SlurmJob:
    job_id_num = _job_id(job, "squeue")
    job_id, array_job_id, array_task_id = _array_ids(
        job_id_num,
        _number(job.get("array_job_id")),
        _number(job.get("array_task_id")),
        _text(job.get("array_task_string")),
    )
    raw_state = job.get("job_state")
    state, raw = map_state(raw_state if isinstance(raw_state, list) else _text(raw_state))
    nodes = _number(job.get("node_count")) or 0
    gpus = tres_gpus(parse_tres(_text(job.get("tres_alloc_str"))))
    if gpus is None:
        gpus = tres_gpus(parse_tres(_text(job.get("tres_req_str"))))
    if gpus is None:
        per_node = gres_gpus(_text(job.get("tres_per_node")))
        per_job = gres_gpus(_text(job.get("tres_per_job")))
        gpus = per_job if per_job is not None else (per_node or 0) * max(nodes, 1)
    exit_code = job.get("exit_code")
    return SlurmJob(
        job_id=job_id,
        name=_text(job.get("name")),
        user=_text(job.get("user_name")),
        account=_text(job.get("account")),
        partition=_text(job.get("partition")),
        state=state,
        reason=_text(job.get("state_reason")),
        submit=_epoch(job.get("submit_time")),
        eligible=_epoch(job.get("eligible_time")),
        start=_epoch(job.get("start_time")),
        end=_epoch(job.get("end_time")),
        time_limit=_minutes(job.get("time_limit")),
        nodes=nodes,
        cpus=_number(job.get("cpus")) or 0,
        gpus=gpus,
        priority=_number(job.get("priority")),
        dependency=_text(job.get("dependency")),
        comment=_text(job.get("comment")),
        exit_code=_exit_code(exit_code) if state.is_finished else None,
        array_job_id=array_job_id,
        array_task_id=array_task_id,
        raw_state=raw,
        node_list=running_nodes(state, _text(job.get("nodes"))),
    )


#: States in which a job holds its nodes.
_HOLDING = frozenset({JobState.RUNNING, JobState.COMPLETING, JobState.RESIZING, JobState.SUSPENDED})


def running_nodes(state: JobState, nodes: str) -> tuple[str, ...]:
    """A running job's nodes from its NodeList (a pending job's is empty, or the nodes a
    pass has in mind for it: not held). A list this module cannot read is left out with
    a warning: the placement is a refinement, never a reason to drop the job."""
    if state not in _HOLDING or not nodes or nodes in {"(null)", "None assigned"}:
        return ()
    try:
        return tuple(hostlist.expand(nodes))
    except hostlist.HostlistError:
        log.warning("cannot read the node list %r: the job is placed without it", nodes)
        return ()


def parse_squeue_json(text: str | bytes, *, taken_at: int | None = None) -> QueueSnapshot:
    """``squeue --json`` (any supported shape) -> QueueSnapshot (every job, finished ones too)."""
    doc = _load_json(text, "squeue --json")
    meta = doc.get("meta")
    detect_shape(meta)  # both shapes share field names for squeue; only values differ
    jobs = tuple(_squeue_job(j) for j in _jobs_list(doc, "squeue --json"))
    when = taken_at
    if when is None:
        when = _number(doc.get("last_update")) or int(time.time())
    version = slurm_version(meta) if isinstance(meta, Mapping) else ""
    return QueueSnapshot(taken_at=when, jobs=jobs, slurm_version=version)


# ------------------------------------------------------------------------------- sacct


def _exit_code(value: Any) -> int | None:
    """``exit_code``: 22.05 {"status": "SUCCESS", "return_code": 0};
    23.02+ {"status": ["SUCCESS"], "return_code": {set, infinite, number}, "signal": ...};
    squeue 22.05 gives a plain number (wait status)."""
    if value is None:
        return None
    if isinstance(value, Mapping):
        rc = _number(value.get("return_code"))
        status = _text(value.get("status"))
        if rc is None and "SIGNAL" in status.upper():
            signal = value.get("signal")
            sig = _number(signal.get("signal_id") if isinstance(signal, Mapping) else None)
            if sig is None and isinstance(signal, Mapping):
                sig = _number(signal.get("id"))
            return None if sig is None else 128 + sig
        return rc
    n = _number(value)
    if n is None:
        return None
    # squeue 22.05 prints the raw wait status: 768 = exit 3, 15 = killed by signal 15
    if n & 0x7F:
        return 128 + (n & 0x7F)
    return (n >> 8) & 0xFF


def _sacct_gpus(tres: Any) -> int:
    """GPUs in sacct's TRES lists (allocated, else requested). Slurm accounts a typed GPU
    request twice, as ``gpu`` (the total) and ``gpu:<type>``: typed entries are summed
    only when no untyped total exists, as :func:`~mirage.slurm.syntax.tres_gpus` does."""
    if not isinstance(tres, Mapping):
        return 0
    for key in ("allocated", "requested"):
        items = tres.get(key)
        if not isinstance(items, list):
            continue
        gpus = _gpu_tres_items(items)
        if gpus is not None:
            return gpus
    return 0


def _gpu_tres_items(items: list[Any]) -> int | None:
    """GPUs in one TRES list; None when it names no GPU."""
    total: int | None = None
    typed: int | None = None
    for item in items:
        if not isinstance(item, Mapping) or item.get("type") != "gres":
            continue
        name = _text(item.get("name"))
        count = _number(item.get("count")) or 0
        if name == "gpu":
            total = (total or 0) + count
        elif name.startswith("gpu:"):
            typed = (typed or 0) + count
    return total if total is not None else typed


def _sacct_cpus(tres: Any) -> int:
    if not isinstance(tres, Mapping):
        return 0
    for key in ("allocated", "requested"):
        items = tres.get(key)
        if isinstance(items, list):
            for item in items:
                if isinstance(item, Mapping) and item.get("type") == "cpu":
                    return _number(item.get("count")) or 0
    return 0


def _sacct_exit_code(value: Any, state: JobState, shape: Shape) -> int | None:
    if not state.is_finished:
        return None
    code = _exit_code(value)
    if shape == "legacy" and code == 0 and state is JobState.FAILED:
        # sacct --json of 22.05 reports return_code 0 for jobs that failed with a non-zero
        # exit (plain sacct shows e.g. 3:0): we cannot know the code, so say so.
        return None
    return code


def _sacct_job(job: Mapping[str, Any], shape: Shape) -> SlurmJob:
    job_id_num = _job_id(job, "sacct")
    array = _mapping(job.get("array"))
    task = array.get("task")
    job_id, array_job_id, array_task_id = _array_ids(
        job_id_num,
        _number(array.get("job_id")),
        _number(array.get("task_id")),
        _task_string(task) if isinstance(task, str) else "",
    )
    state_block = job.get("state")
    if isinstance(state_block, Mapping):
        current = state_block.get("current")
        reason = _text(state_block.get("reason"))
    else:
        current, reason = state_block, ""
    state, raw = map_state(current if isinstance(current, list) else _text(current))
    times = _mapping(job.get("time"))
    comment = job.get("comment")
    comment_text = _text(comment.get("job") if isinstance(comment, Mapping) else comment)
    required = _mapping(job.get("required"))
    cpus = _sacct_cpus(job.get("tres")) or _number(required.get("CPUs")) or 0
    return SlurmJob(
        job_id=job_id,
        name=_text(job.get("name")),
        user=_text(job.get("user")),
        account=_text(job.get("account")),
        partition=_text(job.get("partition")),
        state=state,
        reason=reason,
        submit=_epoch(times.get("submission")),
        eligible=_epoch(times.get("eligible")),
        start=_epoch(times.get("start")),
        end=_epoch(times.get("end")),
        time_limit=_minutes(times.get("limit")),
        nodes=_number(job.get("allocation_nodes")) or 0,
        cpus=cpus,
        gpus=_sacct_gpus(job.get("tres")),
        priority=_number(job.get("priority")),
        dependency="",
        comment=comment_text,
        exit_code=_sacct_exit_code(job.get("exit_code"), state, shape),
        array_job_id=array_job_id,
        array_task_id=array_task_id,
        raw_state=raw,
    )


def parse_sacct_json(text: str | bytes) -> list[SlurmJob]:
    """``sacct --json`` (any supported shape) -> one record per job (steps are dropped)."""
    doc = _load_json(text, "sacct --json")
    shape = detect_shape(doc.get("meta"))
    return [_sacct_job(j, shape) for j in _jobs_list(doc, "sacct --json")]


# ----------------------------------------------------------------- text outputs


def _start_time(value: str) -> int | None:
    """A start time in squeue's or sbatch's answer (UTC: the runner sets TZ=UTC)."""
    try:
        return parse_slurm_time(value)
    except SlurmSyntaxError as exc:
        raise _perr(f"unrecognised Slurm time {value.strip()!r}", value) from exc


#: Output format Mirage asks of ``squeue --start`` (see :func:`parse_start_estimates`).
START_FORMAT = "%i|%S|%N|%P|%r"


def parse_start_estimates(text: str) -> dict[str, StartEstimate]:
    """``squeue --start -h -o '%i|%S|%N|%P|%r'`` -> {job id: estimate}.

    ``start`` is None where Slurm prints N/A (no estimate yet)."""
    out: dict[str, StartEstimate] = {}
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        fields = line.split("|")
        if len(fields) < 4 or not fields[0].strip():
            raise _perr(f"squeue --start line {lineno}: expected '%i|%S|%N|%P|...'", line)
        job_id = fields[0].strip()
        out[job_id] = StartEstimate(
            job_id=job_id,
            start=_start_time(fields[1]),
            nodes=fields[2].strip(),
            partition=fields[3].strip(),
        )
    return out


_TEST_ONLY_RE = re.compile(
    r"Job (?P<id>\d+) to start at (?P<start>\S+) using (?P<cpus>\d+) processors? on "
    r"(?:nodes? )?(?P<nodes>\S*)(?: in partition (?P<part>\S+))?"
)


def parse_test_only(stderr: str) -> StartEstimate:
    """``sbatch --test-only`` stderr -> the estimate it names; SlurmParseError otherwise."""
    m = _TEST_ONLY_RE.search(stderr)
    if not m:
        raise _perr("sbatch --test-only gave no start estimate", stderr)
    return StartEstimate(
        job_id=m.group("id"),
        start=_start_time(m.group("start")),
        nodes=m.group("nodes"),
        partition=m.group("part") or "",
    )


def parse_sbatch_parsable(stdout: str) -> str:
    """``sbatch --parsable`` stdout ("123" or "123;cluster") -> "123".

    Some sites print warnings to stdout before the id, so only the last non-empty line is
    the id; but if several lines look like a job id we cannot tell which one is ours.
    Leading zeros are refused, not normalised: sbatch prints ids with ``%u``, so "00123"
    means the line is not what we think it is, and a SlurmParseError after exit 0 only
    costs the daemon a look-up by token, while a wrong id would be trusted.
    """
    lines = [ln.strip() for ln in stdout.splitlines() if ln.strip()]
    if not lines:
        raise _perr("sbatch --parsable printed nothing", stdout)
    job_id = _parsable_id(lines[-1])
    if job_id is None or job_id.startswith("0"):
        raise _perr(f"sbatch --parsable printed {lines[-1]!r}, not a job id", stdout)
    if sum(_parsable_id(line) is not None for line in lines) > 1:
        raise _perr("sbatch --parsable printed more than one job id", stdout)
    return job_id


def _parsable_id(line: str) -> str | None:
    """The id in a ``<digits>`` or ``<digits>;<cluster>`` line, else None."""
    job_id, sep, cluster = line.partition(";")
    if not digits(job_id) or (sep and not re.fullmatch(r"[^;\s]+", cluster)):
        return None
    return job_id


# scontrol prints this (exit 0) when there is nothing to show: "No jobs in the system",
# "No partitions in the system", "No reservations in the system" (src/scontrol/info_*.c).
_NOTHING_RE = re.compile(r"No [A-Za-z ]+ in the system\.?")

# A key starts a new field when it looks like Slurm's keys: an upper-case letter first, then
# letters, digits and the separators Slurm uses in keys ("AllocNode:Sid", "CPUs/Task").
_KEY_RE = re.compile(r"^([A-Z][A-Za-z0-9_:/.\-]*)=(.*)$", re.DOTALL)


def parse_scontrol_oneliner(text: str) -> list[dict[str, str]]:
    """``scontrol -o show partition|node|job`` (one entity per line) -> key/value dicts.

    Values may contain spaces (``Comment=a b``, ``OS=Linux 6.1 #1 SMP``, node ``Reason``):
    a whitespace-separated token continues the previous value unless it starts with an
    upper-case ``Key=``. A value that itself contains `` Word=`` is therefore split; that
    is Slurm's format, which has no quoting. "No <things> in the system" gives [].
    """
    if _NOTHING_RE.fullmatch(text.strip()):
        return []
    records: list[dict[str, str]] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        record: dict[str, str] = {}
        key: str | None = None
        for token in line.split(" "):
            m = _KEY_RE.match(token)
            if m:
                key = m.group(1)
                record[key] = m.group(2)
            elif key is not None:
                record[key] = f"{record[key]} {token}" if token or record[key] else token
            elif token:
                raise _perr(f"scontrol line does not start with Key=: {token!r}", line)
        records.append({k: v.strip() for k, v in record.items()})
    return records


def parse_scontrol_config(text: str) -> dict[str, str]:
    """``scontrol show config`` (``Key = value`` lines) -> one dict; other lines ignored."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(" = ")
        if sep and key.strip() and " " not in key.strip():
            out[key.strip()] = value.strip()
    if not out:
        raise _perr("scontrol show config: no 'Key = value' lines", text)
    return out


def parse_sacctmgr_parsable(text: str) -> list[Mapping[str, str]]:
    """``sacctmgr -P show qos|assoc`` (with its header line) -> one mapping per row.

    Fields are "|"-separated; empty fields stay "" (no limit). A row with a different
    number of fields than the header is an error.
    """
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        return []
    header = lines[0].split("|")
    if len(header) < 2:
        raise _perr("sacctmgr -P output has no '|'-separated header", text)
    rows: list[Mapping[str, str]] = []
    for line in lines[1:]:
        fields = line.split("|")
        if len(fields) != len(header):
            raise _perr(
                f"sacctmgr row has {len(fields)} fields, the header {len(header)}: {line!r}", text
            )
        rows.append(dict(zip(header, fields, strict=True)))
    return rows


_SCONTROL_VERSION_RE = re.compile(r"slurm(?:-wlm)?\s+(\d+)\.(\d+)\.(\d+)\S*", re.IGNORECASE)


def parse_scontrol_version(text: str) -> str:
    """``scontrol version`` ("slurm 22.05.8") -> "22.05.8"; SlurmParseError otherwise."""
    m = _SCONTROL_VERSION_RE.search(text)
    if not m:
        raise _perr("scontrol version printed no Slurm version", text)
    return f"{int(m.group(1))}.{int(m.group(2)):02d}.{int(m.group(3))}"


def parse_tres_table(text: str) -> dict[int, str]:
    """``sacctmgr -P show tres`` (header ``Type|Name|ID``) -> {id: "cpu", "gres/gpu", ...}:
    the names accounting's numeric TRES strings ("1=8,1001=2") stand for."""
    out: dict[int, str] = {}
    for row in parse_sacctmgr_parsable(text):
        ident, kind, name = row.get("ID", ""), row.get("Type", ""), row.get("Name", "")
        if not digits(ident) or not kind:
            raise _perr(f"sacctmgr show tres row without Type or numeric ID: {dict(row)!r}", text)
        out[int(ident)] = f"{kind}/{name}" if name else kind
    return out
