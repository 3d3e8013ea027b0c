"""NodePlan against a brute-force reference: free resources and earliest fits after many
reservations (enough new breakpoints to grow its row buffers several times)."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from mirage.sim.plan import Availability, NodePlan

N, GCAP, CCAP = 3, 4, 8

ask_st = st.tuples(
    st.integers(1, N),  # nodes
    st.integers(0, GCAP),  # GPUs per node
    st.integers(1, CCAP),  # CPUs per node
    st.booleans(),  # exclusive
    st.integers(1, 60),  # duration
    st.integers(0, 100),  # not before (from now)
)


class Reference:
    """Free GPUs and CPUs at every integer time, from the initial state and the holds."""

    def __init__(self, gfree: list[int], cfree: list[int], releases: list[tuple[int, int]]):
        self.horizon = 3000  # past every end: 40 asks of at most 60 s after t = 250
        self.g = np.tile(np.array(gfree), (self.horizon, 1))
        self.c = np.tile(np.array(cfree), (self.horizon, 1))
        for t, node in releases:  # a running job on ``node`` frees 1 GPU and 2 CPUs at t
            self.g[t:, node] += 1
            self.c[t:, node] += 2

    def take(self, start: int, end: int, holds: list[tuple[int, int, int]]) -> None:
        for node, g, c in holds:
            self.g[start:end, node] -= g
            self.c[start:end, node] -= c

    def earliest(
        self, starts: list[int], count: int, g: int, c: int, excl: bool, dur: int
    ) -> tuple[int, tuple[int, ...]] | None:
        for s in starts:
            span = slice(s, min(s + dur, self.horizon))
            if excl:
                ok = (self.g[span] == GCAP).all(0) & (self.c[span] == CCAP).all(0)
            else:
                ok = (self.g[span] >= g).all(0) & (self.c[span] >= c).all(0)
            fit = np.flatnonzero(ok)
            if fit.size >= count:
                return s, tuple(int(x) for x in fit[:count])
        return None


@given(
    running=st.lists(st.tuples(st.integers(1, 150), st.integers(0, N - 1)), max_size=6),
    asks=st.lists(ask_st, min_size=1, max_size=40),
)
@settings(max_examples=60, deadline=None)
def test_node_plan_matches_brute_force(
    running: list[tuple[int, int]], asks: list[tuple[int, int, int, bool, int, int]]
) -> None:
    gfree = [GCAP - sum(1 for _, n in running if n == k) for k in range(N)]
    cfree = [CCAP - 2 * sum(1 for _, n in running if n == k) for k in range(N)]
    plan = NodePlan(
        0,
        gpus_free=gfree,
        cpus_free=cfree,
        gpus_cap=[GCAP] * N,
        cpus_cap=[CCAP] * N,
        releases=[(t, ((n, 1, 2),)) for t, n in running],
    )
    ref = Reference(gfree, cfree, running)
    nodes = np.arange(N)
    for count, g, c, excl, dur, nb in asks:
        # candidate starts are the breakpoints from not_before on, not_before included
        cands = sorted({nb} | {t for t in plan.times if t > nb})
        want = ref.earliest(cands, count, g, c, excl, dur)
        got = plan.earliest(
            nodes, count, gpus=g, cpus=c, exclusive=excl, duration=dur, not_before=nb
        )
        assert got == want
        if got is not None:
            start, chosen = got
            holds = [(n, GCAP, CCAP) if excl else (n, g, c) for n in chosen]
            plan.reserve(start, start + dur, holds)
            ref.take(start, start + dur, holds)
        assert plan.times == sorted(set(plan.times))
        for k, t in enumerate(plan.times):
            assert plan.gpus[k].tolist() == ref.g[t].tolist()
            assert plan.cpus[k].tolist() == ref.c[t].tolist()


def test_availability_dry_is_the_first_instant_with_no_node_free() -> None:
    plan = Availability(100, 1, [(200, 1), (500, 2)])  # free: 1, then 2 at 200, 4 at 500
    assert plan.dry() == math.inf
    plan.reserve(300, 400, 2)  # 2 free from 200 to 300 and 400 to 500: none in between
    assert plan.dry() == 300
    plan.reserve(100, 150, 1)
    assert plan.dry() == 100
    assert Availability(0, 0, [(50, 1)]).dry() == 0
