"""`msched sim` (compare policies on a simulated cluster) and `msched trace synth` (build workloads).

I/O lives here (files, the terminal, the database); the simulation itself is in `slurm_sim.compare`.
Every bad input ends in one line (click.UsageError / ClickException) naming the file, row or option.
"""

from __future__ import annotations

import csv
import json
import math
import sys
from pathlib import Path

import click

from msched.config import DATA_DIR, OBJECTIVES, ConfigError, load_config
from msched.estimate.perf_table import PerfTable, PerfTableError

SHARED_TABLE = Path(__file__).resolve().parent.parent.parent / "shared" / "data" / "gpu-train-benchmarks" / "perf_table.csv"


def default_truth_path() -> Path:
    """The simulator's default truth: all measured models (msched/data/measured_perf.csv), else the shared table."""
    shipped = Path(DATA_DIR) / "measured_perf.csv"
    return shipped if shipped.exists() or not SHARED_TABLE.exists() else SHARED_TABLE


def _load_table(path: str | Path, what: str) -> PerfTable:
    try:
        table = PerfTable.load(path)
    except PerfTableError as exc:
        raise click.ClickException(f"{what}: {exc}") from None
    if not table.rows:
        raise click.ClickException(f"{what} {path} has no rows")
    return table


def _cluster(spec: str):
    from slurm_sim.cluster import ClusterSpecError, parse_cluster
    try:
        return parse_cluster(spec)
    except ClusterSpecError as exc:
        raise click.UsageError(f"--cluster: {exc}") from None


def reference_names(config=None) -> list[str]:
    """The default reference models' names (the shipped set)."""
    try:
        from msched.models.classify import ClassifyError, load_references
        try:
            return list(load_references(config).names)
        except ClassifyError as exc:
            raise click.ClickException(f"cannot read the reference set: {exc}") from None
    except ImportError:
        raise click.ClickException("the reference set is not available (msched.models.classify missing)") from None


def resolve_models(text: str, truth: PerfTable, config=None) -> list[str]:
    """`all` (every model of the truth table), `non-reference` (all minus the references) or NAME,NAME."""
    known = sorted(truth.models())
    key = text.strip().lower()
    if key == "all":
        return known
    if key == "non-reference":
        refs = set(reference_names(config))
        out = [m for m in known if m not in refs]
        if not out:
            raise click.UsageError("--models non-reference: every model of the truth table is a reference")
        return out
    names = [n.strip() for n in text.split(",") if n.strip()]
    bad = [n for n in names if n not in known]
    if bad or not names:
        raise click.UsageError(f"--models: unknown model(s) {', '.join(bad) or '(none given)'}; use all, "
                               f"non-reference or names from the truth table: {', '.join(known)}")
    return names


# ----------------------------------------------------------------------------- msched trace
@click.group("trace")
def trace() -> None:
    """Build workload traces for `msched sim` (DESIGN's trace CSV)."""


@trace.command("synth")
@click.option("--jobs", "n_jobs", type=click.IntRange(min=1), required=True, help="Number of jobs.")
@click.option("--models", default="non-reference", show_default=True,
              help="all, non-reference (all minus the reference set) or a comma-separated list.")
@click.option("--seed", type=int, default=0, show_default=True, help="Random seed (same seed, same trace).")
@click.option("--arrival", default="poisson:600", show_default=True,
              help="static (all at time 0), poisson:MEAN_S (mean gap in seconds) or philly (Philly's timestamps).")
@click.option("--philly", "philly_path", type=click.Path(dir_okay=False),
              help="Philly jobs CSV for sizes/durations (default: the shared copy when present).")
@click.option("--no-philly", is_flag=True, help="Ignore the Philly trace: Gavel's size and duration distribution.")
@click.option("--gpus-per-job", "gpus_dist", default=None,
              help="GPU-count distribution, e.g. 1:0.7,2:0.1,4:0.15,8:0.05 (default: Philly's, else that one).")
