"""The submit decision: a new job's tag reference fields and the GPU types to allow it, before any
round has planned it. `decide_submit` is the one function that makes it, for msub on a real cluster and
for the simulator's replay of msub (`slurm_sim.compare`), so the simulator measures what msub does.

    decision = decide_submit(tag, job, cluster, estimator, now=..., slack=..., choose=None)

- `tag`: the job's tag with its reference fields from `reference_fields(classification)` (the one
  place a classification becomes `ref/group/sim/flops/pref/pflops`), its iterations, batch size and
  `pinned` (a GPU type the user chose: then nothing is added).
- `job`: `SubmitJob`, the request's shape and time limit.
- `cluster`: `ClusterView`, what the submitter knows: GPUs per node of each type the user's own request
  reaches (feature constraint, partitions), the free time per type the last round published, and,
  without a fresh round, the free GPUs now and the GPUs of managed jobs already pending per type.
- `estimator`: the estimator interface (`msched.estimate.estimators`: `.estimates(job, tag)`).
- `choose(est, free_at, now)`: the policy's rule; default `completion_choice` with `slack` (msched's):
  the types within `slack` of the best projected completion (`informed_slack` instead when a fresh
  round's free times say some type is busy: `submit_slack`).

A type is considered only if it is feasible for the job's shape (`msched.policy.feasibility`) and has an
estimate within the job's time limit. With a fresh round's `price` (off by default: msched.policy.price),
a priced type is considered only for a job whose saving there reaches its price. Without a fresh round,
a burst of submissions would all see the same free cluster and pile onto one type; so the free time of a
type is then projected from the GPUs free now and the managed GPUs already pending there
(`projected_free_at`), and the burst spreads over the types within the slack.

Kept apart from the planner (snapshot, timeline, list scheduling) because msub makes this choice on
every submission and must not import the planner (see `msched.util.record`).
"""

from __future__ import annotations

import time

from msched.estimate.runtime import DEFAULT_UNKNOWN_RUNTIME_S, Estimate
from msched.policy.feasibility import feasible_types
from msched.tag import JobTag
from msched.util.record import record

TYPE_CHECKING = False       # typing.TYPE_CHECKING without importing typing
if TYPE_CHECKING:           # for annotations only: importing collections.abc costs msub ~1 ms (predict14)
    from collections.abc import Callable, Mapping

DEFAULT_SLACK = 1.25
# the slack when a fresh round's published free times say some type is busy now (`submit_slack`; None: the
# same as `slack`). Off by default: 1.1 was chosen on bench_planner's tuning seeds 6-10 (online mean JCT x
# fifo philly 0.730 -> 0.721, alibaba 0.768 -> 0.760, static and gavel unchanged) but gained nothing on
# the held-out seeds 1-5 (philly 0.718 -> 0.718, alibaba 0.704 -> 0.706): BENCHMARKS.md, the sixth round
DEFAULT_INFORMED_SLACK = None
__all__ = ["DEFAULT_INFORMED_SLACK", "DEFAULT_SLACK", "DEFAULT_UNKNOWN_RUNTIME_S", "ClusterView", "SubmitDecision", "SubmitJob",
           "completion_choice", "decide_submit", "projected_free_at", "reference_fields", "submit_slack"]


@record
class SubmitJob:
    """A job about to be submitted: its shape (see `msched.policy.feasibility`) and time limit."""

    num_gpus: int
    gpus_per_node: int | None = None        # fixed per-node count (--gres, --gpus-per-node); None = may spread
    num_nodes: int = 1
    time_limit_s: float | None = None
    peak_memory_gb: float | None = None     # predicted training memory per GPU (None = unknown)


@record
class ClusterView:
    """What the submitter knows of the cluster (mappings by canonical GPU type; None = unknown)."""

    node_gpus: Mapping[str, tuple[int, ...]] | None = None   # GPUs per node the job's request may use
    free_at: Mapping[str, float] | None = None               # projected free time per type (last round)
    fresh: bool = False                                      # free_at comes from a recent round
    free_gpus: Mapping[str, int] | None = None               # free GPUs now (without a fresh round)
    pending_gpus: Mapping[str, float] | None = None          # GPUs of managed jobs pending for the type
    usable_gb: Mapping[str, float] | None = None             # usable memory per GPU of each type (spec rows)
    price: Mapping[str, float] | None = None                 # saving a job needs on a type to be allowed it
                                                             # (msched.policy.price; fresh rounds only)
    price_measure: str = "saving"                            # what `price` measures (price.saving)

    @property
    def types(self) -> tuple[str, ...]:
        """The GPU types present (as far as the view knows); () = unknown."""
        return tuple(sorted(self.node_gpus or self.free_at or ()))


@record
class SubmitDecision:
    tag: JobTag                              # the tag to submit (`added` = the types below)
    types: tuple[str, ...] = ()              # GPU types to OR into the constraint; () = none
    estimates: Mapping[str, Estimate] | None = None   # feasible types' estimates, with their sources
    note: str = ""                           # why no types were added ("" when types were)


def reference_fields(cls: object) -> dict[str, object]:
    """The tag's reference fields from a classification (`msched.models.classify.Classification`):
    the nearest reference, its group, the similarity and FLOPs ratio, and, when the nearest reference
    has no measurements, the nearest one that has (`pref`, `pflops`). Which of these estimates the job
    is `msched.estimate.runtime.reference_for`'s rule."""
    ref = cls.nearest_reference
    perf_ref = getattr(cls, "perf_reference", "") or ""
    elsewhere = bool(perf_ref) and perf_ref != ref
    return {"ref": ref, "group": cls.group, "sim": float(cls.similarity), "flops": float(cls.flops_ratio),
            "pref": perf_ref if elsewhere else "",
            "pflops": float(cls.perf_flops_ratio) if elsewhere else None}


