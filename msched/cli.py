"""`msched`: the administrator's command. Subcommands live beside the code they drive and are
imported only when invoked, so `msched --help` and each command stay quick to start."""

from __future__ import annotations

import importlib
import sys

import click

from msched import __version__

# name -> "module:attribute" of a click command or group
COMMANDS: dict[str, str] = {
    "profile": "msched.commands.profile_cmd:profile",
    "classify": "msched.commands.classify_cmd:classify",
    "estimate": "msched.commands.estimate_cmd:estimate",
    "references": "msched.commands.references_cmd:references",
    "jobs": "msched.commands.jobs_cmd:jobs",
    "reorder": "msched.commands.reorder_cmd:reorder",
    "report": "msched.commands.report_cmd:report",
    "calibrate": "msched.commands.calibrate_cmd:calibrate",
    "plugin": "msched.plugin.install_cmd:plugin",
    "sim": "slurm_sim.commands:sim",
    "trace": "slurm_sim.commands:trace",
}

HELP = {
    "profile": "Profile a model layer by layer on the meta device.",
    "classify": "Find a model's similarity group and nearest reference.",
    "estimate": "Predict a model's iteration time and memory fit per GPU type.",
    "references": "List and evaluate the reference model set.",
    "jobs": "Tagged jobs in Slurm's queue, joined with the database.",
    "reorder": "Re-plan the pending queue: priorities and GPU types (run from cron).",
    "report": "What the scheduler did and how well its estimates held.",
    "calibrate": "Measure the reference models on this site's GPU types.",
    "plugin": "Install msched as a Slurm plugin (cli_filter.lua, job_submit.lua).",
    "sim": "Replay a trace on a simulated cluster and compare policies.",
    "trace": "Build workload traces for `msched sim`.",
}


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        target = COMMANDS.get(name)
        if target is None:
            return None
        module, _, attr = target.partition(":")
        return getattr(importlib.import_module(module), attr)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        # list help without importing every command module
        with formatter.section("Commands"):
            formatter.write_dl([(name, HELP.get(name, "")) for name in sorted(COMMANDS)])


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="msched")
def cli() -> None:
    """msched: model-similarity-based scheduling of DL training jobs on Slurm clusters with several GPU types."""


def main(argv: list[str] | None = None) -> int:
    try:
        return cli.main(args=argv, prog_name="msched", standalone_mode=True) or 0
    except KeyboardInterrupt:
        click.echo("interrupted", err=True)
        return 130


if __name__ == "__main__":
    sys.exit(main())
