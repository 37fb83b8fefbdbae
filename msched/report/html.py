"""The report as one self-contained HTML page: the terminal's tables plus matplotlib plots inlined as
base64 PNGs, so the file can be mailed or opened offline with nothing beside it."""

from __future__ import annotations

import base64
import datetime as _dt
import html
import io

from msched.report.data import Report, RunReport
from msched.report.terminal import (
    TEXT_COLUMNS,
    churn_line,
    fmt_counts,
    fmt_duration,
    fmt_ratio,
    fmt_share,
    fmt_time,
)

_CSS = """
body{font-family:system-ui,sans-serif;margin:2em;color:#222;max-width:1200px}
h1{font-size:1.5em}h2{border-bottom:1px solid #ccc;padding-bottom:.2em;margin-top:2em}
h3{font-size:1.05em;margin-bottom:.3em}
table{border-collapse:collapse;margin:.3em 0 1em}
th,td{border:1px solid #ddd;padding:.25em .6em;text-align:right}th{background:#f4f4f4}
td.t,th.t{text-align:left}
.note{color:#666}.plots img{max-width:48%;margin:.5%;border:1px solid #eee}
"""


def render_html(report: Report) -> str:
    parts = [
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        "<title>msched report</title>", f"<style>{_CSS}</style></head><body>",
        "<h1>msched report</h1>",
        f'<p class="note">database {_e(report.database)}; generated '
        f'{_dt.datetime.fromtimestamp(report.generated_at, _dt.UTC):%Y-%m-%d %H:%M UTC}'
        + (f"; last {_e(fmt_duration(report.since_s))}" if report.since_s else "") + "</p>",
    ]
    if report.empty:
        parts.append(f"<p>{_e(report.message)}</p>")
    for rr in report.runs:
        parts.append(_run_section(rr, report))
    parts.append("</body></html>")
    return "\n".join(parts)


def _e(x: object) -> str:
    return html.escape(str(x))


