"""The harness on a hand-made scenario, the oracle bound, resumable probes, the statistics."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from mirage.evaluate import probes
from mirage.evaluate.harness import BASELINES, ORACLE, Walker, curve_cost, evaluate, tune
from mirage.evaluate.probes import SampleResult, generate, probe_sample
from mirage.evaluate.protocol import Protocol, Setting, Split, sample_times
from mirage.evaluate.stats import MIN_N, ceiling, head_to_head, load_levels, table
from mirage.policy.cost import HELD_TWICE
from mirage.profile.schema import ClusterProfile, Partition
from mirage.sim import JobSpec, Simulation
from mirage.slurm.syntax import parse_when

H = 3600


def LIMITS(n: int) -> np.ndarray:
    """Predecessors' limits of ``n`` samples (48 h, the protocol's default)."""
    return np.full(n, 48.0 * H)


REPO = Path(__file__).resolve().parents[2]
SLICE = str(REPO / "traces" / "ls6-a100-slice.log.gz")
LS6 = str(REPO / "models" / "ls6" / "profile.toml")
TWO = ClusterProfile("two", (Partition("gpu", 8, 1000, nodes=2, gpus_per_node=0),))
SMALL = Protocol(time_limit_s=4 * H, step_s=30 * 60, every_s=12 * H, window_s=10 * H,
                 warmup_s=12 * H)  # fmt: skip


def scenario_sim() -> Simulation:
    sim = Simulation(TWO, start_time=0)
    sim.add_job(JobSpec(submit=0, run=50 * H, time_limit=50 * H, nodes=1, partition="gpu"))
    sim.add_job(JobSpec(submit=H, run=10 * H, time_limit=10 * H, nodes=2, partition="gpu"))
    sim.run_until(0)
    return sim


def scenario() -> SampleResult:
    """2 nodes. A 1-node job runs 0-50 h; the predecessor (1 node, 48 h) starts at 0; at
    1 h a 2-node, 10 h job queues and gets a reservation at 50 h. A successor submitted
    at the predecessor's end cannot backfill (48 h would delay that reservation): it
    starts at 60 h, a 12 h gap. Submitted before 1 h, it is older than the 2-node job
    and takes the predecessor's node at 48 h: no gap."""
    return probe_sample(scenario_sim(), Protocol(step_s=30 * 60))


def test_reactive_gap_and_oracle_on_hand_made_scenario() -> None:
    r = scenario()
    assert r.ok and r.pred_start == 0 and r.planned_end == 48 * H
    assert r.succ_start[-1] == 60 * H  # reactive: the analytically known 12 h gap
    assert r.succ_start[0] == 48 * H and r.succ_start[1] == 48 * H  # before the 2-node job
    walker = Walker([r], Protocol(step_s=30 * 60), TWO, "gpu")
    res = evaluate(walker, BASELINES, {"fixed-lead": 3600.0}, HELD_TWICE)
    assert res["reactive"].gap[0] == 12 * H and res["reactive"].interruption[0] == 12 * H
    assert res[ORACLE].cost()[0] == 0.0 and res[ORACLE].step[0] == 1
    assert res["fixed-lead"].gap[0] == 12 * H  # an hour ahead is too late here
    # sbatch --test-only at the end: a node is free now, plus the area of the older
    # 2-node job ahead (2 x 8 CPUs x 10 h over 16 CPUs): 58 h, where it starts at 60 h
    assert r.estimate[-1] == 58 * H


def test_runtime_oracle_on_hand_made_scenario() -> None:
    """Without arrivals, a successor submitted before the 2-node job exists starts at
    48 h; from 1 h on, that job is there and the successor starts at 60 h whatever comes
    later. The runtime oracle sees those starts: with margin 0 it submits at once (no
    gap); with a margin that nothing reaches it waits for the end (reactive's 12 h gap).
    It is a reference: never the selected method."""
    from mirage.evaluate.harness import RUNTIME_ORACLE, select
    from mirage.evaluate.whatif import no_arrival_curve

    protocol = Protocol(step_s=30 * 60)
    r = scenario()
    curve = no_arrival_curve(scenario_sim(), protocol)
    assert curve.pred_start == r.pred_start and len(curve.start) == len(r.steps)
    assert list(curve.start[:3]) == [48 * H, 48 * H, 60 * H]
    assert np.all(curve.start[2:] == 60 * H)
    walker = Walker([r], protocol, TWO, "gpu", no_arrivals=[curve.start])
    res = evaluate(walker, ["reactive", RUNTIME_ORACLE], {RUNTIME_ORACLE: 0.0}, HELD_TWICE)
    assert res[RUNTIME_ORACLE].step[0] == 0 and res[RUNTIME_ORACLE].cost()[0] == 0.0
    late = evaluate(walker, [RUNTIME_ORACLE], {RUNTIME_ORACLE: -13.0 * H}, HELD_TWICE)
    assert late[RUNTIME_ORACLE].gap[0] == 12 * H
    tuned = tune(walker, [RUNTIME_ORACLE], HELD_TWICE)
    assert late[RUNTIME_ORACLE].cost()[0] > 0 and tuned.params[RUNTIME_ORACLE] >= 0
    chosen, scores = select(walker, ["reactive", RUNTIME_ORACLE], tuned.params, HELD_TWICE)
    assert chosen == "reactive" and RUNTIME_ORACLE not in scores
    with pytest.raises(ValueError, match="runtime-oracle needs its recorded start curves"):
        evaluate(Walker([r], protocol, TWO, "gpu"), [RUNTIME_ORACLE], {}, HELD_TWICE)


