"""tests/slurm/docs_blocks.py: which fenced blocks the docs' test runs, and every relative
link in docs/ and README.md resolves to a file of the checkout."""

from __future__ import annotations

import contextlib
import doctest
import io
import re
import shlex
from pathlib import Path

import click
import pytest

from mirage.cli import main
from tests.slurm import docs_blocks
from tests.slurm.docs_blocks import blocks, fenced, links

REPO = Path(__file__).resolve().parents[2]
DOCS = sorted((REPO / "docs").rglob("*.md"))
#: the guides whose ``sh test`` blocks tests/slurm/test_docs.py runs, in its order
RUN_BY_THE_TEST = (
    "docs/admin/install.md",
    "docs/admin/configuration.md",
    "docs/admin/running.md",
    "docs/users/chain-ready-job.md",
    "docs/users/chains.md",
)


def test_only_blocks_marked_sh_test_are_taken() -> None:
    text = "\n".join(
        [
            "```sh test",
            "echo one",
            "```",
            "```sh",
            "systemctl start mirage",
            "```",
            "```sh test extra",  # not exactly "sh test"
            "echo no",
            "```",
            "```  sh test  ",  # surrounding blanks are not part of the info string
            "echo two",
            "```",
            "~~~sh test",
            "echo three",
            "~~~",
            "````sh test",
            "cat <<'EOF'",
            "```",  # a shorter fence inside a longer one is text
            "EOF",
            "````",
            "```toml",
            "[policy]",
            "```",
        ]
    )
    assert blocks(text) == ["echo one\n", "echo two\n", "echo three\n", "cat <<'EOF'\n```\nEOF\n"]
    assert blocks(text, "sh") == ["systemctl start mirage\n"]
    assert [info for info, _ in fenced(text)] == [
        "sh test", "sh", "sh test extra", "sh test", "sh test", "sh test", "toml",
    ]  # fmt: skip


def test_indented_fences_and_an_unclosed_one() -> None:
    text = "1. Install:\n\n   ```sh test\n   ln -s a b\n     indented more\n   ```\n\n"
    text += "```sh test\necho tail"
    assert blocks(text) == ["ln -s a b\n  indented more\n", "echo tail\n"]
    # four spaces is an indented code block, not a fence
    assert blocks("    ```sh test\n    echo no\n    ```\n") == []


def test_links_are_the_relative_ones_outside_code() -> None:
    text = "\n".join(
        [
            "See [install](admin/install.md), [who](../deploy/systemd/README.md#who-may-do-what),",
            '![plot](img/plot.png "a title"), [angle](<with space.md>), [site](https://x.org/a.md),',
            "[mail](mailto:a@b.c), [here](#top), `[not](code.md)`, [q](page.md?raw=1).",
            "",
            "```sh",
            "echo [not](a-link.md)",
            "```",
            "",
            "[ref]: reference.md",
        ]
    )
    assert links(text) == [
        "admin/install.md",
        "../deploy/systemd/README.md",
        "img/plot.png",
        "with space.md",
        "page.md",
        "reference.md",
    ]


def test_the_module_examples_hold() -> None:
    assert doctest.testmod(docs_blocks).failed == 0


@pytest.mark.parametrize("doc", [REPO / "README.md", *DOCS], ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_resolves(doc: Path) -> None:
    missing = [t for t in links(doc.read_text()) if not (doc.parent / t).exists()]
    assert not missing, f"{doc.relative_to(REPO)}: links to missing files: {missing}"


def test_the_readme_links_every_doc() -> None:
    readme = {(REPO / t).resolve() for t in links((REPO / "README.md").read_text())}
    assert {d.resolve() for d in DOCS} <= readme, "README.md's Documentation section"


@pytest.mark.parametrize("doc", RUN_BY_THE_TEST)
def test_the_guides_the_test_runs_have_blocks_to_run(doc: str) -> None:
    assert blocks((REPO / doc).read_text()), f"{doc}: no `sh test` block"


# ---- every `mirage …` command line shown in the docs parses with its subcommand -----------

_MIRAGE = re.compile(r"^(?:\$ )?(?:sudo -u \S+ )?(?:\S*/)?mirage(?=\s|$)")
_SHELL_ENDS = {">", ">>", "2>", "|", "&&", "||", ";", "&"}


def mirage_command_lines(text: str) -> list[list[str]]:
    """The argv (after ``mirage``) of every command line in a shell code block, with line
    continuations joined, comments and shell redirections cut; placeholders (``…``) left
    out."""
    found = []
    for info, body in fenced(text):
        if info.split()[:1] not in (["sh"], ["bash"], ["console"], []):
            continue
        for line in body.replace("\\\n", " ").splitlines():
            m = _MIRAGE.match(line.strip())
            if not m or "…" in line:
                continue
            argv = shlex.split(line.strip()[m.end() :], comments=True)
            cut = next((k for k, a in enumerate(argv) if a in _SHELL_ENDS), len(argv))
            found.append(argv[:cut])
    return found


def parse_error(argv: list[str]) -> str:
    """How `mirage ARGV` fails to parse ("" if it parses). A path that does not exist on
    this machine is not an error of the docs."""
    cmd: click.Command = main
    name, rest = "mirage", list(argv)
    try:
        while isinstance(cmd, click.Group) and rest and not rest[0].startswith("-"):
            name = rest.pop(0)
            sub = cmd.commands.get(name)
            if sub is None:
                return f"no command {name!r}"
            cmd = sub
        with contextlib.redirect_stdout(io.StringIO()):
            cmd.make_context(name, _expanded(cmd, rest))
    except click.exceptions.Exit:
        return ""
    except click.BadParameter as exc:
        return "" if "does not exist" in str(exc) else str(exc)
    except click.ClickException as exc:
        return str(exc)
    return ""


def _expanded(cmd: click.Command, argv: list[str]) -> list[str]:
    """``argv`` with each shell expansion (``$SITE``, ``$(( N * 2 ))``) replaced by a value
    of its option's type: the option must exist, its value is the reader's."""
    out: list[str] = []
    for arg in argv:
        if "$" not in arg:
            out.append(arg)
            continue
        param = next((p for p in cmd.params if out and out[-1] in getattr(p, "opts", ())), None)
        numeric = param is not None and isinstance(
            param.type, (click.types.IntParamType, click.types.FloatParamType)
        )
        out.append("1" if numeric else "x")
    return out


def test_the_command_check_catches_a_wrong_option() -> None:
    text = "```sh\nmirage daemon --backend sim --demo-chains 4  # gone\nmirage status --json\n```\n"
    lines = mirage_command_lines(text)
    assert lines == [["daemon", "--backend", "sim", "--demo-chains", "4"], ["status", "--json"]]
    assert "--demo-chains" in parse_error(lines[0])
    assert parse_error(lines[1]) == ""
    assert "no command" in parse_error(["chains", "list"])
    assert parse_error(["calibrate", "--trace", "$T", "--before", "$C", "--nodes-min", "$N"]) == ""
    assert "--nodes-mn" in parse_error(["calibrate", "--trace", "x", "--nodes-mn", "$N"])


def test_every_mirage_command_shown_parses() -> None:
    docs = [REPO / "README.md", REPO / "experiments" / "README.md", *DOCS]
    shown = [(d, argv) for d in docs for argv in mirage_command_lines(d.read_text())]
    assert len(shown) > 15  # the docs show many (19 on 2026-11-28); a broken extraction none
    bad = [
        f"{d.relative_to(REPO)}: mirage {' '.join(a)}: {e}"
        for d, a in shown
        if (e := parse_error(a))
    ]
    assert not bad, "\n".join(bad)
