"""The report as rich tables in the terminal (and plain text when piped)."""

from __future__ import annotations

import datetime as _dt
import math

from rich.console import Console
from rich.table import Table
from rich.text import Text

from msched.report.data import Report, RunReport
from msched.util.text import printable


def fmt_duration(seconds: float | None) -> str:
    """`45s`, `12m`, `3.2h`, `2.1d`: short enough for a table cell."""
    if seconds is None or (isinstance(seconds, float) and math.isnan(seconds)):
        return "-"
    s = float(seconds)
    if s < 90:
        return f"{s:.0f}s"
    if s < 90 * 60:
        return f"{s / 60:.0f}m"
    if s < 48 * 3600:
        return f"{s / 3600:.1f}h"
    return f"{s / 86400:.1f}d"


def fmt_time(t: float | None, kind: str) -> str:
    """Wall-clock time for real runs; simulated runs count seconds from the trace's start."""
    if t is None:
        return "-"
    if kind == "sim":
        return f"t+{fmt_duration(t)}"
    return _dt.datetime.fromtimestamp(t, _dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def fmt_ratio(x: float | None) -> str:
    return "-" if x is None or math.isnan(x) else f"{x:.2f}"


def fmt_share(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.0f}%"


def fmt_counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in counts.items()) or "-"


def render(report: Report, console: Console | None = None) -> None:
    console = console or Console()
    if report.empty:
        console.print(f"[bold]msched report[/bold] ({report.database})", soft_wrap=True)
        console.print(Text(printable(report.message)), soft_wrap=True)
        return
    for rr in report.runs:
        _render_run(rr, report, console)


TEXT_COLUMNS = {"group", "type", "basis", "jobs by group", "model", "state", "reference", "time", "error",
                 "planned type (pending jobs)", "job", "job a", "job b", "model a", "model b"}


def _table(title: str, *columns: str) -> Table:
    t = Table(title=title, title_justify="left", title_style="bold", header_style="bold")
    for c in columns:
        t.add_column(c, justify="left" if c in TEXT_COLUMNS else "right")
    return t


