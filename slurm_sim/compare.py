"""Replaying a trace under each policy, through the same round core the real reorderer runs.

For every trace job, at its submit time, the replay does what `msub` would do on a real cluster: it
classifies the model (nearest reference, group, similarity, FLOPs ratio), and makes msub's one submit
decision (`msched.policy.choice.decide_submit`, with the policy's `submit_choice`: none for fifo; a
user-pinned type stays a typed gres and gets no constraint): the tag in the job's comment and the
GPU-type constraint. Then, for policies that
re-plan, every `round_s` seconds `msched.rounds.core.run_round` runs against the simulator through
`SimClient`, exactly as cron's `msched reorder` runs against Slurm. A round is skipped only when it
could not plan differently from the last one (`msched.rounds.core.round_due`: the simulator's state
is unchanged and the clock has not reached the last round's `stable_until`: a job reaching the
starvation age, a running job passing its estimate); the clock then jumps to the next grid time at
which something can have changed.

What msub knows of the future differs by policy, as on a real cluster: a re-planning policy's msub reads
the free time per GPU type that the last round published; `msched-once` has no reorderer, so the replay
gives its msub a fresh projection of the queue at each submission (a dry-run plan: the most a
round-less submit-time choice can know), which keeps the comparison with rounds honest.

`--perf` (what the policy knows) and `--truth` (what happens) are separate tables on purpose.
"""

from __future__ import annotations

import time as _time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from msched import __version__
from msched.estimate.perf_table import PerfTable
from msched.policy import POLICY_NAMES
from msched.policy.choice import ClusterView, SubmitDecision, SubmitJob, decide_submit, reference_fields
from msched.slurm.base import JobRequest, SlurmJob
from msched.tag import JobTag, with_tag
from slurm_sim.client import SimClient
from slurm_sim.cluster import ClusterSpec
from slurm_sim.metrics import ENDED_OK, JobOutcome, summarize, trace_bound
from slurm_sim.simulator import Simulator
from slurm_sim.trace import TraceJob

POLICIES = POLICY_NAMES          # every registered policy, in the order results are listed
CACHE_SHAPES = True              # replay keeps submit_decision's memory figures per (model, batch) and types
KEEP_USABLE_MEMORY = True        # replay reads the rounds' usable memory per type once (off: every round reads
                                 # the site's spec table; tests/test_fast_paths.py)


class SimRunError(RuntimeError):
    """A replay that cannot go on (e.g. jobs that can never start); one-line message."""


# ----------------------------------------------------------------------------- classification
class Classifier:
    """What msub learns about a model (`msched.models.classify.classify`), cached per model name.

    A reference named directly is its own reference (DESIGN, policy point 3). The tag's `pref`/`pflops`
    name the nearest reference with measurements when the nearest one has none (e.g. EfficientNet).
    """

    def __init__(self, references: Sequence[str] | None = None, perf: PerfTable | None = None):
        from msched.models import classify as similarity

        self.references = list(references) if references else None
        self.perf = perf
        self._similarity = similarity
        try:
            self._refset = similarity.resolve_references(self.references)
            self._names = set(self._refset.names)
        except similarity.ClassifyError as exc:
            # references that are not torchvision models (e.g. Gavel's job types) work by name only
            self._refset, self._names, self._why = None, set(self.references or ()), str(exc)
        self._cache: dict[str, JobTag] = {}

    def __call__(self, model: str) -> JobTag:
        """The tag fields msub would write for this model (model, ref, group, sim, flops, pref, pflops)."""
        hit = self._cache.get(model)
        if hit is None:
            hit = self._cache[model] = self._classify(model)
        return hit

    def _classify(self, model: str) -> JobTag:
        if self._refset is None:
            if model in self._names:     # references known by name only: each its own group
                return JobTag(model=model, ref=model, group=model, sim=1.0, flops=1.0)
            raise SimRunError(f"cannot classify {model}: {self._why}")
        try:
            c = self._similarity.classify(model, references=self.references)
        except self._similarity.ClassifyError as exc:
            raise SimRunError(f"cannot classify {model}: {exc}") from None
        return JobTag(model=model, **reference_fields(c))


