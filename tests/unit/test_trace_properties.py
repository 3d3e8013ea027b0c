"""Property tests: readers never crash on bad input and never keep a silently wrong row."""

from __future__ import annotations

import gzip
import random
import tempfile
from functools import cache
from pathlib import Path

import pandas as pd
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mirage.trace.load import TraceFormatError, TraceLoad
from mirage.trace.readers import FORMATS, load_trace

REPO = Path(__file__).resolve().parents[2]
LS6_SLICE = REPO / "traces" / "ls6-a100-slice.log.gz"
SWF_SLICE = REPO / "traces" / "hpc2n-head300.swf.gz"

SETTINGS = settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@cache
def text_of(path: Path) -> bytes:
    return gzip.decompress(path.read_bytes())


@cache
def full_load(path: Path) -> TraceLoad:
    return load_trace(path)


def load_bytes(tmp_path: Path, data: bytes, fmt: str | None = None) -> TraceLoad | None:
    path = tmp_path / "input.trace"
    path.write_bytes(data)
    try:
        return load_trace(path, fmt)
    except TraceFormatError:
        return None


def rows_by_id(df: pd.DataFrame) -> pd.DataFrame:
    return df.set_index("job_id").sort_index()


@SETTINGS
@given(data=st.binary(max_size=2000), fmt=st.sampled_from([None, *FORMATS]))
def test_garbage_never_crashes(tmp_path: Path, data: bytes, fmt: str | None) -> None:
    load_bytes(tmp_path, data, fmt)


@SETTINGS
@given(
    data=st.text(alphabet=st.sampled_from(list("0123456789-:T ;\t\n.{}-,abc")), max_size=600),
    fmt=st.sampled_from([None, *FORMATS]),
)
def test_trace_like_text_never_crashes(tmp_path: Path, data: str, fmt: str | None) -> None:
    load_bytes(tmp_path, data.encode(), fmt)


@SETTINGS
@given(prefix=st.sampled_from([b"", LS6_SLICE.read_bytes()[:1]]), cut=st.integers(0, 10**6))
def test_truncated_gzip_is_a_format_error(tmp_path: Path, prefix: bytes, cut: int) -> None:
    raw = LS6_SLICE.read_bytes()
    data = raw[: cut % len(raw)]
    assert load_bytes(tmp_path, prefix + data) is None or cut % len(raw) == 0


def check_truncation(tmp_path: Path, source: Path, fmt: str, cut: int) -> None:
    text = text_of(source)
    load = load_bytes(tmp_path, text[: cut % (len(text) + 1)], fmt)
    if load is None:
        return
    full = rows_by_id(full_load(source).jobs)
    kept = rows_by_id(load.jobs)
    assert kept.index.isin(full.index).all()
    pd.testing.assert_frame_equal(kept, full.loc[kept.index])


@SETTINGS
@given(cut=st.integers(0, 10**7))
def test_truncated_ls6_keeps_only_exact_rows(tmp_path: Path, cut: int) -> None:
    check_truncation(tmp_path, LS6_SLICE, "ls6", cut)


@SETTINGS
@given(cut=st.integers(0, 10**6))
def test_truncated_swf_keeps_only_exact_rows(tmp_path: Path, cut: int) -> None:
    check_truncation(tmp_path, SWF_SLICE, "swf", cut)


def shuffled(text: bytes, header_lines: int, seed: int) -> bytes:
    lines = text.decode().splitlines(keepends=True)
    head, body = lines[:header_lines], lines[header_lines:]
    random.Random(seed).shuffle(body)
    return "".join(head + body).encode()


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_shuffled_rows_give_the_same_jobs(seed: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        for source, header in ((LS6_SLICE, 3), (SWF_SLICE, 23)):
            load = load_bytes(Path(tmp), shuffled(text_of(source), header, seed))
            assert load is not None
            full = full_load(source)
            pd.testing.assert_frame_equal(rows_by_id(load.jobs), rows_by_id(full.jobs))
            assert len(load.skipped) == len(full.skipped)
            assert load.ambiguous_times == full.ambiguous_times
