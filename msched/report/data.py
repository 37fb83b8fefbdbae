"""The report's figures: read-only queries on the store's tables, reduced to small frozen dataclasses.

Pure apart from the SQL reads: no Slurm, no printing. Each run (the real cluster, or one simulated policy
run) is reported on its own, over its own clock: a real run's "now" is the wall clock, a simulated run's
is the last thing that happened in it, so `--since 2h` means "the last two hours" of either.

Why these figures (issue 7): an administrator keeps msched on if the queue moves (waits, starvation),
the GPUs stay busy (busy share per type), and its estimates hold (estimated vs actual runtime); the
references whose estimates miss most are the ones worth calibrating first.
"""

from __future__ import annotations

import math
import re
import time as _time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field

from sqlalchemy import func, inspect, select
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from msched.store.schema import Job, PackedPair, Round, RoundDay, Run

ACTIVE = ("PENDING", "RUNNING")
# A job that ended like this says nothing about how long its work takes.
NOT_A_RUNTIME = ("CANCELLED", "FAILED", "NODE_FAIL", "TIMEOUT", "PREEMPTED", "OUT_OF_MEMORY", "BOOT_FAIL",
                 "DEADLINE")
RUN_KINDS = ("slurm", "sim")
NO_GROUP = "(none)"

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*([smhdw])")


class ReportError(ValueError):
    """A report that cannot be made as asked (bad option); the message is one line."""


def parse_duration(text: str) -> float:
    """Seconds in `90s`, `30m`, `2h`, `7d`, `1w`, `1d12h` (a bare number is seconds)."""
    s = text.strip().lower().replace(" ", "")
    if re.fullmatch(r"\d+(\.\d+)?", s):
        value = float(s)
    else:
        pos, value = 0, 0.0
        for m in _DURATION.finditer(s):
            if m.start() != pos:
                break
            value += float(m.group(1)) * _UNITS[m.group(2)]
            pos = m.end()
        if pos != len(s) or not s:
            raise ReportError(f"cannot read duration {text!r}: use a number with a unit s, m, h, d or w (e.g. 2h, 7d)")
    if value <= 0:
        raise ReportError(f"duration {text!r} must be positive")
    return value


# ----------------------------------------------------------------------------------------- dataclasses
@dataclass(frozen=True)
class RunInfo:
    id: int
    kind: str
    name: str
    policy: str
    period_start: float
    period_end: float          # the run's "now"
    jobs: int                  # jobs in the period
    gpus: dict[str, int] = field(default_factory=dict)
    live: bool = False         # the queue below came from Slurm just now


@dataclass(frozen=True)
class QueueGroup:
    """Jobs queued now in one similarity group, with the GPU types their last plan chose."""

    group: str
    pending: int
    running: int
    planned: dict[str, int] = field(default_factory=dict)     # planned type -> pending jobs


@dataclass(frozen=True)
class GpuTypeUsage:
    gpu_type: str
    gpus: int
    busy_share: float | None        # busy GPU-seconds / (GPUs x period); None = nothing to measure it by
    basis: str                      # "rounds" (sampled busy GPUs, all jobs) or "jobs" (msched jobs' intervals)
    jobs_by_group: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class GroupWait:
    group: str
    jobs: int
    mean_wait_s: float
    p95_wait_s: float
    max_wait_s: float


@dataclass(frozen=True)
class JobWait:
    job_id: str
    group: str
    model: str
    state: str
    wait_s: float                   # start - submit, or now - submit while it still waits
    gpu_type: str                   # the type it ran on, or the type planned for it


@dataclass(frozen=True)
class GroupEstimate:
    """actual / estimated runtime on the type the job ran on (1.0 = exact, 2.0 = took twice as long)."""

    group: str
    jobs: int
    median_ratio: float
    p10_ratio: float
    p90_ratio: float
    from_table: int = 0             # of `jobs`, estimated from today's performance table (no round planned them)


@dataclass(frozen=True)
class ReferenceMiss:
    reference: str
    group: str
    jobs: int
    median_ratio: float
    miss_factor: float              # exp(median |log ratio|): 1.0 = exact, 1.5 = typically 50% off either way


