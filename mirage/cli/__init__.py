"""The ``mirage`` command line: one click group, each concept adds its own subcommands."""

from __future__ import annotations

import logging

import click

from mirage import __version__
from mirage.extras import MissingExtra


class _Group(click.Group):
    """The root group: a missing optional extra is one line naming it (mirage.extras),
    wherever below it was found missing, never an ImportError traceback."""

    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except MissingExtra as exc:
            raise click.ClickException(str(exc)) from exc


@click.group(cls=_Group)
@click.version_option(__version__, prog_name="mirage")
@click.option(
    "-v",
    "--verbose",
    count=True,
    help="More logging (-v: Mirage's debug lines, e.g. one per daemon cycle; -vv: every "
    "library's too).",
)
def main(verbose: int) -> None:
    """Mirage: proactive provisioning of chained jobs on Slurm GPU clusters."""
    setup_logging(verbose)


def setup_logging(verbose: int) -> None:
    """Mirage's own loggers at INFO (the daemon's start line, warnings), DEBUG with -v; every
    other library's (APScheduler, Alembic, SQLAlchemy, urllib3, numexpr, ...) at WARNING
    unless -vv: their INFO lines (a job added, a migration context) drown the daemon's."""
    root = logging.DEBUG if verbose >= 2 else logging.WARNING
    logging.basicConfig(level=root, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # basicConfig sets nothing when the root logger already has a handler (an embedding
    # program, a test runner): the levels are set either way
    logging.getLogger().setLevel(root)
    logging.getLogger("mirage").setLevel(logging.INFO if verbose == 0 else logging.DEBUG)


def _register() -> None:
    # Subcommand groups live beside their concept; imported here so that `mirage --help`
    # lists them all. Each import is cheap (heavy libraries are imported inside commands).
    from mirage.cli.evaluate import evaluate
    from mirage.cli.plan import plan_cmd
    from mirage.daemon.cli import chain, daemon_cmd, status_cmd
    from mirage.demo.cli import demo_cmd
    from mirage.learn.cli import train_cmd
    from mirage.profile.cli import profile
    from mirage.sim.cli import calibrate, sim, simulate
    from mirage.synth.cli import synth
    from mirage.trace.cli import trace

    main.add_command(trace)
    main.add_command(profile)
    main.add_command(simulate)
    main.add_command(calibrate)
    main.add_command(sim)
    main.add_command(chain)
    main.add_command(status_cmd)
    main.add_command(plan_cmd)
    main.add_command(daemon_cmd)
    main.add_command(demo_cmd)
    main.add_command(evaluate)
    main.add_command(train_cmd)
    main.add_command(synth)


_register()

if __name__ == "__main__":
    main()
