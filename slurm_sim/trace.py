"""Workload traces: reading DESIGN's trace CSV (with errors that name the row) and synthesising them.

Trace CSV (DESIGN, a stable interface): `job_id,submit_time,user,model,num_gpus,batch_size,iterations
[,gpu_type][,time_limit_s][,partition][,dependency][,array]`; seconds from trace start, `batch_size` per
GPU, `gpu_type` only where the user pins one, `time_limit_s` the user's own limit (empty: the partition's
DefaultTime), `partition` sbatch -p's comma list, `dependency` afterok:ID[:ID] / afterany:ID[:ID] on
earlier rows, `array` N or A-B (each task becomes a job `ID_K`).

Synthetic workloads (`synth`) have Philly-shaped sizes and durations: rows drawn from the Philly trace
(`philly_jobs.csv`, jobs of the allowed GPU counts; durations clipped to [60 s, 600,000 s] so one
months-long job does not swamp a comparison) when that file is available, else Gavel's distribution
(GPUs 1/2/4/8 with P = 0.7/0.1/0.15/0.05; duration 60*10^U(1.5,3) s w.p. 0.8, else 60*10^U(3,4) s).
A duration becomes iterations through the model's true iteration time: the duration is taken to be the
job's runtime on a "middle" GPU type, the median over the types with data of the iteration time at the
job's GPU count and batch size, so no single type is favoured by construction.
"""

from __future__ import annotations

import bisect
import csv
import math
import os
import random
import statistics
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from functools import lru_cache
from pathlib import Path
from typing import IO

from msched.estimate.perf_table import PerfRow, PerfTable
from slurm_sim.cluster import ClusterSpec

REQUIRED = ("job_id", "submit_time", "user", "model", "num_gpus", "batch_size", "iterations")
OPTIONAL = ("gpu_type", "time_limit_s", "partition", "dependency", "array")
GAVEL_SIZES = ((1, 0.7), (2, 0.1), (4, 0.15), (8, 0.05))
MIN_DURATION_S, MAX_DURATION_S = 60.0, 600_000.0
DEFAULT_BATCH = 12
ARRIVALS = ("static", "poisson:MEAN_S", "philly")
TRUTH_FILLS = ("median-type-ratio",)
MAX_ARRAY_TASKS = 10_000


class TraceError(ValueError):
    """A trace that cannot be used; the message is one line naming the file and row."""


@dataclass(frozen=True, slots=True)
class TraceJob:
    """One trace row (one task of an array row). Slots: a 1M-line trace holds a million of these."""

    job_id: str
    submit_time: float
    user: str
    model: str
    num_gpus: int
    batch_size: int
    iterations: int
    gpu_type: str | None = None
    time_limit_s: float | None = None
    partition: str = ""                 # comma-separated partitions ("" = the cluster's default one)
    dependency: str = ""                # afterok:ID[:ID] / afterany:ID[:ID] on earlier trace job ids


