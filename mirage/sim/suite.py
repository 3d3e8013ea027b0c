"""The simulator fidelity suite: workloads cut from real traces, recorded on the test cluster.

Formats shared with the recorder (the real driver):

- A workload (:class:`Workload`) is ``tests/data/fidelity/<name>/workload.json``: jobs
  (:class:`SuiteJob`) submitted at offsets (seconds after t0) to a partition of the test
  cluster, as ``user``, with time limits in whole minutes; each job's script sleeps
  ``run_s`` seconds (past its limit: it ends TIMEOUT). ``array`` > 0: a job array of that
  many tasks (``--array=0-<array-1>``), each task a job of the given shape. ``dependency``
  is ``"afterok:<key>"`` or ``"afterany:<key>"`` naming an earlier job (for an array: all
  its tasks). ``hold_until``: submitted held (``--hold``), released (``scontrol release``)
  at that offset.
- A recorded run is a directory ``tests/data/fidelity/<name>/run-<n>/`` with ``run.json``::

      {"t0": <epoch float>, "label": <str>,
       "clock": {"ctld_start": <int epoch>, "limit_check": <int epoch>} | null,
       "submitted": {<key>: {"job_id": <str>, "at": <epoch float>}},
       "released": {<key>: <epoch float>}}

  and ``sacct.txt``, the raw output of ``sacct -X -P --noheader -a --format=`` followed by
  :data:`SACCT_FIELDS` joined with commas (array tasks appear as ``<arrayid>_<task>``).
  :func:`read_run` parses it. sacct prints times in its machine's local time without a
  zone: the parser reads them as UTC and corrects by the whole quarter hours that the
  submit stamps differ from run.json's ``at`` (so a recorder in any time zone reads right).
"""

from __future__ import annotations

import calendar
import json
import re
import statistics
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from mirage.sim.fidelity import ClusterClock

#: The sacct fields of sacct.txt, in order.
SACCT_FIELDS = (
    "JobID",
    "JobIDRaw",
    "JobName",
    "User",
    "Partition",
    "State",
    "Submit",
    "Eligible",
    "Start",
    "End",
    "TimelimitRaw",
    "NNodes",
    "ReqTRES",
    "AllocTRES",
    "Reason",
)
SACCT_FORMAT = ",".join(SACCT_FIELDS)
#: Where the workloads and their recorded runs live (relative to the repository root).
DATA_DIR = Path("tests/data/fidelity")

_KEY = re.compile(r"^[A-Za-z0-9-]+$")
_DEP = re.compile(r"^(afterok|afterany):([A-Za-z0-9-]+)$")


# ---- the workload format ------------------------------------------------------------------


@dataclass(frozen=True)
class SuiteJob:
    """One job of a workload (times in seconds after t0, limits in whole minutes)."""

    key: str  # unique in the workload; letters, digits and '-' (no '_': array tasks use it)
    offset: int  # submit, s after t0
    partition: str
    nodes: int
    gpus_per_node: int
    cpus_per_node: int
    limit_min: int
    run_s: int  # the script sleeps this long; longer than the limit: ends TIMEOUT
    user: str = "root"
    exclusive: bool = False
    array: int = 0  # tasks; 0 = not an array
    dependency: str | None = None  # "afterok:<key>" or "afterany:<key>"
    hold_until: int | None = None  # submitted held (--hold), released at this offset

    def __post_init__(self) -> None:
        problems = []
        if not _KEY.match(self.key):
            problems.append("key must be letters, digits and '-'")
        if self.offset < 0:
            problems.append("offset < 0")
        if self.nodes < 1 or self.cpus_per_node < 1 or self.gpus_per_node < 0:
            problems.append("nodes and cpus_per_node must be >= 1, gpus_per_node >= 0")
        if self.limit_min < 1:
            problems.append("limit_min < 1")
        if self.run_s < 1:
            problems.append("run_s < 1")
        if self.array < 0:
            problems.append("array < 0")
        if self.dependency is not None and not _DEP.match(self.dependency):
            problems.append(f"dependency {self.dependency!r} is not afterok:<key>/afterany:<key>")
        if self.hold_until is not None and self.hold_until < self.offset:
            problems.append("hold_until before offset")
        if problems:
            raise ValueError(f"job {self.key!r}: " + "; ".join(problems))

    @property
    def limit_s(self) -> int:
        return 60 * self.limit_min

    @property
    def hits_limit(self) -> bool:
        return self.run_s > self.limit_s

    @property
    def depends_on(self) -> tuple[str, str] | None:
        """(kind, key) of the dependency, if any."""
        if self.dependency is None:
            return None
        kind, key = self.dependency.split(":", 1)
        return kind, key

    @property
    def task_keys(self) -> tuple[str, ...]:
        """The keys of the jobs it becomes: itself, or ``<key>_<task>`` for an array."""
        if self.array == 0:
            return (self.key,)
        return tuple(f"{self.key}_{i}" for i in range(self.array))


