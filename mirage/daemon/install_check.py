"""Whether the users a root daemon serves can run the installed ``mirage`` at all.

A daemon started by root works even when it runs from a virtual environment built on an
interpreter that only root can reach (a pyenv or conda Python under ``/root``, mode
0700): every user's ``mirage chain submit`` then fails with ``Permission denied`` before
Mirage's code runs, and nothing on the daemon's side would say so. This module reads the
permission bits ``others`` have on the paths a user's ``mirage`` needs (the interpreter,
its standard library, Mirage's package and the command itself, each with every folder
above it) and says which one blocks and what to change. It reads modes only (no
``runuser``): a path readable through a group the users share passes here and is caught
by the install guide's own check (``runuser -u nobody -- mirage --version``) if not.
"""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Iterable
from pathlib import Path

#: What others need on each kind of path: enter a folder, read a file, run a program.
_ENTER, _READ, _RUN = stat.S_IXOTH, stat.S_IROTH, stat.S_IXOTH


def _mode_text(mode: int) -> str:
    return f"{stat.S_IMODE(mode):04o}"


def blocking(path: Path, need: int) -> str:
    """The first path on the way to ``path`` (its folders, then itself, links resolved)
    that others may not use as needed; "" when none blocks (or ``path`` is gone: not this
    check's business)."""
    try:
        real = path.resolve(strict=True)
    except OSError:
        return ""
    for folder in reversed(real.parents):
        mode = folder.stat().st_mode
        if not mode & _ENTER:
            return f"{folder} is {_mode_text(mode)} (others may not enter it)"
    mode = real.stat().st_mode
    if stat.S_ISDIR(mode):
        need = _ENTER | _READ
    missing = need & ~mode
    if missing:
        verbs = ["read"] if missing & _READ else []
        if missing & _RUN:
            verbs.append("enter" if stat.S_ISDIR(mode) else "run")
        return f"{real} is {_mode_text(mode)} (others may not {' or '.join(verbs)} it)"
    return ""


def needed_paths(command: str | None = None) -> list[tuple[Path, int]]:
    """What a user's ``mirage`` needs: the interpreter, the standard library, Mirage's
    package folder and, when known, the ``mirage`` command itself."""
    import mirage

    paths = [
        (Path(sys.executable), _RUN),
        (Path(os.__file__).parent, _ENTER | _READ),
        (Path(mirage.__file__).parent, _ENTER | _READ),
        (Path(mirage.__file__), _READ),
    ]
    if command:
        paths.append((Path(command), _RUN | _READ))
    return paths


def problems(paths: Iterable[tuple[Path, int]]) -> list[str]:
    """One sentence per blocking path (each once)."""
    found: list[str] = []
    for path, need in paths:
        why = blocking(path, need)
        if why and why not in found:
            found.append(why)
    return found


def install_problem(command: str | None = None) -> str:
    """For a root daemon: "" when users can run this install, else what blocks and what to
    change (the daemon's start line and ``mirage status`` show it)."""
    found = problems(needed_paths(command))
    if not found:
        return ""
    return (
        "users cannot run this install of mirage: "
        + "; ".join(found)
        + ". Build the venv from a Python every user can run (e.g. /usr/bin/python3 -m venv "
        "/opt/mirage/venv, docs/admin/install.md) or give others read and enter rights there"
    )
