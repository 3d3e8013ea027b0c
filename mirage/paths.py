"""Where Mirage looks for what a command was not told: the current directory and the
environment, never the installed package's own location.

From a checkout's root (where ``make`` runs) this finds the checkout's ``models/`` and
``traces/`` and the public traces in ``../shared/traces``; an installed Mirage run
elsewhere finds what that directory holds, or what the environment names:

- ``MIRAGE_MODELS``: the trained models' root (``<root>/<cluster>/<policy>/``);
- ``MIRAGE_TRACES``: a folder of public traces (``tacc_ls6_a100/ls6-a100.log.gz``, ...).

The daemon itself reads only its configuration (``[policy] models_dir``).
"""

from __future__ import annotations

import os
from pathlib import Path


def models_root() -> Path:
    """Where trained models are read and written by default (``mirage train``,
    ``mirage evaluate``): ``$MIRAGE_MODELS``, else ``models`` in the current directory."""
    return Path(os.environ.get("MIRAGE_MODELS") or "models")


def trace_roots() -> list[Path]:
    """Folders searched for a known cluster's trace, in order: ``$MIRAGE_TRACES`` if set,
    else ``../shared/traces`` (the full public traces beside a checkout) and ``traces``
    (its bundled slices), relative to the current directory."""
    env = os.environ.get("MIRAGE_TRACES")
    if env:
        return [Path(env)]
    return [Path("..") / "shared" / "traces", Path("traces")]
