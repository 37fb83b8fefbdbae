"""`msched plugin install [--dir DIR]`: write cli_filter.lua and job_submit.lua for Slurm."""

from __future__ import annotations

import os

import click


def _default_dir() -> str:
    """Beside the slurm.conf in use (where slurmctld and the clients look for both scripts)."""
    conf = os.environ.get("SLURM_CONF") or "/etc/slurm/slurm.conf"
    return os.path.dirname(os.path.abspath(conf))


@click.group()
def plugin() -> None:
    """msched as a Slurm plugin (cli_filter/lua and job_submit/lua)."""


@plugin.command("install")
@click.option("--dir", "directory", metavar="DIR", default=None,
              help="Where to write the two files (default: the directory of $SLURM_CONF, else /etc/slurm).")
@click.option("--python", "python", metavar="PATH", default=None,
              help="The Python that users' sbatch runs msched with (default: this one). Every user must be "
                   "able to run it.")
@click.option("--timeout", "timeout_s", type=click.IntRange(1, 30), default=2, show_default=True,
              help="Seconds the filter waits for msched's decision before submitting unchanged.")
def install(directory: str | None, python: str | None, timeout_s: int) -> None:
    """Write cli_filter.lua and job_submit.lua, generated from msched's tag bounds and GPU-type table,
    and print the slurm.conf lines that turn them on."""
    from msched.config import ConfigError, load_config
    from msched.plugin.generate import SLURM_CONF_LINES
    from msched.plugin.generate import install as write

    directory = directory or _default_dir()
    if python is not None and not (os.path.isabs(python) and os.access(python, os.X_OK)):
        raise click.BadParameter(f"{python!r} is not an executable absolute path", param_hint="--python")
    try:
        paths = write(directory, load_config(), python=python, timeout_s=timeout_s)
    except (ConfigError, OSError, ValueError) as exc:
        raise click.ClickException(str(exc)) from None
    for path in paths:
        click.echo(f"wrote {path}")
    click.echo("add to slurm.conf (then `scontrol reconfigure`; clients read cli_filter.lua at each command):")
    for line in SLURM_CONF_LINES:
        click.echo(f"    {line}")
    click.echo("on every submit host, install LuaSocket for Lua 5.1 (Debian: lua-socket): the filter then asks "
               "each user's resident decider instead of starting Python for every submission")
