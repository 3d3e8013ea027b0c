"""The lease after a crash: a holder that died on this host is taken over at once.

A daemon killed with ``kill -9`` leaves its lease unexpired; the next daemon on the same
host takes it at once when the holder's process is gone, and waits it out otherwise (a
live holder, one on another host, a name not of the ``host:pid:tag`` form). On SQLite and
on a real PostgreSQL server (``tests/unit/test_daemon_postgres.py``'s fixture).
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from mirage.daemon.config import Config, DaemonSection
from mirage.daemon.core import Daemon
from mirage.daemon.store import LeaseInfo, Store, holder_alive
from tests.unit.daemon_support import chain_state, make_chain, make_sim
from tests.unit.test_daemon_postgres import pg_store, pg_url  # noqa: F401  (fixtures)

HOST = socket.gethostname()
TTL = 180


def dead_pid() -> int:
    """The pid of a process that has exited and been reaped."""
    proc = subprocess.Popen([sys.executable, "-c", ""])
    proc.wait()
    with pytest.raises(ProcessLookupError):
        os.kill(proc.pid, 0)
    return proc.pid


def holder(pid: int, host: str = HOST, tag: str = "0123abcd") -> str:
    return f"{host}:{pid}:{tag}"


@pytest.fixture(
    params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)],
)
def open_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[], Store]]:
    """Opens Stores (each its own engine) on one fresh database."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'lease.sqlite'}"
    else:
        request.getfixturevalue("pg_store")  # migrated; its schema is dropped afterwards
        url = request.getfixturevalue("pg_url")
    opened: list[Store] = []

    def open_one() -> Store:
        opened.append(Store.open(url))
        return opened[-1]

    yield open_one
    for store in opened:
        store.engine.dispose()


def test_dead_local_holder_is_taken_at_once(
    open_store: Callable[[], Store], caplog: pytest.LogCaptureFixture
) -> None:
    a, b = open_store(), open_store()
    dead = holder(dead_pid())
    assert a.acquire_lease("c", dead, 0, TTL)
    info = b.lease_info("c", 10)
    assert info == LeaseInfo(holder=dead, acquired_at=0, expires_at=TTL, alive=False)
    me = holder(os.getpid(), tag="feed")
    with caplog.at_level(logging.WARNING, logger="mirage.daemon.store"):
        assert b.acquire_lease("c", me, 10, TTL)  # 170 s before the dead one's expiry
    assert f"lease c held by dead process {dead}: taken over" in caplog.text
    assert a.lease_info("c", 20) == LeaseInfo(me, acquired_at=10, expires_at=10 + TTL, alive=True)
    # the dead holder's name can renew nothing now, and nobody takes the live holder's lease
    assert not a.acquire_lease("c", dead, 20, TTL)
    assert not a.acquire_lease("c", holder(os.getpid(), tag="beef"), 20, TTL)
    assert a.acquire_lease("c", me, 60, TTL)  # renewal keeps acquired_at
    assert a.lease_info("c", 60) == LeaseInfo(me, acquired_at=10, expires_at=60 + TTL, alive=True)


def test_live_local_holder_is_waited_out(open_store: Callable[[], Store]) -> None:
    a, b = open_store(), open_store()
    live = holder(os.getpid())
    assert a.acquire_lease("c", live, 0, TTL)
    assert not b.acquire_lease("c", holder(os.getpid(), tag="beef"), 60, TTL)
    assert b.lease_info("c", 60) == LeaseInfo(live, acquired_at=0, expires_at=TTL, alive=True)
    assert not b.acquire_lease("c", "B", TTL, TTL)  # expires_at itself is still held
    assert b.acquire_lease("c", "B", TTL + 1, TTL)  # lapsed: taken, acquired_at is now
    assert b.lease_info("c", TTL + 1) == LeaseInfo("B", TTL + 1, 2 * TTL + 1, alive=None)


def test_a_process_we_may_not_signal_counts_as_alive(
    open_store: Callable[[], Store], monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = open_store(), open_store()
    other_users = holder(dead_pid())
    assert a.acquire_lease("c", other_users, 0, TTL)

    def eperm(pid: int, sig: int) -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "kill", eperm)
    assert holder_alive(other_users) is True
    assert not b.acquire_lease("c", holder(os.getpid()), 60, TTL)
    assert b.lease_holder("c", 60) == other_users


def test_holder_on_another_host_is_waited_out(open_store: Callable[[], Store]) -> None:
    a, b = open_store(), open_store()
    remote = holder(dead_pid(), host=f"not-{HOST}")  # its pid means nothing here
    assert a.acquire_lease("c", remote, 0, TTL)
    me = holder(os.getpid())
    for t in (1, 60, TTL):
        assert not b.acquire_lease("c", me, t, TTL)
        assert b.lease_info("c", t) == LeaseInfo(remote, 0, TTL, alive=None)
    assert b.acquire_lease("c", me, TTL + 1, TTL)
    assert b.lease_holder("c", TTL + 1) == me