# ----------------------------------------------------------------------------- reading
def load_trace(path: str | os.PathLike, truth: PerfTable | None = None,
               cluster: ClusterSpec | None = None) -> list[TraceJob]:
    """Read and check a trace (a streaming csv.reader, strings interned: ~1 µs and well under 1 KB a row).

    With `truth` and `cluster`, every job must be able to run somewhere, and the truth must have data on
    every type it may be sent to (`truth_gaps`), else one line names the gaps. Array rows (`array` = N or
    A-B) become one job per task, `ID_K`; a dependency on an array's ID waits for all of its tasks."""
    name = str(path)
    try:
        fh = open(path, newline="")
    except OSError as exc:
        raise TraceError(f"cannot read trace {name}: {exc.strerror}") from None
    with fh:
        reader = csv.reader(fh)
        header = next(reader, None)
        cols = [c.strip() for c in (header or [])]
        missing = [c for c in REQUIRED if c not in cols]
        if missing:
            raise TraceError(f"{name} line 1: missing column(s) {', '.join(missing)}; expected "
                             f"{','.join(REQUIRED)}[,{'][,'.join(OPTIONAL)}]")
        idx = {c: cols.index(c) for c in (*REQUIRED, *OPTIONAL) if c in cols}
        parse = _RowParser(name, idx, len(cols))
        jobs: list[TraceJob] = []
        seen: dict[str, tuple[str, ...]] = {}       # trace id -> its job ids (an array's tasks)
        submitted: dict[str, float] = {}
        checked: set[tuple] = set()
        for lineno, rec in enumerate(reader, start=2):
            if not rec:
                continue
            job, tasks = parse(rec, lineno)
            if job.job_id in seen:
                raise TraceError(f"{name} line {lineno} (job {job.job_id}): duplicate job_id")
            if job.dependency:
                job = _resolve_dependency(job, seen, submitted, f"{name} line {lineno} (job {job.job_id})")
            submitted[job.job_id] = job.submit_time
            key = (job.model, job.num_gpus, job.batch_size, job.gpu_type, job.partition)
            if truth is not None and key not in checked:
                _check_runnable(job, truth, cluster, f"{name} line {lineno} (job {job.job_id})")
                checked.add(key)
            if tasks is None:
                seen[job.job_id] = (job.job_id,)
                jobs.append(job)
            else:
                ids = tuple(f"{job.job_id}_{k}" for k in tasks)
                clash = [i for i in ids if i in seen]
                if clash:
                    raise TraceError(f"{name} line {lineno} (job {job.job_id}): array task id {clash[0]} "
                                     "clashes with another job")
                seen[job.job_id] = ids
                for i in ids:
                    seen[i] = (i,)
                    jobs.append(replace(job, job_id=i))
    if not jobs:
        raise TraceError(f"{name}: no jobs")
    if truth is not None and cluster is not None:
        gaps = truth_gaps(jobs, truth, cluster)
        if gaps:
            raise TraceError(f"{name}: {describe_gaps(gaps)}; the simulator will not guess those runtimes: use a "
                             f"truth with those rows or --truth-fill {TRUTH_FILLS[0]}")
    return jobs


class _RowParser:
    """Turns one CSV record into a TraceJob; repeated strings (users, models, types) are shared.

    A fast path reads a plain row (integers as integers, nothing optional but a limit and a type) in one
    try block; anything else, and every error, goes through the careful path that names what is wrong."""

    def __init__(self, name: str, idx: dict[str, int], ncols: int):
        self.name, self.idx, self.ncols = name, idx, ncols
        self.strings: dict[str, str] = {}
        self._plain = not any(k in idx for k in ("partition", "dependency", "array"))
        self._cols = tuple(idx[k] for k in REQUIRED)
        self._type_col = idx.get("gpu_type")
        self._limit_col = idx.get("time_limit_s")

    def _intern(self, v: str) -> str:
        return self.strings.setdefault(v, v)

    def __call__(self, rec: list[str], lineno: int) -> tuple[TraceJob, range | None]:
        if self._plain and len(rec) == self.ncols:
            i_id, i_t, i_u, i_m, i_g, i_b, i_it = self._cols
            try:
                job_id, model = rec[i_id].strip(), rec[i_m].strip()
                t, g, b, it = float(rec[i_t]), int(rec[i_g]), int(rec[i_b]), int(rec[i_it])
                raw_limit = rec[self._limit_col].strip() if self._limit_col is not None else ""
                limit = float(raw_limit) if raw_limit else None
                gpu_type = rec[self._type_col].strip().lower() if self._type_col is not None else ""
            except ValueError:
                return self._careful(rec, lineno)
            if (job_id and model and 0.0 <= t < math.inf and g >= 1 and b >= 1 and it >= 1
                    and (limit is None or 1.0 <= limit < math.inf)):
                strings = self.strings
                return TraceJob(job_id, t, strings.setdefault(u := rec[i_u].strip(), u),
                                strings.setdefault(model, model), g, b, it,
                                strings.setdefault(gpu_type, gpu_type) if gpu_type else None, limit), None
        return self._careful(rec, lineno)

    def _careful(self, rec: list[str], lineno: int) -> tuple[TraceJob, range | None]:
        idx = self.idx

        def field_(key: str) -> str:
            i = idx.get(key)
            return rec[i].strip() if i is not None and i < len(rec) else ""

        job_id = field_("job_id")
        where = f"{self.name} line {lineno}" + (f" (job {job_id})" if job_id else "")
        if len(rec) > self.ncols:
            raise TraceError(f"{where}: more values than columns")
        if not job_id:
            raise TraceError(f"{where}: empty job_id")
        model = field_("model")
        if not model:
            raise TraceError(f"{where}: empty model")

        def number(key: str, kind, minimum: float, optional: bool = False):
            raw = field_(key)
            if raw == "" and optional:
                return None
            try:
                value = float(raw)
                if kind is int:
                    if value != int(value):
                        raise ValueError
                    value = int(value)
            except (ValueError, OverflowError):
                raise TraceError(f"{where}: {key} {raw!r} is not {'an integer' if kind is int else 'a number'}") from None
            if not math.isfinite(value) or value < minimum:
                raise TraceError(f"{where}: {key} must be >= {minimum:g} (got {raw})")
            return value

        gpu_type = field_("gpu_type").lower() or None
        partition = ",".join(p.strip().lower() for p in field_("partition").split(",") if p.strip())
        job = TraceJob(job_id=job_id, submit_time=number("submit_time", float, 0.0),
                       user=self._intern(field_("user")), model=self._intern(model),
                       num_gpus=number("num_gpus", int, 1), batch_size=number("batch_size", int, 1),
                       iterations=number("iterations", int, 1),
                       gpu_type=self._intern(gpu_type) if gpu_type else None,
                       time_limit_s=number("time_limit_s", float, 1.0, optional=True),
                       partition=self._intern(partition), dependency=field_("dependency"))
        return job, _array_tasks(field_("array"), where)


