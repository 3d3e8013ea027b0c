"""Slurm hostlist expressions ("gpu[1-4],cpu[01-02],login1"): expand and compress.

The syntax is Slurm's (src/common/hostlist.c): comma-separated items, each a prefix with
an optional bracketed list of numbers and ranges; a range keeps the zero padding of its
bounds ("cpu[01-02]" is cpu01, cpu02). Only one bracket per item is handled, which covers
node names as slurm.conf and scontrol print them on the clusters Mirage targets.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

_ITEM = re.compile(r"([^\[\],]*)(?:\[([^\]]*)\])?([^\[\],]*)")


class HostlistError(ValueError):
    """Not a hostlist expression this module can read."""


def _split_top(text: str) -> list[str]:
    """Split on commas outside brackets."""
    items: list[str] = []
    cur: list[str] = []
    depth = 0
    for ch in text:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise HostlistError(f"unbalanced ']' in {text!r}")
        if ch == "," and depth == 0:
            items.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if depth:
        raise HostlistError(f"unbalanced '[' in {text!r}")
    items.append("".join(cur))
    return [i.strip() for i in items if i.strip()]


def _numbers(spec: str, where: str) -> list[str]:
    out: list[str] = []
    for part in spec.split(","):
        lo, _, hi = part.strip().partition("-")
        if not lo.isdigit() or (hi and not hi.isdigit()):
            raise HostlistError(f"bad range {part!r} in {where!r}")
        if not hi:
            out.append(lo)
            continue
        if int(hi) < int(lo):
            raise HostlistError(f"descending range {part!r} in {where!r}")
        width = len(lo) if lo.startswith("0") else 0
        out += [str(k).zfill(width) for k in range(int(lo), int(hi) + 1)]
    return out


def expand(text: str) -> list[str]:
    """Every host name of ``text``, in order ("gpu[1-2],x" -> ["gpu1", "gpu2", "x"])."""
    names: list[str] = []
    for item in _split_top(text):
        m = _ITEM.fullmatch(item)
        if m is None:
            raise HostlistError(f"cannot read hostlist item {item!r}")
        prefix, spec, suffix = m.groups()
        if spec is None:
            names.append(item)
        else:
            names += [f"{prefix}{n}{suffix}" for n in _numbers(spec, item)]
    return names


def compress(names: Iterable[str]) -> str:
    """A hostlist expression for ``names`` (order kept; runs of numbers become ranges)."""
    groups: list[tuple[str, int, list[int]]] = []  # (prefix, width, numbers)
    for name in names:
        m = re.fullmatch(r"(.*?)(\d+)", name)
        if m is None:
            groups.append((name, -1, []))
            continue
        prefix, digits = m.groups()
        width = len(digits) if digits.startswith("0") else 0
        last = groups[-1] if groups else None
        if last and last[0] == prefix and last[1] == width:
            last[2].append(int(digits))
        else:
            groups.append((prefix, width, [int(digits)]))
    return ",".join(_render(p, w, ns) for p, w, ns in groups)


def _render(prefix: str, width: int, numbers: list[int]) -> str:
    if width < 0:
        return prefix
    if len(numbers) == 1:
        return f"{prefix}{str(numbers[0]).zfill(width)}"
    runs: list[str] = []
    start = prev = numbers[0]
    for n in [*numbers[1:], None]:
        if n is not None and n == prev + 1:
            prev = n
            continue
        a, b = str(start).zfill(width), str(prev).zfill(width)
        runs.append(a if start == prev else f"{a}-{b}")
        if n is not None:
            start = prev = n
    return f"{prefix}[{','.join(runs)}]"