@pytest.mark.parametrize(
    "shape",
    [
        "{host}:{pid}",  # no tag
        "{host}:{pid}:0123abcd:ff",  # one field too many
        "{host}:{pid}:",  # empty tag
        ":{pid}:0123abcd",  # no host
        "{host}:0:0123abcd",  # kill(0, 0) would signal our own process group
        "{host}:-{pid}:0123abcd",  # kill(-pid, 0): a process group
        "{host}:0{pid}:0123abcd",  # not how a pid is written
        "{host}: {pid}:0123abcd",
        "{host}:{pid}:XYZ",  # not hex
        "{host}:99999999999:0123abcd",  # beyond any pid_max
        "{host}:\u0663:0123abcd",  # a non-ASCII digit
        "{host}.:{pid}:0123abcd",  # not this host's exact name
        "A",
    ],
)
def test_malformed_holder_is_waited_out(
    shape: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = Store.open(f"sqlite:///{tmp_path / 'lease.sqlite'}")
    odd = shape.format(host=HOST, pid=dead_pid())
    killed: list[int] = []
    real_kill = os.kill

    def spy(pid: int, sig: int) -> None:
        killed.append(pid)
        real_kill(pid, sig)

    monkeypatch.setattr(os, "kill", spy)
    assert holder_alive(odd) is None
    assert store.acquire_lease("c", odd, 0, TTL)
    assert not store.acquire_lease("c", holder(os.getpid()), 60, TTL)
    assert store.lease_info("c", 60) == LeaseInfo(odd, 0, TTL, alive=None)
    assert store.acquire_lease("c", holder(os.getpid()), TTL + 1, TTL)
    assert killed == []  # no malformed pid was ever signalled
    store.engine.dispose()


def test_racing_takers_one_wins(open_store: Callable[[], Store]) -> None:
    """Several daemons on this host find the same dead holder at once: one takes it."""
    takers = [open_store() for _ in range(6)]
    dead = holder(dead_pid())
    assert takers[0].acquire_lease("c", dead, 0, TTL)
    barrier = threading.Barrier(len(takers))
    won: dict[str, bool] = {}

    def take(i: int, store: Store) -> None:
        name = holder(os.getpid(), tag=f"{i:04x}")
        barrier.wait()
        won[name] = store.acquire_lease("c", name, 30, TTL)

    threads = [threading.Thread(target=take, args=(i, s)) for i, s in enumerate(takers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    winners = [name for name, ok in won.items() if ok]
    assert len(winners) == 1
    assert takers[0].lease_holder("c", 30) == winners[0]
    # the conditional UPDATE on the dead holder's exact name: a late taker changes nothing
    assert not takers[1]._take_from_dead("c", dead, holder(os.getpid(), tag="late"), 31, TTL)
    assert takers[0].lease_holder("c", 31) == winners[0]


def test_lease_info_when_nobody_holds_it(open_store: Callable[[], Store]) -> None:
    store = open_store()
    assert store.lease_info("c", 0) is None  # never taken
    me = holder(os.getpid())
    assert store.acquire_lease("c", me, 0, TTL)
    assert store.lease_info("c", TTL + 1) is None  # expired
    assert store.acquire_lease("c", me, TTL + 2, TTL)
    store.release_lease("c", me)
    assert store.lease_info("c", TTL + 3) is None and store.lease_holder("c", TTL + 3) is None


def test_daemon_killed_with_sigkill_is_replaced_at_once(tmp_path: Path) -> None:
    """A real process holds the lease and is killed with SIGKILL: its pid is gone, and the
    next daemon on this host acts in its very next cycle instead of 180 s later."""
    url = f"sqlite:///{tmp_path / 'mirage.sqlite'}"
    store = Store.open(url)
    chain = make_chain(store, segments=1, limit=600)
    code = (
        "import os, socket, sys, time\n"
        "from mirage.daemon.store import Store\n"
        "me = f'{socket.gethostname()}:{os.getpid()}:0123abcd'\n"
        f"assert Store.open({url!r}).acquire_lease('default', me, 0, {TTL})\n"
        "print(me, flush=True)\n"
        "time.sleep(600)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        old = proc.stdout.readline().strip()
        assert old == holder(proc.pid)
        assert store.lease_info("default", 0) == LeaseInfo(old, 0, TTL, alive=True)
        cfg = Config(daemon=DaemonSection(poll_interval_s=60, lease_ttl_s=TTL))
        sim = make_sim()
        new = Daemon(store, sim, config=cfg)
        assert new.holder.startswith(f"{HOST}:{os.getpid()}:")
        assert not new.cycle(30).acted  # the old daemon lives: its lease is respected
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        assert proc.stdout is not None
        proc.stdout.close()
    assert store.lease_info("default", 60) == LeaseInfo(old, 0, TTL, alive=False)
    sim.advance_to(60)
    assert new.cycle(60).acted  # 120 s before the old lease would have lapsed
    assert store.lease_holder("default", 60) == new.holder
    t = 60
    while chain_state(store, chain.id).state.value == "ACTIVE" and t < 7200:
        t += 60
        sim.advance_to(t)
        new.cycle(t)
    assert chain_state(store, chain.id).state.value == "COMPLETED"
    store.engine.dispose()