@dataclass(frozen=True)
class PairRow:
    """Two shard jobs that shared a GPU: each one's own/solo speed, predicted (when a round saw the
    pair) and measured (a simulated run's truth; None on a real cluster, which reports no such speed)."""

    job_a: str
    job_b: str
    model_a: str
    model_b: str
    gpu_type: str
    predicted_a: float | None
    predicted_b: float | None
    measured_a: float | None
    measured_b: float | None

    @staticmethod
    def _sum(a: float | None, b: float | None) -> float | None:
        return None if a is None or b is None else a + b

    @property
    def predicted(self) -> float | None:
        """Predicted combined throughput (own/solo + partner/solo)."""
        return self._sum(self.predicted_a, self.predicted_b)

    @property
    def measured(self) -> float | None:
        return self._sum(self.measured_a, self.measured_b)

    @property
    def slowest(self) -> float | None:
        """The slower job's measured own/solo speed (packing aims to keep it at 0.5 or more)."""
        return None if self.measured_a is None or self.measured_b is None else min(self.measured_a, self.measured_b)


@dataclass(frozen=True)
class PackingStats:
    """The run's packed pairs (the Packing issue): how many, how well predicted, the slowest job."""

    pairs: int = 0
    measured: int = 0
    mean_predicted: float | None = None        # combined, over pairs with a prediction
    mean_measured: float | None = None         # combined, over pairs with a measurement
    mean_abs_error: float | None = None        # |predicted - measured| combined, over pairs with both
    slowest: float | None = None               # the slowest measured own/solo speed of any packed job
    below_half: int = 0                        # pairs with a job measured below 0.5x solo
    shown: tuple[PairRow, ...] = ()            # slowest measured first, then the newest


MAX_PAIRS_SHOWN = 20


@dataclass(frozen=True)
class RoundError:
    time: float
    error: str


@dataclass(frozen=True)
class RoundStats:
    count: int
    dry_runs: int
    mean_plan_s: float | None
    max_plan_s: float | None
    mean_changes: float | None
    total_changes: int
    skipped: int
    last_time: float | None
    errors: tuple[RoundError, ...] = ()
    max_changes: int = 0                       # the most Slurm updates one round made
    mean_writes_per_job: float | None = None   # Slurm updates per msched job over its life (churn)
    max_writes_per_job: int | None = None
    aggregated_days: int = 0                   # days of the period known only from daily aggregates


@dataclass(frozen=True)
class PlotSeries:
    """What the HTML page plots (the terminal shows only the tables)."""

    utilisation: dict[str, list[tuple[float, float]]] = field(default_factory=dict)   # type -> (t, busy share)
    queue: list[tuple[float, int, int]] = field(default_factory=list)                 # (t, pending, running)
    waits_by_group: dict[str, list[float]] = field(default_factory=dict)
    est_vs_actual: list[tuple[str, float, float]] = field(default_factory=list)       # (group, est s, actual s)


@dataclass(frozen=True)
class RunReport:
    run: RunInfo
    queue: tuple[QueueGroup, ...]
    gpu_types: tuple[GpuTypeUsage, ...]
    waits: tuple[GroupWait, ...]
    longest_waits: tuple[JobWait, ...]
    starving: tuple[JobWait, ...]          # pending now, past the starvation age
    started_late: int                      # started in the period after waiting past the starvation age
    estimates: tuple[GroupEstimate, ...]
    reference_misses: tuple[ReferenceMiss, ...]
    rounds: RoundStats
    series: PlotSeries
    packing: PackingStats = PackingStats()


@dataclass(frozen=True)
class Report:
    generated_at: float
    database: str
    since_s: float | None
    starvation_age_s: float
    runs: tuple[RunReport, ...] = ()
    message: str = ""               # why there is nothing to show, when there is nothing

    @property
    def empty(self) -> bool:
        return not self.runs


