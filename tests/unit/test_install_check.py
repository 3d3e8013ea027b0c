"""The root daemon's check that users can run the installed mirage: a
venv on an interpreter under a 0700 home is named, with what to change."""

from __future__ import annotations

import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from mirage.daemon import install_check
from mirage.daemon.install_check import blocking, install_problem, problems

RUN = stat.S_IXOTH
READ = stat.S_IROTH


@pytest.fixture
def tmp_path() -> Iterator[Path]:
    """A folder every user may enter (pytest's own lies under a 0700 folder)."""
    top = Path(tempfile.mkdtemp(dir="/tmp"))
    yield top
    for sub in top.rglob("*"):
        if sub.is_dir() and not sub.is_symlink():
            sub.chmod(0o755)
    shutil.rmtree(top)


def _tree(tmp_path: Path) -> tuple[Path, Path]:
    home = tmp_path / "root"
    python = home / ".pyenv" / "bin" / "python3"
    python.parent.mkdir(parents=True)
    python.write_text("#!/bin/sh\n")
    python.chmod(0o755)
    tmp_path.chmod(0o755)
    return home, python


def test_a_folder_others_cannot_enter_blocks_what_is_below(tmp_path: Path) -> None:
    home, python = _tree(tmp_path)
    home.chmod(0o700)
    assert blocking(python, RUN) == f"{home} is 0700 (others may not enter it)"
    home.chmod(0o755)
    assert blocking(python, RUN) == ""


def test_a_program_others_cannot_run_or_a_file_they_cannot_read(tmp_path: Path) -> None:
    _home, python = _tree(tmp_path)
    python.chmod(0o750)
    assert blocking(python, RUN) == f"{python} is 0750 (others may not run it)"
    python.chmod(0o711)
    assert blocking(python, RUN | READ) == f"{python} is 0711 (others may not read it)"
    python.chmod(0o700)
    assert blocking(python, RUN | READ) == f"{python} is 0700 (others may not read or run it)"


def test_a_link_is_judged_by_where_it_leads(tmp_path: Path) -> None:
    home, python = _tree(tmp_path)
    home.chmod(0o700)
    public = tmp_path / "opt"
    public.mkdir()
    (public / "python3").symlink_to(python)
    assert blocking(public / "python3", RUN).startswith(f"{home} is 0700")


def test_a_missing_path_is_not_this_checks_business(tmp_path: Path) -> None:
    assert blocking(tmp_path / "gone", RUN) == ""


def test_each_blocking_folder_is_named_once(tmp_path: Path) -> None:
    home, python = _tree(tmp_path)
    (home / "lib").mkdir()
    home.chmod(0o700)
    found = problems([(python, RUN), (home / "lib", RUN | READ)])
    assert found == [f"{home} is 0700 (others may not enter it)"]


def test_the_sentence_says_what_to_change(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home, python = _tree(tmp_path)
    home.chmod(0o700)
    monkeypatch.setattr(install_check, "needed_paths", lambda command: [(python, RUN)])
    text = install_problem()
    assert text.startswith("users cannot run this install of mirage: ")
    assert f"{home} is 0700" in text and "/usr/bin/python3 -m venv" in text
    home.chmod(0o755)
    assert install_problem() == ""


def test_the_paths_checked_include_the_interpreter_and_mirage(tmp_path: Path) -> None:
    import sys

    import mirage

    paths = [p for p, _ in install_check.needed_paths("/usr/local/bin/mirage")]
    assert Path(sys.executable) in paths
    assert Path(mirage.__file__).parent in paths
    assert Path("/usr/local/bin/mirage") in paths


def test_status_shows_the_problem_under_the_daemon(monkeypatch: pytest.MonkeyPatch) -> None:
    from mirage.daemon import cli

    monkeypatch.setattr("os.geteuid", lambda: 0)
    monkeypatch.setattr(
        install_check, "install_problem", lambda command: "users cannot run this install: X"
    )
    start = {"version": "1", "started_at": 100, "install": cli.users_install_problem()}
    text = "\n".join(cli._daemon_lines({"daemon": {"start": start}}, 200))
    assert "    INSTALL: users cannot run this install: X" in text
    start["install"] = ""
    assert "INSTALL" not in "\n".join(cli._daemon_lines({"daemon": {"start": start}}, 200))
    monkeypatch.setattr("os.geteuid", lambda: 1000)
    assert cli.users_install_problem() == ""
