"""Find chained runs (a job that continues an earlier one) in a canonical job table.

Candidates are grouped by user (unknown user "" is never chained) and by

- the job name's stem, where names exist: ``dimer.10`` -> stem ``dimer.`` with index 10
  (an index needs a ``.``, ``_`` or ``-`` before the digits, so anonymised tokens such as
  ``name00005115`` are whole names, not stem + index); or
- the request (nodes, gpus, cpus, time limit) where the name is empty (SWF).

A job continues a predecessor of its group (at most one each way; numbered links win,
then the closest) when the predecessor's end is known, the job started (or, if it never
started, was submitted) after the predecessor started, and one of these holds
(``gap_submit = submit - prev.end``, ``gap_start = start - prev.end``):

- resubmitted: ``-slack <= gap_submit <= resubmit_tol`` (submitted at or shortly after
  the previous end);
- held by a dependency: submitted before the previous end (``gap_submit < 0``) and
  started at or just after it (``-slack <= gap_start <= start_tol``), strictly later than
  the previous job started (jobs that started together ran side by side);
- numbered: both names carry an index, the index goes up by one, it was submitted no
  later than ``resubmit_tol`` after the previous end and did not start before that end
  (``gap_start >= -slack``, and after the previous start), however long it then waited
  (that wait is what we measure).

The "real gap" of a link is ``start(k+1) - end(k)``; a link is an *interruption* when
that gap exceeds ``interruption_s``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from mirage.trace.stats import quantile_summary

_NAME_INDEX = r"^(?P<stem>.*[._-])(?P<idx>\d{1,6})$"


@dataclass(frozen=True)
class ChainParams:
    resubmit_tol: int = 600  # s after the previous end a resubmission may come
    start_tol: int = 600  # s after the previous end a held successor must start
    slack: int = 60  # s of clock/accounting jitter allowed before the previous end
    interruption_s: int = 60  # a gap above this counts as an interruption


@dataclass
class Chains:
    chains: list[list[int]]  # positional row indices into the table, in chain order
    gaps: np.ndarray  # start(k+1) - end(k) of every link, seconds

    def summary(self, interruption_s: int = ChainParams.interruption_s) -> dict[str, Any]:
        return chain_summary(self, interruption_s)


def _group_keys(jobs: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """(group code per row, -1 = never chained; name index per row, -1 = none)."""
    name = jobs["name"].astype("string").fillna("")
    parts = name.str.extract(_NAME_INDEX)
    stem = parts["stem"].fillna(name).astype("string")
    idx = pd.to_numeric(parts["idx"], errors="coerce").fillna(-1).astype("int64")
    request = (
        jobs["nodes"].astype("string").fillna("?")
        + "/"
        + jobs["gpus"].astype("string").fillna("?")
        + "/"
        + jobs["cpus"].astype("string").fillna("?")
        + "/"
        + jobs["time_limit"].astype("string").fillna("?")
    )
    key2 = ("n:" + stem).where(name != "", "r:" + request)
    user = jobs["user"].astype("string").fillna("")
    codes = pd.MultiIndex.from_arrays([user, key2]).factorize()[0].astype(np.int64)
    codes[(user == "").to_numpy(dtype=bool)] = -1
    return codes, idx.to_numpy()


def _window_pairs(  # noqa: PLR0917
    keys: np.ndarray, porder: np.ndarray, succ: np.ndarray, lo: np.ndarray,
                  hi: np.ndarray, cap: int) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """(pred, succ) row pairs whose sorted pred ``keys`` lie in [lo, hi] (at most ``cap``
    per successor, the ones with the largest keys, i.e. nearest to ``hi``)."""
    left = np.searchsorted(keys, lo, side="left")
    right = np.searchsorted(keys, hi, side="right")
    counts = np.clip(right - left, 0, cap)
    total = int(counts.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    first = np.repeat(right - counts, counts)
    within = np.arange(total) - np.repeat(np.cumsum(counts) - counts, counts)
    return porder[first + within], np.repeat(succ, counts)


def _match(pi: np.ndarray, sj: np.ndarray, n: int) -> tuple[np.ndarray, list[list[int]]]:
    """Greedy one-to-one matching of ranked (pred, succ) pairs; (pred per row, chains)."""
    pred = np.full(n, -1, dtype=np.int64)
    succ = np.full(n, -1, dtype=np.int64)
    for i, j in zip(pi.tolist(), sj.tolist(), strict=True):
        if succ[i] < 0 and pred[j] < 0:
            succ[i], pred[j] = j, i
    chains: list[list[int]] = []
    for head in np.flatnonzero((pred < 0) & (succ >= 0)).tolist():
        chain = [head]
        while succ[chain[-1]] >= 0:
            chain.append(int(succ[chain[-1]]))
        chains.append(chain)
    return pred, chains


#: Times are clipped to this magnitude before tolerances are added (no int64 wrap-around).
_CLIP = 2**62


def _ints(col: pd.Series) -> np.ndarray:
    """Epoch seconds as int64 (0 where unknown: callers mask those rows), clipped."""
    values = col.astype("Int64").fillna(0).to_numpy(dtype=np.int64)
    return np.clip(values, -_CLIP, _CLIP)


def find_chains(jobs: pd.DataFrame, params: ChainParams | None = None) -> Chains:
    """All chains of two or more jobs (see the module docstring for the rules).

    Every job gets at most one predecessor and one successor: candidate pairs are matched
    greedily, numbered pairs first, then by how close the successor came to the end, so
    several chains of the same user and name running side by side are told apart.
    """
    p = params or ChainParams()
    n = len(jobs)
    if n == 0:
        return Chains([], np.zeros(0, dtype=np.int64))
    codes, idx = _group_keys(jobs)
    submit = jobs["submit"].astype("Int64").to_numpy(dtype=np.float64, na_value=np.nan)
    start = jobs["start"].astype("Int64").to_numpy(dtype=np.float64, na_value=np.nan)
    end = jobs["end"].astype("Int64").to_numpy(dtype=np.float64, na_value=np.nan)
    if not jobs[["submit", "start", "end"]].notna().to_numpy().any():
        return Chains([], np.zeros(0, dtype=np.int64))
    sub_i, sta_i, end_i = (_ints(jobs[c]) for c in ("submit", "start", "end"))
    pidx = np.flatnonzero((codes >= 0) & ~np.isnan(end))  # possible predecessors
    cap = 64
    queries = [  # (successors, lowest and highest predecessor end, cap)
        (js := np.flatnonzero((codes >= 0) & ~np.isnan(submit)),  # resubmitted after the end
         sub_i[js] - p.resubmit_tol, sub_i[js] + p.slack, cap),
        (js := np.flatnonzero((codes >= 0) & ~np.isnan(start)),  # held: started right after
         sta_i[js] - p.start_tol, sta_i[js] + p.slack, cap),
        (js := np.flatnonzero((codes >= 0) & ~np.isnan(start) & ~np.isnan(submit) & (idx >= 0)),
         sub_i[js] - p.resubmit_tol, sta_i[js] + p.slack, cap * 4),
    ]  # fmt: skip
    # Exact integer keys (group, end): every time is replaced by its rank among all the
    # times compared, so group * ranks + rank never mixes groups or rounds a time.
    times = np.concatenate([end_i[pidx], *(np.concatenate([lo, hi]) for _, lo, hi, _ in queries)])
    uniq = np.unique(times)
    width = np.int64(uniq.size + 1)
    pkeys = codes[pidx] * width + np.searchsorted(uniq, end_i[pidx])
    order = np.argsort(pkeys, kind="stable")
    porder, keys = pidx[order], pkeys[order]

    def key(rows: np.ndarray, t: np.ndarray) -> np.ndarray:
        return np.asarray(codes[rows] * width + np.searchsorted(uniq, t), dtype=np.int64)

    pairs = [
        _window_pairs(keys, porder, js, key(js, lo), key(js, hi), c) for js, lo, hi, c in queries
    ]
    pi = np.concatenate([a for a, _ in pairs])
    sj = np.concatenate([b for _, b in pairs])
    order_key = np.where(np.isnan(start), submit, start)
    with np.errstate(invalid="ignore"):
        gap_submit = submit[sj] - end[pi]
        gap_start = start[sj] - end[pi]
        later = order_key[sj] > order_key[pi]  # side-by-side jobs are not a chain
        resubmitted = (gap_submit >= -p.slack) & (gap_submit <= p.resubmit_tol)
        held = (gap_submit < 0) & (gap_start >= -p.slack) & (gap_start <= p.start_tol)
        numbered = (
            (idx[sj] >= 0)
            & (idx[sj] == idx[pi] + 1)
            & (gap_submit <= p.resubmit_tol)
            & (gap_start >= -p.slack)
        )
    ok = (pi != sj) & later & (resubmitted | held | numbered)
    pi, sj, numbered = pi[ok], sj[ok], numbered[ok]
    closeness = np.abs(np.where(np.isnan(gap_start[ok]), gap_submit[ok], gap_start[ok]))
    rank = np.lexsort((sj, pi, closeness, ~numbered))
    pred, chains = _match(pi[rank], sj[rank], n)
    linked = np.flatnonzero(pred >= 0)
    gaps = start[linked] - end[pred[linked]]
    return Chains(chains, gaps[~np.isnan(gaps)].astype(np.int64))


def chain_summary(
    chains: Chains, interruption_s: int = ChainParams.interruption_s
) -> dict[str, Any]:
    """Number of chains, lengths, real gaps between segments, share of interruptions."""
    lengths = pd.Series([len(ch) for ch in chains.chains], dtype="int64")
    counts = lengths.value_counts().sort_index()
    dist = {int(k): int(v) for k, v in zip(counts.index, counts.to_numpy(), strict=True)}
    links = int(chains.gaps.size)
    interrupted = int((chains.gaps > interruption_s).sum())
    return {
        "chains": len(chains.chains),
        "jobs_in_chains": int(lengths.sum()),
        "links": links,
        "length_distribution": dist,
        "longest": int(lengths.max()) if len(lengths) else 0,
        "gap_s": quantile_summary(chains.gaps),
        "interruption_threshold_s": interruption_s,
        "interruption_share": (interrupted / links) if links else None,
    }
