"""Alembic migrations of the daemon's database (``mirage.daemon.store.migrate``)."""