@pytest.fixture(scope="module")
def slice_samples(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[Setting, list[SampleResult], Path]:
    cache = tmp_path_factory.mktemp("cache")
    split = Split("tune", parse_when("2022-11-06", "UTC"), parse_when("2022-11-14", "UTC"))
    setting = Setting(SLICE, LS6, 40, 2.0, split, SMALL)
    times = sample_times(split, SMALL, 0)
    assert len(times) == 16
    return setting, generate(setting, times, cache=str(cache), tasks=2), cache


def test_oracle_beats_every_baseline_on_each_sample(
    slice_samples: tuple[Setting, list[SampleResult], Path],
) -> None:
    _, samples, _ = slice_samples
    walker = Walker(samples, SMALL, ClusterProfile("x", (Partition("gpu-a100", 1, 1),)),
                    "gpu-a100")  # fmt: skip
    assert len(walker.samples) >= 10
    tuned = tune(walker, BASELINES, HELD_TWICE)
    res = evaluate(walker, BASELINES, tuned.params, HELD_TWICE)
    oracle = res[ORACLE].cost()
    for name, o in res.items():
        assert np.all(oracle <= o.cost() + 1e-9), name
    for s, k in zip(walker.samples, res[ORACLE].step, strict=True):
        assert curve_cost(s)[k] == curve_cost(s).min()
    assert set(tuned.params) == {"fixed-lead", "running-average", "qbets"}


def test_probes_resume_from_cache(
    slice_samples: tuple[Setting, list[SampleResult], Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    setting, first, cache = slice_samples
    calls = []
    monkeypatch.setattr(probes, "probe_sample", lambda *a: calls.append(a))
    again = generate(setting, [s.t for s in first], cache=str(cache))
    assert not calls
    for a, b in zip(first, again, strict=True):
        assert a.t == b.t and a.pred_start == b.pred_start
        assert np.array_equal(a.succ_start, b.succ_start)
        assert np.array_equal(a.estimate, b.estimate)


def test_probe_tasks_do_not_report_the_traces_skips_again(
    slice_samples: tuple[Setting, list[SampleResult], Path], caplog: pytest.LogCaptureFixture
) -> None:
    """The slice has one bad row: reading it warns once; the probe tasks that re-read it
    (one per task and worker process) stay quiet, and the warning level is restored."""
    from mirage.trace.readers import load_trace

    setting, first, _ = slice_samples
    with caplog.at_level("WARNING", logger="mirage.trace"):
        probes.run_task(setting, [first[0].t], None, probes.PROBES)
        assert not [r for r in caplog.records if "skipped" in r.getMessage()]
        load_trace(setting.trace)
    assert [r.getMessage() for r in caplog.records] == [
        f"{setting.trace}:1503: skipped: expected 10 tab-separated fields, got 11"
    ]


def test_statistics() -> None:
    from mirage.evaluate.harness import Outcomes

    rng = np.random.default_rng(1)
    n = 60
    gap = np.concatenate([rng.uniform(0, 2 * H, 40), rng.uniform(3 * H, 11 * H, 20)])
    none = np.zeros(n, np.int64)
    react = Outcomes(none, gap, np.zeros(n), gap, none, LIMITS(n))
    half = Outcomes(none, gap / 2, np.zeros(n), gap / 2, none, LIMITS(n))
    tab = table({"reactive": react, "half": half}, HELD_TWICE, boot=500)
    assert list(load_levels(np.array([0, 2 * H, 2 * H + 1, 13 * H]))) == [
        "low", "low", "medium", "heavy"]  # fmt: skip
    cell = tab["half"]["all"]["removed"]
    assert cell.value == pytest.approx(0.5) and cell.lo == pytest.approx(0.5)
    assert tab["reactive"]["all"]["removed"].value == 0.0
    j = tab["reactive"]["all"]["mean_J_h"]
    assert j.lo <= j.value <= j.hi and j.n == n
    assert tab["reactive"]["low"]["mean_J_h"].n == 40
    assert tab["reactive"]["heavy"]["mean_J_h"].n == 0
    # head to head, paired: "half" beats reactive by half its gap on every sample
    noisy = Outcomes(
        none, gap + np.abs(rng.normal(0, 0.01 * H, n)), np.zeros(n), gap, none, LIMITS(n)
    )
    runs = {"reactive": react, "half": half, "noisy": noisy}
    h2h = head_to_head(runs, HELD_TWICE, ["half"], ["reactive", "noisy"], boot=500)
    assert set(h2h) == {"all", "low"}  # medium has 20 samples: does not count
    assert (h2h["all"].learned, h2h["all"].baseline, h2h["all"].verdict) == (
        "half",
        "reactive",
        "better",
    )
    assert h2h["all"].diff.value == pytest.approx(-gap.mean() / 2 / H)
    # a hair worse on every sample: side by side their intervals overlap; paired, it shows
    hair = head_to_head(runs, HELD_TWICE, ["noisy"], ["reactive"], boot=500)["all"]
    assert hair.verdict == "worse" and 0 < hair.diff.lo <= hair.diff.value <= hair.diff.hi
    side = table({"reactive": react, "noisy": noisy}, HELD_TWICE, boot=500)
    assert side["noisy"]["all"]["mean_J_h"].lo < side["reactive"]["all"]["mean_J_h"].hi
    same = head_to_head({"reactive": react, "copy": react}, HELD_TWICE, ["copy"], ["reactive"])
    assert same["all"].verdict == "tie" and same["all"].diff.value == 0.0


def test_probes_on_a_dask_cluster(
    slice_samples: tuple[Setting, list[SampleResult], Path], tmp_path: Path
) -> None:
    from distributed import LocalCluster

    setting, first, _ = slice_samples
    times = [s.t for s in first[:3]]
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False) as cluster:  # type: ignore[no-untyped-call]
        got = generate(setting, times, cache=str(tmp_path), dask_address=cluster.scheduler_address)
    for a, b in zip(first[:3], got, strict=True):
        assert np.array_equal(a.succ_start, b.succ_start) and a.pred_start == b.pred_start
    assert len(list(tmp_path.rglob("*.npz"))) == 3


def test_no_method_removes_more_of_reactives_j_than_the_oracle() -> None:
    """The ceiling the report prints: methods a hair worse than the oracle on some samples
    never show a larger share removed, nor a larger bound, because every method is
    bootstrapped on the same resamples (unpaired resamples break this within a few
    draws)."""
    from mirage.evaluate.harness import Outcomes

    def run(intr: np.ndarray) -> Outcomes:
        none = np.zeros(intr.size, np.int64)
        return Outcomes(none, intr, np.zeros(intr.size), intr, none, LIMITS(intr.size))

    rng = np.random.default_rng(7)
    for _ in range(20):
        n = int(rng.integers(40, 120))
        gap = np.where(rng.random(n) < 0.6, rng.uniform(0, 2 * H, n), rng.uniform(3 * H, 20 * H, n))
        best = gap * rng.uniform(0, 0.4, n)
        worse = {  # at least the oracle's J on every sample, equal on most
            f"m{i}": run(best + rng.exponential(0.05 * H, n) * (rng.random(n) < 0.1))
            for i in range(4)
        }
        tab = table({"reactive": run(gap), "oracle": run(best), **worse}, HELD_TWICE, boot=300)
        ceil = ceiling(tab)
        assert "all" in ceil and set(ceil) <= {"all", "low", "medium", "heavy"}
        for level, top in ceil.items():
            assert level == "all" or top.n >= MIN_N
            for name in worse:
                cell = tab[name][level]["removed"]
                assert cell.value <= top.value and cell.lo <= top.lo and cell.hi <= top.hi
    assert ceiling({"reactive": tab["reactive"]}) == {}


def test_oracle_gain_share_and_no_harm() -> None:
    """Issue 25's columns: the oracle gain per level, each method's share of it, and the
    paired interval of (method - reactive) J whose upper bound is the no-harm mark."""
    from mirage.evaluate.harness import Outcomes
    from mirage.evaluate.report import render_gains
    from mirage.evaluate.stats import NO_HARM_H, gains

    def run(intr: np.ndarray) -> Outcomes:
        none = np.zeros(intr.size, np.int64)
        return Outcomes(none, intr, np.zeros(intr.size), intr, none, LIMITS(intr.size))

    rng = np.random.default_rng(3)
    n = 90  # 60 low, 30 medium: both count
    gap = np.concatenate([rng.uniform(0, 2 * H, 60), rng.uniform(3 * H, 11 * H, 30)])
    oracle = gap * 0.2
    low = np.arange(n) < 60
    runs = {
        "reactive": run(gap),
        "oracle": run(oracle),
        "most": run(gap - 0.9 * (gap - oracle)),  # 90% of the gain on every sample
        # the gain where queues are long, 0.5 h worse than reactive on every quiet sample
        "eager": run(np.where(low, gap + 0.5 * H, oracle)),
    }
    got = gains(runs, HELD_TWICE, boot=400)
    assert set(got) == {"all", "low", "medium"}  # heavy has no sample
    for level, g in got.items():
        j = {m: o.cost(HELD_TWICE)[low if level == "low" else ~low if level == "medium" else ...]
             for m, o in runs.items()}  # fmt: skip
        assert g.oracle_gain.value == pytest.approx((j["reactive"] - j["oracle"]).mean() / H)
        assert g.oracle_gain.lo <= g.oracle_gain.value <= g.oracle_gain.hi
        assert set(g.methods) == {"most", "eager"}
        assert g.methods["most"].share == pytest.approx(0.9)
        assert g.methods["most"].no_harm and g.methods["most"].harm.hi < 0
    eager = got["low"].methods["eager"]
    assert eager.share < 0 and eager.harm.value == pytest.approx(0.5)
    assert eager.harm.lo > NO_HARM_H and not eager.no_harm  # harms the quiet level
    assert got["medium"].methods["eager"].share == pytest.approx(1.0)
    assert got["medium"].methods["eager"].no_harm
    text = render_gains(got)
    assert "[low] n = 60" in text and "[medium] n = 30" in text
    rows = [line.split() for line in text.splitlines() if line.strip().startswith("eager")]
    # all, low, medium: over all samples the long queues' gain hides the quiet ones' harm
    assert [r[-1] for r in rows] == ["yes", "NO", "yes"]
    assert (
        gains({"reactive": runs["reactive"], "most": runs["most"]}, HELD_TWICE) == {}
    )  # no oracle


def test_max_samples_spreads_over_the_split() -> None:
    """Issue 28: ``--max-samples N`` takes N samples spread over the split (first and last
    included), not its first N."""
    from mirage.evaluate.protocol import spread

    times = list(range(0, 1000, 10))  # 100 sample times
    picked = spread(times, 5)
    assert picked == [0, 250, 500, 740, 990]
    assert spread(times, 1) == [500] and spread(times, 0) == times
    assert spread(times, 100) == times and spread(times, 200) == times
    many = spread(times, 37)
    assert len(set(many)) == 37 and many == sorted(many) and many[-1] == 990


def test_evaluation_warnings() -> None:
    """Issue 28: the report says in words when the tuning split cannot tell constants or
    methods apart, when a level has too few samples, and when a forecaster's intervals
    do not hold."""
    from mirage.evaluate.stats import warnings_for

    said = warnings_for(
        {
            "fixed-lead": {"0": 0.0, "600": 0.0, "3600": 0.0},
            "qbets": {"0.5": 7200.0, "0.9": 3600.0},
        },
        {"chosen": "reactive", "tune_mean_J_h": {"reactive": 0.0, "fixed-lead": 0.0}},
        {"low": 120, "medium": 12, "heavy": 0},
        {"xgb": 0.27, "rf": 0.88},
    )
    assert len(said) == 4
    assert said[0].startswith("fixed-lead: every constant tried gives the same mean J")
    assert "reactive was picked by its place in the list" in said[1]
    assert "medium (12)" in said[2] and "low" not in said[2] and "heavy" not in said[2]
    assert said[3].startswith("xgb: its stated 90% intervals held only 27%")
    assert warnings_for(None, None, {"low": 40}, {"xgb": None}) == []


def test_shipped_is_the_daemons_default_policy() -> None:
    """What `mirage evaluate` measures as "shipped" is what the daemon builds from its
    default [policy] section: the same policy, constant and guard margin."""
    from mirage.daemon.config import PolicySection
    from mirage.daemon.policies import build_policies
    from mirage.evaluate.harness import SHIPPED_METHOD, factory
    from mirage.policy.baselines import Qbets
    from mirage.policy.guard import Guard

    daemon = build_policies(PolicySection())[PolicySection().default].policy
    measured = factory(SHIPPED_METHOD, None)()
    for p in (daemon, measured):
        assert isinstance(p, Guard) and isinstance(p.inner, Qbets)
    assert isinstance(daemon, Guard) and isinstance(measured, Guard)
    assert daemon.margin_s is measured.margin_s is None  # a share of the limit:
    assert daemon.estimate_margin_fraction == measured.estimate_margin_fraction == 1 / 6
    assert daemon.lookahead_margin_s is measured.lookahead_margin_s is None
    assert daemon.inner.quantile == measured.inner.quantile  # type: ignore[attr-defined]


def test_guarded_walk_revokes_as_the_daemon_would() -> None:
    """An unconditional pre-submission behind the guard: the harness' walk of the policy
    object and the grid's vectorised walk agree step for step, and both follow the
    recorded estimates; on the hand-made scenario as recorded (Slurm's test-only: 48 h
    until the 2-node job queues at 1 h, 58 h after), and with its estimates replaced by
    a queue that drains for a while (40 h from 26 h to 36 h, 58 h otherwise), where the
    pre-submission is revoked and made again."""
    from mirage.evaluate.harness import Walker, guarded, outcomes_at
    from mirage.policy.base import Decision, Policy, revocable_step
    from mirage.policy.guard import EstimateGuard

    class Always(Policy):
        def decide(self, ctx: object, pending: object) -> list[Decision]:
            return [Decision(True)]

    recorded = scenario()
    assert recorded.estimate[:3].tolist() == [48 * H, 48 * H, 58 * H]
    drains = np.where((recorded.steps >= 26 * H) & (recorded.steps < 36 * H), 40 * H, 58 * H)
    for sample, want_seen in (
        (recorded, {(0, 0), (2, 0), (96, 0)}),
        (dataclasses.replace(recorded, estimate=drains.astype(np.int64)), {(72, 1), (96, 0)}),
    ):
        w = Walker([sample], Protocol(step_s=30 * 60), TWO, "gpu")
        seen = set()
        for margin in (0, 2 * H, 20 * H):
            walked = w.run(lambda m=margin: EstimateGuard(Always(), m))  # type: ignore[misc]
            n_steps = len(sample.steps) - 1
            fast = guarded(w, [np.ones(n_steps, bool)], margin)
            assert walked.step.tolist() == fast.step.tolist()
            assert walked.revoked.tolist() == fast.revoked.tolist()
            est = sample.estimate[:-1]
            early = (est >= 0) & (est < sample.planned_end + margin)
            k, n = revocable_step(~early, early, sample.succ_start, sample.steps)
            want = outcomes_at([sample], [k], [n])
            assert walked.step.tolist() == want.step.tolist()
            seen.add((int(walked.step[0]), int(walked.revoked[0])))
        assert seen == want_seen  # the wider the margin, the later


def test_lookahead_guarded_walk_is_the_daemons_rule() -> None:
    """The look-ahead veto, alone and beside the estimate veto: the harness' walk of the
    Guard object (reading the recorded look-ahead start from its contexts) and the grid's
    vectorised walk agree step for step, and follow the daemon's rule on the curve; a
    recorded start that drains (40 h from 26 h to 36 h, 58 h otherwise) revokes, and
    without curves the walk refuses to guess."""
    from mirage.evaluate.harness import Walker, guarded, outcomes_at
    from mirage.policy.base import Decision, Policy, revocable_step
    from mirage.policy.guard import Guard

    class Always(Policy):
        def decide(self, ctx: object, pending: object) -> list[Decision]:
            return [Decision(True)]

    sample = scenario()
    drains = np.where((sample.steps >= 26 * H) & (sample.steps < 36 * H), 40 * H, 58 * H)
    w = Walker([sample], Protocol(step_s=30 * 60), TWO, "gpu", lookahead=[drains])
    n_steps = len(sample.steps) - 1
    seen = set()
    for est, la in ((None, 0), (None, 2 * H), (None, 20 * H), (0, 0), (20 * H, 0)):
        walked = w.run(lambda e=est, a=la: Guard(Always(), estimate_margin_s=e,  # type: ignore[misc]
                                                 lookahead_margin_s=a))  # fmt: skip
        fast = guarded(w, [np.ones(n_steps, bool)], est, la)
        assert walked.step.tolist() == fast.step.tolist()
        assert walked.revoked.tolist() == fast.revoked.tolist()
        ahead, rec = drains[:-1], sample.estimate[:-1]
        early = (ahead < sample.planned_end + la) | (
            np.zeros(n_steps, bool)
            if est is None
            else (rec >= 0) & (rec < sample.planned_end + est)
        )
        k, n = revocable_step(~early, early, sample.succ_start, sample.steps)
        assert walked.step.tolist() == outcomes_at([sample], [k], [n]).step.tolist()
        seen.add((est, int(walked.step[0]), int(walked.revoked[0])))
    assert (None, 72, 1) in seen  # submitted at once, revoked while the queue drained
    assert (None, 96, 0) in seen  # a 20 h margin: never early enough to go
    with pytest.raises(ValueError, match="look-ahead curves"):
        guarded(Walker([sample], Protocol(step_s=30 * 60), TWO, "gpu"),
                [np.ones(n_steps, bool)], None, 0.0)  # fmt: skip


def test_shipped_lookahead_choice_reads_back_as_the_daemon_runs_it(tmp_path: Path) -> None:
    """A look-ahead choice written as a cluster's policy.toml: read back by the daemon's
    configuration and by mirage evaluate's ``shipped``, the same guard with the same
    margins (a negative look-ahead margin too: the grid's -2 h, which the file's reader
    once refused); the daemon refuses it without the cluster (its profile); evaluate
    refuses to measure it without look-ahead curves."""
    from mirage.daemon.config import ConfigError, config_from_dict
    from mirage.daemon.policies import build_policies
    from mirage.evaluate.harness import SHIPPED_METHOD, Walker, evaluate, shipped_policy
    from mirage.evaluate.shipping import Candidate, policy_toml
    from mirage.policy.guard import Guard, shipped_for

    folder = tmp_path / "models" / "ls6"
    folder.mkdir(parents=True)
    (folder / "profile.toml").write_bytes(Path(LS6).read_bytes())
    for cand, guard in ((Candidate("qbets", 0.9, None, 2.0), "lookahead"),
                        (Candidate("qbets", 0.9, None, -2.0), "lookahead"),
                        (Candidate("running-average", 1.0, 1 / 2, 0.0), "estimate+lookahead"),
                        (Candidate("qbets", 0.95, 1 / 6, None), "estimate"),
                        (Candidate("qbets", 0.5, None, None), "none")):  # fmt: skip
        (folder / "policy.toml").write_text(policy_toml(cand) + "\n")
        got = shipped_for(folder)
        assert got.guard == cand.guard == guard and got.policy == cand.method
        measured = shipped_policy(got)
        cfg = config_from_dict({"policy": {"models_dir": str(tmp_path / "models"),
                                           "cluster": "ls6"}}, "t").policy  # fmt: skip
        assert (cfg.default, cfg.guard) == (cand.method, guard)
        daemon = build_policies(cfg)[cfg.default].policy
        if guard == "none":
            assert not isinstance(daemon, Guard) and not isinstance(measured, Guard)
            continue
        assert isinstance(daemon, Guard) and isinstance(measured, Guard)
        la = None if cand.lookahead_h is None else round(cand.lookahead_h * H)
        assert daemon.lookahead_margin_s == measured.lookahead_margin_s == la
        # the margin is the cluster's share of the limit, in both, never a fixed one
        assert daemon.margin_s is None and measured.margin_s is None
        if cand.margin is None:
            assert not daemon.estimates and not measured.estimates
        else:
            frac = daemon.estimate_margin_fraction
            assert frac == measured.estimate_margin_fraction == pytest.approx(cand.margin, abs=1e-6)
    with pytest.raises(ConfigError, match="guard 'lookahead' needs models_dir and cluster"):
        config_from_dict({"policy": {"guard": "lookahead"}}, "t")
    w = Walker([scenario()], Protocol(step_s=30 * 60), TWO, "gpu", shipped=shipped_for(folder))
    w.shipped = dataclasses.replace(w.shipped, guard="lookahead")
    with pytest.raises(ValueError, match="needs look-ahead curves"):
        evaluate(w, [SHIPPED_METHOD], {}, HELD_TWICE)


def test_shipped_choice_is_safe_and_least_j(
    slice_samples: tuple[Setting, list[SampleResult], Path],
) -> None:
    """The grid on a tuning split: every candidate measured at each load, the choice the
    safe one of least summed J, and "safe" exactly no upper bound above SAFE_BOUND_H at
    every level that counts."""
    from mirage.evaluate.shipping import (
        GRID,
        MARGIN_FRACTIONS,
        SAFE_BOUND_H,
        candidates,
        choose,
        guards,
    )

    _, samples, _ = slice_samples
    w = Walker(samples, SMALL, ClusterProfile("x", (Partition("gpu-a100", 1, 1),)), "gpu-a100")
    cands = candidates({1.0: w, 2.0: w}, HELD_TWICE, boot=200)
    assert len(cands) == sum(len(v) for v in GRID.values()) * (len(MARGIN_FRACTIONS) + 1)
    # no curves: no look-ahead veto; no guard is a candidate everywhere (the handoff's cost)
    assert {c.guard for c in cands} == {"estimate", "none"}
    # with look-ahead curves (here each step's true start, a stand-in): the whole grid
    ahead = Walker(samples, SMALL, w.profile, "gpu-a100", lookahead=[s.succ_start for s in samples])
    more = candidates({1.0: ahead}, HELD_TWICE, boot=200)
    assert len(more) == sum(len(v) for v in GRID.values()) * len(guards(True))
    assert {c.guard for c in more} == {"estimate", "lookahead", "estimate+lookahead", "none"}
    for c in cands:
        assert set(c.mean_j_h) == {1.0, 2.0} and c.mean_j_h[1.0] == c.mean_j_h[2.0]
        levels = [g for per in c.levels.values() for lv, g in per.items() if lv != "all"]
        assert c.safe == all(g.harm.hi <= SAFE_BOUND_H for g in levels)
    best = choose(cands)
    safe = [c for c in cands if c.safe]
    if best is None:
        assert not safe
    else:
        assert best.safe and best.total_j_h == min(c.total_j_h for c in safe)


def test_train_s_shipped_choice_is_written_as_the_daemon_reads_it(
    slice_samples: tuple[Setting, list[SampleResult], Path], tmp_path: Path
) -> None:
    """mirage train's last step (mirage.learn.ship): the grid's choice on the tuning
    samples, written as the cluster's policy.toml, reads back as the daemon's shipped
    configuration; with too few samples to judge harm, no file (the defaults hold)."""
    from mirage.evaluate.shipping import select
    from mirage.learn.ship import choose_and_write
    from mirage.policy.guard import shipped_for
    from mirage.profile.schema import load_profile

    setting, samples, _ = slice_samples
    many = samples * 4  # the slice's 16 samples: a level needs MIN_N to be judged
    folder = tmp_path / "ls6"
    out = choose_and_write("ls6", LS6, setting.split, {2.0: (SMALL, many)}, folder=folder,
                           cost_model=HELD_TWICE)  # fmt: skip
    prof = load_profile(LS6)
    want = select({2.0: Walker(many, SMALL, prof, prof.partition(None).name)}, HELD_TWICE).chosen
    assert out["judged"] and out["file"] == str(folder / "policy.toml")
    got = shipped_for(folder)
    if want is None:
        assert out["policy"] == got.policy == "reactive"
    else:
        assert (out["policy"], got.policy) == (want.method, want.method)
        assert want.margin is not None and got.guard == want.guard == "estimate"
        assert got.guard_margin_s is None  # a share of the limit, not hours
        assert got.guard_margin_fraction == round(want.margin, 6)
        assert out["tune_mean_J_h"] == {"2": round(want.mean_j_h[2.0], 3)}
    text = (folder / "policy.toml").read_text()
    assert text.startswith("# Chosen by mirage train on ls6's tuning split, 2022-11-06 to")
    # 16 samples: a level of 5 or more vetoes harmful candidates, but a choice needs 30
    few = choose_and_write("ls6", LS6, setting.split, {2.0: (SMALL, samples)},
                           folder=tmp_path / "few", cost_model=HELD_TWICE)  # fmt: skip
    assert few["file"] is None and "enough samples" in few["reason"]
    assert not (tmp_path / "few" / "policy.toml").exists()


def test_shipped_summary_rows_and_targets() -> None:
    """The issue's one table: per level reactive, oracle, the gain, the best baseline and
    the shipped configuration's J, share and no-harm interval, and whether it meets the
    targets (no harm; where the gain is >= 1 h, >= 85% of it and ahead of the baseline)."""
    from mirage.evaluate.harness import Outcomes
    from mirage.evaluate.report import render_shipped
    from mirage.evaluate.stats import shipped_rows

    def run(intr: np.ndarray) -> Outcomes:
        none = np.zeros(intr.size, np.int64)
        return Outcomes(none, intr, np.zeros(intr.size), intr, none, LIMITS(intr.size))

    rng = np.random.default_rng(5)
    gap = np.concatenate([rng.uniform(0, 2 * H, 60), rng.uniform(3 * H, 11 * H, 40)])
    low = np.arange(gap.size) < 60
    oracle = gap * 0.1
    runs = {
        "reactive": run(gap),
        "oracle": run(oracle),
        "qbets": run(np.where(low, gap + 0.3 * H, gap - 0.5 * (gap - oracle))),
        "shipped": run(np.where(low, gap, gap - 0.9 * (gap - oracle))),
    }
    rows = shipped_rows(runs, HELD_TWICE, ["reactive", "qbets"], boot=400)
    assert set(rows) == {"all", "low", "medium"}
    low_row, med = rows["low"], rows["medium"]
    assert low_row.best_baseline == "reactive" and low_row.shipped.harm.value == 0
    assert low_row.gain.value < 1 and low_row.meets  # no harm is all a quiet level asks
    assert med.best_baseline == "qbets" and med.shipped.share == pytest.approx(0.9)
    assert med.against_best.hi < 0 and med.meets
    worse = {**runs, "shipped": run(np.where(low, gap + 0.3 * H, gap))}
    assert [r.meets for r in shipped_rows(worse, HELD_TWICE, ["qbets"], boot=400).values()] == [
        False, False, False
    ]  # fmt: skip
    text = render_shipped(rows)
    assert "best baseline" in text and "qbets" in text and text.count("yes") == 2
    assert not rows["all"].meets  # 75% over all samples: the targets are per level, though
    assert text.splitlines()[3].split()[-1] == "-"  # so "all" shows none


def test_report_of_a_minutes_long_log_reads_in_minutes() -> None:
    """Issue 28: on the test cluster's minutes-long log every hour figure printed as 0.00;
    the text names the unit it chose (minutes) in each header."""
    from mirage.evaluate.harness import Outcomes
    from mirage.evaluate.report import render, render_gains, render_shipped, table_unit
    from mirage.evaluate.stats import gains, shipped_rows

    def run(intr: np.ndarray) -> Outcomes:
        none = np.zeros(intr.size, np.int64)
        return Outcomes(none, intr, np.zeros(intr.size), intr, none, LIMITS(intr.size))

    gap = np.linspace(120.0, 480.0, 40)  # 2 to 8 minutes: reactive's mean J is 5 min
    runs = {"reactive": run(gap), "oracle": run(gap * 0.1), "shipped": run(gap * 0.5)}
    tab = table(runs, HELD_TWICE, boot=200)
    unit = table_unit(tab)
    assert unit.name == "min"
    text = render(tab, unit=unit)
    assert "J min" in text and "p90 intr min" in text and " h " not in text
    reactive = next(ln for ln in text.splitlines() if ln.startswith("reactive"))
    assert reactive.split()[1] == "5.00"
    gained = render_gains(gains(runs, HELD_TWICE, boot=200), unit)
    assert "method - reactive, min" in gained and "+3 min above 0" in gained
    shipped = render_shipped(shipped_rows(runs, HELD_TWICE, ["reactive"], boot=200), unit)
    assert "mean J, min" in shipped and "5.00" in shipped


def test_the_choice_judges_harm_on_levels_too_small_to_report(
    slice_samples: tuple[Setting, list[SampleResult], Path],
) -> None:
    """A report counts a level from MIN_N (30) samples; the choice judges harm from
    SELECT_MIN_N (5): a busy tuning month's few quiet samples rule candidates out (CERIT's
    February had 6 at a 2 h spacing), and a level under 5 is still not judged. A choice
    is made at all only where some level has MIN_N."""
    from mirage.evaluate.harness import factory
    from mirage.evaluate.shipping import SELECT_MIN_N, candidates, select
    from mirage.evaluate.stats import gains, level_counts

    _, samples, _ = slice_samples
    w = Walker(samples, SMALL, ClusterProfile("x", (Partition("gpu-a100", 1, 1),)), "gpu-a100")
    res = {"reactive": w.run(factory("reactive", None)), "oracle": w.oracle(HELD_TWICE)}
    counts = level_counts(res)
    assert SELECT_MIN_N == 5 < MIN_N and sum(counts.values()) < MIN_N
    small = {lv for lv, n in counts.items() if n >= SELECT_MIN_N}
    assert small  # 16 samples: some level holds at least 6
    assert set(gains(res, HELD_TWICE, boot=100)) == {"all"}  # too few for a report
    for c in candidates({1.0: w}, HELD_TWICE, boot=100):
        assert set(c.levels[1.0]) == {"all"} | small  # but judged by the choice
    assert not select({1.0: w}, HELD_TWICE, boot=100).judged  # too few to choose on, though
    many = Walker(samples * 8, SMALL, w.profile, "gpu-a100")  # its largest level: 48 or more
    assert select({1.0: many}, HELD_TWICE, boot=100).judged
    # samples a census added at a denser spacing veto, but do not make a choice possible
    n = len(w.samples)
    assert not select({1.0: many}, HELD_TWICE, boot=100, added={1.0: 7 * n}).judged
    assert select(
        {1.0: many}, HELD_TWICE, boot=100, added={1.0: 2 * n}
    ).judged  # 6 x 16: 30 or more


def test_a_candidate_is_safe_only_without_measurable_harm_on_the_tuning_month() -> None:
    """The choice holds the tuning month to an upper bound of 0 (SAFE_BOUND_H), stricter
    than the +0.05 h the test month is held to: a bound of +0.03 h passes the test mark
    but not the choice; levels under MIN_N ("all" aside) are not in ``levels`` at all."""
    from mirage.evaluate.shipping import SAFE_BOUND_H, Candidate, choose
    from mirage.evaluate.stats import Cell, Gain

    def cand(hi: float, j: float) -> Candidate:
        c = Candidate("qbets", 0.9, 24.0)
        c.levels[1.0] = {
            "all": Gain(0.5, Cell(-1.0, -2.0, 0.5, 40)),
            "low": Gain(0.0, Cell(0.0, -0.01, hi, 40)),
        }
        c.mean_j_h[1.0] = j
        return c

    assert SAFE_BOUND_H == 0.0
    near = cand(0.03, 1.0)
    assert near.levels[1.0]["low"].no_harm and not near.safe  # the test mark, not the choice's
    clean = cand(0.0, 2.0)
    assert clean.safe and choose([near, clean]) is clean
    assert choose([near]) is None  # none safe: reactive
    assert cand(float("nan"), 1.0).safe is False
