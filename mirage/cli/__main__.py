"""``python -m mirage.cli``: the ``mirage`` command (mirage.cli is a package since the
evaluate command moved into it; the daemon's service test starts it this way)."""

from mirage.cli import main

main()
