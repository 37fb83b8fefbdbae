"""`msched`: the administrator's command. Subcommands live beside the code they drive and are
imported only when invoked, so `msched --help` and each command stay quick to start.

Click itself is imported only when needed: cron's `msched reorder` (with at most --config, -v,
--backend, --objective) runs the round loop directly (msched.commands.reorder_run), so a light round
loads neither click nor SQLAlchemy (issue 21, sixth pass). `msched.cli.cli`, the click group, is built
on first use.
"""

from __future__ import annotations

import functools
import os
import sys

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


@functools.lru_cache(maxsize=1)
def _group():  # noqa: ANN202 - the click group
    """The click group of every subcommand (built once, on first use)."""
    import importlib

    import click

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

    return cli


def __getattr__(name: str):  # noqa: ANN202 - `from msched.cli import cli`
    if name == "cli":
        return _group()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


_REORDER_OPTIONS = {"--config": "config_file", "--backend": "backend", "--objective": "objective"}


def plain_reorder_options(args: list[str]) -> dict | None:
    """`msched reorder`'s arguments as `reorder_run.run`'s keywords when they are only --config FILE,
    -v/--verbose, --backend B and --objective O (each at most once, valid); None for anything else,
    which click parses (and reports)."""
    from msched.config import BACKENDS, OBJECTIVES

    opts: dict = {}
    i = 0
    while i < len(args):
        arg = args[i]
        if arg in ("-v", "--verbose"):
            opts["verbose"] = True
            i += 1
            continue
        key, eq, value = arg.partition("=")
        if key not in _REORDER_OPTIONS or _REORDER_OPTIONS[key] in opts:
            return None
        if not eq:
            if i + 1 >= len(args):
                return None
            value = args[i + 1]
        i += 1 if eq else 2
        opts[_REORDER_OPTIONS[key]] = value
    ok = (opts.get("backend", BACKENDS[0]) in BACKENDS and opts.get("objective", OBJECTIVES[0]) in OBJECTIVES
          and opts.get("config_file", "x") and not os.path.isdir(opts.get("config_file", "")))
    return opts if ok else None


def _plain_reorder(opts: dict) -> int:
    from msched.commands.reorder_run import CommandError, run

    try:
        run(**opts)
    except CommandError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    return 0


def _exit_now(code: int) -> None:
    """End the process without tearing the interpreter down: cron's one round (`msched reorder`) is done,
    its store closed, its lock dropped and its children reaped, and freeing what the planning core's
    caches hold object by object (every job's reading, the timelines) cost 0.15-0.2 s of CPU at 10,000
    pending (measured on the dev cluster, issue 21 ninth pass). The output is flushed first."""
    import logging

    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def one_round_process() -> None:
    """Pause Python's cyclic collector for the rest of a process that runs one round and ends (cron's
    `msched reorder`, which leaves by `_exit_now`). The round pauses it anyway (`without_cyclic_gc`);
    switched on again after it, the collector's first pass walked every object the round left alive
    (its snapshot, plans and evaluations: ~1 million at 10,000 pending), 50 ms of CPU measured on the
    dev cluster, only to find them alive just before the process ends (issue 21, sixteenth pass). A
    loop (`--every`) keeps the collector between its rounds."""
    import gc

    gc.disable()


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else list(argv)
    if args[:1] == ["reorder"] and (opts := plain_reorder_options(args[1:])) is not None:
        if argv is None:                       # the command itself: one round, then `_exit_now`
            one_round_process()
        code = _plain_reorder(opts)
        if argv is None and code == 0:         # the command itself (not a caller in this process)
            _exit_now(code)
        return code
    import click

    try:
        return _group().main(args=args, prog_name="msched", standalone_mode=True) or 0
    except KeyboardInterrupt:
        click.echo("interrupted", err=True)
        return 130


if __name__ == "__main__":
    sys.exit(main())