def _render_run(rr: RunReport, report: Report, console: Console) -> None:
    run = rr.run
    span = fmt_duration(run.period_end - run.period_start)
    console.rule(f"[bold]{run.kind} run {run.name}[/bold] (policy {run.policy})")
    console.print(f"period {fmt_time(run.period_start, run.kind)} .. {fmt_time(run.period_end, run.kind)} "
                  f"({span}), {run.jobs} msched jobs; GPUs {fmt_counts(run.gpus)}")

    t = _table("Queue now" + (" (live from Slurm)" if run.live else " (as of the last round)"),
               "group", "pending", "running", "planned type (pending jobs)")
    for g in rr.queue:
        _row(t, g.group, str(g.pending), str(g.running), fmt_counts(g.planned))
    _print(console, t, "Queue now: no msched jobs pending or running.")

    t = _table("Per GPU type", "type", "GPUs", "busy", "basis", "jobs by group")
    for u in rr.gpu_types:
        _row(t, u.gpu_type, str(u.gpus), fmt_share(u.busy_share), u.basis, fmt_counts(u.jobs_by_group))
    _print(console, t, "Per GPU type: no GPU types known.")

    t = _table("Waits (jobs that started in the period)", "group", "jobs", "mean", "p95", "max")
    for w in rr.waits:
        _row(t, w.group, str(w.jobs), fmt_duration(w.mean_wait_s), fmt_duration(w.p95_wait_s),
                  fmt_duration(w.max_wait_s))
    _print(console, t, "Waits: no job started in the period.")

    t = _table("Longest waits", "job", "group", "model", "state", "wait", "type")
    for w in rr.longest_waits:
        _row(t, w.job_id, w.group, w.model, w.state, fmt_duration(w.wait_s), w.gpu_type or "-")
    _print(console, t, None)
    age = fmt_duration(report.starvation_age_s)
    if rr.starving:
        t = _table(f"Pending past the starvation age ({age})", "job", "group", "model", "state", "wait", "type")
        for w in rr.starving:
            _row(t, w.job_id, w.group, w.model, w.state, fmt_duration(w.wait_s), w.gpu_type or "-")
        console.print(t)
    else:
        console.print(f"No job pending past the starvation age ({age}).")
    if rr.started_late:
        console.print(f"{rr.started_late} job(s) started in the period after waiting longer than {age}.")

    t = _table("Estimates: actual / estimated runtime (1.00 = exact)", "group", "jobs", "median", "p10", "p90",
               "from table")
    for e in rr.estimates:
        _row(t, e.group, str(e.jobs), fmt_ratio(e.median_ratio), fmt_ratio(e.p10_ratio), fmt_ratio(e.p90_ratio),
                  str(e.from_table))
    _print(console, t, "Estimates: no finished job with an estimate in the period.")
    if rr.reference_misses:
        t = _table("References whose estimates miss most (calibrate these first)",
                   "reference", "group", "jobs", "median ratio", "typical miss")
        for m in rr.reference_misses:
            _row(t, m.reference, m.group, str(m.jobs), fmt_ratio(m.median_ratio), f"x{m.miss_factor:.2f}")
        console.print(t)

    pk = rr.packing
    if pk.pairs:
        measured = (f", measured {fmt_ratio(pk.mean_measured)} (mean error {fmt_ratio(pk.mean_abs_error)}), "
                    f"slowest packed job {fmt_ratio(pk.slowest)}x solo" if pk.measured else ", none measured")
        t = _table(f"Packed pairs: {pk.pairs}, predicted combined {fmt_ratio(pk.mean_predicted)}{measured}",
                   "job a", "model a", "job b", "model b", "type", "predicted", "measured")
        for p in pk.shown:
            _row(t, p.job_a, p.model_a or "-", p.job_b, p.model_b or "-", p.gpu_type or "-",
                 f"{fmt_ratio(p.predicted_a)} + {fmt_ratio(p.predicted_b)}",
                 f"{fmt_ratio(p.measured_a)} + {fmt_ratio(p.measured_b)}")
        console.print(t)

    r = rr.rounds
    if r.count:
        console.print(
            f"[bold]Rounds[/bold]: {r.count} ({r.dry_runs} dry runs), mean plan time "
            f"{_ms(r.mean_plan_s)} (max {_ms(r.max_plan_s)}), {fmt_ratio(r.mean_changes)} changes per round "
            f"({r.total_changes} in all), {r.skipped} jobs skipped mid-round, last {fmt_time(r.last_time, run.kind)}")
        console.print(churn_line(r))
    else:
        console.print("[bold]Rounds[/bold]: none in the period.")
    if r.errors:
        t = _table("Last round errors", "time", "error")
        for e in r.errors:
            _row(t, fmt_time(e.time, run.kind), e.error)
        console.print(t)
    console.print()


def churn_line(r) -> str:  # noqa: ANN001 - RoundStats
    """What the rounds cost Slurm: writes per round and per job (each one REQUEST_UPDATE_JOB)."""
    per_job = ("-" if r.mean_writes_per_job is None
               else f"{r.mean_writes_per_job:.2f} per job (max {r.max_writes_per_job})")
    days = f"; {r.aggregated_days} day(s) from daily aggregates" if r.aggregated_days else ""
    return (f"Churn: Slurm updates {fmt_ratio(r.mean_changes)} per round (max {r.max_changes}), "
            f"{per_job}{days}")


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{1000 * seconds:.1f} ms"


def _row(table: Table, *cells: object) -> None:
    """A table row whose cells are plain text: job ids, models, groups and error texts come from users'
    tags and comments or from the database, so control bytes are escaped and no rich markup is read."""
    table.add_row(*(Text(printable(str(c))) for c in cells))


def _print(console: Console, table: Table, if_empty: str | None) -> None:
    if table.row_count:
        console.print(table)
    elif if_empty:
        console.print(if_empty)