@click.option("--time-limits", "time_limits", type=click.Choice(["users", "none"]), default="users",
              show_default=True,
              help="users: limits as users set them (an overestimate of the runtime on the slowest type, "
                   "heavy-tailed, rounded up to popular values; Mu'alem & Feitelson 2001, Tsafrir et al. "
                   "2005); none: no limits (jobs get the partition's DefaultTime).")
@click.option("--time-limit-factor", type=click.FloatRange(min=1.0), default=None,
              help="Instead: a time limit of F x each job's true runtime on its slowest type.")
@click.option("--max-duration", "max_duration", type=click.FloatRange(min=60.0), default=600_000.0,
              show_default=True, help="Clip drawn durations to this many seconds.")
@click.option("--truth", "truth_path", type=click.Path(dir_okay=False), default=None,
              help="Performance table that turns durations into iterations [default: msched/data/measured_perf.csv].")
@click.option("--cluster", "cluster_spec", default=None,
              help="Keep job sizes that fit this cluster, and models with truth data on every type that can "
                   "hold the job (so `msched sim` never refuses the trace for truth gaps).")
@click.option("--out", "out_path", type=click.Path(dir_okay=False), default=None, help="Output CSV (default: stdout).")
def synth_cmd(n_jobs, models, seed, arrival, philly_path, no_philly, gpus_dist, time_limits, time_limit_factor,
              max_duration, truth_path, cluster_spec, out_path) -> None:
    """Synthesise a workload: Philly-shaped sizes and durations, turned into iterations of real models."""
    from slurm_sim.trace import TraceError, default_philly_path, parse_size_dist, synth, write_trace

    truth = _load_table(truth_path or default_truth_path(), "--truth")
    names = resolve_models(models, truth)
    philly = None if no_philly else (philly_path or default_philly_path())
    cl = _cluster(cluster_spec) if cluster_spec else None
    try:
        sizes = parse_size_dist(gpus_dist) if gpus_dist else None
        jobs = synth(n_jobs, names, truth, seed=seed, arrival=arrival, philly=philly, sizes=sizes,
                     time_limit_factor=time_limit_factor, time_limits=time_limits, cluster=cl,
                     max_duration_s=max_duration)
        if out_path:
            write_trace(out_path, jobs)
        else:
            write_trace(sys.stdout, jobs)
    except TraceError as exc:
        raise click.UsageError(str(exc)) from None
    except OSError as exc:
        raise click.ClickException(f"cannot write {out_path}: {exc.strerror}") from None
    if out_path:
        span = max(j.submit_time for j in jobs)
        click.echo(f"wrote {len(jobs)} jobs ({len(names)} models, arrivals over {span:.0f} s, sizes and durations "
                   f"from {'Philly' if philly else 'Gavel'}) to {out_path}", err=True)


# ----------------------------------------------------------------------------- msched sim
def _fmt_s(v: float | None) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    if v < 120:
        return f"{v:.0f}s"
    if v < 7200:
        return f"{v / 60:.1f}m"
    return f"{v / 3600:.2f}h"


def _fmt_r(v: float | None) -> str:
    return "-" if v is None else f"{v:.3f}"


@click.command("sim")
@click.option("--cluster", "cluster_spec", required=True, help="TYPE:GPUSxNODES,... or a TOML file.")
@click.option("--trace", "trace_path", required=True, type=click.Path(dir_okay=False), help="Trace CSV (DESIGN).")
@click.option("--truth", "truth_path", type=click.Path(dir_okay=False), default=None,
              help="What really happens [default: msched/data/measured_perf.csv].")
@click.option("--perf", "perf_path", type=click.Path(dir_okay=False), default=None,
              help="What the policy knows [default: the configured table, msched/data/gpu_performance.csv].")
@click.option("--references", default=None,
              help="Comma-separated reference models (default: the configured set); --perf rows of others are ignored.")
@click.option("--policy", "policies", default="fifo,fastest,msched-once,msched,oracle", show_default=True,
              help="Comma-separated policies to compare.")
@click.option("--round", "round_s", type=click.FloatRange(min=1.0), default=60.0, show_default=True,
              help="Seconds between reorder rounds.")
