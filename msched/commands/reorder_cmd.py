"""`msched reorder`: re-plan the pending queue (cron every minute, or `--every 60`). Its options here; the
round loop itself is msched.commands.reorder_run.run (which `msched.cli.main` calls without click for the
plain cron forms).

Exit status: 0 after a round (or when another round holds the lock: cron overlaps are normal),
1 when Slurm is unreachable or the database cannot be written (one line on stderr; nothing changed in
Slurm unless the line says otherwise), 2 for bad options.
"""

from __future__ import annotations

import click

from msched.config import BACKENDS, OBJECTIVES


@click.command("reorder")
@click.option("--dry-run", is_flag=True, help="Print the plan as a table; change nothing (Slurm, database, free-time file).")
@click.option("--every", type=click.FloatRange(min=1.0), default=None, metavar="SECONDS",
              help="Run a round every SECONDS until interrupted (default: one round).")
@click.option("--objective", type=click.Choice(OBJECTIVES), default=None,
              help="What the plan optimises: balanced (mean JCT, the makespan kept within 25% of its best; "
                   "a batch submitted together: the makespan first), makespan or jct. Default: config (balanced).")
@click.option("--backend", type=click.Choice(BACKENDS), default=None, help="Slurm client backend. Default: config.")
@click.option("--release", is_flag=True,
              help="Hand every managed job back to Slurm's own priorities and drop msched's type constraint.")
@click.option("--config", "config_file", type=click.Path(dir_okay=False), default=None,
              help="Site configuration file (default: $MSCHED_CONFIG or /etc/msched/msched.toml).")
@click.option("-v", "--verbose", is_flag=True, help="Also log every update written (or, with --dry-run, that would be).")
def reorder(dry_run: bool, every: float | None, objective: str | None, backend: str | None, release: bool,
            config_file: str | None, verbose: bool) -> None:
    """Re-plan the pending queue: each msub job's priority and GPU type."""
    from msched.commands.reorder_run import CommandError, run

    try:
        run(dry_run=dry_run, every=every, objective=objective, backend=backend, release=release,
            config_file=config_file, verbose=verbose)
    except CommandError as exc:
        raise click.ClickException(str(exc)) from None


def _fmt_s(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    return f"{seconds / 3600:.1f}h"


def print_plan(result) -> None:  # noqa: ANN001
    """The round's plan as a rich table, highest priority first: what would change and why."""
    from rich.console import Console
    from rich.table import Table

    plan = result.plan
    pending = {p.job_id: p for p in result.snapshot.pending}
    jobs = {j.job_id: j for j in (getattr(result, "jobs", None) or [])}
    decisions = sorted(plan.decisions if plan is not None else [], key=lambda d: -d.priority)
    now = result.time
    table = Table(title=f"msched plan ({plan.policy if plan is not None else '-'}): "
                        f"{len(decisions)} managed pending job(s)", show_lines=False)
    for col in ("#", "job", "user", "model", "group", "priority", "gpu type", "est start", "est runtime"):
        table.add_column(col, justify="right" if col in ("#", "priority", "est start") else "left")
    for rank, d in enumerate(decisions, 1):
        p = pending.get(d.job_id)
        j = jobs.get(d.job_id)
        tag = j.tag if j is not None else None
        cur_prio = p.priority if p is not None else None
        prio = str(d.priority) if cur_prio in (None, d.priority) else f"{cur_prio} -> {d.priority}"
        new_types = "|".join(d.gpu_types) or "(any)"
        cur_types = "|".join(p.current_types) if p is not None and p.current_types else "(any)"
        pinned = p is not None and p.pinned_type
        types = f"{new_types} (pinned)" if pinned else (new_types if cur_types == new_types or not d.gpu_types
                                                       else f"{cur_types} -> {new_types}")
        est = " ".join(f"{t}:{_fmt_s(v)}" for t, v in sorted(dict(d.est_runtime_s).items(), key=lambda kv: kv[1]))
        start = _fmt_s(max(0.0, d.est_start - now)) if d.est_start is not None else "-"
        table.add_row(str(rank), d.job_id, j.user if j else "", tag.model if tag else "",
                      p.group if p is not None else "", prio, types, f"+{start}" if start != "-" else start, est or "?")
    console = Console(width=max(120, Console().width))
    console.print(table)
    console.print(f"updates that would be made: {len(result.updates)}; "
                  f"estimated makespan: {_fmt_s(plan.est_makespan_end - now) if plan and plan.est_makespan_end else '-'}")
