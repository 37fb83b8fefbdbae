"""Packed jobs in the simulator: shard jobs share a GPU and run at the *measured* pair speeds.

What the simulator does with a shard job (`submit(..., shards=1)`), as Slurm 22.05 does with
`--gres=shard:1` on nodes whose GPUs carry 2 shards each (SLURM-NOTES, tests/test_packing_slurm.py):
- it starts on a GPU that already holds one shard job, when one of its allowed nodes has such a GPU
  (Slurm fills a GPU's shards before the next GPU's), else on a free GPU of its own, which no `gpu`
  job can then take until both shard jobs on it have ended;
- alone on its GPU it runs at its solo speed (the truth table); with a partner, each job runs at the
  fraction of its solo speed that Gavel measured for the pair on that GPU type (`PairTruth`, Gavel's
  `simulation_throughputs.json`): the truth, which the planner never sees (it has the prediction).
  Speeds change when a partner starts or ends; a job's remaining work carries over;
- a pair Gavel measured at 0 (the two do not fit in memory together) crashes the job that joins at its
  start: it is counted (`oom`) and put back in the queue, and never again joins that partner;
- squeue shows a shard job with no GPUs (it asks for shards), as the real cli backend reads it.

`ShardRuns` holds this state; the engine calls it from a few hooks (`Simulator.packing`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from slurm_sim.cluster import ClusterSpec, PartitionSpec

SHARD_PARTITION = "shared"
SHARD_FEATURE = "shard"
SHARDS_PER_GPU = 2            # every shard node's GPUs (the dev cluster's --shards NODE=2, the bench's)
GAVEL_FAMILIES = {"resnet18": "ResNet-18", "resnet50": "ResNet-50", "transformer": "Transformer", "lm": "LM",
                  "recommendation": "Recommendation", "a3c": "A3C", "cyclegan": "CycleGAN"}


# the optimizer each of Gavel's job types trains with (github.com/stanford-futuredata/gavel,
# workloads/pytorch/*: SGD with momentum for the image models, plain SGD updates for the language model,
# Adam for the rest): its per-parameter state, in the memory estimate
GAVEL_OPTIMIZERS = {"resnet18": "momentum", "resnet50": "momentum", "transformer": "adam", "lm": "sgd",
                    "recommendation": "adam", "a3c": "adam", "cyclegan": "adam"}


@dataclass(frozen=True)
class GavelMemory:
    """Predicted peak training memory (GB, msched.estimate.memory) of Gavel's job types, from the layer
    profiles of their model files (msched/data/gavel_models/; ResNet-50 is torchvision's): what msub's
    tag would carry for such a job. The simulator's perf-table names ("resnet18") are not the shipped
    torchvision models of the same name (Gavel's ResNet-18 trains on 32 x 32 CIFAR images), so without
    this a replay's packing decision sees the wrong memory or none."""

    profiles: Mapping[str, object]

    @classmethod
    def load(cls) -> GavelMemory:
        """Profiles the model files (torch on the meta device, once per user: msched's profile cache)."""
        from msched.estimate.training_data import GAVEL_MODEL_FILES, GAVEL_TORCHVISION, gavel_profiles
        from msched.models.shipped import profile_data

        by_key = gavel_profiles()
        profiles = {t: by_key[f"gavel:{t}"] for t in GAVEL_MODEL_FILES}
        profiles.update({t: profile_data(t) for t in GAVEL_TORCHVISION})
        return cls(profiles)

    def __call__(self, model: str, batch_size: int | None) -> float | None:
        """GB at the batch size (Gavel's A3C and CycleGAN name none: 1), None for a model it has no profile of."""
        from msched.estimate.memory import peak_memory_gb

        prof = self.profiles.get(model)
        if prof is None:
            return None
        if model == "transformer":
            prof = transformer_with_internals(prof)
        return round(peak_memory_gb(prof, batch_size or 1, "float", GAVEL_OPTIMIZERS.get(model, "sgd")).peak_gb, 3)


TRANSFORMER_HEADS = 8           # Gavel's Transformer: d_model 512 / d_k 64
TRANSFORMER_RESIDUALS = 30      # 6 encoder layers x 2 + 6 decoder layers x 3 residual adds


def transformer_with_internals(profile, tokens: int | None = None) -> dict:  # noqa: ANN001 - a profile
    """The model file's Transformer profile with what autograd keeps that no module outputs (the profile
    records module outputs only, 4.47 GB at batch 256 where Gavel's pairs put the job near 10 GB): per
    attention call the score tensors (q k^T, its scaling, its softmax: heads x L x L each) and the copies
    of q, k, v and the context that its transposes make (4 x L x d), and the residual adds' outputs (L x d
    each). `tokens`: the sentence length (None: the model file's, 30); every kept layer output scales with
    it. Gavel's code pads a batch to its longest sentence (up to 52 tokens), but at 52 the pair check keeps
    apart far more pairs that ran (bench_packing --memory-check; BENCHMARKS.md, packing fourth pass), so
    the file's length stays. Pure arithmetic on the profile."""
    from msched.estimate.memory import _get

    shape = tuple(_get(profile, "input_shape") or ())
    seq = int(shape[0]) if shape else 30
    tokens = tokens or seq
    by_kind = dict(_get(profile, "bytes_by_kind") or {})
    calls = (_get(profile, "calls_by_kind") or {}).get("attention", 0)
    width = by_kind.get("attention", 0) / calls / (seq * 4) if calls else 0     # d_model, from one call's output
    scaled = {k: v * tokens / seq for k, v in by_kind.items()}
    scaled["attention_internal"] = calls * 4.0 * (3 * TRANSFORMER_HEADS * tokens * tokens + 4 * tokens * width)
    scaled["residual_add"] = TRANSFORMER_RESIDUALS * 4.0 * tokens * width
    return {"params": _get(profile, "params"), "bytes_by_kind": scaled, "input_shape": (2 * tokens,)}


def memory_check(memory, path: str | Path, usable_gb: Mapping[str, float]) -> dict[str, int]:  # noqa: ANN001
    """The pair memory check (msched.estimate.interference.pair_fits, on `memory`'s peaks) against every
    single-GPU pair Gavel measured: predicted to fit or not x ran or measured 0 (out of memory)."""
    import json

    from msched.estimate.interference import _parse_key, pair_fits

    with open(path, encoding="utf-8") as fh:
        data = json.load(fh)
    inverse = {v: k for k, v in GAVEL_FAMILIES.items()}
    out = {"fit_ran": 0, "fit_oom": 0, "apart_ran": 0, "apart_oom": 0}

    def peak(job_type: str) -> float | None:
        from msched.estimate.interference import batch_of, family_of

        model = inverse.get(family_of(job_type))
        return memory(model, batch_of(job_type)) if model else None

    for g, usable in usable_gb.items():
        for key, entry in data.get(g, {}).items():
            a, sa = _parse_key(key)
            if sa != 1:
                continue
            for key2, both in entry.items():
                if key2 == "null" or _parse_key(key2)[1] != 1:
                    continue
                fits = pair_fits((peak(a), peak(_parse_key(key2)[0])), usable)
                out[("fit_" if fits else "apart_") + ("ran" if both[0] + both[1] > 0 else "oom")] += 1
    return out


class MeasuredPredictor:
    """The interference model's interface answered with Gavel's *measurements* (the simulator's truth):
    a perfect predictor, for measuring how much packing could gain if the prediction were exact (the
    ceiling of bench/bench_packing.py --predictor measured). A job is recognised by its solo iteration
    times (the perf table the simulator's tags are estimated from is Gavel's own); a pair Gavel did not
    measure, or measured at 0 (out of memory), predicts 0 (never packed). Never used by msched itself."""

    def __init__(self, path: str | Path):
        from msched.estimate.interference import read_gavel

        jobs, pairs = read_gavel(path)
        self.names = {self._key(s): n for n, s in jobs.items()}
        self.own = {}
        for p in pairs:
            self.own[(p.a, p.b, p.gpu_type)] = p.own_a
            self.own[(p.b, p.a, p.gpu_type)] = p.own_b

    @staticmethod
    def _key(speeds) -> tuple:  # noqa: ANN001 - a JobSpeeds
        return tuple(sorted((t, round(ms, 6)) for t, ms in speeds.iter_ms.items()))

    def own_speed(self, a, b, gpu_type: str) -> float:  # noqa: ANN001 - JobSpeeds
        na, nb = self.names.get(self._key(a)), self.names.get(self._key(b))
        return self.own.get((na, nb, gpu_type), 0.0) if na and nb else 0.0

    def combined_throughput(self, a, b, gpu_type: str) -> float:  # noqa: ANN001
        x, y = self.own_speed(a, b, gpu_type), self.own_speed(b, a, gpu_type)
        return x + y if x > 0 and y > 0 else 0.0

    def slower_speed(self, a, b, gpu_type: str) -> float:  # noqa: ANN001
        return min(self.own_speed(a, b, gpu_type), self.own_speed(b, a, gpu_type))

    guard_slower = slower_speed

    def slower_for(self, guard: str):  # noqa: ANN201, ARG002 - the measured slower job whatever the guard
        return self.slower_speed


def gavel_job_type(model: str, batch_size: int | None) -> str | None:
    """A Gavel perf-table model and batch -> Gavel's job type name ('ResNet-18 (batch size 32)')."""
    family = GAVEL_FAMILIES.get(model)
    if family is None:
        return None
    return family if family in ("A3C", "CycleGAN") else f"{family} (batch size {batch_size})"


@dataclass(frozen=True)
class PairTruth:
    """Own/solo speed of each job of a pair sharing one GPU: {(type a, type b, gpu type): (fa, fb)}."""

    fractions: Mapping[tuple[str, str, str], tuple[float, float]]

    @classmethod
    def from_gavel(cls, path: str | Path) -> PairTruth:
        """Gavel's measured pairs (msched.estimate.interference.read_gavel: pairs that did not fit are absent)."""
        from msched.estimate.interference import read_gavel

        _, pairs = read_gavel(path)
        return cls({(p.a, p.b, p.gpu_type): (p.own_a, p.own_b) for p in pairs})

    def pair(self, a: tuple[str, int | None], b: tuple[str, int | None], gpu_type: str) -> tuple[float, float]:
        """(fa, fb) for jobs (model, batch) a and b on `gpu_type`; (0, 0) when they do not fit together
        or Gavel did not measure them (never run a pair on a guess)."""
        ta, tb = gavel_job_type(*a), gavel_job_type(*b)
        return self.fractions.get((ta, tb, gpu_type), (0.0, 0.0)) if ta and tb else (0.0, 0.0)


@dataclass
class _Run:
    remaining: float          # solo-seconds of work left
    rate: float = 1.0         # own speed / solo speed now
    since: float = 0.0        # when `remaining` was last brought up to date
    due: float = 0.0          # the end event that is current
    node: int = -1
    gpu: int = -1             # which of the node's shard GPUs (squeue's gres_detail index; its partner's)
    partner: str | None = None
    owner: bool = True        # holds the GPU (the first of a pair; its partner after it ends)


@dataclass
class ShardRuns:
    """The simulator's shard jobs: who shares which GPU, how fast each runs, what was observed."""

    truth: PairTruth
    runs: dict[str, _Run] = field(default_factory=dict)
    open_slots: dict[int, list[str]] = field(default_factory=dict)     # node -> jobs alone on a GPU there
    barred: set[tuple[str, str]] = field(default_factory=set)
    oom: list[tuple[str, str, str]] = field(default_factory=list)       # (joiner, partner, gpu type)
    pairs: list[dict] = field(default_factory=list)                     # every pair that ran
    chosen: tuple | None = None          # (job, node, partner) open_slot found for the start that follows
    alone_s: float = 0.0                 # GPU seconds shard jobs ran alone on a GPU (a shard idle beside them)
    shared_s: float = 0.0                # GPU seconds of shared GPUs (two jobs on one)
    gained_s: float = 0.0                # work sharing added: sum over shared time of (combined speed - 1),
                                         # in solo seconds on the type it ran on (negative: sharing lost work)
    history: list[tuple] = field(default_factory=list)   # (time, "start"|"join"|"end", job, node, gpu)
    sim: object = None

    def attach(self, sim) -> ShardRuns:  # noqa: ANN001 - a slurm_sim.simulator.Simulator
        self.sim = sim
        sim.packing = self
        return self

    # ---------------------------------------------------------------- placement
    def open_slot(self, job, closed) -> tuple[int, tuple[int, ...]] | None:  # noqa: ANN001
        """A GPU holding one shard job on a node the job may use, as Slurm fills shards: (class, (node,))."""
        sim = self.sim
        for c in job.classes:
            if c in closed:
                continue
            for n in sim.classes[c].nodes:
                if n in job.exc_nodes:          # ExcNodeList (the round keeps it from a bad partner's node)
                    continue
                for other in self.open_slots.get(n, ()):
                    if (job.job_id, other) in self.barred:
                        continue
                    partner = sim.jobs[other]
                    fa, fb = self.truth.pair((job.model, job.batch_size), (partner.model, partner.batch_size),
                                             sim.node_type[n])
                    if fa <= 0 or fb <= 0:       # out of memory at its start: back in the queue
                        self.barred.add((job.job_id, other))
                        self.oom.append((job.job_id, other, sim.node_type[n]))
                        continue
                    self.chosen = (job.job_id, n, other)
                    return c, (n,)
        return None

    def backfill_slot(self, job, now: float) -> tuple[int, tuple[int, ...]] | None:  # noqa: ANN001
        """For the backfill pass: an open shard the pending shard job may join now, as `open_slot`, but only
        beside a job whose time limit ends no earlier than the joiner's would, so that the GPU is held no
        longer by limits than the reservations already count (a join takes no free GPU, so it delays none).
        Slurm's backfill fills a GPU's open shard as its main pass does; the simulator's backfill places
        jobs on free GPUs only, and shard jobs it started stood beside open shards of their type
        (bench_packing --why). None when there is none (`chosen` cleared)."""
        sim = self.sim
        if job.held or job.waiting_on or not job.classes or job.begin_time > now:
            return None
        slot = self.open_slot(job, frozenset())
        if slot is None:
            return None
        partner = sim.jobs[self.chosen[2]]
        if now + sim.limit_in(job, slot[0]) > partner.start_time + sim.effective_limit(partner):
            self.chosen = None
            return None
        return slot

    def start(self, job, node: int, runtime: float, now: float) -> tuple[bool, float]:  # noqa: ANN001
        """(whether the job joined a partner's GPU, its end time); the partner's end is moved."""
        run = _Run(remaining=runtime, since=now, node=node)
        self.runs[job.job_id] = run
        cap = now + job.limit_s if job.limit_s else float("inf")
        slot = self.open_slots.get(node, [])
        chosen, self.chosen = self.chosen, None
        partner_id = chosen[2] if chosen and chosen[:2] == (job.job_id, node) and chosen[2] in slot else None
        if partner_id is None:                  # a GPU of its own (the main pass found no open shard, or backfill)
            taken = {r.gpu for r in self.runs.values() if r.node == node and r is not run}
            run.gpu = next(k for k in range(len(taken) + 1) if k not in taken)
            slot.append(job.job_id)
            self.open_slots[node] = slot
            run.due = min(now + runtime, cap)
            self.history.append((now, "start", job.job_id, node, run.gpu))
            return False, run.due
        slot.remove(partner_id)
        other = self.runs[partner_id]
        run.gpu = other.gpu
        self.history.append((now, "join", job.job_id, node, run.gpu))
        self._catch_up(other, now)
        partner = self.sim.jobs[partner_id]
        fa, fb = self.truth.pair((job.model, job.batch_size), (partner.model, partner.batch_size),
                                 self.sim.node_type[node])
        run.rate, other.rate = fa, fb
        run.partner, other.partner, run.owner = partner_id, job.job_id, False
        run.due = min(now + run.remaining / fa, cap)
        self._reschedule(partner_id, other)
        self.pairs.append({"a": partner_id, "b": job.job_id, "gpu_type": self.sim.node_type[node], "start": now,
                           "speed_a": fb, "speed_b": fa, "combined": fa + fb})
        return True, run.due

    # ---------------------------------------------------------------- ends
    def due(self, job, now: float) -> bool:  # noqa: ANN001
        run = self.runs.get(job.job_id)
        return run is not None and abs(run.due - now) < 1e-6

    def finish(self, job, now: float) -> tuple[bool, bool]:  # noqa: ANN001
        """(whether the GPU is free now, whether the job's work is done); its partner runs alone."""
        run = self.runs.pop(job.job_id)
        self._catch_up(run, now)
        self.history.append((now, "end", job.job_id, run.node, run.gpu))
        done = run.remaining <= 1e-6 * max(1.0, run.since)
        slot = self.open_slots.get(run.node, [])
        if job.job_id in slot:
            slot.remove(job.job_id)
        if run.partner is None or run.partner not in self.runs:
            return True, done
        other = self.runs[run.partner]
        self._catch_up(other, now)
        other.rate, other.partner, other.owner = 1.0, None, True
        slot.append(run.partner)
        self.open_slots[run.node] = slot
        self._reschedule(run.partner, other)
        return False, done

    def gpu_index(self, job_id: str) -> tuple[int, ...]:
        """The GPU a running shard job holds, as real Slurm's squeue reports it (`SlurmJob.gpu_index`).
        The index counts shard GPUs only (the simulator does not number a node's `gpu` jobs' GPUs): it
        says which shard jobs share, which is what the round reads it for."""
        run = self.runs.get(job_id)
        return (run.gpu,) if run is not None and run.gpu >= 0 else ()

    def owns_gpu(self, job_id: str) -> bool:
        """Whether the job holds the GPU it runs on (the first of a pair); backfill counts the GPU once."""
        run = self.runs.get(job_id)
        return run is None or run.owner

    def _catch_up(self, run: _Run, now: float) -> None:
        if run.partner is None:
            self.alone_s += now - run.since          # a shard GPU with one of its two shards idle
        else:
            self.shared_s += (now - run.since) / 2  # GPU seconds: a pair's two jobs hold one GPU
            self.gained_s += (now - run.since) * (run.rate - 0.5)     # the pair's two halves: combined - 1
        run.remaining = max(0.0, run.remaining - (now - run.since) * run.rate)
        run.since = now

    def _reschedule(self, job_id: str, run: _Run) -> None:
        sim = self.sim
        job = sim.jobs[job_id]
        end = run.since + run.remaining / run.rate if run.rate > 0 else float("inf")
        run.due = min(end, job.start_time + job.limit_s) if job.limit_s else end
        sim._push_event(run.due, 0, job_id)          # the engine's job-end event; an older one is stale
        sim.version += 1


def with_shard_nodes(spec: ClusterSpec, per_type: int | None = None) -> ClusterSpec:
    """The cluster with `per_type` nodes of each GPU type (None: every node) also sharing their GPUs
    through shards: the `shard` feature and the partition `shared`, as the dev cluster's `--shards`."""
    seen: dict[str, int] = {}
    nodes = []
    for n in spec.nodes:
        k = seen[n.gpu_type] = seen.get(n.gpu_type, 0) + 1
        if per_type is None or k <= per_type:
            n = replace(n, features=(*n.features, SHARD_FEATURE), partitions=(*n.partitions, SHARD_PARTITION))
        nodes.append(n)
    default = spec.partitions[0]
    return replace(spec, nodes=tuple(nodes), partitions=(*spec.partitions, PartitionSpec(
        SHARD_PARTITION, default.default_time_s, default.max_time_s)))


@dataclass(frozen=True)
class SimPacking:
    """Packing in a replay: the truth of pair speeds (what happens) and msub's packing decision at
    submit (what msched predicts: msched.policy.packing.submit_verdict, as msub makes it)."""

    truth: PairTruth
    threshold: float = 1.0
    packable_share: float = 1.0          # share of the 1-GPU jobs whose owners opt in (by job id)
    only_when_busy: bool = False         # pack only when no GPU of the job's types is free at submit
    when_waiting: bool = True            # pack only when the job would wait (submit_verdict's wait rule)
    wait_share: float | None = None      # submit_verdict's wait_share (None: its default)
    guard: str = "bound"                 # config `pack_guard`: msub's and the round's packing guard
    memory: object = None                # (model, batch) -> predicted peak GB (GavelMemory); None: msched's
                                         # peak_gb (shipped torchvision models only)
    reasons: dict | None = None          # when given: why each opted-in 1-GPU job was or was not packed
                                         # (`verdict_kind` of its first type's reason) -> count
    packed_types: dict | None = None     # when given: job id -> the GPU types a packed job may land on
    queue_share: float = 1.0             # submit_verdict's queue_share: the share of the queued shard jobs
                                         # that must be good partners (1: each, msub's rule)
    refusals: dict | None = None         # when given: the guard's queue refusals judged by the truth
                                         # (`judge_refusal`) -> count
    exclude: bool = False                # the round's ExcNodeList lever (config `pack_exclude`)

    def runs(self, sim) -> ShardRuns:  # noqa: ANN001
        return ShardRuns(self.truth).attach(sim)

    def at_submit(self, tj, decision, sim, times, shard_types: list[str],  # noqa: ANN001, ANN201
                  free_at: Mapping[str, float] | None = None, plan_end: float | None = None):
        """(decision, partition, shards): the trace job as msub would submit it (`free_at`, `plan_end`:
        the free times per GPU type and the plan's last end msub reads, as the round published them)."""
        from msched.estimate.interference import load_model, peak_gb, speeds_from_tag, type_usable_gb
        from msched.msub.packing import may_meet, reference_mix
        from msched.policy.packing import solo_runtime_s, submit_verdict

        if tj.num_gpus != 1 or tj.gpu_type or not shard_types or not _opted_in(tj.job_id, self.packable_share):
            return decision, tj.partition, 0
        note = self._note
        types = [t for t in decision.types if t in shard_types] or ([] if decision.types else list(shard_types))
        if not types:
            return note("no shard type chosen for it", decision, tj)
        if self.only_when_busy and any(sim.free[n] > 0 for n, t in enumerate(sim.node_type) if t in types):
            return note("a GPU is free", decision, tj)
        tag = decision.tag
        mine = speeds_from_tag(tag, times)
        if mine is None:
            return note("no speeds", decision, tj)
        from msched.msub.packing import MAX_PARTNERS

        queued = []
        running = set()                              # the running ones (id of their speeds): msub's %T
        for j in sim.active.values():                # every shard job it may meet, as msub's squeue
            if j.shards:
                t = sim.job_view(j).tag
                s = speeds_from_tag(t, times) if t is not None else None
                if s is None or len(queued) >= MAX_PARTNERS:
                    return note("a queued shard job it cannot check", decision, tj)   # msub's rule
                queued.append((s, t))
                if j.state == "RUNNING":
                    running.add(id(s))
        model = load_model()
        slower = model.slower_for(self.guard)
        peak = self.memory or peak_gb
        my_peak = peak(tag.model, tag.bs)
        kept, why = [], []                           # as msub: judged on each type it may land on
        for gpu_type in types:
            here = [(s, t) for s, t in queued if may_meet(t, gpu_type)]      # as msub: those it may meet there
            if any(gpu_type not in s.iter_ms for s, _ in here):
                why.append("a queued shard job without an estimate")
                continue
            partners = [(s, t.mem if t.mem is not None else peak(t.model, t.bs), solo_runtime_s(s, t.iters, gpu_type))
                        for s, t in here]       # as msub: the tag's memory first
            where = f"{len(partners)} shard jobs in the queue"
            every = bool(partners)
            if not partners:
                perf = getattr(times, "perf", None) or times.times.perf        # a TableTimes, or one cached
                partners = [(s, peak(m, b)) for m, b, s in reference_mix(perf, gpu_type)]
                where = "the reference mix"
            waits = [max(0.0, free_at[gpu_type] - sim.now)] if free_at and gpu_type in free_at else []
            est = (decision.estimates or {}).get(gpu_type)
            value, reason = submit_verdict(mine, my_peak, partners, gpu_type,
                                           model.combined_throughput, type_usable_gb(gpu_type), self.threshold,
                                           slower, every=every, own=model.own_speed,
                                           some=self.guard == "bound", best_types=types if self.guard == "bound" else (),
                                           queue_share=self.queue_share if every else 1.0,
                                           required=[s for s, _ in here if id(s) in running]
                                           if self.exclude and every else (),
                                           wait_s=min(waits) if waits and self.when_waiting else None,
                                           runtime_s=est.seconds if est is not None else None,
                                           horizon_s=plan_end - sim.now if plan_end is not None and self.when_waiting
                                           else None,
                                           **({} if self.wait_share is None else {"wait_share": self.wait_share}))
            if value is not None:
                kept.append((gpu_type, value, f"{reason} with {where}"))
            else:
                if self.refusals is not None and every and not why and verdict_kind(reason) == "guard: a job below 0.5x":
                    verdict = self.judge_refusal(tag, mine, [(s, t) for s, t in here], gpu_type, slower)
                    for k, v in verdict.items():
                        self.refusals[k] = self.refusals.get(k, 0) + v
                why.append(verdict_kind(reason) + (" (queue)" if every else " (reference mix)"))
        if not kept:
            return note(why[0], decision, tj)
        note("packed", decision, tj)
        if self.packed_types is not None:
            self.packed_types[tj.job_id] = tuple(t for t, _, _ in kept)
        ok = [t for t, _, _ in kept]
        packed = tag._replace(pack=round(kept[0][1], 3), added="|".join(ok), mem=my_peak if self.memory else tag.mem,
                              why=f"packed on {'|'.join(ok)}: {kept[0][2]}")
        return decision._replace(tag=packed, types=tuple(ok)), SHARD_PARTITION, 1


    def judge_refusal(self, tag, mine, here, gpu_type: str, slower) -> dict:  # noqa: ANN001
        """The guard refused a job beside the queue (a queued shard job it may meet predicted to leave one
        of the two below 0.5x): was it right? Each partner the guard flagged, by what Gavel measured for
        the pair on the type: "flagged, measured < 0.5x" (or the two do not fit: Gavel measured 0) or
        "flagged, measured >= 0.5x" (the predictor's caution); the refusal itself "refusal right" when
        at least one flagged partner measured < 0.5x, else "refusal cautious"; and the queue's make-up as
        Gavel measured it ("queue measured good": partners each >= 0.5x, combined >= the threshold)."""
        from msched.estimate.interference import MIN_OWN_SPEED as MIN_OWN

        out = {"refusals": 1}
        wrong = 0
        for s, t in here:
            fa, fb = self.truth.pair((tag.model, tag.bs), (t.model, t.bs), gpu_type)
            bad_truth = fa <= 0 or fb <= 0 or min(fa, fb) < MIN_OWN
            good_truth = not bad_truth and fa + fb >= self.threshold
            out["queued partners"] = out.get("queued partners", 0) + 1
            out["queue measured good"] = out.get("queue measured good", 0) + good_truth
            if (v := slower(mine, s, gpu_type)) is not None and v < MIN_OWN:
                key = "flagged, measured < 0.5x" if bad_truth else "flagged, measured >= 0.5x"
                out[key] = out.get(key, 0) + 1
                wrong += bad_truth
        out["refusal right" if wrong else "refusal cautious"] = 1
        return out

    def _note(self, reason: str, decision, tj):  # noqa: ANN001, ANN202
        """Count why a job was (not) packed in `reasons`; (decision, partition, 0): not packed."""
        if self.reasons is not None:
            self.reasons[reason] = self.reasons.get(reason, 0) + 1
        return decision, tj.partition, 0


VERDICT_KINDS = (("waits", "would not wait (a GPU free for it)"), ("slowed to", "would run past the plan's end"),
                 ("a queued shard job beside it would run past", "a partner would run past the plan's end"),
                 ("one job predicted below", "guard: a job below 0.5x"), ("too big", "memory"),
                 ("predicted combined", "combined below the threshold"), ("no estimate", "no estimate"),
                 ("no partner", "no partner to predict against"))


def verdict_kind(reason: str) -> str:
    """submit_verdict's reason, as a kind (the bench's count of why jobs were not packed)."""
    if "is not its best shard type" in reason:
        return "not its best shard type"
    return next((kind for prefix, kind in VERDICT_KINDS if reason.startswith(prefix)), reason)


def _opted_in(job_id: str, share: float) -> bool:
    if share >= 1.0:
        return True
    import zlib

    return (zlib.crc32(job_id.encode()) % 1000) < share * 1000


@dataclass(frozen=True)
class PackingBound:
    """`pair_lp_bound`'s answer: the LP bound on the makespan with and without pairs, and what it used."""

    value_s: float                 # with pairs allowed (no schedule that packs only such pairs ends sooner)
    solo_s: float                  # the same LP without pairs (msched.policy.bound.lp_lower_bound's instance)
    pair_kinds: int                # (job, job, type) pair variables the LP was offered
    paired_share: float            # share of the 1-GPU jobs' work the LP ran in pairs (at its optimum)


def pair_lp_bound(trace, truth, cluster, pairs: PairTruth, *, min_own: float = 0.5,  # noqa: ANN001, PLR0915
                  min_combined: float = 0.0, lengths: bool = True, max_releases: int = 256) -> PackingBound:
    """A lower bound on the makespan of `trace` when 1-GPU jobs may share a GPU two at a time at the speeds
    `pairs` measured, only pairs where each job keeps >= `min_own` of its solo speed and the two together
    >= `min_combined` (the issue's 0.5x rule; 0: any pair that fits), on every node. The LP of
    msched.policy.bound (fractional types, per-type capacity after every release, no job shorter than its
    runtime) with pair "machines" added: y[a,b,t] GPU-seconds of type t on which a and b share, doing
    y fa / p[a,t] of a's work and y fb / p[b,t] of b's, holding one GPU, counting y towards both jobs'
    elapsed time, released when the later of the two is. Any schedule that packs only such pairs (and
    changes partners as it likes) is a feasible point, so the value bounds it from below. A job whose time
    limit caps its runtime on a type ends by elapsed time, so there each paired second counts as a solo
    one (still a valid bound). `solo_s` solves the same LP without y: the ratio value_s / solo_s is what
    packing could gain on the bound. `lengths=False` drops the elapsed rows (the area bound: only the
    per-type capacity after each release; weaker, but it shows what pairs do to the work alone)."""
    import bisect

    import numpy as np
    from scipy.optimize import linprog
    from scipy.sparse import coo_matrix

    from slurm_sim.metrics import true_runtimes

    cap = dict(cluster.gpus_total)
    jobs = [(j, rt) for j in trace if (rt := {t: p for t, p in true_runtimes(j, truth, cluster).items()
                                              if cap.get(t, 0) >= j.num_gpus and p > 0})]
    origin = min((j.submit_time for j, _ in jobs), default=0.0)
    scale = max([max(rt.values()) for _, rt in jobs] + [j.submit_time - origin for j, _ in jobs] + [1.0])
    types = sorted(t for t, g in cap.items() if g > 0)
    rel = sorted({(j.submit_time - origin) / scale for j, _ in jobs} | {0.0})
    if len(rel) > max_releases:
        step = (len(rel) - 1) / (max_releases - 1)
        rel = sorted({rel[round(k * step)] for k in range(max_releases)})

    def bucket(release_s: float) -> int:
        return max(0, bisect.bisect_right(rel, (release_s - origin) / scale + 1e-12) - 1)

    # columns: ("x", job, type, coefficient of work, GPU-seconds, bucket) and ("y", a, b, type, ...)
    cols: list[tuple] = []
    for jn, (j, rt) in enumerate(jobs):
        for t, p in rt.items():
            cols.append((jn, None, t, 1.0, None, j.num_gpus * p / scale, p / scale, bucket(j.submit_time)))
    n_solo = len(cols)
    single = [(jn, j, rt) for jn, (j, rt) in enumerate(jobs) if j.num_gpus == 1]
    for k, (an, a, art) in enumerate(single):
        for bn, b, brt in single[k + 1:]:
            for t in art.keys() & brt.keys():
                fa, fb = pairs.pair((a.model, a.batch_size), (b.model, b.batch_size), t)
                if fa <= 0 or fb <= 0 or min(fa, fb) < min_own or fa + fb < min_combined:
                    continue

                def share(job, rt_t: float, f: float, t=t) -> float:  # noqa: ANN001 - work per scaled GPU-s
                    capped = job.time_limit_s and rt_t >= job.time_limit_s * (1 - 1e-9)
                    return (1.0 if capped else f) * scale / rt_t

                cols.append((an, bn, t, share(a, art[t], fa), share(b, brt[t], fb), 1.0, 1.0,
                             bucket(max(a.submit_time, b.submit_time))))
    n_x, c_var = len(cols), len(cols)
    n_k = len(rel)
    s_base = c_var + 1
    n_var = s_base + len(types) * n_k
    tindex = {t: i for i, t in enumerate(types)}
    eq_r, eq_c, eq_v = [], [], []
    ub_r, ub_c, ub_v = [], [], []
    for v, (an, bn, t, wa, wb, gpu_s, elapsed, kb) in enumerate(cols):
        eq_r.append(an)                              # work: every job done
        eq_c.append(v)
        eq_v.append(wa)
        ub_r.append(an)                              # elapsed: release + time on it <= C
        ub_c.append(v)
        ub_v.append(elapsed)
        if bn is not None:
            eq_r.append(bn)
            eq_c.append(v)
            eq_v.append(wb)
            ub_r.append(bn)
            ub_c.append(v)
            ub_v.append(elapsed)
        eq_r.append(len(jobs) + tindex[t] * n_k + kb)     # capacity: suffix sums of GPU-seconds per type
        eq_c.append(v)
        eq_v.append(-gpu_s)
    eq_b = [1.0] * len(jobs)
    for t in types:
        for k in range(n_k):
            row = len(jobs) + tindex[t] * n_k + k
            eq_r.append(row)
            eq_c.append(s_base + tindex[t] * n_k + k)
            eq_v.append(1.0)
            if k + 1 < n_k:
                eq_r.append(row)
                eq_c.append(s_base + tindex[t] * n_k + k + 1)
                eq_v.append(-1.0)
            eq_b.append(0.0)
    ub_b = []
    for jn, (j, _) in enumerate(jobs):
        ub_r.append(jn)
        ub_c.append(c_var)
        ub_v.append(-1.0)
        ub_b.append(-(j.submit_time - origin) / scale)
    if not lengths:                                  # the area bound: no elapsed rows
        ub_r, ub_c, ub_v, ub_b = [], [], [], []
    row = len(ub_b)
    for t in types:
        for k in range(n_k):
            ub_r += [row, row]
            ub_c += [s_base + tindex[t] * n_k + k, c_var]  # S[t,k] <= G_t (C - r_k)
            ub_v += [1.0, -float(cap[t])]
            ub_b.append(-cap[t] * rel[k])
            row += 1
    cost = np.zeros(n_var)
    cost[c_var] = 1.0

    def solve(allowed: int) -> np.ndarray:
        bounds = [(0, None) if v < allowed or v >= n_x else (0, 0) for v in range(n_var)]
        res = linprog(cost, A_ub=coo_matrix((ub_v, (ub_r, ub_c)), shape=(row, n_var)).tocsr(), b_ub=ub_b,
                      A_eq=coo_matrix((eq_v, (eq_r, eq_c)), shape=(len(eq_b), n_var)).tocsr(), b_eq=eq_b,
                      bounds=bounds, method="highs")
        if res.status != 0:
            raise RuntimeError(f"pair LP bound not solved: {res.message}")
        return res.x

    solo = solve(n_solo)
    both = solve(n_x)
    single_work = sum(c[3] * both[v] for v, c in enumerate(cols[:n_solo]) if jobs[c[0]][0].num_gpus == 1)
    return PackingBound(float(both[c_var]) * scale * (1 - 1e-7), float(solo[c_var]) * scale * (1 - 1e-7),
                        n_x - n_solo, 1.0 - single_work / len(single) if single else 0.0)