@click.option("--objective", type=click.Choice(OBJECTIVES), default=None,
              help="What msched/oracle optimise [default: the config's objective].")
@click.option("--scheduler", type=click.Choice(["backfill", "builtin"]), default=None,
              help="Slurm's SchedulerType: backfill (sched/backfill, Slurm's default) or builtin (strict "
                   "priority order) [default: the cluster spec's, else backfill].")
@click.option("--backfill", "backfill_flag", is_flag=True, hidden=True,
              help="Same as --scheduler backfill (kept for older scripts).")
@click.option("--truth-fill", "truth_fill", type=click.Choice(["median-type-ratio"]), default=None,
              help="Fill truth gaps (a job's model without rows on a type it may be sent to) by this rule "
                   "instead of refusing the trace: the model's time on the type sharing most models x the "
                   "median ratio between the two types (docs/backfill.md).")
@click.option("--starvation-age", "starvation_age", type=click.FloatRange(min=0), default=None,
              help="Seconds after which a pending job is put first and widened to every type "
                   "[default: the config's, 86400]; 0 turns the guard off.")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), help="Write the results (a JSON list).")
@click.option("--jobs-csv", "jobs_csv", type=click.Path(dir_okay=False),
              help="Write job_id,policy,gpu_type,submit,start,end per job and policy.")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False), help="Write a PNG: utilisation and jobs over time.")
@click.option("--db", "db_path", default=None, help="Record runs, rounds and jobs in this database (file or URL).")
def sim(cluster_spec, trace_path, truth_path, perf_path, references, policies, round_s, objective, scheduler,
        backfill_flag, truth_fill, starvation_age, json_path, jobs_csv, plot_path, db_path) -> None:
    """Replay a trace on a simulated Slurm cluster under each policy and compare them.

    Exits 1, naming them, when any job of any policy did not finish."""
    from msched.policy.reservations import BeginTimeOptions
    from slurm_sim.cluster import with_scheduler
    from slurm_sim.compare import POLICIES, Classifier, SimRunError, SimSetup, compare
    from slurm_sim.trace import TraceError, fill_truth, load_trace

    names = [p.strip() for p in policies.split(",") if p.strip()]
    bad = [p for p in names if p not in POLICIES]
    if bad or not names:
        raise click.UsageError(f"--policy: unknown {', '.join(bad) or '(none)'}; choose from {', '.join(POLICIES)}")
    try:
        config = load_config()
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None
    if backfill_flag and scheduler == "builtin":
        raise click.UsageError("--backfill contradicts --scheduler builtin")
    cluster = with_scheduler(_cluster(cluster_spec), scheduler or ("backfill" if backfill_flag else None))
    truth = _load_table(truth_path or default_truth_path(), "--truth")
    if truth_fill:
        try:
            truth = fill_truth(truth, truth_fill, cluster.gpu_types)
        except TraceError as exc:
            raise click.UsageError(str(exc)) from None
    perf = _load_table(perf_path or config.performance, "--perf")
    ref_names = None
    if references:
        ref_names = [r.strip() for r in references.split(",") if r.strip()]
        missing = [r for r in ref_names if not perf.has_model(r)]
        if missing:
            raise click.UsageError(f"--references: {', '.join(missing)} not in the performance table "
                                   f"({perf_path or config.performance}); it has {', '.join(sorted(perf.models()))}")
        perf = PerfTable([r for r in perf.rows if r.model in set(ref_names)])
    try:
        trace_jobs = load_trace(trace_path, truth, cluster)
    except TraceError as exc:
        raise click.ClickException(str(exc)) from None
    store = None
    if db_path:
        from msched.store.db import Store, StoreError
        url = db_path if "://" in db_path else f"sqlite:///{Path(db_path).expanduser().resolve()}"
        try:
            store = Store(url)
        except StoreError as exc:
            raise click.ClickException(str(exc)) from None
    setup = SimSetup(cluster=cluster, truth=truth, perf=perf, classifier=Classifier(ref_names, perf),
                     round_s=round_s, objective=objective or config.objective,
                     starvation_age_s=_starvation(starvation_age, config), trace_name=Path(trace_path).name,
                     # the site config's planner and levers, as the reorderer reads them
                     policy_options={"planner": config.planner, "time_box_s": config.plan_time_s},
                     begin_times=BeginTimeOptions.from_config(config))
    try:
        results = compare(trace_jobs, names, setup, store=store,
                          progress=lambda m: click.echo(m, err=True))
    except SimRunError as exc:
        raise click.ClickException(str(exc)) from None
    _print_table(results, cluster, len(trace_jobs), cluster.scheduler.type)
    try:
        if json_path:
            Path(json_path).write_text(json.dumps([r.metrics for r in results], indent=2) + "\n")
        if jobs_csv:
            with open(jobs_csv, "w", newline="") as fh:
                w = csv.writer(fh)
                w.writerow(["job_id", "policy", "gpu_type", "submit", "start", "end"])
                for r in results:
                    for o in r.outcomes:
                        w.writerow([o.job_id, o.policy, o.gpu_type or "", _num(o.submit), _num(o.start), _num(o.end)])
        if plot_path:
            from slurm_sim.plot import plot_runs
            plot_runs(plot_path, [(r.policy, r.outcomes) for r in results], cluster,
                      title=f"{Path(trace_path).name} on {cluster.describe()}")
    except OSError as exc:
        raise click.ClickException(f"cannot write output: {exc}") from None
    lost = [r for r in results if r.unfinished]
    if lost:
        raise click.ClickException("unfinished jobs: " + "; ".join(
            f"{r.policy}: {len(r.unfinished)} ({', '.join(r.unfinished[:5])}{', ...' if len(r.unfinished) > 5 else ''})"
            for r in lost))


