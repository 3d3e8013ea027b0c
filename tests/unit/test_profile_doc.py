"""docs/profile.md explains every key of a profile: each field of the schema's dataclasses
is in a table of its section, and no table names a key the schema lacks."""

from __future__ import annotations

import re
from dataclasses import fields
from pathlib import Path

from mirage.profile.schema import Association, ClusterProfile, Partition, Qos, SchedulerSettings

DOC = Path(__file__).resolve().parents[2] / "docs" / "profile.md"
NESTED = {"partitions", "scheduler", "qos", "associations"}


def _sections() -> dict[str, set[str]]:
    """Per ``## `` heading, the keys in the first column of its tables."""
    out: dict[str, set[str]] = {}
    head = ""
    for line in DOC.read_text(encoding="utf-8").splitlines():
        if line.startswith("## "):
            head = line[3:]
            out[head] = set()
        m = re.match(r"\| `([a-z_]+)` \|", line)
        if m and head:
            out[head].add(m[1])
    return out


def test_every_profile_key_is_explained() -> None:
    sections = _sections()

    def keys(heading_part: str) -> set[str]:
        return set().union(*(v for k, v in sections.items() if heading_part in k))

    expected = {
        "Top level": {f.name for f in fields(ClusterProfile)} - NESTED,
        "[scheduler]": {f.name for f in fields(SchedulerSettings)},
        "[[partitions]]": {f.name for f in fields(Partition)},
        "[[qos]]": {f.name for f in fields(Qos)} | {f.name for f in fields(Association)},
    }
    for heading, want in expected.items():
        assert keys(heading) == want, heading
