"""Alembic environment: run on the connection ``mirage.daemon.store.migrate`` passes in.

New revisions: ``alembic -c /dev/null`` is not needed; from Python::

    cfg = Config(); cfg.set_main_option("script_location", "mirage/daemon/migrations")
    cfg.set_main_option("sqlalchemy.url", "sqlite:////tmp/x.sqlite")
    alembic.command.revision(cfg, "what changed", autogenerate=True)
"""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection, create_engine

from mirage.daemon.store import Base

target_metadata = Base.metadata


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=connection.dialect.name == "sqlite",  # SQLite ALTER TABLE support
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = context.config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    url = context.config.get_main_option("sqlalchemy.url")
    if not url:
        raise RuntimeError("no connection and no sqlalchemy.url for the migration")
    engine = create_engine(url)
    with engine.begin() as conn:
        _run(conn)


if context.is_offline_mode():
    context.configure(
        url=context.config.get_main_option("sqlalchemy.url"), target_metadata=target_metadata
    )
    with context.begin_transaction():
        context.run_migrations()
else:
    run_migrations_online()