def _table(title: str, header: list[str], rows: list[list[str]], empty: str) -> str:
    if not rows:
        return f"<h3>{_e(title)}</h3><p class=note>{_e(empty)}</p>"
    left = [h in TEXT_COLUMNS for h in header]
    head = "".join(f"<th{' class=t' if lf else ''}>{_e(h)}</th>" for h, lf in zip(header, left, strict=True))
    body = "".join("<tr>" + "".join(f"<td{' class=t' if lf else ''}>{_e(c)}</td>"
                                    for c, lf in zip(row, left, strict=True)) + "</tr>" for row in rows)
    return f"<h3>{_e(title)}</h3><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _run_section(rr: RunReport, report: Report) -> str:
    run = rr.run
    out = [f"<h2>{_e(run.kind)} run {_e(run.name)} <small>(policy {_e(run.policy)})</small></h2>",
           f"<p>period {_e(fmt_time(run.period_start, run.kind))} .. {_e(fmt_time(run.period_end, run.kind))}"
           f" ({_e(fmt_duration(run.period_end - run.period_start))}), {run.jobs} msched jobs; "
           f"GPUs {_e(fmt_counts(run.gpus))}</p>"]
    out.append(_table("Queue now" + (" (live from Slurm)" if run.live else " (as of the last round)"),
                      ["group", "pending", "running", "planned type (pending jobs)"],
                      [[g.group, str(g.pending), str(g.running), fmt_counts(g.planned)] for g in rr.queue],
                      "No msched jobs pending or running."))
    out.append(_table("Per GPU type", ["type", "GPUs", "busy", "basis", "jobs by group"],
                      [[u.gpu_type, str(u.gpus), fmt_share(u.busy_share), u.basis, fmt_counts(u.jobs_by_group)]
                       for u in rr.gpu_types], "No GPU types known."))
    out.append(_table("Waits (jobs that started in the period)", ["group", "jobs", "mean", "p95", "max"],
                      [[w.group, str(w.jobs), fmt_duration(w.mean_wait_s), fmt_duration(w.p95_wait_s),
                        fmt_duration(w.max_wait_s)] for w in rr.waits], "No job started in the period."))
    wait_rows = [[w.job_id, w.group, w.model, w.state, fmt_duration(w.wait_s), w.gpu_type or "-"]
                 for w in rr.longest_waits]
    out.append(_table("Longest waits", ["job", "group", "model", "state", "wait", "type"], wait_rows, "None."))
    age = fmt_duration(report.starvation_age_s)
    out.append(_table(f"Pending past the starvation age ({age})",
                      ["job", "group", "model", "state", "wait", "type"],
                      [[w.job_id, w.group, w.model, w.state, fmt_duration(w.wait_s), w.gpu_type or "-"]
                       for w in rr.starving], "No job pending past the starvation age."))
    if rr.started_late:
        out.append(f"<p>{rr.started_late} job(s) started in the period after waiting longer than {_e(age)}.</p>")
    out.append(_table("Estimates: actual / estimated runtime (1.00 = exact)",
                      ["group", "jobs", "median", "p10", "p90", "from table"],
                      [[e.group, str(e.jobs), fmt_ratio(e.median_ratio), fmt_ratio(e.p10_ratio),
                        fmt_ratio(e.p90_ratio), str(e.from_table)] for e in rr.estimates],
                      "No finished job with an estimate in the period."))
    out.append(_table("References whose estimates miss most (calibrate these first)",
                      ["reference", "group", "jobs", "median ratio", "typical miss"],
                      [[m.reference, m.group, str(m.jobs), fmt_ratio(m.median_ratio), f"x{m.miss_factor:.2f}"]
                       for m in rr.reference_misses], "Nothing to compare yet."))
    out.append(_packing_section(rr))
    r = rr.rounds
    out.append("<h3>Rounds</h3>")
    if r.count:
        out.append(f"<p>{r.count} rounds ({r.dry_runs} dry runs), mean plan time "
                   f"{_e(_ms(r.mean_plan_s))} (max {_e(_ms(r.max_plan_s))}), {_e(fmt_ratio(r.mean_changes))} "
                   f"changes per round ({r.total_changes} in all), {r.skipped} jobs skipped mid-round.</p>"
                   f"<p>{_e(churn_line(r))}</p>")
    else:
        out.append("<p class=note>No rounds in the period.</p>")
    if r.errors:
        out.append(_table("Last round errors", ["time", "error"],
                          [[fmt_time(e.time, run.kind), e.error] for e in r.errors], ""))
    out.append('<div class="plots">')
    for alt, png in plots(rr):
        out.append(f'<img alt="{_e(alt)}" src="data:image/png;base64,{png}">')
    out.append("</div>")
    return "\n".join(out)


def _packing_section(rr: RunReport) -> str:
    """Packed pairs (gres/shard): which jobs shared a GPU, predicted vs measured own/solo speeds."""
    pk = rr.packing
    if not pk.pairs:
        return '<div id="packing"><h3>Packed pairs</h3><p class=note>No jobs shared a GPU in this run.</p></div>'
    summary = (f"<p>{pk.pairs} pair(s) shared a GPU; predicted combined throughput "
               f"{_e(fmt_ratio(pk.mean_predicted))} on average")
    if pk.measured:
        summary += (f", measured {_e(fmt_ratio(pk.mean_measured))} ({pk.measured} measured; mean error "
                    f"{_e(fmt_ratio(pk.mean_abs_error))}); slowest packed job at {_e(fmt_ratio(pk.slowest))}x solo, "
                    f"{pk.below_half} pair(s) with a job below 0.5x")
    else:
        summary += "; no measured speeds (Slurm reports none for a shared GPU; simulated runs have them)"
    table = _table("Packed pairs (slowest measured first, then the newest): own/solo speed of each job",
                   ["job a", "model a", "job b", "model b", "type", "predicted a", "predicted b",
                    "measured a", "measured b", "combined predicted", "combined measured"],
                   [[p.job_a, p.model_a or "-", p.job_b, p.model_b or "-", p.gpu_type or "-",
                     fmt_ratio(p.predicted_a), fmt_ratio(p.predicted_b), fmt_ratio(p.measured_a),
                     fmt_ratio(p.measured_b), fmt_ratio(p.predicted), fmt_ratio(p.measured)] for p in pk.shown], "")
    table = table.replace("<h3>", "<h4>").replace("</h3>", "</h4>")
    return f'<div id="packing"><h3>Packed pairs</h3>{summary}.</p>{table}</div>'


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{1000 * seconds:.1f} ms"


