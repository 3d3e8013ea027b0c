"""One models folder: what the weekly recalibration writes is what the daemon reads.

The configuration's default ``[policy] models_dir``, the commented example, the README's
"Learned policies in three commands", the systemd units and their README all name the same
folder; the recalibration unit reads and writes ``<models_dir>/<cluster>/`` (where the
daemon loads ``<models_dir>/<cluster>/<policy>/`` and ``profile.toml``), and the folder
lies in the units' StateDirectory, writable under ``ProtectSystem=strict``.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path, PurePosixPath

import pytest

from mirage.daemon.config import Config, load_config

ROOT = Path(__file__).resolve().parents[2]
UNITS = ROOT / "deploy" / "systemd"
MODELS = Config().policy.models_dir
INSTALL = f"install -d {MODELS} && cp -r models/ls6 {MODELS}/"

#: An absolute path up to its "models" component ("/var/lib/mirage/models/ls6" gives
#: "/var/lib/mirage/models"); relative ones (models/ls6, REPO/models) are not matched.
ABSOLUTE_MODELS = re.compile(r"(?<![\w./~-])(/(?:[\w.@%-]+/)*?models)(?![\w.-])")


def models_paths(text: str) -> set[str]:
    return set(ABSOLUTE_MODELS.findall(text))


def unit_settings(path: Path) -> dict[str, list[str]]:
    """A unit's settings (continuation lines joined, comments dropped), each key's values."""
    settings: dict[str, list[str]] = {}
    joined = re.sub(r"\\\n\s*", " ", path.read_text())
    for raw in joined.splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";", "[")):
            continue
        key, _, value = line.partition("=")
        settings.setdefault(key.strip(), []).append(value.strip())
    return settings


def test_the_default_is_the_state_directory_folder() -> None:
    assert MODELS == "/var/lib/mirage/models"
    assert MODELS.startswith(Config().daemon.state_dir + "/")


def test_the_example_configuration_names_it() -> None:
    example = ROOT / "deploy" / "mirage.toml.example"
    assert load_config(example).policy.models_dir == MODELS
    assert re.findall(r'(?m)^models_dir = "(.*)"$', example.read_text()) == [MODELS]
    assert models_paths(example.read_text()) == {MODELS}


def test_the_research_results_name_it() -> None:
    text = (ROOT / "docs" / "research" / "README.md").read_text()
    section = text.split("## Learned policies in three commands", 1)[1].split("\n## ", 1)[0]
    assert re.findall(r'models_dir = "(.*?)"', section) == [MODELS]
    assert INSTALL in section
    assert models_paths(text) == {MODELS}
    assert models_paths((ROOT / "README.md").read_text()) <= {MODELS}


def test_the_systemd_readme_names_it() -> None:
    text = (UNITS / "README.md").read_text()
    assert INSTALL in text
    assert models_paths(text) == {MODELS}


@pytest.mark.parametrize("unit", sorted(p.name for p in UNITS.glob("*.service")))
def test_every_unit_names_it_and_may_write_it(unit: str) -> None:
    path = UNITS / unit
    assert models_paths(path.read_text()) <= {MODELS}
    settings = unit_settings(path)
    # under ProtectSystem=strict only the StateDirectory (/var/lib/<name>) is writable
    assert settings.get("ProtectSystem") == ["strict"]
    state = [PurePosixPath("/var/lib", name) for name in settings.get("StateDirectory", [])]
    assert any(PurePosixPath(MODELS).is_relative_to(folder) for folder in state)


def test_recalibration_reads_and_writes_the_daemons_folder() -> None:
    settings = unit_settings(UNITS / "mirage-recalibrate@.service")
    [command] = settings["ExecStart"]
    argv = shlex.split(command)
    assert argv[1:3] == ["train", "--cluster"]
    cluster = argv[argv.index("--cluster") + 1]
    assert cluster == "%i"

    def option(name: str) -> str:
        assert argv.count(name) == 1, name
        return argv[argv.index(name) + 1]

    # `mirage train --models M` writes M/<cluster>/<policy>/; the daemon loads
    # <models_dir>/<cluster>/<policy>/ and <models_dir>/<cluster>/profile.toml
    assert option("--models") == MODELS
    assert option("--recalibrate") == f"{MODELS}/{cluster}"
    assert option("--profile") == f"{MODELS}/{cluster}/profile.toml"
    for name in ("--models", "--recalibrate", "--profile"):
        assert PurePosixPath(option(name)).is_relative_to(MODELS)