# ----------------------------------------------------------------------------- one run
@dataclass
class RunResult:
    policy: str
    outcomes: list[JobOutcome]
    metrics: dict[str, Any]
    rounds: int = 0
    rounds_skipped: int = 0
    update_calls: int = 0
    plan_seconds: float = 0.0
    wall_s: float = 0.0
    unfinished: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class SimSetup:
    """Everything a replay needs besides the policy name."""

    cluster: ClusterSpec
    truth: PerfTable
    perf: PerfTable
    classifier: Classifier
    round_s: float = 60.0
    objective: str = "balanced"
    scheduler: str | None = None                 # None: the cluster spec's SchedulerType (default backfill)
    starvation_age_s: float | None = 86400.0     # None: no starvation guard
    trace_name: str = "trace"
    # per user, the factor by which their tags misstate iterations (a claim, not the truth: users
    # write their own tags); absent = honest. bench/bench_liar.py measures what lying buys.
    claim_factors: Mapping[str, float] = field(default_factory=dict)
    settle: Any = None                           # msched.rounds.settle.SettleOptions; None: the defaults
    policy_options: Mapping[str, Any] = field(default_factory=dict)   # e.g. {"planner": "greedy"}
    packing: Any = None                          # slurm_sim.packing.SimPacking: shard jobs; None: no packing
    begin_times: Any = None                      # msched.policy.reservations.BeginTimeOptions (the lever)
    # (simulator, now) -> None, called after each round's writes have taken effect: a bench's model of a lever
    # the round core does not have (bench/bench_requeue.py's requeue of just-started jobs); None: nothing
    after_round: Callable[[Any, float], None] | None = None


    @property
    def backfill(self) -> bool:
        """Whether the simulated Slurm backfills (what the planner is told)."""
        return (self.scheduler or self.cluster.scheduler.type) == "backfill"


def make_policy(name: str, setup: SimSetup):
    """The policy object, built as the reorderer builds its own (`msched.rounds.core.round_policy`):
    the planner is told whether Slurm backfills, `fastest` ranks types by --perf."""
    from msched.rounds.core import round_policy
    return round_policy(name, backfill=setup.backfill, objective=setup.objective,
                        starvation_age_s=setup.starvation_age_s, perf=setup.perf, **setup.policy_options)


def make_estimator(policy, setup: SimSetup):
    from msched.estimate.estimators import TagEstimator, TruthEstimator
    if getattr(policy, "estimator_kind", "tag") == "truth":
        return _PerJobCache(TruthEstimator(setup.truth, knowledge=setup.perf))
    return _PerJobCache(TagEstimator(setup.perf))


class _PerJobCache:
    """An estimator remembered per job id: a job's estimate depends only on what it was submitted with
    (tag, GPUs, time limit, pinned type; msched changes only its priority and features, which estimators
    do not read), and every round asks again for every running and pending job."""

    def __init__(self, inner):
        self.inner = inner
        self._memo: dict[tuple, dict[str, float]] = {}

    def __call__(self, job: SlurmJob, tag: JobTag) -> dict[str, float]:
        hit = self._memo.get(job.job_id)
        if hit is None:
            hit = self._memo[job.job_id] = self.inner(job, tag)
        return hit


