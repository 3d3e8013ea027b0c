"""Store: Alembic migrations match the models; SQLite WAL; the lease; the config loader."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import inspect, text

from mirage.daemon.config import Config, ConfigError, config_from_dict, load_config
from mirage.daemon.metrics import DaemonMetrics
from mirage.daemon.store import Base, Store, make_engine, migrate
from mirage.policy.guard import FILE_KEYS

ROOT = Path(__file__).resolve().parents[2]


def test_migrations_create_exactly_the_models(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'm.sqlite'}")
    migrate(engine)
    with engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), Base.metadata)
        assert diff == []
        assert conn.execute(text("PRAGMA journal_mode")).scalar() == "wal"
        assert conn.execute(text("SELECT version_num FROM alembic_version")).scalar() == "0008"
    migrate(engine)  # idempotent at every start
    migrate(engine, "base", downgrade=True)  # and reversible
    assert inspect(engine).get_table_names() == ["alembic_version"]
    migrate(engine)
    assert {"chains", "segments", "submissions", "events", "leases"} <= set(
        inspect(engine).get_table_names()
    )


def test_migration_0005_splits_fallback_labels_and_back(tmp_path: Path) -> None:
    """A chain stored as ``"reactive (fallback: xgb)"`` (before 0005) reads as policy
    "reactive" standing in for "xgb"; a downgrade writes the label back."""
    engine = make_engine(f"sqlite:///{tmp_path / 'f.sqlite'}")
    migrate(engine, "0004")
    cols = "id, name, cluster, owner, uid, gid, groups, state, reason, script, script_sha256, script_path, chdir, export, sbatch_args, environment, time_limit_s, nodes, gpus_per_node, trained_s, next_index, policy, rejections, created_at, updated_at"  # noqa: E501
    with engine.begin() as conn:
        for cid, policy in (("a", "reactive (fallback: xgb)"), ("b", "qbets"), ("c", "")):
            conn.execute(
                text(f"INSERT INTO chains ({cols}) VALUES (:id, 'n', '', 'u', 1, 1, '[]', "
                     "'ACTIVE', '', x'00', '', '', '/', '', '[]', '{}', 60, 1, 0, 0, 0, :p, "
                     "0, 0, 0)"),
                {"id": cid, "p": policy},
            )  # fmt: skip
    migrate(engine)
    query = text("SELECT id, policy, fallback_for FROM chains ORDER BY id")
    with engine.connect() as conn:
        rows = [tuple(r) for r in conn.execute(query)]
    assert rows == [("a", "reactive", "xgb"), ("b", "qbets", ""), ("c", "", "")]
    migrate(engine, "0004", downgrade=True)
    with engine.connect() as conn:
        rows = [tuple(r) for r in conn.execute(text("SELECT id, policy FROM chains ORDER BY id"))]
    assert rows == [("a", "reactive (fallback: xgb)"), ("b", "qbets"), ("c", "")]


def test_lease_one_holder_until_expiry(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'l.sqlite'}"
    a, b = Store.open(url), Store.open(url)
    assert a.acquire_lease("c", "A", 0, 180)
    assert not b.acquire_lease("c", "B", 60, 180)
    assert a.acquire_lease("c", "A", 120, 180)  # renewed until 300
    assert not b.acquire_lease("c", "B", 299, 180)
    assert b.acquire_lease("c", "B", 301, 180)  # A stopped renewing
    assert not a.acquire_lease("c", "A", 302, 180)
    assert a.lease_holder("c", 302) == "B"
    b.release_lease("c", "B")
    assert a.acquire_lease("c", "A", 303, 180)


def test_config_defaults_example_and_unknown_keys(tmp_path: Path) -> None:
    example_path = ROOT / "deploy" / "mirage.toml.example"
    example = load_config(example_path)
    assert example == Config()  # the example lists every default
    body = example_path.read_text()
    for section in fields(Config):
        assert f"[{section.name}]" in body
        for key in fields(getattr(Config(), section.name)):
            # the shipped policy keys are listed commented out: a cluster's own policy.toml
            # sets them where the configuration leaves them out
            shipped = section.name == "policy" and key.name in FILE_KEYS
            line = f"\n# {key.name} = " if shipped else f"\n{key.name} = "
            assert line in body or f"[{section.name}.{key.name}]" in body
    with pytest.raises(ConfigError, match=r"unknown key.*poll_intervl_s.*valid keys"):
        config_from_dict({"daemon": {"poll_intervl_s": 30}})
    with pytest.raises(ConfigError, match="unknown section"):
        config_from_dict({"deamon": {}})
    with pytest.raises(ConfigError, match="unknown policy"):
        config_from_dict({"policy": {"default": "magic"}})
    with pytest.raises(ConfigError, match="lease_ttl_s"):
        config_from_dict({"daemon": {"poll_interval_s": 120, "lease_ttl_s": 180}})
    with pytest.raises(ConfigError, match="must be int"):
        config_from_dict({"daemon": {"poll_interval_s": "60"}})
    cfg = config_from_dict({"policy": {"partitions": {"debug": "reactive"}}})
    assert cfg.policy.partitions == {"debug": "reactive"}


def test_metrics_registry_is_per_daemon() -> None:
    m1, m2 = DaemonMetrics(), DaemonMetrics()
    m1.presubmissions.labels("presubmitted").inc()
    assert m1.value("mirage_presubmissions_total", {"outcome": "presubmitted"}) == 1
    assert m2.value("mirage_presubmissions_total", {"outcome": "presubmitted"}) == 0
    names = {m.name for m in m1.registry.collect()}
    assert all(n.startswith("mirage_") for n in names)
    for metric in m1.registry.collect():
        for sample in metric.samples:
            assert not {"user", "job_id", "job", "owner"} & set(sample.labels)


def test_grafana_dashboard_uses_only_exported_metrics() -> None:
    import json
    import re

    dash = json.loads((ROOT / "deploy" / "grafana" / "mirage.json").read_text())
    exported: set[str] = set()
    for metric in DaemonMetrics().registry.collect():
        exported.update(s.name for s in metric.samples)
        exported.add(metric.name)
        exported.add(f"{metric.name}_total" if metric.type == "counter" else metric.name)
    for panel in dash["panels"]:
        for target in panel["targets"]:
            for name in re.findall(r"mirage_[a-z_]+", target["expr"]):
                base = re.sub(r"_(bucket|sum|count)$", "", name)
                assert name in exported or base in exported, name


def test_metrics_exporter_serves_http() -> None:
    import socket
    import urllib.request

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    m = DaemonMetrics()
    m.slurm_reachable.set(1)
    m.serve("127.0.0.1", port)
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read()
    assert b"mirage_slurm_reachable 1.0" in body
    assert b"python_gc" not in body  # a private registry: only Mirage's metrics


def test_owner_runner_drops_to_the_owner() -> None:
    import os

    from mirage.daemon.identity import OwnerRunner

    if os.geteuid() != 0:
        pytest.skip("needs root")
    runner = OwnerRunner(65534, 65534, [], base_env={"PATH": "/usr/bin:/bin", "SLURM_JOB_ID": "9"})
    uid, groups = runner(["id", "-u"]), runner(["id", "-G"])
    assert (uid.stdout.split(), groups.stdout.split()) == (["65534"], ["65534"])
    env = runner(["env"]).stdout  # the chain's environment, cleaned of Slurm variables
    assert "SLURM_JOB_ID" not in env and "TZ=UTC" in env


def test_every_documented_labelled_counter_is_exported_before_its_first_count() -> None:
    """The trial never saw mirage_slurm_records_ignored_total (a labelled counter appears
    only once a label is used: an alert on it had nothing to read); and metrics.md called
    mirage_model_info an info, which the exposition format shows as a gauge."""
    from prometheus_client.exposition import generate_latest

    text = generate_latest(DaemonMetrics().registry).decode()
    for why in ("duplicate", "stale_pending", "id_reused", "extra_job"):
        assert f'mirage_slurm_records_ignored_total{{reason="{why}"}} 0.0' in text
    assert "# TYPE mirage_model_info gauge" in text
    doc = (ROOT / "docs" / "admin" / "metrics.md").read_text()
    assert "| `mirage_model_info` | gauge" in doc


def test_the_example_configuration_describes_the_shipped_cluster_files() -> None:
    """The trial found mirage.toml.example calling CERIT's file "slurm-estimate behind a
    1 h guard"; it ships qbets behind the look-ahead. The text is held to the files."""
    import tomllib

    example = (ROOT / "deploy" / "mirage.toml.example").read_text()
    said = {"cerit": "-2 h", "theta": "+2 h"}
    for cluster, margin in said.items():
        shipped = tomllib.loads((ROOT / "models" / cluster / "policy.toml").read_text())["policy"]
        assert (shipped["default"], shipped["qbets_quantile"], shipped["guard"]) == (
            "qbets", 0.9, "lookahead",
        )  # fmt: skip
        hours = shipped["guard_lookahead_margin_s"] / 3600
        assert f"{hours:+g} h" == margin, (cluster, hours)
    assert "qbets at 0.9 behind the look-ahead guard at a\n# margin of -2 h" in example
    assert "theta/policy.toml: the same at +2 h" in example


def test_jobs_that_cannot_hand_off_take_the_held_twice_default() -> None:
    """[daemon] handoff = false: the [policy] keys left out take the choice made for jobs
    whose early successor waits beside its predecessor; keys set stay the admin's."""
    from mirage.policy.guard import SHIPPED_HELD_TWICE

    held = config_from_dict({"daemon": {"handoff": False}}).policy
    assert (held.qbets_quantile, held.guard_margin_s) == (0.9, 86400)
    assert held.default == SHIPPED_HELD_TWICE.policy and held.guard == "estimate"
    own = config_from_dict({"daemon": {"handoff": False}, "policy": {"qbets_quantile": 0.8}})
    assert own.policy.qbets_quantile == 0.8 and own.policy.guard_margin_s == 86400
    hands_off = config_from_dict({}).policy
    assert (hands_off.qbets_quantile, hands_off.guard_margin_s) == (0.95, None)