def _array_tasks(text: str, where: str) -> range | None:
    """`array` = N (tasks 0..N-1) or A-B (sbatch --array's simple form); empty: not an array."""
    if not text:
        return None
    lo, sep, hi = text.partition("-")
    try:
        tasks = range(int(lo), int(hi) + 1) if sep else range(int(lo))
    except ValueError:
        tasks = range(0)
    if not tasks or len(tasks) > MAX_ARRAY_TASKS or tasks.start < 0:
        raise TraceError(f"{where}: array {text!r}: expected N or A-B (0 <= A <= B, at most {MAX_ARRAY_TASKS} tasks)")
    return tasks


def _resolve_dependency(job: TraceJob, seen: dict[str, tuple[str, ...]], submitted: dict[str, float],
                        where: str) -> TraceJob:
    """Dependencies name earlier rows submitted no later; an array's ID expands to its tasks."""
    kind, _, ids = job.dependency.partition(":")
    if kind not in ("afterok", "afterany") or not ids.strip(":"):
        raise TraceError(f"{where}: dependency {job.dependency!r}: expected afterok:ID[:ID...] or afterany:ID[:ID...]")
    out = []
    for d in (i for i in ids.split(":") if i):
        if d not in seen:
            raise TraceError(f"{where}: dependency on {d!r}, which is not an earlier row of the trace")
        if submitted[d] > job.submit_time:
            raise TraceError(f"{where}: dependency on {d!r}, submitted later ({submitted[d]:g} s)")
        out.extend(seen[d])
    return replace(job, dependency=f"{kind}:{':'.join(out)}")


def candidate_types(job: TraceJob, cluster: ClusterSpec) -> list[str]:
    """GPU types a job may be sent to: its pin, else every type of its partitions whose nodes hold its size."""
    parts = set(job.partition.split(",")) if job.partition else {cluster.default_partition}
    types = [job.gpu_type] if job.gpu_type else cluster.gpu_types
    return [t for t in types if cluster.fits(t, job.num_gpus, parts)]


def _check_runnable(job: TraceJob, truth: PerfTable, cluster: ClusterSpec | None, where: str) -> None:
    if not truth.has_model(job.model):
        raise TraceError(f"{where}: model {job.model!r} is not in the truth table "
                         f"(it has {len(truth.models())} models, e.g. {', '.join(sorted(truth.models())[:4])})")
    if cluster is None:
        return
    types = cluster.gpu_types
    if job.gpu_type is not None and job.gpu_type not in types:
        raise TraceError(f"{where}: gpu_type {job.gpu_type!r} is not in the cluster (types: {', '.join(types)})")
    unknown = [p for p in job.partition.split(",") if p and p not in cluster.partition]
    if unknown:
        raise TraceError(f"{where}: partition {', '.join(unknown)} is not in the cluster "
                         f"(partitions: {', '.join(cluster.partition)})")
    fitting = candidate_types(job, cluster)
    if not fitting:
        allowed = [job.gpu_type] if job.gpu_type else types
        most = max(cluster.max_gpus(t) for t in allowed)
        raise TraceError(f"{where}: {job.num_gpus} GPUs is more than the cluster can give one job"
                         f"{' of type ' + job.gpu_type if job.gpu_type else ''}"
                         f"{' in partition ' + job.partition if job.partition else ''} (at most {most}: one node "
                         "or whole nodes of one type)")