def _starvation(value: float | None, config) -> float | None:
    if value is None:
        return config.starvation_age_s
    return None if value == 0 else value


def _num(v: float | None) -> str:
    return "" if v is None else f"{v:.3f}".rstrip("0").rstrip(".")


def _print_table(results, cluster, n_jobs: int, scheduler: str) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{n_jobs} jobs on {cluster.describe()} ({cluster.total_gpus} GPUs), sched/{scheduler}")
    for col in ("policy", "finished", "makespan", "mean JCT", "p99 JCT", "mean wait", "GPU util", "x fifo",
                "x lower bound", "rounds"):
        table.add_column(col, justify="left" if col == "policy" else "right", no_wrap=True)
    for r in results:
        m = r.metrics
        util = m.get("gpu_utilization")
        table.add_row(r.policy, f"{m.get('finished', 0)}/{m.get('submitted', n_jobs)}", _fmt_s(m.get("makespan_s")),
                      _fmt_s(m.get("mean_jct_s")), _fmt_s(m.get("p99_jct_s")),
                      _fmt_s(m.get("mean_wait_s")), "-" if util is None else f"{util:.1%}", _fmt_r(m.get("ratio_to_fifo")),
                      _fmt_r(m.get("ratio_to_lower_bound")), str(r.rounds))
    Console(file=sys.stdout, width=max(120, Console().width)).print(table)
    lb = results[0].metrics.get("lower_bound_s") if results else None
    simple = results[0].metrics.get("simple_lower_bound_s") if results else None
    click.echo(f"lower bound on the makespan: {_fmt_s(lb)} (LP relaxation over GPU types; the simple bound, "
               f"longest job vs all work over all GPUs, is {_fmt_s(simple)})")
    runs = [(m["longest_job_s"] / m["makespan_s"], m["longest_job_s"], r.policy) for r in results
            if (m := r.metrics).get("makespan_s") and m.get("longest_job_s") is not None]
    if runs:
        share, longest, policy = max(runs)
        click.echo(f"longest job as run: {_fmt_s(longest)} ({policy}), at most {share:.2f} of a policy's makespan"
                   + (" (one job sets the makespan: the schedule matters little)" if share > 0.5 else ""))
