"""Backfill's start times as Slurm 22.05's ``_will_run_test`` finds them: in batches.

cons_common/job_test.c releases running jobs in order of end time, in batches (the first
ends by the first job's end rounded up to the next multiple of 30 s, plus 30 s; then the
window doubles), and tries the pending job after each batch: its start is the end of the
batch's last job, later than the exact earliest start when a batch spans several ends.
The reservation goes there, and what backfill packs around it changes. Every expected
value below is worked out by hand from that rule.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from mirage.sim import JobSpec, Simulation
from mirage.sim.plan import WillRunPlan, will_run_batches
from mirage.sim.scenario import job, toy_profile

EXACT: dict[str, Any] = {"bf_interval_s": 1, "bf_resolution_s": 1, "bf_will_run_batches": True}


def test_batches_follow_the_time_window_loop() -> None:
    # first end 100 -> end_time 120; batch 0: ends <= 150 (100, 125, 130, 150); the window
    # doubles to 60, then to 120 to cover 200: batch {200} (260 > 240); 240 covers 260:
    # {260} (400 > 360); 480: {400}; 960: {1000}
    ends = [100, 125, 130, 150, 200, 260, 400, 1000]
    assert will_run_batches(ends) == [150, 150, 150, 150, 200, 260, 400, 1000]
    # a multiple of 30 goes to the next one: 120 -> end_time 150, batch 0 up to 180
    assert will_run_batches([120, 180, 181]) == [180, 180, 181]
    # bf_window_linear=100: the window grows 30 -> 130 ({200, 250}) -> 230 ({300})
    assert will_run_batches([100, 200, 250, 300], scale=100) == [100, 250, 250, 300]


def test_a_job_on_no_usable_node_is_skipped_but_still_ends_a_batch_by_its_time() -> None:
    # Slurm skips a job on no usable node without looking at the window, so the next
    # usable job (170) joins the batch of 100 although 170 > 120 + 30; the batch ends at
    # the peek of 175 > 150.
    assert will_run_batches([100, 140, 170, 175], [True, False, True, True]) == [170, 0, 170, 175]
    # a non-touching job never sets end_time: the first touching job (140) does
    assert will_run_batches([10, 140, 200], [False, True, True]) == [0, 140, 200]


# 4 whole nodes. At 0 the main pass starts R1 (ends 100), R2 (140) and R3 (1000), one
# node each; P (2 nodes, 100 s) is blocked (1 node free) and so is B behind it.
# Exact earliest start of P: 100 (the idle node and R1's). Slurm: R1 and R2 end in one
# batch (end_time = 120, 140 <= 150), so P is tried only after both: start 140, reserved
# [140, 240). B (1 node, 120 s) then runs on the idle node until 120, before P's
# reservation: backfilled at 0. With the exact start P would hold 2 nodes from 100 and B
# (running until 120) would delay it: B waits.
WHOLE = (job(0, 100), job(0, 140), job(0, 1000), job(0, 100, nodes=2), job(0, 120))


def _at_zero(*jobs: JobSpec, nodes: int, **sched: Any) -> tuple[Simulation, list[str]]:
    sim = Simulation(toy_profile(nodes, **{**EXACT, **sched}))
    ids = sim.add_jobs(jobs)
    sim.run_until(0)
    return sim, ids


def test_batched_reservation_lets_a_job_backfill_on_whole_nodes() -> None:
    sim, ids = _at_zero(*WHOLE, nodes=4)
    assert sim.start_estimate(ids[3]) == 140
    assert sim.view(ids[4]).start == 0


def test_exact_earliest_start_without_batches_on_whole_nodes() -> None:
    sim, ids = _at_zero(*WHOLE, nodes=4, bf_will_run_batches=False)
    assert sim.start_estimate(ids[3]) == 100
    assert sim.view(ids[4]).start is None


# The same on 3 shared nodes (4 GPUs, 32 CPUs), as the test cluster's settings plan them
# (reservations take whole nodes, best fit): R1 takes node 0's 4 GPUs until 100, R2 and
# R3 2 GPUs each on node 1 until 140 and 1000. P wants 2 nodes x 4 GPUs: only node 2 now;
# exactly at 100 (nodes 0 and 2); Slurm: after the batch {100, 140}, at 140, on nodes 0
# and 2 (node 1 keeps R3's GPUs), reserved whole over [140, 240). B (1 GPU, 120 s) fits on
# node 2 until 120: started at 0; with P reserved from 100 it would not be.
SHARED = (
    job(0, 100, gpus=4, cpus=4),
    job(0, 140, gpus=2, cpus=2),
    job(0, 1000, gpus=2, cpus=2),
    job(0, 100, nodes=2, gpus=8, cpus=8),
    job(0, 120, gpus=1, cpus=1),
)
SLURM_22 = {"bf_reserve_whole_nodes": True, "node_choice": "cons_tres"}
# the simpler planner (NodePlan: partial reservations, lowest nodes first), same outcome
PLANNERS = [SLURM_22, {"bf_reserve_whole_nodes": False, "node_choice": "lowest"}]


@pytest.mark.parametrize("planner", PLANNERS)
def test_batched_reservation_lets_a_job_backfill_on_shared_nodes(planner: dict[str, Any]) -> None:
    sim, ids = _at_zero(*SHARED, nodes=3, **planner)
    assert [sim.view(i).nodes for i in ids[:3]] == [("gpu-0000",), ("gpu-0001",), ("gpu-0001",)]
    assert sim.start_estimate(ids[3]) == 140
    assert sim.view(ids[4]).start == 0
    assert sim.view(ids[4]).nodes == ("gpu-0002",)


@pytest.mark.parametrize("planner", PLANNERS)
def test_exact_earliest_start_without_batches_on_shared_nodes(planner: dict[str, Any]) -> None:
    sim, ids = _at_zero(*SHARED, nodes=3, bf_will_run_batches=False, **planner)
    assert sim.start_estimate(ids[3]) == 100
    assert sim.view(ids[4]).start is None


def test_a_reservation_moves_to_where_more_nodes_are_free_of_reservations() -> None:
    # 2 empty nodes of 4 GPUs, nothing running. A holds node 0 reserved over [50, 150).
    # J (2 nodes x 4 GPUs, 100 s): from now, only node 1 is free of reservations over
    # [0, 100] (too few); later_start = 150, where node 0 is free again (TRY_LATER):
    # both nodes, start 150.
    plan = WillRunPlan(
        0,
        gpus_free=[4, 4],
        cpus_free=[32, 32],
        gpus_cap=[4, 4],
        cpus_cap=[32, 32],
        releases=[],
    )
    plan.reserve(50, 100, (0,))
    nodes = np.array([0, 1])
    found = plan.place(nodes, 2, gpus=4, cpus=1, exclusive=False, duration=100, not_before=0)
    assert found == (150, (0, 1), False)
    # a 1-node job of 40 s fits now (node 1, or node 0 before 50): it starts now
    found = plan.place(nodes, 1, gpus=4, cpus=1, exclusive=False, duration=40, not_before=0)
    assert found is not None and found[0] == 0 and found[2]  # it starts now


def test_a_start_that_meets_a_reservation_tries_again_from_there() -> None:
    # 1 node, a running job holds it until 100; node 0 is reserved over [150, 250).
    # J (1 node, 100 s): over [0, 100] node 0 is free of reservations (150 > 100);
    # will_run: 100 (the running job's end); its run [100, 200) meets the reservation
    # (_test_resv_overlap): again from 100: the record [150, 250) begins within [100,
    # 200]: no node left; later_start 250: start 250.
    plan = WillRunPlan(
        0,
        gpus_free=[0],
        cpus_free=[0],
        gpus_cap=[4],
        cpus_cap=[32],
        releases=[(100, ((0, 4, 32),))],
    )
    plan.reserve(150, 100, (0,))
    found = plan.place(
        np.array([0]), 1, gpus=1, cpus=1, exclusive=False, duration=100, not_before=0
    )
    assert found == (250, (0,), False)


def test_a_job_past_its_end_is_guessed_to_end_kill_wait_later() -> None:
    # At 110 a job still holds node 0 although its limit ended at 100 (time limits are
    # enforced every 30 s). _will_run_test: J fits once it is released, at its end 100,
    # which is past: _guess_job_end says 100 + KillWait. KillWait=30: start 130, a
    # reservation. KillWait=2: 102, before start_res (now): the start is now, which fails
    # (_start_job: the node is busy), and the job is reserved from now on: [110, 210).
    def plan(kill_wait: int) -> WillRunPlan:
        return WillRunPlan(
            110,
            gpus_free=[0],
            cpus_free=[0],
            gpus_cap=[4],
            cpus_cap=[32],
            releases=[(100, ((0, 4, 32),))],
            kill_wait=kill_wait,
        )

    args: dict[str, Any] = {"gpus": 1, "cpus": 1, "exclusive": False, "duration": 100}
    assert plan(30).place(np.array([0]), 1, not_before=110, **args) == (130, (0,), False)
    p = plan(2)
    assert p.place(np.array([0]), 1, not_before=110, **args) == (110, (0,), False)
    p.reserve(110, 100, (0,))
    assert p.times == [110, 210] and p.resv[0].tolist() == [True]