@dataclass(frozen=True)
class Workload:
    """A named workload: its jobs and where they came from (``source``: trace, seed, rule)."""

    name: str
    source: dict[str, Any]
    jobs: tuple[SuiteJob, ...]

    def __post_init__(self) -> None:
        seen: set[str] = set()
        for job in self.jobs:
            if job.key in seen:
                raise ValueError(f"workload {self.name}: duplicate key {job.key!r}")
            dep = job.depends_on
            if dep is not None and dep[1] not in seen:
                raise ValueError(
                    f"workload {self.name}: {job.key} depends on {dep[1]!r}, not an earlier key"
                )
            seen.add(job.key)

    def job(self, key: str) -> SuiteJob:
        for j in self.jobs:
            if j.key == key:
                return j
        raise KeyError(key)

    @property
    def task_keys(self) -> tuple[str, ...]:
        """Every job the workload becomes (array tasks one by one), in workload order."""
        return tuple(k for j in self.jobs for k in j.task_keys)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "source": self.source,
            "jobs": [_job_dict(j) for j in self.jobs],
        }

    def to_json(self) -> str:
        """JSON text with one job a line (diffs stay readable)."""
        head = json.dumps({"name": self.name, "source": self.source}, sort_keys=True)
        jobs = ",\n".join("  " + json.dumps(_job_dict(j)) for j in self.jobs)
        return head[:-1] + ', "jobs": [\n' + jobs + "\n]}\n"

    def write(self, path: str | Path) -> None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(self.to_json())

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Workload:
        jobs = tuple(SuiteJob(**j) for j in data["jobs"])
        return cls(str(data["name"]), dict(data.get("source", {})), jobs)

    @classmethod
    def from_json(cls, path: str | Path) -> Workload:
        return cls.from_dict(json.loads(Path(path).read_text()))


def _job_dict(job: SuiteJob) -> dict[str, Any]:
    """The job's fields, leaving out those at their defaults (short JSON)."""
    out = asdict(job)
    defaults = {"user": "root", "exclusive": False, "array": 0, "dependency": None}
    defaults["hold_until"] = None
    return {k: v for k, v in out.items() if not (k in defaults and defaults[k] == v)}


# ---- recorded runs ------------------------------------------------------------------------


@dataclass(frozen=True)
class SacctRecord:
    """One line of sacct.txt; times in epoch seconds (None: Unknown/None)."""

    job_id: str  # as sacct prints it: "123" or "120_3" for an array task
    job_id_raw: str
    name: str
    user: str
    partition: str
    state: str  # the first word: COMPLETED, TIMEOUT, CANCELLED, ...
    submit: int | None
    eligible: int | None
    start: int | None
    end: int | None
    limit_min: int | None
    nodes: int
    req_tres: str
    alloc_tres: str
    reason: str

    @property
    def array_id(self) -> str | None:
        return self.job_id.split("_", 1)[0] if "_" in self.job_id else None

    @property
    def task(self) -> int | None:
        if "_" not in self.job_id:
            return None
        tail = self.job_id.split("_", 1)[1]
        return int(tail) if tail.isdigit() else None


@dataclass(frozen=True)
class Submitted:
    job_id: str
    at: float  # epoch


@dataclass(frozen=True)
class RecordedRun:
    """One recorded run of a workload on the real cluster."""

    t0: float
    label: str
    clock: ClusterClock | None
    submitted: dict[str, Submitted]
    released: dict[str, float]
    records: tuple[SacctRecord, ...]
    tz_offset_s: int = 0  # subtracted from sacct's stamps read as UTC (the recorder's zone)
    path: str = ""
    by_key: dict[str, SacctRecord] = field(default_factory=dict)  # task key -> record

    @property
    def base(self) -> int:
        """The whole second of t0: starts are counted from it."""
        return int(self.t0)

    def starts(self) -> dict[str, int | None]:
        """Start per task key, seconds after t0's whole second (None: never started)."""
        keys = self._keys()
        return {
            k: (
                None
                if (r := self.by_key.get(k)) is None or r.start is None
                else r.start - self.base
            )
            for k in keys
        }

    def waits(self) -> dict[str, int]:
        """Start minus eligible-from per started task key (s); eligible as sacct reports it."""
        out: dict[str, int] = {}
        for k in self._keys():
            r = self.by_key.get(k)
            if r is None or r.start is None:
                continue
            ready = r.eligible if r.eligible is not None else r.submit
            if ready is not None:
                out[k] = max(0, r.start - ready)
        return out

    def states(self) -> dict[str, str]:
        return {k: r.state for k, r in self.by_key.items()}

    def _keys(self) -> list[str]:
        return sorted(self.by_key)


_SACCT_TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d$")


def _sacct_time(text: str, where: str) -> int | None:
    if text in ("Unknown", "None", ""):
        return None
    if not _SACCT_TIME.match(text):
        raise ValueError(f"{where}: bad time {text!r}")
    return calendar.timegm(time.strptime(text, "%Y-%m-%dT%H:%M:%S"))


