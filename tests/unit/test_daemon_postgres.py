"""The store on a real PostgreSQL server: migrations, the lease, a chain, two daemons.

Uses ``$MIRAGE_TEST_POSTGRES_URL`` when set; otherwise starts a throwaway server
(``initdb`` + ``pg_ctl``, as the unprivileged user ``nobody`` when run as root, on a Unix
socket only). Skipped when neither is possible.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import NoReturn

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from mirage.daemon.core import Daemon
from mirage.daemon.store import Base, ChainState, Store
from tests.unit.daemon_support import (
    chain_state,
    make_chain,
    make_config,
    make_sim,
    run_cycles,
)

pytestmark = pytest.mark.postgres

PG_BIN = Path("/usr/lib/postgresql/15/bin")


def _bin(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    return str(PG_BIN / name) if (PG_BIN / name).exists() else None


def unavailable(reason: str) -> NoReturn:
    """Skip, with the reason; under ``make test`` (``MIRAGE_REQUIRE_POSTGRES=1``) fail: the
    PostgreSQL tests must not pass there by not running."""
    if os.environ.get("MIRAGE_REQUIRE_POSTGRES") == "1":
        pytest.fail(f"MIRAGE_REQUIRE_POSTGRES=1 but {reason}", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="module")
def pg_url() -> Iterator[str]:
    url = os.environ.get("MIRAGE_TEST_POSTGRES_URL")
    if url:
        yield url
        return
    initdb, pg_ctl = _bin("initdb"), _bin("pg_ctl")
    if initdb is None or pg_ctl is None:
        unavailable("no PostgreSQL server binaries (initdb, pg_ctl)")
    try:
        import psycopg  # noqa: F401
    except ImportError:
        unavailable("psycopg is not installed (pip install 'psycopg[binary]')")
    root = Path(tempfile.mkdtemp(prefix="mirage-pg-"))
    user = pwd.getpwuid(os.geteuid()).pw_name
    kw: dict[str, object] = {}
    if os.geteuid() == 0:  # postgres refuses to run as root
        nobody = pwd.getpwnam("nobody")
        os.chown(root, nobody.pw_uid, nobody.pw_gid)
        kw = {"user": nobody.pw_uid, "group": nobody.pw_gid, "extra_groups": []}
        user = "nobody"
    data, sock = root / "data", root
    env = {"PATH": "/usr/bin:/bin", "LC_ALL": "C"}
    try:
        subprocess.run(
            [initdb, "-D", str(data), "-A", "trust", "-U", user, "-E", "UTF8"],
            check=True, capture_output=True, env=env, cwd=str(root), timeout=120, **kw,  # type: ignore[call-overload]
        )  # fmt: skip
        opts = f"-k {sock} -c listen_addresses='' -p 55432 -c fsync=off"
        subprocess.run(
            [pg_ctl, "-D", str(data), "-o", opts, "-w", "-l", str(root / "log"), "start"],
            check=True, capture_output=True, env=env, cwd=str(root), timeout=120, **kw,  # type: ignore[call-overload]
        )  # fmt: skip
    except (subprocess.SubprocessError, OSError) as exc:
        shutil.rmtree(root, ignore_errors=True)
        unavailable(f"cannot start a PostgreSQL server: {exc}")
    try:
        yield f"postgresql+psycopg://{user}@/postgres?host={sock}&port=55432"
    finally:
        subprocess.run(
            [pg_ctl, "-D", str(data), "-m", "immediate", "stop"],
            capture_output=True, env=env, cwd=str(root), timeout=60, check=False, **kw,  # type: ignore[call-overload]
        )  # fmt: skip
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def pg_store(pg_url: str) -> Iterator[Store]:
    store = Store.open(pg_url)
    yield store
    store.engine.dispose()
    from sqlalchemy import create_engine, text

    eng = create_engine(pg_url)
    with eng.begin() as conn:  # a clean schema for the next test
        conn.execute(text("DROP SCHEMA public CASCADE; CREATE SCHEMA public"))
    eng.dispose()


def test_postgres_migrations_match_models(pg_store: Store) -> None:
    with pg_store.engine.connect() as conn:
        assert compare_metadata(MigrationContext.configure(conn), Base.metadata) == []


def test_postgres_chain_and_two_daemons(pg_store: Store, pg_url: str) -> None:
    sim = make_sim()
    other = Store.open(pg_url)
    chain = make_chain(pg_store, segments=3, limit=1800)
    cfg = make_config("fixed-lead", lead_s=300)
    a = Daemon(pg_store, sim, config=cfg, holder="A")
    b = Daemon(other, sim, config=cfg, holder="B")
    run_cycles([a, b], sim, 0, 3 * 1800 + 600)
    assert chain_state(pg_store, chain.id).state is ChainState.COMPLETED
    assert set(sim.tokens().values()) == {1} and len(sim.tokens()) == 3
    assert b.metrics.value("mirage_cycles_skipped_total", {"why": "lease"}) > 0
    assert a.metrics.value("mirage_cycles_skipped_total", {"why": "lease"}) == 0
    other.engine.dispose()