# ------------------------------------------------------------------------------------------ plots
def plots(rr: RunReport) -> list[tuple[str, str]]:
    """(title, base64 PNG) for each plot. Every plot is drawn, with a note when it has no data, so the
    page always has the same shape."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    s = rr.series
    kind = rr.run.kind
    origin = rr.run.period_start if kind == "slurm" else 0.0
    unit = 3600.0
    xlabel = "hours since period start" if kind == "slurm" else "simulated hours"
    out = []

    fig, ax = plt.subplots(figsize=(6.4, 3.6), dpi=90)
    for t, pts in sorted(s.utilisation.items()):
        if pts:
            ax.step([(x - origin) / unit for x, _ in pts], [100 * v for _, v in pts], where="post", label=t)
    _finish(ax, "GPU-type utilisation", xlabel, "busy GPUs (%)", bool(s.utilisation))
    out.append(("GPU-type utilisation over time", _png(fig, plt)))

    fig, ax = plt.subplots(figsize=(6.4, 3.6), dpi=90)
    if s.queue:
        xs = [(t - origin) / unit for t, _, _ in s.queue]
        ax.step(xs, [p for _, p, _ in s.queue], where="post", label="pending")
        ax.step(xs, [r for _, _, r in s.queue], where="post", label="running")
    _finish(ax, "Queue length", xlabel, "jobs", bool(s.queue))
    out.append(("Queue length over time", _png(fig, plt)))

    fig, ax = plt.subplots(figsize=(6.4, 3.6), dpi=90)
    groups = [g for g, ws in s.waits_by_group.items() if ws]
    longest = max((max(ws) for ws in s.waits_by_group.values() if ws), default=0.0)
    wunit, wname = (3600.0, "hours") if longest > 3 * 3600 else (60.0, "minutes")
    if groups:
        ax.boxplot([[w / wunit for w in s.waits_by_group[g]] for g in groups], showfliers=True)
        ax.set_xticks(range(1, len(groups) + 1), groups, rotation=30, ha="right")
    _finish(ax, "Wait time by group", "", f"wait ({wname})", bool(groups), legend=False)
    out.append(("Wait time by group", _png(fig, plt)))

    fig, ax = plt.subplots(figsize=(6.4, 3.6), dpi=90)
    if s.est_vs_actual:
        by_group: dict[str, list[tuple[float, float]]] = {}
        for g, est, act in s.est_vs_actual:
            by_group.setdefault(g, []).append((est / 60, act / 60))
        for g, pts in sorted(by_group.items()):
            ax.scatter([p[0] for p in pts], [p[1] for p in pts], s=12, alpha=0.7, label=g)
        lo = min(min(p) for pts in by_group.values() for p in pts)
        hi = max(max(p) for pts in by_group.values() for p in pts)
        ax.plot([lo, hi], [lo, hi], color="grey", linewidth=0.8, linestyle="--")
        if lo > 0 and hi / lo > 50:
            ax.set_xscale("log")
            ax.set_yscale("log")
    _finish(ax, "Estimated vs actual runtime", "estimated (minutes)", "actual (minutes)", bool(s.est_vs_actual))
    out.append(("Estimated vs actual runtime", _png(fig, plt)))
    return out


def _finish(ax, title: str, xlabel: str, ylabel: str, has_data: bool, legend: bool = True) -> None:
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if not has_data:
        ax.text(0.5, 0.5, "no data in the period", ha="center", va="center", transform=ax.transAxes,
                color="grey")
    elif legend and ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize="small", loc="best")
    ax.grid(alpha=0.3)


def _png(fig, plt) -> str:
    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode("ascii")