def parse_sacct(text: str, source: str = "sacct.txt") -> list[SacctRecord]:
    """Parse sacct -P output with :data:`SACCT_FIELDS` (times read as UTC)."""
    records = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        where = f"{source} line {n} ({line[:80]!r})"
        parts = line.split("|")
        if len(parts) != len(SACCT_FIELDS):
            raise ValueError(f"{where}: {len(parts)} fields, expected {len(SACCT_FIELDS)}")
        f = dict(zip(SACCT_FIELDS, parts, strict=True))
        if not re.match(r"^\d+(_(\d+|\[[^\]]*\]))?$", f["JobID"]):
            raise ValueError(f"{where}: bad JobID {f['JobID']!r}")
        try:
            limit = (
                None
                if f["TimelimitRaw"] in ("", "UNLIMITED", "Partition_Limit")
                else int(f["TimelimitRaw"])
            )
            nodes = int(f["NNodes"])
        except ValueError:
            raise ValueError(f"{where}: bad TimelimitRaw or NNodes") from None
        records.append(
            SacctRecord(
                job_id=f["JobID"],
                job_id_raw=f["JobIDRaw"],
                name=f["JobName"],
                user=f["User"],
                partition=f["Partition"],
                state=f["State"].split(" ", 1)[0] if f["State"] else "",
                submit=_sacct_time(f["Submit"], where),
                eligible=_sacct_time(f["Eligible"], where),
                start=_sacct_time(f["Start"], where),
                end=_sacct_time(f["End"], where),
                limit_min=limit,
                nodes=nodes,
                req_tres=f["ReqTRES"],
                alloc_tres=f["AllocTRES"],
                reason=f["Reason"],
            )
        )
    return records


def _tz_offset(records: Sequence[SacctRecord], by_id: Mapping[str, float]) -> int:
    """Whole quarter hours by which sacct's stamps (read as UTC) lead the real epoch."""
    diffs = [
        r.submit - by_id[r.job_id] for r in records if r.submit is not None and r.job_id in by_id
    ]
    if not diffs:
        return 0
    return round(statistics.median(diffs) / 900.0) * 900


def read_run(path: str | Path, workload: Workload | None = None) -> RecordedRun:
    """Read ``run.json`` and ``sacct.txt`` from a recorded run's directory.

    Records are matched to workload keys through run.json's job ids (array tasks as
    ``<key>_<task>``); sacct lines of other jobs are kept in ``records`` but not keyed.
    With ``workload``, every key of run.json must be one of its jobs.
    """
    d = Path(path)
    try:
        meta = json.loads((d / "run.json").read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"{d / 'run.json'}: {exc}") from None
    for key in ("t0", "submitted"):
        if key not in meta:
            raise ValueError(f"{d / 'run.json'}: no {key!r}")
    clock = meta.get("clock")
    submitted = {
        k: Submitted(str(v["job_id"]), float(v["at"])) for k, v in meta["submitted"].items()
    }
    released = {k: float(v) for k, v in (meta.get("released") or {}).items()}
    if workload is not None:
        known = {j.key for j in workload.jobs}
        stray = sorted((set(submitted) | set(released)) - known)
        if stray:
            raise ValueError(f"{d}: keys not in workload {workload.name}: {stray[:5]}")
    records = parse_sacct((d / "sacct.txt").read_text(), str(d / "sacct.txt"))
    tz = _tz_offset(records, {s.job_id: s.at for s in submitted.values()})
    if tz:
        records = [_shift(r, tz) for r in records]
    key_of = {s.job_id: k for k, s in submitted.items()}
    by_key: dict[str, SacctRecord] = {}
    for r in records:
        if r.array_id is not None:
            parent = key_of.get(r.array_id)
            if parent is None or r.task is None:
                continue
            by_key[f"{parent}_{r.task}"] = r
        elif r.job_id in key_of:
            by_key[key_of[r.job_id]] = r
    return RecordedRun(
        t0=float(meta["t0"]),
        label=str(meta.get("label", d.name)),
        clock=ClusterClock(int(clock["ctld_start"]), int(clock["limit_check"])) if clock else None,
        submitted=submitted,
        released=released,
        records=tuple(records),
        tz_offset_s=tz,
        path=str(d),
        by_key=by_key,
    )


def _shift(r: SacctRecord, tz: int) -> SacctRecord:
    def s(x: int | None) -> int | None:
        return None if x is None else x - tz

    return SacctRecord(
        **{
            **asdict(r),
            "submit": s(r.submit),
            "eligible": s(r.eligible),
            "start": s(r.start),
            "end": s(r.end),
        }
    )


def recorded_runs(name: str, root: str | Path = DATA_DIR) -> list[Path]:
    """The run directories recorded for workload ``name`` (run-1, run-2, ...), in order."""
    d = Path(root) / name
    runs = [p for p in d.glob("run-*") if (p / "run.json").exists() and (p / "sacct.txt").exists()]
    return sorted(runs, key=lambda p: (len(p.name), p.name))