@dataclass(frozen=True)
class LiveJob:
    """A tagged job as Slurm shows it now (the command reads Slurm; this module stays free of it)."""

    job_id: str
    state: str
    group: str
    model: str
    submit_time: float
    planned_type: str


def to_jsonable(report: Report) -> dict:
    """The report as plain JSON data (NaN becomes null, so any JSON reader takes it)."""
    def clean(x):
        if isinstance(x, float):
            return None if math.isnan(x) or math.isinf(x) else x
        if isinstance(x, dict):
            return {str(k): clean(v) for k, v in x.items()}
        if isinstance(x, (list, tuple)):
            return [clean(v) for v in x]
        return x

    return clean(asdict(report))


# ----------------------------------------------------------------------------------------- helpers
def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile, q in [0, 100]."""
    xs = sorted(values)
    if not xs:
        return math.nan
    k = (len(xs) - 1) * q / 100.0
    lo, hi = math.floor(k), math.ceil(k)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def _group(name: str | None) -> str:
    return name or NO_GROUP


def _overlap(a0: float, a1: float, b0: float, b1: float) -> float:
    return max(0.0, min(a1, b1) - max(a0, b0))


# ----------------------------------------------------------------------------------------- queries
def has_schema(engine: Engine) -> bool:
    names = set(inspect(engine).get_table_names())
    return {"runs", "jobs", "rounds"} <= names


def list_runs(session: Session) -> list[Run]:
    return list(session.scalars(select(Run).order_by(Run.kind, Run.name)))


def select_runs(runs: Sequence[Run], name: str | None = None, kind: str | None = None) -> list[Run]:
    """Runs matching --run (exact name, else a unique substring) and --kind; errors list the choices."""
    if kind is not None and kind not in RUN_KINDS:
        raise ReportError(f"unknown run kind {kind!r}; choose one of {', '.join(RUN_KINDS)}")
    chosen = [r for r in runs if kind is None or r.kind == kind]
    if name is not None:
        exact = [r for r in chosen if r.name == name]
        partial = [r for r in chosen if name in r.name]
        if exact:
            chosen = exact
        elif len(partial) == 1:
            chosen = partial
        else:
            names = ", ".join(sorted(r.name for r in chosen)) or "(none)"
            what = "matches several runs" if partial else "is not a run"
            raise ReportError(f"{name!r} {what}; runs: {names}")
    return chosen


def build_report(
    session: Session, *, database: str, since_s: float | None = None, run_name: str | None = None,
    kind: str | None = None, starvation_age_s: float = 86400.0, now: float | None = None,
    live_jobs: Iterable[LiveJob] | None = None, live_run: str | None = None,
    estimator: Callable[[Job], dict[str, float]] | None = None,
) -> Report:
    """The whole report. `now` is the wall clock for real runs (tests pin it); `live_jobs`, when given,
    replace the database's idea of the queue for the real run named `live_run` (the site's cluster_name).
    `estimator` estimates a finished job that no round planned (it started before any round saw it
    pending), so the estimate check covers those jobs too: runtime per GPU type, or {}."""
    wall = _time.time() if now is None else now
    all_runs = list_runs(session)
    base = dict(generated_at=wall, database=database, since_s=since_s, starvation_age_s=starvation_age_s)
    if not all_runs:
        return Report(**base, message="The database holds no runs yet: nothing has been scheduled or simulated. "
                                      "Run `msched reorder` (from cron) or `msched sim --db` to fill it.")
    runs = select_runs(all_runs, run_name, kind)
    if not runs:
        return Report(**base, message=f"No {kind} runs in the database.")
    live = list(live_jobs) if live_jobs is not None else None
    slurm_runs = [r for r in runs if r.kind == "slurm"]
    live_target = None
    if live is not None and slurm_runs:
        # only the run of the cluster Slurm's commands talk to (a copied database is another cluster's)
        live_target = next((r for r in slurm_runs if r.name == live_run), None)
    reports = []
    for run in runs:
        reports.append(_run_report(session, run, since_s, starvation_age_s, wall,
                                   live if run is live_target else None, estimator))
    return Report(**base, runs=tuple(reports))


def _run_report(session: Session, run: Run, since_s: float | None, starvation_age_s: float, wall: float,
                live: list[LiveJob] | None,
                estimator: Callable[[Job], dict[str, float]] | None = None) -> RunReport:
    jobs = list(session.scalars(select(Job).where(Job.run_id == run.id)))
    # rounds are read for the period only (a month of rounds at one a minute is 43,200 rows); rounds
    # past the retention are in round_days, one row a day (msched.store.retention)
    first_round, last_round = session.execute(
        select(func.min(Round.time), func.max(Round.time)).where(Round.run_id == run.id)).one()
    first_day, last_day = session.execute(
        select(func.min(RoundDay.first_time), func.max(RoundDay.last_time)).where(RoundDay.run_id == run.id)).one()
    round_times = [t for t in (first_round, last_round, first_day, last_day) if t is not None]
    if run.kind == "slurm":
        now = wall
    else:
        # the simulated clock ends with the last job event (a round after that changes nothing)
        stamps = [t for j in jobs for t in (j.submit_time, j.start_time, j.end_time) if t is not None]
        stamps = stamps or round_times
        now = max(stamps) if stamps else run.created_at

    def submitted(j: Job) -> float:
        """Submit time; without one, the job was submitted no later than it was seen or started."""
        if j.submit_time is not None:
            return j.submit_time
        return min(j.first_seen, j.start_time) if j.start_time is not None else j.first_seen

    first = [*(submitted(j) for j in jobs), *round_times]
    start = min(first) if first else run.created_at
    t0 = max(start, now - since_s) if since_s else start
    t1 = now
    detailed = list(session.scalars(select(Round).where(Round.run_id == run.id, Round.time >= t0,
                                                        Round.time <= t1).order_by(Round.time)))
    days = list(session.scalars(select(RoundDay).where(RoundDay.run_id == run.id, RoundDay.last_time >= t0,
                                                       RoundDay.first_time <= t1).order_by(RoundDay.day)))
    rounds = [*(_DaySample.of(d) for d in days), *detailed]     # days are all older than detailed rounds

    # a job belongs to the period if it was around during it
    in_period = [j for j in jobs if submitted(j) <= t1 and (j.end_time is None or j.end_time >= t0)]
    gpus = _gpu_totals(session, run)
    info = RunInfo(id=run.id, kind=run.kind, name=run.name, policy=run.policy, period_start=t0, period_end=t1,
                   jobs=len(in_period), gpus=gpus, live=live is not None)
    planned_of = {j.job_id: j.planned_type or "" for j in jobs}

    # ---- queue now
    if live is not None:
        queue_jobs = [(lj.group or NO_GROUP, lj.state, lj.planned_type or planned_of.get(lj.job_id, ""))
                      for lj in live if lj.state in ACTIVE]
    else:
        queue_jobs = [(_group(j.group), j.state, j.planned_type or "") for j in jobs
                      if j.state in ACTIVE and j.end_time is None]
    q: dict[str, dict] = defaultdict(lambda: {"pending": 0, "running": 0, "planned": Counter()})
    for group, state, planned in queue_jobs:
        if state == "PENDING":
            q[group]["pending"] += 1
            q[group]["planned"][planned or "any"] += 1
        else:
            q[group]["running"] += 1
    queue = tuple(QueueGroup(g, v["pending"], v["running"], dict(v["planned"].most_common()))
                  for g, v in sorted(q.items()))

    # ---- per GPU type
    usage = _gpu_usage(gpus, rounds, in_period, t0, t1)

    # ---- waits
    waits_by_group: dict[str, list[float]] = defaultdict(list)
    job_waits: list[JobWait] = []
    for j in in_period:
        sub = submitted(j)
        if j.start_time is not None and t0 <= j.start_time <= t1:
            w = max(0.0, j.start_time - sub)
            waits_by_group[_group(j.group)].append(w)
            job_waits.append(JobWait(j.job_id, _group(j.group), j.model, j.state, w, j.actual_type or ""))
        elif j.start_time is None and j.state == "PENDING":
            job_waits.append(JobWait(j.job_id, _group(j.group), j.model, j.state, max(0.0, t1 - sub),
                                     j.planned_type or ""))
    if live is not None:   # Slurm's queue now is fresher than the last round
        job_waits = [w for w in job_waits if w.state != "PENDING"]
        for lj in live:
            if lj.state == "PENDING":
                job_waits.append(JobWait(lj.job_id, lj.group or NO_GROUP, lj.model, lj.state,
                                         max(0.0, t1 - lj.submit_time),
                                         lj.planned_type or planned_of.get(lj.job_id, "")))
    waits = tuple(GroupWait(g, len(ws), sum(ws) / len(ws), percentile(ws, 95), max(ws))
                  for g, ws in sorted(waits_by_group.items()))
    longest = tuple(sorted(job_waits, key=lambda w: -w.wait_s)[:10])
    # starving: still waiting past the age (the reorderer should have put them first); jobs that did
    # start after waiting that long are only counted
    starving = tuple(sorted((w for w in job_waits if w.state == "PENDING" and w.wait_s > starvation_age_s),
                            key=lambda w: -w.wait_s))
    started_late = sum(1 for w in job_waits if w.state != "PENDING" and w.wait_s > starvation_age_s)

    # ---- estimates
    ratios: dict[str, list[float]] = defaultdict(list)
    from_table: Counter = Counter()
    by_ref: dict[tuple[str, str], list[float]] = defaultdict(list)
    points: list[tuple[str, float, float]] = []
    for j in in_period:
        if j.start_time is None or j.end_time is None or not (t0 <= j.end_time <= t1):
            continue
        if j.state in NOT_A_RUNTIME or not j.actual_type:
            continue
        est = (j.est_runtime or {}).get(j.actual_type)
        if not est and estimator is not None and run.kind == "slurm":   # the site table is the reorderer's
            try:
                est = estimator(j).get(j.actual_type)
            except Exception:   # an estimate the table cannot make is simply left out
                est = None
            if est:
                from_table[_group(j.group)] += 1
        actual = j.end_time - j.start_time
        if not est or est <= 0 or actual <= 0:
            continue
        ratio = actual / est
        ratios[_group(j.group)].append(ratio)
        by_ref[(j.reference or "?", _group(j.group))].append(ratio)
        points.append((_group(j.group), float(est), float(actual)))
    estimates = tuple(GroupEstimate(g, len(rs), percentile(rs, 50), percentile(rs, 10), percentile(rs, 90),
                                    from_table[g])
                      for g, rs in sorted(ratios.items()))
    misses = sorted(
        (ReferenceMiss(ref, g, len(rs), percentile(rs, 50),
                       math.exp(percentile([abs(math.log(r)) for r in rs], 50)))
         for (ref, g), rs in by_ref.items()),
        key=lambda m: (-m.miss_factor, m.reference))
    reference_misses = tuple(misses[:5])

    # ---- rounds (detailed ones, plus the days past the retention)
    real_rounds = [r for r in detailed if not r.dry_run]
    errors = tuple(RoundError(r.time, r.error) for r in detailed if r.error)[-5:]
    plan_times = [r.plan_seconds for r in detailed if not r.error]
    n_plans = len(plan_times) + sum(d.rounds - d.errors for d in days)
    n_real = len(real_rounds) + sum(d.rounds - d.dry_runs for d in days)
    total_changes = sum(r.changes for r in real_rounds) + sum(d.changes for d in days)
    writes = [j.writes or 0 for j in in_period]
    rounds_stats = RoundStats(
        count=len(detailed) + sum(d.rounds for d in days),
        dry_runs=len(detailed) - len(real_rounds) + sum(d.dry_runs for d in days),
        mean_plan_s=(sum(plan_times) + sum(d.plan_seconds for d in days)) / n_plans if n_plans else None,
        max_plan_s=max([*plan_times, *(d.max_plan_seconds for d in days)]) if n_plans else None,
        mean_changes=total_changes / n_real if n_real else None,
        total_changes=total_changes,
        skipped=sum(r.skipped for r in detailed) + sum(d.skipped for d in days),
        last_time=rounds[-1].time if rounds else None, errors=tuple(reversed(errors)),
        max_changes=max([*(r.changes for r in real_rounds), *(d.max_changes for d in days)], default=0),
        mean_writes_per_job=sum(writes) / len(writes) if writes else None,
        max_writes_per_job=max(writes) if writes else None,
        aggregated_days=len(days))

    series = PlotSeries(
        utilisation=_utilisation_series(gpus, rounds, in_period, t0, t1),
        queue=_queue_series(rounds, in_period, t0, t1, submitted),
        waits_by_group={g: sorted(ws) for g, ws in sorted(waits_by_group.items())},
        est_vs_actual=points)
    return RunReport(run=info, queue=queue, gpu_types=usage, waits=waits, longest_waits=longest,
                     starving=starving, started_late=started_late, estimates=estimates, reference_misses=reference_misses,
                     rounds=rounds_stats, series=series, packing=_packing(session, run.id, jobs))


def _packing(session: Session, run_id: int, jobs: Sequence[Job]) -> PackingStats:
    """The run's packed pairs (msched.store.schema.PackedPair); none in a store written before packing."""
    if not inspect(session.connection()).has_table(PackedPair.__tablename__):
        return PackingStats()
    rows = list(session.scalars(select(PackedPair).where(PackedPair.run_id == run_id).order_by(PackedPair.id)))
    if not rows:
        return PackingStats()
    model = {j.job_id: j.model for j in jobs}
    pairs = [PairRow(r.job_a, r.job_b, model.get(r.job_a, ""), model.get(r.job_b, ""), r.gpu_type or "",
                     r.predicted_a, r.predicted_b, r.measured_a, r.measured_b) for r in rows]
    predicted = [p.predicted for p in pairs if p.predicted is not None]
    measured = [p for p in pairs if p.measured is not None]
    both = [abs(p.predicted - p.measured) for p in measured if p.predicted is not None]
    worst = sorted(measured, key=lambda p: p.slowest)[:MAX_PAIRS_SHOWN // 2]
    newest = [p for p in reversed(pairs) if p not in worst][:MAX_PAIRS_SHOWN - len(worst)]
    return PackingStats(
        pairs=len(pairs), measured=len(measured),
        mean_predicted=sum(predicted) / len(predicted) if predicted else None,
        mean_measured=sum(p.measured for p in measured) / len(measured) if measured else None,
        mean_abs_error=sum(both) / len(both) if both else None,
        slowest=min((p.slowest for p in measured), default=None),
        below_half=sum(p.slowest < 0.5 for p in measured), shown=(*worst, *newest))


@dataclass(frozen=True)
class _DaySample:
    """A day past the retention, read as one round of the day's means (for the utilisation and queue
    series, which hold each sample until the next)."""

    time: float
    pending: int
    running: int
    busy_gpus: dict
    total_gpus: dict
    dry_run: int = 0
    error: str | None = None

    @classmethod
    def of(cls, d: RoundDay) -> _DaySample:
        n = max(1, d.rounds)
        return cls(d.first_time, round(d.pending / n), round(d.running / n),
                   {t: v / n for t, v in (d.busy_gpus or {}).items()}, dict(d.total_gpus or {}))


def _gpu_totals(session: Session, run: Run) -> dict[str, int]:
    """GPUs per type: the latest round's count (the cluster as it is), else the latest day's, else the
    run's at creation."""
    for table in (Round, RoundDay):
        when = table.time if table is Round else table.last_time
        latest = session.scalar(select(table.total_gpus).where(table.run_id == run.id).order_by(when.desc()).limit(1))
        if latest:
            return {str(k): int(v) for k, v in sorted(latest.items())}
    return {str(k): int(v) for k, v in sorted((run.gpus or {}).items())}


def _gpu_usage(gpus: dict[str, int], rounds: Sequence[Round], jobs: Sequence[Job], t0: float,
               t1: float) -> tuple[GpuTypeUsage, ...]:
    """Busy share per type. Rounds sample every busy GPU (non-msched jobs too), so they are preferred
    when there are at least two in the period; otherwise msched jobs' own run intervals are summed."""
    by_group: dict[str, Counter] = defaultdict(Counter)
    busy_s: Counter = Counter()
    for j in jobs:
        if j.start_time is None or not j.actual_type:
            continue
        end = j.end_time if j.end_time is not None else t1
        ov = _overlap(j.start_time, end, t0, t1)
        if ov > 0 or (j.start_time <= t1 and end >= t0):
            by_group[j.actual_type][_group(j.group)] += 1
        busy_s[j.actual_type] += ov * max(1, j.num_gpus)
    sampled = [r for r in rounds if r.total_gpus]
    types = sorted(set(gpus) | set(by_group))
    out = []
    for t in types:
        total = gpus.get(t, 0)
        share, basis = None, "jobs"
        if len(sampled) >= 2:
            share, basis = _time_weighted([(r.time, _frac(r, t)) for r in sampled], t1), "rounds"
        elif total and t1 > t0:
            share = min(1.0, busy_s[t] / (total * (t1 - t0)))
        out.append(GpuTypeUsage(t, total, share, basis, dict(sorted(by_group[t].items()))))
    return tuple(out)


def _frac(r: Round, t: str) -> float | None:
    total = (r.total_gpus or {}).get(t)
    if not total:
        return None
    return min(1.0, float((r.busy_gpus or {}).get(t, 0)) / float(total))


def _time_weighted(samples: Sequence[tuple[float, float | None]], end: float) -> float | None:
    """Mean of a step function: each sample holds until the next one (the last until `end`)."""
    pts = [(t, v) for t, v in samples if v is not None]
    if not pts:
        return None
    if len(pts) == 1:
        return pts[0][1]
    acc = span = 0.0
    for (ta, va), (tb, _) in zip(pts, pts[1:], strict=False):
        acc += va * (tb - ta)
        span += tb - ta
    tail = max(0.0, end - pts[-1][0])
    acc += pts[-1][1] * tail
    span += tail
    return acc / span if span > 0 else sum(v for _, v in pts) / len(pts)


def _grid(t0: float, t1: float, n: int = 120) -> list[float]:
    if t1 <= t0:
        return [t0]
    return [t0 + (t1 - t0) * i / (n - 1) for i in range(n)]


def _utilisation_series(gpus: dict[str, int], rounds: Sequence[Round], jobs: Sequence[Job], t0: float,
                        t1: float) -> dict[str, list[tuple[float, float]]]:
    sampled = [r for r in rounds if r.total_gpus]
    out: dict[str, list[tuple[float, float]]] = {}
    if len(sampled) >= 2:
        types = sorted({t for r in sampled for t in r.total_gpus})
        for t in types:
            out[t] = [(r.time, v) for r in sampled if (v := _frac(r, t)) is not None]
        return out
    intervals: dict[str, list[tuple[float, float, int]]] = defaultdict(list)
    for j in jobs:
        if j.start_time is not None and j.actual_type:
            intervals[j.actual_type].append((j.start_time, j.end_time if j.end_time is not None else t1,
                                             max(1, j.num_gpus)))
    for t, total in gpus.items():
        if total:
            out[t] = [(x, min(1.0, sum(n for a, b, n in intervals[t] if a <= x < b) / total))
                      for x in _grid(t0, t1)]
    return out


def _queue_series(rounds: Sequence[Round], jobs: Sequence[Job], t0: float, t1: float,
                  submitted) -> list[tuple[float, int, int]]:
    if len(rounds) >= 2:
        return [(r.time, r.pending, r.running) for r in rounds]
    out = []
    for x in _grid(t0, t1):
        pending = running = 0
        for j in jobs:
            start = j.start_time if j.start_time is not None else math.inf
            end = j.end_time if j.end_time is not None else math.inf
            if submitted(j) <= x < start:
                pending += 1
            elif start <= x < end:
                running += 1
        out.append((x, pending, running))
    return out
