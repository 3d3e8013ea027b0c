"""``mirage profile``: show, check and capture cluster profiles."""

from __future__ import annotations

import json
import tomllib
from dataclasses import asdict
from pathlib import Path

import click

from mirage.profile.schema import ProfileError, builtin_names, load_profile, profile_to_toml


@click.group()
def profile() -> None:
    """Cluster profiles (partitions, node shapes, scheduler settings)."""


@profile.command("list")
def list_cmd() -> None:
    """List the built-in profiles."""
    for name in builtin_names():
        click.echo(name)


@profile.command("show")
@click.argument("name_or_path")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of TOML.")
def show(name_or_path: str, as_json: bool) -> None:
    """Validate and print a profile (a built-in name or a TOML path)."""
    try:
        prof = load_profile(name_or_path)
    except ProfileError as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(json.dumps(asdict(prof), indent=2) if as_json else profile_to_toml(prof), nl=False)


@profile.command("capture")
@click.option("--name", required=True, help="Name of the cluster profile.")
@click.option("--timezone", default="UTC", show_default=True, help="The site's IANA time zone.")
@click.option(
    "--out", type=click.Path(dir_okay=False, path_type=Path), help="Write here, not stdout."
)
@click.pass_context
def capture(ctx: click.Context, name: str, timezone: str, out: Path | None) -> None:
    """Write a profile from the live cluster (scontrol show partition/node/config)."""
    from mirage.profile.capture import capture_profile
    from mirage.profile.schema import profile_from_dict
    from mirage.slurm.types import SlurmError

    client = ctx.obj.get("slurm_client") if isinstance(ctx.obj, dict) else None
    if client is None:
        from mirage.slurm.cli_backend import CliSlurmClient

        client = CliSlurmClient()
    try:
        prof = capture_profile(client, name, timezone)
        text = profile_to_toml(prof)
        profile_from_dict(tomllib.loads(text), "<captured>")  # what we write must load back
    except (SlurmError, ProfileError) as exc:
        raise click.ClickException(str(exc)) from exc
    if out is None:
        click.echo(text, nl=False)
    else:
        try:  # a models folder's profile: <models_dir>/<cluster>/profile.toml, maybe new
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(text, encoding="utf-8")
        except OSError as exc:
            raise click.ClickException(f"cannot write {out}: {exc.strerror or exc}") from exc
        click.echo(f"wrote {out} ({len(prof.partitions)} partitions)")
