"""The ``mirage`` command line: one click group, each concept adds its own subcommands."""

from __future__ import annotations

import logging

import click

from mirage import __version__


@click.group()
@click.version_option(__version__, prog_name="mirage")
@click.option("-v", "--verbose", count=True, help="More logging (-v info, -vv debug).")
def main(verbose: int) -> None:
    """Mirage: proactive provisioning of chained jobs on Slurm GPU clusters."""
    level = logging.WARNING - 10 * min(verbose, 2)
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")


def _register() -> None:
    # Subcommand groups live beside their concept; imported here so that `mirage --help`
    # lists them all. Each import is cheap (heavy libraries are imported inside commands).
    from mirage.daemon.cli import chain, daemon_cmd, status_cmd
    from mirage.evaluate.cli import evaluate
    from mirage.learn.cli import train_cmd
    from mirage.profile.cli import profile
    from mirage.sim.cli import calibrate, simulate
    from mirage.synth.cli import synth
    from mirage.trace.cli import trace

    main.add_command(trace)
    main.add_command(profile)
    main.add_command(simulate)
    main.add_command(calibrate)
    main.add_command(chain)
    main.add_command(status_cmd)
    main.add_command(daemon_cmd)
    main.add_command(evaluate)
    main.add_command(train_cmd)
    main.add_command(synth)


_register()

if __name__ == "__main__":
    main()