def truth_gaps(jobs: Sequence[TraceJob], truth: PerfTable, cluster: ClusterSpec) -> dict[tuple[str, str], int]:
    """(model, GPU type) -> jobs of the trace that may be sent to a type where the truth has no data."""
    gaps: Counter[tuple[str, str]] = Counter()
    memo: dict[tuple, list[str]] = {}
    for j in jobs:
        key = (j.model, j.num_gpus, j.batch_size, j.gpu_type, j.partition)
        missing = memo.get(key)
        if missing is None:
            missing = memo[key] = [t for t in candidate_types(j, cluster)
                                   if truth.iter_ms(j.model, t, j.num_gpus, j.batch_size) is None]
        for t in missing:
            gaps[j.model, t] += 1
    return dict(gaps)


def describe_gaps(gaps: dict[tuple[str, str], int]) -> str:
    by_model: dict[str, list[str]] = {}
    for (m, t) in sorted(gaps):
        by_model.setdefault(m, []).append(t)
    jobs = {m: max(gaps[m, t] for t in ts) for m, ts in by_model.items()}
    parts = [f"{m} on {'/'.join(ts)} ({jobs[m]} job{'s' if jobs[m] > 1 else ''})" for m, ts in by_model.items()]
    shown = "; ".join(parts[:6]) + (f"; and {len(parts) - 6} more model(s)" if len(parts) > 6 else "")
    return f"the truth table has no data where {sum(jobs.values())} job(s) may be sent: {shown}"


def fill_truth(truth: PerfTable, rule: str, types: Sequence[str]) -> PerfTable:
    """The truth with each missing (model, type) filled by an explicit, documented rule.

    `median-type-ratio`: a model without rows on type T gets, for each of its rows on the reference type S
    (the type that shares the most models with T), a row on T with iter_ms x the median over the models
    measured on both of iter_ms(T) / iter_ms(S) at the same GPU count and batch size. The filled rows are
    marked `source=fill:median-type-ratio`. It guesses; the simulator uses it only when asked."""
    if rule not in TRUTH_FILLS:
        raise TraceError(f"unknown truth fill rule {rule!r}; choose from {', '.join(TRUTH_FILLS)}")
    by_key = {(r.model, r.gpu_type, r.num_gpus, r.batch_size, r.precision): r for r in truth.rows}
    models_on: dict[str, set[str]] = {}
    for r in truth.rows:
        models_on.setdefault(r.gpu_type, set()).add(r.model)
    added = []
    for t in types:
        lacking = sorted(m for m in truth.models() if m not in models_on.get(t, set()))
        if not lacking:
            continue
        if t not in models_on:
            raise TraceError(f"--truth-fill {rule}: the truth has no row at all on {t}; nothing to scale from")
        for m in lacking:
            sources = sorted((s for s in models_on if s != t and m in models_on[s]),
                             key=lambda s: (-len(models_on[s] & models_on[t]), s))
            if not sources:
                continue
            s_type = sources[0]
            ratios = [by_key[(r.model, t, r.num_gpus, r.batch_size, r.precision)].iter_ms / r.iter_ms
                      for r in truth.rows if r.gpu_type == s_type
                      and (r.model, t, r.num_gpus, r.batch_size, r.precision) in by_key]
            if not ratios:
                continue
            ratio = statistics.median(ratios)
            added.extend(PerfRow(r.model, t, r.num_gpus, r.batch_size, r.precision, r.iter_ms * ratio,
                                 f"fill:{rule}")
                         for r in truth.rows if r.model == m and r.gpu_type == s_type)
    return PerfTable(list(truth.rows) + added)


def write_trace(path: str | os.PathLike | IO[str], jobs: Sequence[TraceJob]) -> None:
    """Write DESIGN's trace CSV (optional columns only when some job uses them) to a path or open file."""
    if hasattr(path, "write"):
        _write_rows(path, jobs)
        return
    with open(path, "w", newline="") as fh:
        _write_rows(fh, jobs)