def completion_choice(est: Mapping[str, float], free_time: Mapping[str, float] | None,
                      now: float | None, slack: float, free_slack: float | None = None,
                      wait_factor: float = 1.0) -> tuple[str, ...]:
    """Types within `slack` of the best projected completion (free time of the type + estimate),
    earliest first. `est` holds the job's estimated runtime on each type it may use; types missing
    from a non-empty `free_time` are not in the cluster (unless none of `est`'s types is).
    `free_slack` (None: `slack`): the slack at most when the best type is free now and the free times say
    some other type is busy (a round's view: the job would start there at once, and a wider choice only
    lets Slurm's node order put it on a slower free type; with every type free, as before any round, the
    wider slack still spreads a burst).
    `wait_factor`: each type's projected wait (its free time less now) is taken that many times over
    (online, later arrivals overtake a waiting job: the measured waits run longer than projected)."""
    if not est:
        return ()
    now = time.time() if now is None else now
    free_time = free_time or {}
    types = [t for t in est if (not free_time or t in free_time)] or list(est)
    if wait_factor == 1.0:
        done = {t: max(now, free_time.get(t, now)) + est[t] for t in types}
    else:
        done = {t: now + max(0.0, free_time.get(t, now) - now) * wait_factor + est[t] for t in types}
    best = min(done.values())
    if free_slack is not None and any(f > now for f in free_time.values()) \
            and any(done[t] == best and free_time.get(t, now) <= now for t in types):
        slack = min(slack, free_slack)
    horizon = now + (best - now) * slack
    return tuple(sorted((t for t in types if done[t] <= horizon + 1e-9), key=lambda t: (done[t], t)))


def submit_slack(free_at: Mapping[str, float], now: float, slack: float, informed_slack: float | None) -> float:
    """The slack of the submit choice: `informed_slack` (None: unused) when the free times say some type
    is busy now, else `slack`. With every type free (before any round, or a stale view), the wider slack
    spreads a burst over the types; with a round's view of which types are taken, the narrower one keeps a
    job off a type much slower than the one it would finish on first."""
    if informed_slack is not None and any(f > now for f in free_at.values()):
        return informed_slack
    return slack


def projected_free_at(cluster: ClusterView, est: Mapping[str, float], num_gpus: int,
                      now: float) -> dict[str, float]:
    """When the job could start on each type, without a fresh round: at once where the GPUs free now,
    less those the managed jobs already pending there will take, hold it; else after the GPUs it waits
    for have turned over, taking the pending jobs to be like this one (a burst of one model is exactly
    that): delay = runtime there x GPUs short / GPUs of the type."""
    sizes = cluster.node_gpus or {}
    free_now = cluster.free_gpus or {}
    pending = cluster.pending_gpus or {}
    out: dict[str, float] = {}
    for t, runtime in est.items():
        total = sum(sizes.get(t, ())) or free_now.get(t, 0)
        if total <= 0:
            continue
        short = pending.get(t, 0.0) + max(1, num_gpus) - free_now.get(t, total)
        out[t] = now + (runtime * short / total if short > 0 else 0.0)
    return out


def decide_submit(tag: JobTag, job: SubmitJob, cluster: ClusterView, estimator, *,  # noqa: ANN001
                  now: float | None = None, slack: float = DEFAULT_SLACK, informed_slack: float | None = None,
                  free_slack: float | None = None, wait_factor: float = 1.0,
                  choose: Callable[[Mapping[str, float], Mapping[str, float], float], tuple[str, ...]] | None = None,
                  ) -> SubmitDecision:
    """The submit decision (module docstring): the tag to write and the GPU types to allow."""
    if tag.pinned:
        note = f"GPU type {tag.pinned} chosen by the user"
        return SubmitDecision(tag._replace(added="", why=note), (), None, note)
    now = time.time() if now is None else now
    estimates = estimator.estimates(job, tag)
    present = cluster.types
    if present:
        estimates = {t: e for t, e in estimates.items() if t in present}
    if cluster.node_gpus is not None or (job.peak_memory_gb and cluster.usable_gb):
        possible = set(feasible_types(job, cluster.node_gpus, estimates, peak_gb=job.peak_memory_gb,
                                      usable_gb=cluster.usable_gb))
        estimates = {t: e for t, e in estimates.items() if t in possible}
    if not estimates:
        note = "no GPU type that can hold the job has an estimate within its time limit"
        return SubmitDecision(tag._replace(added="", why=note), (), {}, note)
    secs = {t: e.seconds for t, e in estimates.items()}
    if cluster.price and cluster.fresh:             # the scarce fast types, for the jobs that gain most there
        from msched.policy.price import priced_types

        secs = priced_types(secs, cluster.price, cluster.price_measure)
    if cluster.fresh or not (cluster.free_gpus or cluster.pending_gpus):
        free = dict(cluster.free_at or {})
        if not cluster.fresh:
            free = dict.fromkeys(free, now)          # a stale projection: every known type free now
    else:
        free = projected_free_at(cluster, secs, job.num_gpus, now)
    if choose is None:
        types = completion_choice(secs, free, now,
                                  submit_slack(free, now, slack, informed_slack) if cluster.fresh else slack,
                                  free_slack if cluster.fresh else None, wait_factor if cluster.fresh else 1.0)
    else:
        types = tuple(choose(secs, free, now))
    types = tuple(t for t in types if t in secs)
    note = "" if types else "the policy adds no GPU-type constraint"
    # the tag's `why` keeps the note for the job's owner (`msched jobs`), since clients may hide stderr
    return SubmitDecision(tag._replace(added="|".join(types), why=note), types, estimates, note)
