"""``mirage.trace.inspect``: ``mirage trace inspect`` as a Python call, on the bundled slices."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from mirage.trace import TraceInputError, inspect
from mirage.trace.cli import trace

REPO = Path(__file__).resolve().parents[2]
LS6_SLICE = str(REPO / "traces" / "ls6-a100-slice.log.gz")
SWF_SLICE = str(REPO / "traces" / "hpc2n-head300.swf.gz")


@pytest.mark.parametrize(("path", "args"), [(LS6_SLICE, {}), (SWF_SLICE, {"tz": "UTC"})])
def test_inspect_returns_what_the_command_prints(path: str, args: dict[str, str]) -> None:
    got = inspect(path, **args)
    argv = ["inspect", path, "--json", *(f"--{k}={v}" for k, v in args.items())]
    res = CliRunner().invoke(trace, argv)
    assert res.exit_code == 0, res.output
    assert json.loads(json.dumps(got)) == json.loads(res.stdout)
    assert got["jobs"] == (1999 if path == LS6_SLICE else 300)


def test_inspect_reads_a_csv_with_a_mapping(tmp_path: Path) -> None:
    csv = tmp_path / "jobs.csv"
    csv.write_text(
        "Submit,Start,End,Limit,N\n"
        "2023-01-01T00:00:00,2023-01-01T01:00:00,2023-01-01T02:00:00,02:00:00,1\n"
    )
    cols = "submit=Submit,start=Start,end=End,time_limit=Limit,nodes=N"
    got = inspect(str(csv), columns=cols, tz="UTC")
    assert got["jobs"] == 1 and got["wait_s"]["max"] == 3600.0


def test_inspect_refuses_unusable_input(tmp_path: Path) -> None:
    with pytest.raises(TraceInputError, match=r"missing\.log"):
        inspect(str(tmp_path / "missing.log"))
    with pytest.raises(TraceInputError, match="Nowhere/Land"):
        inspect(LS6_SLICE, tz="Nowhere/Land")
    with pytest.raises(TraceInputError) as bad:
        inspect(LS6_SLICE, columns="nosuchfield=X")
    assert bad.value.option == "--columns/--columns-file"
