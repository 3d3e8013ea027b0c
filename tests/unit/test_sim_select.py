"""Node choice as select/cons_tres's ``_eval_nodes`` makes it (mirage.sim.select)."""

from __future__ import annotations

from mirage.sim.select import eval_nodes

CPUS = [16, 16, 16, 16]


def test_one_node_goes_to_the_fewest_free_cpus_of_a_run() -> None:
    cfree = [14, 16, 10, 16]
    assert eval_nodes([0, 1, 2, 3], [4, 4, 4, 4], cfree, 1, gpus=1, cpus=2) == (2,)
    # ties: the first
    assert eval_nodes([0, 1, 2, 3], [4, 4, 4, 4], CPUS, 1, gpus=1, cpus=2) == (0,)


def test_a_node_that_cannot_run_the_job_splits_the_runs() -> None:
    """Runs {0} (14 CPUs) and {2, 3} (26): the first run with enough, and no later run
    with fewer CPUs in all, wins, though node 3 has fewer free CPUs than node 0."""
    cfree = [14, 0, 16, 10]
    assert eval_nodes([0, 2, 3], [4, 0, 4, 4], cfree, 1, gpus=1, cpus=2) == (0,)
    # a later run with fewer CPUs in all wins: {0, 1} (30) against {3} (12)
    assert eval_nodes([0, 1, 3], [4, 4, 0, 4], [14, 16, 0, 12], 1, gpus=1, cpus=2) == (3,)


def test_a_larger_job_takes_a_run_in_index_order() -> None:
    cfree = [16, 4, 8, 16]
    assert eval_nodes([0, 1, 2, 3], [4, 4, 4, 4], cfree, 2, gpus=1, cpus=4) == (0, 1)
    # then the next best run: {0} has too few nodes, the larger run {2, 3} has most CPUs
    assert eval_nodes([0, 2, 3], [4, 0, 4, 4], cfree, 2, gpus=1, cpus=4) == (2, 3)


def test_gpu_jobs_do_not_spread_to_the_nodes_with_most_free_gpus() -> None:
    """near_gpu_cnt is capped at the job's --gres count: nodes that fit weigh the same."""
    assert eval_nodes([0, 1], [4, 1], [16, 13], 1, gpus=1, cpus=2) == (1,)


def test_too_few_nodes() -> None:
    assert eval_nodes([0], [4], [16], 2, gpus=1, cpus=2) is None
    assert eval_nodes([], [], [], 1, gpus=0, cpus=1) is None