def replay(trace: Sequence[TraceJob], policy_name: str, setup: SimSetup, *, store=None,
           progress: Callable[[str], None] | None = None, bound=None) -> RunResult:  # noqa: ANN001
    """Simulate one policy on one trace; optionally record runs, rounds and jobs in `store`. `bound`:
    the trace's lower bound (`metrics.trace_bound`) when the caller has it already (one LP per trace)."""
    from msched.estimate.memory import usable_by_type
    from msched.rounds.core import policy_prices, round_due, run_round

    wall0 = _time.perf_counter()
    policy = make_policy(policy_name, setup)
    estimator = make_estimator(policy, setup)
    sim = Simulator(setup.cluster, setup.truth, scheduler=setup.scheduler)
    shard_runs = setup.packing.runs(sim) if setup.packing is not None else None
    shard_types = sorted({n.gpu_type for n in setup.cluster.nodes if "shard" in n.features})
    client = SimClient(sim)
    recorder = _Recorder(store, policy_name, setup) if store is not None else None
    jobs = sorted(trace, key=lambda j: j.submit_time)
    n = len(jobs)
    t0 = jobs[0].submit_time if jobs else 0.0
    replans = bool(getattr(policy, "replans", False))
    use_constraint = policy_name != "fifo"
    fresh_free_time = not replans and use_constraint and policy_name != "fastest"
    round_s = float(setup.round_s)
    types = setup.cluster.gpu_types
    published: dict[str, float] = {}
    price: dict[str, float] = {}         # the round's submit prices (msched.policy.price), published beside
    published_end: float | None = None
    sim_id_of: dict[str, str] = {}
    trace_of: dict[str, TraceJob] = {}
    rounds = skipped = calls = begin_writes = 0
    writes_per_round: list[int] = []
    incumbent = None                     # what the last round held each job to (msched.rounds.settle)
    plan_s = 0.0
    round_s_total = 0.0                  # wall seconds inside the round core (snapshot, plan, writes)
    reported = 0
    last_version: int | None = None
    stable_until = float("inf")          # the last round's plan holds until then unless Slurm changes
    next_round = t0 if replans else float("inf")
    i = 0
    inf = float("inf")

    usable: dict[frozenset, Mapping[str, float]] = {}

    def usable_memory(known: set[str]) -> Mapping[str, float]:
        """The round's usable memory per known type (`msched.estimate.memory.usable_by_type`: the site's
        spec table), read once per set of types in a replay instead of once per round (KEEP_USABLE_MEMORY)."""
        key = frozenset(known)
        hit = usable.get(key)
        if hit is None:
            hit = usable[key] = usable_by_type(known)
        return hit

    sizes: dict[str, dict[str, tuple[int, ...]]] = {}      # per partition list: the nodes the job may use
    shapes: dict = {}                                       # submit_decision's per-model and per-types memory

    def submit(tj: TraceJob) -> None:
        free: dict[str, float] = {}
        if use_constraint and not tj.gpu_type:
            free = published or dict.fromkeys(types, sim.now)
            if fresh_free_time:
                free = _projected_free_time(client, policy, estimator, setup)
        node_gpus = sizes.get(tj.partition)
        if node_gpus is None:
            node_gpus = sizes[tj.partition] = cluster_node_gpus(setup.cluster, tj.partition)
        decision = submit_decision(tj, setup.classifier, policy, estimator,
                                   ClusterView(node_gpus=node_gpus, free_at=free, fresh=True,
                                               price=price or None,
                                               price_measure=getattr(policy, "price_measure", "saving")), sim.now,
                                   claim=setup.claim_factors.get(tj.user, 1.0),
                                   shapes=shapes if CACHE_SHAPES else None)
        partition = tj.partition
        extra = {"model": tj.model, "iterations": tj.iterations, "batch_size": tj.batch_size, "user": tj.user}
        if shard_runs is not None and use_constraint:      # msub's packing decision (slurm_sim.packing)
            times = getattr(getattr(estimator, "inner", estimator), "times", None)
            decision, partition, extra["shards"] = setup.packing.at_submit(tj, decision, sim, times, shard_types,
                                                                           free, published_end)
        if tj.dependency:
            kind, _, ids = tj.dependency.partition(":")
            extra["dependency"] = f"{kind}:{':'.join(sim_id_of[i] for i in ids.split(':'))}"
        req = JobRequest(name=f"{tj.model}-{tj.job_id}", num_gpus=tj.num_gpus, gpu_type=tj.gpu_type,
                         constraint="|".join(decision.types), comment=with_tag(decision.tag, None),
                         time_limit_s=tj.time_limit_s, partition=partition, extra=extra)
        jid = client.submit(req)
        sim_id_of[tj.job_id] = jid
        trace_of[jid] = tj

    while True:
        t_sub = jobs[i].submit_time if i < n else inf
        if i >= n and not sim.active:
            break
        t = min(t_sub, next_round)
        if t == inf:                     # nothing left to submit and no rounds: play out the queue
            nxt = sim.next_event_time()
            if nxt is None:
                break
            sim.run_until(nxt)
            continue
        sim.run_until(t)
        if t_sub <= t:
            while i < n and jobs[i].submit_time <= t:
                submit(jobs[i])
                i += 1
            sim.run_until(t)             # Slurm looks at the new jobs at once
        if replans and next_round <= t:
            due = round_due(stable_until, sim.now, sim.version != last_version)
            if due and sim.pending_count() == 0:
                last_version, stable_until = sim.version, inf   # nothing to plan: a round could change nothing
                skipped += 1
                if getattr(policy, "price_quantile", None) is not None:    # what the real round publishes
                    price = policy_prices(policy, client.jobs(), estimator, sim.now, types, _canonical)
            elif due:
                seen = sim.version       # the snapshot this round reads
                r0 = _time.perf_counter()
                result = run_round(client, policy, estimator, now=sim.now,
                                   starvation_age_s=setup.starvation_age_s, gpu_type_of=_canonical,
                                   incumbent=incumbent, settle_options=setup.settle,
                                   begin_times=setup.begin_times,
                                   pack_guard=setup.packing.guard if setup.packing is not None else "bound",
                                   pack_exclude=setup.packing is not None and setup.packing.exclude,
                                   usable_memory=usable_memory if KEEP_USABLE_MEMORY else usable_by_type)
                round_s_total += _time.perf_counter() - r0
                incumbent = result.incumbent
                rounds += 1
                calls += int(getattr(result, "update_calls", 0) or 0)
                begin_writes += len(result.begin_times)
                writes_per_round.append(int(getattr(result, "update_calls", 0) or 0))
                plan_s += float(getattr(result, "plan_seconds", 0.0) or 0.0)
                published = dict(result.free_time)
                price = dict(result.submit_price)
                published_end = getattr(result.plan, "est_makespan_end", None)     # packing's horizon
                stable_until = result.stable_until
                if recorder is not None:
                    recorder.round(result, sim.now)
                sim.run_until(t)         # Slurm acts on the changes (what it starts, the next round sees)
                if setup.after_round is not None:
                    setup.after_round(sim, sim.now)
                    sim.run_until(t)
                last_version = seen
            else:
                skipped += 1
            next_round = t + round_s
            if sim.version == last_version:
                # nothing changes before the next event, submission or time-driven change of the plan:
                # jump to the grid time after it
                nxt = min(sim.next_event_time() or inf, jobs[i].submit_time if i < n else inf, stable_until)
                if nxt == inf:
                    if i >= n and sim.active:
                        break            # stuck: nothing will ever change again
                elif nxt > next_round:
                    steps = -(-(nxt - t0) // round_s)
                    next_round = max(next_round, t0 + steps * round_s)
        if progress is not None and rounds >= reported + 2000:
            reported = rounds
            progress(f"{policy_name}: t={sim.now:.0f}s, {len(sim.finished)}/{n} done")

    unfinished = [j.job_id for j in sorted(sim.jobs.values(), key=lambda j: j.seq) if j.state not in ENDED_OK]
    outcomes = [JobOutcome(job_id=trace_of[j.job_id].job_id, policy=policy_name, gpu_type=j.gpu_type,
                           submit=j.submit_time, start=j.start_time, end=j.end_time, num_gpus=j.num_gpus,
                           state=j.state, model=j.model, writes=j.writes,
                           nodes=tuple(sim.node_names[k] for k in j.nodes))
                for j in sorted(sim.jobs.values(), key=lambda j: j.seq)]
    if bound is None:
        bound = trace_bound(trace, setup.truth, setup.cluster)
    metrics = summarize(policy_name, outcomes, setup.cluster.total_gpus, bound.value_s, submitted=n,
                        simple_lb=bound.simple_s)
    metrics.update({"rounds": rounds, "rounds_skipped": skipped, "update_calls": calls,
                    "writes_per_round": calls / rounds if rounds else 0.0,
                    "max_writes_per_round": max(writes_per_round, default=0),
                    "begin_time_writes": begin_writes,
                    "plan_seconds": round(plan_s, 3), "round_seconds": round(round_s_total, 3)})
    if recorder is not None:
        recorder.finish(client, sim.now)
    wall = _time.perf_counter() - wall0
    metrics["sim_wall_s"] = round(wall, 3)
    if shard_runs is not None:
        metrics["packing"] = {"shard_jobs": sum(1 for j in sim.jobs.values() if j.shards),
                              "pairs": [{**p, "a": trace_of[p["a"]].job_id, "b": trace_of[p["b"]].job_id}
                                        for p in shard_runs.pairs], "oom": len(shard_runs.oom),
                              "alone_gpu_s": shard_runs.alone_s, "shared_gpu_s": shard_runs.shared_s,
                              "gained_gpu_s": shard_runs.gained_s,
                              "history": [(t, k, trace_of[j].job_id, node, gpu) for t, k, j, node, gpu in shard_runs.history]}
    return RunResult(policy_name, outcomes, metrics, rounds, skipped, calls, plan_s, wall,
                     [trace_of[j].job_id for j in unfinished])


def compare(trace: Sequence[TraceJob], policies: Sequence[str], setup: SimSetup, *, store=None,
            progress: Callable[[str], None] | None = None) -> list[RunResult]:
    """Every policy on the same trace; each result's `metrics` gains `ratio_to_fifo` when fifo ran."""
    bound = trace_bound(trace, setup.truth, setup.cluster) if trace else None
    results = [replay(trace, p, setup, store=store, progress=progress, bound=bound) for p in policies]
    base = next((r for r in results if r.policy == "fifo"), None)
    for r in results:
        ms = r.metrics.get("makespan_s")
        b = base.metrics.get("makespan_s") if base else None
        r.metrics["ratio_to_fifo"] = (ms / b) if (b and ms is not None) else None
    return results


# ----------------------------------------------------------------------------- helpers
def _canonical(name: str) -> str:
    """GPU type names in the simulator are canonical already (cluster specs are lowercased)."""
    return name

def cluster_node_gpus(cluster: ClusterSpec, partition: str = "") -> dict[str, tuple[int, ...]]:
    """GPUs per node of each type: the node shapes msub reads from sinfo, of the nodes in the job's
    partitions (comma-separated; "" = the default partition), as sbatch -p limits them."""
    parts = set(partition.split(",")) if partition else {cluster.default_partition}
    out: dict[str, list[int]] = {}
    for n in cluster.nodes:
        if not parts & set(n.partitions):
            continue
        out.setdefault(n.gpu_type, []).append(n.gpus)
    return {t: tuple(sorted(v)) for t, v in out.items()}


def submit_decision(tj: TraceJob, classifier: Classifier, policy, estimator, cluster: ClusterView,  # noqa: ANN001
                    now: float, claim: float = 1.0, shapes: dict | None = None) -> SubmitDecision:
    """What msub decides for a trace job (the one submit decision; the policy's `submit_choice`);
    CLAIM scales the iterations the tag states (the job's true work stays the trace's). `shapes`: a dict
    one replay keeps (`CACHE_SHAPES`) for what depends only on the model and batch size (its peak
    memory) or on the cluster's types (their usable memory), which msub works out anew per submission."""
    from msched.estimate.memory import job_peak_gb

    bs = int(tj.batch_size) if tj.batch_size else None
    if shapes is None:
        mem = job_peak_gb(tj.model, bs)          # what msub's tag carries (its memory feasibility)
    else:
        key = ("peak", tj.model, bs)
        mem = shapes[key] if key in shapes else shapes.setdefault(key, job_peak_gb(tj.model, bs))
    tag = classifier(tj.model)._replace(iters=max(1, round(tj.iterations * claim)) if tj.iterations else None,
                                        bs=bs, pinned=tj.gpu_type or "", ver=__version__, mem=mem)
    job = SubmitJob(num_gpus=tj.num_gpus, time_limit_s=tj.time_limit_s, peak_memory_gb=mem)
    if mem and cluster.usable_gb is None:           # msub reads each type's memory from the spec table
        from msched.estimate.memory import usable_by_type

        if shapes is None:
            usable = usable_by_type(cluster.types)
        else:
            key = ("usable", tuple(cluster.types))
            usable = shapes[key] if key in shapes else shapes.setdefault(key, usable_by_type(cluster.types))
        cluster = cluster._replace(usable_gb=usable)
    raw = getattr(estimator, "inner", estimator)      # not the per-job-id cache: this job has no id yet
    return decide_submit(tag, job, cluster, raw, now=now, choose=policy.submit_choice)


def _projected_free_time(client: SimClient, policy, estimator, setup: SimSetup) -> dict[str, float]:
    """A dry-run plan of the queue as it stands: when each GPU type frees up."""
    from msched.rounds.core import run_round
    result = run_round(client, policy, estimator, now=client.now(), dry_run=True,
                       starvation_age_s=setup.starvation_age_s, gpu_type_of=_canonical)
    return dict(result.free_time)


class _Recorder:
    """Writes a simulated run into the store as the real reorderer writes real rounds."""

    def __init__(self, store, policy: str, setup: SimSetup):
        from msched.store.queries import run_names_starting
        self.store = store
        base = f"sim:{policy}:{setup.trace_name}"[:120]
        with store.read() as s:
            taken = run_names_starting(s, base)
        name, k = base, 1
        while name in taken:
            k += 1
            name = f"{base}#{k}"
        self.run_id = store.run_id("sim", name, policy=policy, gpus=setup.cluster.gpus_total)

    def round(self, result, now: float) -> None:
        from msched.store import writes as records
        with self.store.write() as s:
            records.ingest_jobs(s, self.run_id, result.jobs, now)
            records.record_round(s, self.run_id, result)

    def finish(self, client: SimClient, now: float) -> None:
        from msched.store import writes as records
        shard_runs = getattr(client.sim, "packing", None)
        with self.store.write() as s:
            records.record_completions(s, self.run_id, client.finished_jobs() + client.jobs(), now)
            if shard_runs is not None:          # the truth of the pairs that ran (slurm_sim.packing)
                records.record_pair_speeds(s, self.run_id, [(p["a"], p["b"], p["speed_a"], p["speed_b"])
                                                            for p in shard_runs.pairs])