def _write_rows(fh: IO[str], jobs: Sequence[TraceJob]) -> None:
    pinned = any(j.gpu_type for j in jobs)
    limits = any(j.time_limit_s is not None for j in jobs)
    parts = any(j.partition for j in jobs)
    deps = any(j.dependency for j in jobs)
    cols = (list(REQUIRED) + (["gpu_type"] if pinned else []) + (["time_limit_s"] if limits else [])
            + (["partition"] if parts else []) + (["dependency"] if deps else []))
    w = csv.writer(fh)
    w.writerow(cols)
    for j in jobs:
        row = [j.job_id, f"{j.submit_time:.3f}".rstrip("0").rstrip("."), j.user, j.model, j.num_gpus,
               j.batch_size, j.iterations]
        if pinned:
            row.append(j.gpu_type or "")
        if limits:
            row.append("" if j.time_limit_s is None else f"{j.time_limit_s:.0f}")
        if parts:
            row.append(j.partition)
        if deps:
            row.append(j.dependency)
        w.writerow(row)


# ----------------------------------------------------------------------------- synthesis
def parse_size_dist(text: str) -> list[tuple[int, float]]:
    """`1:0.7,2:0.1,4:0.15,8:0.05` -> [(1, 0.7), ...] (weights normalised)."""
    out = []
    for item in text.split(","):
        k, sep, v = item.partition(":")
        try:
            size, weight = int(k), float(v)
        except ValueError:
            raise TraceError(f"bad --gpus-per-job item {item.strip()!r}: expected GPUS:WEIGHT, e.g. 1:0.7") from None
        if not sep or size < 1 or weight < 0:
            raise TraceError(f"bad --gpus-per-job item {item.strip()!r}: GPUs >= 1 and weight >= 0")
        out.append((size, weight))
    total = sum(w for _, w in out)
    if not out or total <= 0:
        raise TraceError("--gpus-per-job needs at least one positive weight")
    return [(s, w / total) for s, w in out]


def parse_arrival(text: str) -> tuple[str, float]:
    text = text.strip().lower()
    if text in ("static", "philly"):
        return text, 0.0
    kind, _, mean = text.partition(":")
    if kind == "poisson":
        try:
            m = float(mean)
        except ValueError:
            m = -1.0
        if m > 0:
            return "poisson", m
    raise TraceError(f"bad --arrival {text!r}; choose one of {', '.join(ARRIVALS)}")


@dataclass(frozen=True)
class _PhillyRow:
    time: float
    duration: float
    num_gpus: int


def load_philly(path: str | os.PathLike) -> list[_PhillyRow]:
    """Philly's jobs sorted by submit time (read once per process: 82k rows take a second or two)."""
    return list(_load_philly(str(Path(path).resolve())))


@lru_cache(maxsize=2)
def _load_philly(path: str) -> tuple[_PhillyRow, ...]:
    rows = []
    try:
        with open(path, newline="") as fh:
            for rec in csv.DictReader(fh):
                try:
                    ts = datetime.fromisoformat(rec["timestamp"]).timestamp()
                    rows.append(_PhillyRow(ts, float(rec["duration"]), int(float(rec["num_gpus"]))))
                except (KeyError, TypeError, ValueError):
                    continue
    except OSError as exc:
        raise TraceError(f"cannot read Philly trace {path}: {exc.strerror}") from None
    if not rows:
        raise TraceError(f"{path}: no usable rows (expected columns timestamp,duration,num_gpus)")
    rows.sort(key=lambda r: r.time)
    return tuple(rows)


# ----------------------------------------------------------------------------- users' time limits
# How users set time limits, from studies of real HPC logs:
# - Mu'alem & Feitelson, "Utilization, predictability, workloads, and user runtime estimates in scheduling
#   the IBM SP2 with backfilling", IEEE TPDS 12(6), 2001: estimates are far above runtimes, and the
#   accuracy runtime/estimate is spread roughly uniformly over (0, 1]; so estimate/runtime = 1/U is
#   heavy-tailed (P(estimate > x runtime) ~ 1/x).
# - Tsafrir, Etsion & Feitelson, "Modeling user runtime estimates", JSSPP 2005 (LNCS 3834): estimates are
#   modal: about 20 round values (5 min, 10 min, 15 min, 30 min, 1 h, 2 h, ... 1 day, the maximum) cover
#   some 90% of jobs, and the maximum the site allows is one of the most popular choices.
# The draw: with probability USER_MAX_SHARE the user asks for the maximum (MaxTime); otherwise the limit is
# runtime / U, U ~ U(USER_MIN_ACCURACY, 1], rounded UP to the next popular value and capped at the maximum.
# The runtime a user knows is the job's runtime on the slowest type it may get, so limits cover every type
# (real users also underestimate and get killed; that is not modelled: a TIMEOUT loses the job's work).
POPULAR_LIMITS_S = tuple(60.0 * m for m in (5, 10, 15, 20, 30, 45, 60, 90, 120, 180, 240, 300, 360, 480, 600, 720,
                                              1080, 1440, 2160, 2880, 4320, 5760, 7200, 10080))
