"""Slurm accounting (``sacct`` via a :class:`SlurmClient`) into the canonical job table."""

from __future__ import annotations

from collections.abc import Iterable

import pandas as pd

from mirage.slurm.client import SlurmClient
from mirage.slurm.types import SlurmJob
from mirage.trace.load import TraceLoad
from mirage.trace.schema import conform, empty_table

#: Spans longer than this are fetched in ``CHUNK_S`` windows (keeps each sacct call small).
CHUNK_ABOVE_S = 31 * 86400
CHUNK_S = 7 * 86400


def from_slurm_jobs(jobs: Iterable[SlurmJob]) -> pd.DataFrame:
    """SlurmJob records (already UTC epoch seconds) as a canonical table, in input order."""
    rows = [
        {
            "job_id": j.job_id,
            "user": j.user,
            "name": j.name,
            "partition": j.partition,
            "state": j.state.value,
            "submit": j.submit,
            "eligible": j.eligible,
            "start": j.start,
            "end": j.end,
            "time_limit": j.time_limit,
            "nodes": j.nodes,
            "gpus": j.gpus,
            "cpus": j.cpus,
            "exit_code": j.exit_code,
        }
        for j in jobs
    ]
    return conform(pd.DataFrame(rows)) if rows else empty_table()


def import_accounting(client: SlurmClient, start: int, end: int) -> TraceLoad:
    """Every job in accounting active between ``start`` and ``end`` (epoch s, UTC).

    One ``client.accounting(start, end)`` call, unless the span exceeds 31 days: then one
    call per 7-day window. A job active in several windows comes back several times; the
    record from the latest window wins (it is the most recent view of the job).
    """
    if end <= start:
        raise ValueError(f"end ({end}) must be after start ({start})")
    windows = [(start, end)]
    if end - start > CHUNK_ABOVE_S:
        windows = [(lo, min(lo + CHUNK_S, end)) for lo in range(start, end, CHUNK_S)]
    by_id: dict[str, SlurmJob] = {}
    fetched = 0
    for lo, hi in windows:
        for job in client.accounting(lo, hi):
            fetched += 1
            by_id.pop(job.job_id, None)
            by_id[job.job_id] = job
    jobs = sorted(by_id.values(), key=lambda j: (j.submit is None, j.submit or 0, j.job_id))
    notes = [f"{len(windows)} accounting call(s); {fetched} records, {len(jobs)} distinct jobs"]
    return TraceLoad(
        jobs=from_slurm_jobs(jobs),
        source=f"slurm accounting {start}..{end}",
        format="slurm",
        tz="UTC",
        rows_read=fetched,
        notes=notes,
    )
