"""The shell blocks the docs' test runs, and the docs' relative links (pure functions).

A fenced block whose info string is exactly ``sh test`` is one that
``tests/slurm/test_docs.py`` runs, literally, in document order; GitHub renders it as
shell, like the plain ``sh`` blocks that no test runs (a fresh venv's ``pip install``,
``systemctl``). For example::

    >>> blocks("```sh test\\nmirage status\\n```\\n```sh\\nsystemctl stop mirage\\n```\\n")
    ['mirage status\\n']
    >>> links("See [chains](chains.md#watch) and [Slurm](https://slurm.schedmd.com/).")
    ['chains.md']
"""

from __future__ import annotations

import re

#: The info string of a block the test runs.
TEST_INFO = "sh test"

# CommonMark fences: up to 3 spaces, then 3+ backticks or tildes; the info string follows
_OPEN = re.compile(r"^(?P<indent> {0,3})(?P<fence>`{3,}|~{3,})(?P<info>.*)$")
# an inline link or image: [text](target "title") or [text](<target>)
_INLINE = re.compile(r"!?\[[^\]]*\]\(\s*(?:<(?P<angle>[^>]*)>|(?P<bare>[^)\s]+))[^)]*\)")
# a link reference definition: [label]: target
_REFERENCE = re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?(?P<target>[^>\s]+)>?", re.MULTILINE)
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
_CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1", re.DOTALL)


def _closes(line: str, fence: str) -> bool:
    stripped = line.lstrip(" ")
    if len(line) - len(stripped) > 3:
        return False
    run = len(stripped) - len(stripped.lstrip(fence[0]))
    return run >= len(fence) and not stripped[run:].strip()


def fenced(text: str) -> list[tuple[str, str]]:
    """Every fenced code block of a Markdown text: (info string, body), in order. An
    unclosed fence runs to the end of the text, as CommonMark has it."""
    out: list[tuple[str, str]] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        m = _OPEN.match(lines[i])
        i += 1
        if m is None or (m["fence"][0] == "`" and "`" in m["info"]):
            continue
        indent, fence = len(m["indent"]), m["fence"]
        body = []
        while i < len(lines) and not _closes(lines[i], fence):
            line = lines[i]
            body.append(line[min(indent, len(line) - len(line.lstrip(" "))) :])
            i += 1
        i += 1  # the closing fence
        out.append((m["info"].strip(), "".join(f"{b}\n" for b in body)))
    return out


def blocks(text: str, info: str = TEST_INFO) -> list[str]:
    """The bodies of the fenced blocks whose info string is exactly ``info``."""
    return [body for got, body in fenced(text) if got == info]


def _prose(text: str) -> str:
    """The text without its fenced blocks and code spans (links there are not links)."""
    lines = text.splitlines()
    kept: list[str] = []
    i = 0
    while i < len(lines):
        m = _OPEN.match(lines[i])
        if m is None or (m["fence"][0] == "`" and "`" in m["info"]):
            kept.append(lines[i])
            i += 1
            continue
        i += 1
        while i < len(lines) and not _closes(lines[i], m["fence"]):
            i += 1
        i += 1
    return _CODE_SPAN.sub("", "\n".join(kept))


def links(text: str) -> list[str]:
    """The relative link targets of a Markdown text, without their ``#anchor`` or
    ``?query``: what must exist beside the file. Absolute URLs (any scheme), bare
    anchors and links inside code are left out."""
    prose = _prose(text)
    targets = [m["angle"] if m["angle"] is not None else m["bare"] for m in _INLINE.finditer(prose)]
    targets += [m["target"] for m in _REFERENCE.finditer(prose)]
    out = []
    for t in targets:
        if not t or t.startswith(("#", "/")) or _SCHEME.match(t):
            continue
        path = re.split(r"[#?]", t, maxsplit=1)[0]
        if path:
            out.append(path)
    return out