USER_MAX_SHARE = 0.1
USER_MIN_ACCURACY = 0.02
TIME_LIMIT_MODES = ("users", "none")


def user_time_limit(rng: random.Random, runtime_s: float, max_s: float = POPULAR_LIMITS_S[-1]) -> float:
    """A time limit as a user would ask for a job that runs `runtime_s` (see the sources above)."""
    if rng.random() < USER_MAX_SHARE:
        return max(max_s, math.ceil(runtime_s / 60.0) * 60.0)
    want = runtime_s / rng.uniform(USER_MIN_ACCURACY, 1.0)
    i = bisect.bisect_left(POPULAR_LIMITS_S, want)
    limit = POPULAR_LIMITS_S[i] if i < len(POPULAR_LIMITS_S) else max_s
    return max(min(limit, max_s), math.ceil(runtime_s / 60.0) * 60.0)


def gap_free(truth: PerfTable, cluster: ClusterSpec | None, model: str, num_gpus: int, batch_size: int) -> bool:
    """Whether the truth has data for the model on every type of the cluster that can hold num_gpus."""
    if cluster is None:
        return True
    return all(truth.iter_ms(model, t, num_gpus, batch_size) is not None
               for t in cluster.gpu_types if cluster.fits(t, num_gpus))


def synth(n_jobs: int, models: Sequence[str], truth: PerfTable, *, seed: int = 0, arrival: str = "static",
          philly: str | os.PathLike | None = None, sizes: list[tuple[int, float]] | None = None,
          time_limit_factor: float | None = None, max_gpus: int | None = None, users: int = 16,
          time_limits: str = "users", cluster: ClusterSpec | None = None,
          max_duration_s: float = MAX_DURATION_S) -> list[TraceJob]:
    """A reproducible synthetic trace (same arguments and seed → same jobs).

    With `cluster`, GPU counts fit it and a job's model always has truth data on every type that can hold
    it (a model without is redrawn among those with), so the trace is never refused for truth gaps.
    `time_limits="users"` gives each job a limit as users set them (`user_time_limit`);
    `time_limit_factor` F instead gives F x the runtime on the slowest type; "none" leaves them empty."""
    if time_limits not in TIME_LIMIT_MODES:
        raise TraceError(f"bad time limit mode {time_limits!r}; choose from {', '.join(TIME_LIMIT_MODES)}")
    if cluster is not None:
        cap = max(cluster.max_gpus(t) for t in cluster.gpu_types)
        max_gpus = cap if max_gpus is None else min(max_gpus, cap)
    max_duration_s = min(MAX_DURATION_S, max_duration_s)
    if n_jobs < 1:
        raise TraceError("--jobs must be at least 1")
    if not models:
        raise TraceError("no models to draw from")
    unknown = [m for m in models if not truth.has_model(m)]
    if unknown:
        raise TraceError(f"model(s) not in the truth table: {', '.join(unknown)}")
    kind, mean = parse_arrival(arrival)
    rng = random.Random(seed)
    rows = load_philly(philly) if philly else None
    if kind == "philly" and rows is None:
        raise TraceError("--arrival philly needs the Philly trace (--philly PATH)")
    explicit_sizes = sizes is not None
    size_dist = sizes or list(GAVEL_SIZES)
    allowed_sizes = {s for s, w in size_dist if w > 0}
    if max_gpus is not None:
        allowed_sizes = {s for s in allowed_sizes if s <= max_gpus}
        if not allowed_sizes:
            raise TraceError(f"no GPU count in the distribution fits the cluster (at most {max_gpus})")
    if cluster is not None:
        allowed_sizes = {s for s in allowed_sizes if any(cluster.fits(t, s) for t in cluster.gpu_types)}
        if not allowed_sizes:
            raise TraceError("no GPU count in the distribution fits the cluster")
    if rows is not None:
        rows = [r for r in rows if r.num_gpus in allowed_sizes and r.duration > 0]
        if not rows:
            raise TraceError("no Philly job has one of the allowed GPU counts")

    # what each job looks like: (arrival offset, num_gpus, duration)
    shapes: list[tuple[float, int, float]] = []
    if kind == "philly":
        assert rows is not None
        start = rng.randrange(0, max(1, len(rows) - n_jobs))
        window = rows[start:start + n_jobs]
        while len(window) < n_jobs:          # a short file: wrap around, shifted in time
            window = window + [_PhillyRow(r.time + (window[-1].time - rows[0].time) + 1, r.duration, r.num_gpus)
                               for r in rows[: n_jobs - len(window)]]
        t0 = window[0].time
        shapes = [(r.time - t0, r.num_gpus, r.duration) for r in window]
    else:
        by_size: dict[int, list[float]] = {}
        if rows is not None:
            for r in rows:
                by_size.setdefault(r.num_gpus, []).append(r.duration)
        cum = _cumulative([(s, w) for s, w in size_dist if s in allowed_sizes])
        t = 0.0
        for _ in range(n_jobs):
            if rows is not None and not explicit_sizes:
                r = rows[rng.randrange(len(rows))]
                g, dur = r.num_gpus, r.duration
            else:
                g = cum[1][bisect.bisect_left(cum[0], rng.random() * cum[0][-1])]
                pool = by_size.get(g) if rows is not None else None
                dur = pool[rng.randrange(len(pool))] if pool else _gavel_duration(rng)
            shapes.append((t, g, dur))
            if kind == "poisson":
                t += rng.expovariate(1.0 / mean)

    batch = {m: _batch_size(truth, m) for m in models}
    usable: dict[int, list[str]] = {}
    speeds: dict[tuple[str, int], list[float]] = {}
    limit_cap = cluster.partitions[0].max_time_s if cluster is not None else math.inf
    limit_cap = POPULAR_LIMITS_S[-1] if not math.isfinite(limit_cap) else limit_cap
    jobs = []
    for i, (t, g, dur) in enumerate(shapes, start=1):
        dur = min(max_duration_s, max(MIN_DURATION_S, dur))
        model = models[rng.randrange(len(models))]
        if not gap_free(truth, cluster, model, g, batch[model]):
            if g not in usable:
                usable[g] = [m for m in models if gap_free(truth, cluster, m, g, batch[m])]
            if not usable[g]:
                raise TraceError(f"no model of the list has truth data on every type of the cluster that can hold "
                                 f"{g} GPUs")
            model = usable[g][rng.randrange(len(usable[g]))]
        bs = batch[model]
        if (model, g) not in speeds:
            kinds = ([ty for ty in cluster.gpu_types if cluster.fits(ty, g)] if cluster is not None
                     else truth.types_for(model))
            speeds[model, g] = [ms for ms in (truth.iter_ms(model, ty, g, bs) for ty in kinds) if ms]
        per_type = speeds[model, g]
        if not per_type:
            raise TraceError(f"the truth table has no iteration time for {model}")
        iters = max(1, round(dur * 1000.0 / statistics.median(per_type)))
        limit = None
        slowest = max(per_type) * iters / 1000.0
        if time_limit_factor is not None:
            limit = math.ceil(time_limit_factor * slowest / 60.0) * 60.0
        elif time_limits == "users":
            limit = user_time_limit(rng, slowest, limit_cap)
        jobs.append(TraceJob(job_id=str(i), submit_time=round(t, 3), user=f"u{rng.randrange(users) + 1:02d}",
                             model=model, num_gpus=g, batch_size=bs, iterations=iters, time_limit_s=limit))
    return jobs


def _cumulative(dist: list[tuple[int, float]]) -> tuple[list[float], list[int]]:
    acc, cum, vals = 0.0, [], []
    for s, w in dist:
        acc += w
        cum.append(acc)
        vals.append(s)
    return cum, vals


def _gavel_duration(rng: random.Random) -> float:
    if rng.random() < 0.8:
        return 60.0 * 10 ** rng.uniform(1.5, 3.0)
    return 60.0 * 10 ** rng.uniform(3.0, 4.0)


def _batch_size(truth: PerfTable, model: str) -> int:
    sizes = [r.batch_size for r in truth.rows if r.model == model]
    return statistics.mode(sizes) if sizes else DEFAULT_BATCH


def default_philly_path() -> Path | None:
    """The shared Philly trace, when this checkout sits beside it (used only if present)."""
    from msched.config import PROJECT_ROOT
    p = Path(PROJECT_ROOT).parent / "shared" / "data" / "philly" / "philly_jobs.csv"
    return p if p.exists() else None
