"""The round's pairing of shard jobs (the Packing issue): which pending shard jobs should share a GPU.

Slurm fills one GPU's shards before the next GPU's (SLURM-NOTES; tests/test_packing_slurm.py), so two
1-shard jobs that start one after the other share a GPU. What a round can steer is therefore the order
in which shard jobs start (their priorities) and, where shard nodes of several GPU types exist, the
type a pair lands on (the GPU-type feature). This module is the pure decision: given the shard jobs
msched knows (their solo speeds and memory), it pairs them and orders them.

- A shard job running alone on a GPU (its partner ended, or it started alone) has an open shard beside
  it: the first pending job in the order is the best partner found for it.
- The pending jobs are paired greedily by predicted combined throughput (msched.estimate.interference),
  best pair first, among pairs at or above the threshold whose memory fits one GPU; greedy matching is
  within a factor of two of the best total and costs O(n^2 log n) for n pending shard jobs (capped).
- Order: the open slot's partner, then the pairs (each pair adjacent, longest first by the pair's longer
  job's estimate, as the planner orders for makespan; ties by queue position), then the jobs without a
  good partner, last (longest first), so a badly matched job starts after the good pairs and meets, at
  worst, another leftover. The priorities written are the
  ones the shard jobs already hold, permuted (nothing moves past a job that is not a shard job).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping, Sequence

from msched.estimate.interference import DEFAULT_THRESHOLD, MIN_OWN_SPEED, JobSpeeds, pair_fits
from msched.util.record import record

WAIT_SHARE = 0.0              # submit_verdict: least wait, as a share of the stretch sharing costs the job
BEST_TYPE_SLACK = 0.1         # on_best_type: solo on the type at most this much slower than on its best one
MAX_PENDING = 200             # shard jobs paired per round at most (the rest keep their order)
EXCLUDE_HEAD = 32             # shard_exclusions: pending jobs kept apart from the bad partners ahead of them


@record
class ShardJob:
    """One shard job as the pairing sees it."""

    job_id: str
    priority: int
    speeds: JobSpeeds | None          # None: msched has no estimate (paired with no one)
    peak_gb: float | None = None      # None: unknown memory (not held against a pair)
    running: bool = False
    gpu_type: str | None = None       # running: the type it runs on
    start_time: float = 0.0
    length_s: float = 0.0             # its estimated solo runtime (shortest over its types); 0 = unknown
    types: tuple[str, ...] = ()       # the shard types msub packed it for (its tag's `added`); (): any
    reach: tuple[str, ...] | None = None   # pending: the shard types its owner's own request (constraint,
                                           # partitions) reaches, the only ones the round may write; None: any


@record
class Pair:
    a: str
    b: str
    gpu_type: str
    predicted: float                  # combined normalized throughput


@record
class PackingPlan:
    """What the round writes: new priorities of pending shard jobs, the GPU type of paired ones (only
    where shard nodes of several types exist), and why (the pairs, with their predictions)."""

    priorities: dict = None          # job id -> priority
    gpu_types: dict = None           # job id -> GPU type
    pairs: tuple = ()                # Pair, the lone running job's partner first
    alone: tuple = ()                # pending jobs without a partner at or above the threshold
    excluded: dict = None            # job id -> the shard nodes it must not start on (`shard_exclusions`;
                                     # None: the lever is off)


def solo_runtime_s(speeds: JobSpeeds, iterations: int | None, gpu_type: str) -> float | None:
    """A shard job's solo runtime on the type from what the predictor knows of it (its iteration time
    there times its iterations; None when either is unknown): a queued partner's, for `horizon_s`."""
    ms = speeds.iter_ms.get(gpu_type)
    return ms * iterations / 1000.0 if ms and iterations else None


def on_best_type(speeds: JobSpeeds, gpu_type: str, types: Sequence[str], slack: float = BEST_TYPE_SLACK) -> bool:
    """Whether `gpu_type` is the job's best among `types` (the shard types it may land on): its solo
    iteration time there within `slack` of its fastest one. The guard's check: a pair's speeds are
    relative to solo *on that type*, and a job packed on a type where it is slow anyway (Gavel's
    Recommendation is 2.2x slower on a V100 than on a P100) may keep 0.5x of that and still crawl
    against what it would have had (BENCHMARKS.md, packing in the simulator)."""
    mine = speeds.iter_ms.get(gpu_type)
    known = [speeds.iter_ms[t] for t in types if speeds.iter_ms.get(t)]
    return bool(mine) and mine <= (1.0 + slack) * min(known, default=mine)


def submit_verdict(mine: JobSpeeds, my_peak: float | None, partners: Sequence[tuple],
                   gpu_type: str, predict: Callable[[JobSpeeds, JobSpeeds, str], float],
                   usable_gb: float | None, threshold: float = DEFAULT_THRESHOLD,
                   slower: Callable[[JobSpeeds, JobSpeeds, str], float | None] | None = None, *,
                   every: bool = False, own: Callable[[JobSpeeds, JobSpeeds, str], float | None] | None = None,
                   wait_s: float | None = None, runtime_s: float | None = None,
                   wait_share: float = WAIT_SHARE, horizon_s: float | None = None,
                   some: bool = False, best_types: Sequence[str] = (),
                   queue_share: float = 1.0, required: Sequence[JobSpeeds] = ()) -> tuple[float | None, str]:
    """msub's decision for one packable job (and the simulator's replay of it): (the mean predicted
    combined throughput with the partners it would likely share with, or None when it is not packed;
    the reason). Not packed: no estimate on the shard type, too big beside most partners, or a mean
    below the threshold. `slower(a, b, type)`: the slower job's predicted own speed; partners beside
    which it falls under MIN_OWN_SPEED count as misfits too.

    `every`: the partners are the shard jobs in the queue (pending or running), one of which it will
    meet. Then *each* of them must be a good partner (fits, combined at or above the threshold, both
    jobs at or above MIN_OWN_SPEED): a shard job that starts after a running one may join its GPU, and
    a pending one may be joined, so a pair forms only between jobs the later one was checked against
    (the 0.5x-solo rule holds for every pair Slurm forms, up to the predictor's error and the jobs a
    long queue leaves unread). Without `every` (the reference mix: no job to meet yet) most must be.

    `wait_s` (the plan's wait for a GPU of its own: the round's published free time) and `runtime_s`
    (its solo estimate on the type): sharing stretches the job by runtime x (1 / own speed - 1) (own
    speed its lowest predicted beside the queue's partners, the median beside the reference mix,
    `own`). It is packed only when it would wait (an idle cluster packs nothing: sharing there only
    slows jobs) and the wait is at least `wait_share` of that stretch (1: sharing ends the job itself
    no later than waiting; 0, the default: any wait, since a job that shares leaves a GPU to the queue
    behind it; bench/bench_packing.py measures both).

    `some` (the guard, `pack_guard = "bound"`, with the reference mix): one partner that passes every
    check is enough (the guard passes few pairs; the first shard job only needs one it could pair
    with), and the mean is over those that pass. `best_types`: the job is packed on `gpu_type` only
    when it is its best of them (`on_best_type`).

    `queue_share` (with `every`; 1, the default: each of them): the looser queue rule, packed when at
    least this share of the queued shard jobs are good partners (the mean, the own speed and the horizon
    over those); the round must then keep the bad ones apart (bench_packing --queue-share measures it).
    `required` (with the looser rule): partners (by identity: the speeds given in `partners`) that must
    each be good whatever the share, the running shard jobs: one alone on a GPU has an open shard the job
    would join as it is submitted, before any round can keep the two apart (config `pack_exclude`).

    `horizon_s`: how long the round's plan runs (its estimated last end minus now). A job the schedule
    waits for is not to be slowed, so it is not packed when it would run past that end slowed by its
    partner, nor when one of its queued partners would (a partner given as (speeds, peak GB, solo
    runtime s): its whole solo runtime counted from now, which errs towards not packing)."""
    if gpu_type not in mine.iter_ms:
        return None, f"no estimate on the shard nodes' type {gpu_type}"
    known = [(s, p) for s, p, *_ in partners if gpu_type in s.iter_ms]
    if not known:
        return None, "no partner to predict against"
    if best_types and not on_best_type(mine, gpu_type, best_types):
        return None, f"{gpu_type} is not its best shard type ({'|'.join(best_types)})"
    runtimes = {id(s): rest[0] for s, _, *rest in partners if rest and rest[0]}
    need = (max(1, math.ceil(queue_share * len(known) - 1e-9)) if every else 1 if some else len(known) / 2)
    fitting = [s for s, p in known if pair_fits((my_peak, p), usable_gb)]
    if len(fitting) < need:
        return None, f"too big to share a {gpu_type} with {'every partner' if every else 'most partners'}"
    if slower is not None:
        fitting = [s for s in fitting if (v := slower(mine, s, gpu_type)) is None or v >= MIN_OWN_SPEED]
        if len(fitting) < need:
            return None, (f"one job predicted below {MIN_OWN_SPEED:g}x solo beside "
                          f"{'a queued shard job' if every else 'every partner' if some else 'most partners'}")
    values = [predict(mine, s, gpu_type) for s in fitting]
    if every and queue_share < 1.0:      # the looser rule: only the good partners count
        good = [(s, v) for s, v in zip(fitting, values, strict=True) if v >= threshold]
        kept = {id(s) for s, _ in good}
        if missing := sum(id(s) not in kept for s in required):
            return None, f"{missing} running shard job(s) it may join at once not good partners"
        if len(good) < need:
            return None, (f"predicted combined throughput < {threshold:g} beside {len(fitting) - len(good)} of "
                          f"{len(known)} queued shard jobs (needs {queue_share:.0%} good)")
        fitting, values = [s for s, _ in good], [v for _, v in good]
    predicted = sum(values) / len(values)
    if every and min(values) < threshold:
        return None, f"predicted combined throughput {min(values):.2f} < {threshold:g} beside a queued shard job"
    if predicted < threshold:
        return None, f"predicted combined throughput {predicted:.2f} < {threshold:g}"
    speeds = [v for s in fitting if own is not None and (v := own(mine, s, gpu_type)) is not None]
    speed = max(0.05, min(speeds) if every else statistics.median(speeds)) if speeds else MIN_OWN_SPEED
    if wait_s is not None:
        stretch = runtime_s * (1.0 / speed - 1.0) if runtime_s else 0.0
        if wait_s <= 0 or wait_s < wait_share * stretch:
            return None, (f"waits {wait_s / 60:.0f} min for a GPU of its own, sharing would add "
                          f"{stretch / 60:.0f} min (own speed {speed:.2f})")
    if horizon_s is not None:
        if runtime_s and runtime_s / speed > horizon_s:
            return None, (f"slowed to {speed:.2f}x it would run {runtime_s / speed / 3600:.1f} h, past the "
                          f"plan's end in {horizon_s / 3600:.1f} h")
        for s in fitting:
            theirs = own(s, mine, gpu_type) if own is not None else None
            if runtime := runtimes.get(id(s)):
                if runtime / max(0.05, theirs or MIN_OWN_SPEED) > horizon_s:
                    return None, f"a queued shard job beside it would run past the plan's end in {horizon_s / 3600:.1f} h"
    return predicted, f"predicted combined throughput {predicted:.2f}"


def pair_rate(a: JobSpeeds, b: JobSpeeds, gpu_type: str, combined: float,
              own: Callable[[JobSpeeds, JobSpeeds, str], float | None] | None = None) -> float:
    """The work a pair gets done on `gpu_type`, in solo runs on each job's fastest type per unit of
    time: each job's own speed there (`own`; half the combined throughput each when unknown) times its
    solo speed there relative to its fastest type. The combined normalized throughput is relative to
    solo *on that type*: a type where a job is slow anyway (Gavel's Recommendation runs 2.2x slower on a
    V100 than on a P100) can score high on it while the pair gets less done (bench/bench_packing.py, seed
    2 at load 3: such a pair put on a V100 ended 80 h late)."""
    total = 0.0
    for x, y in ((a, b), (b, a)):
        fastest = min(v for v in x.iter_ms.values() if v and v > 0)
        speed = own(x, y, gpu_type) if own is not None else None
        total += (speed if speed is not None else combined / 2) * fastest / x.iter_ms[gpu_type]
    return total


def pair_value(a: ShardJob, b: ShardJob, gpu_type: str, predict: Callable[[JobSpeeds, JobSpeeds, str], float],
               usable_gb: float | None, threshold: float = DEFAULT_THRESHOLD,
               slower: Callable[[JobSpeeds, JobSpeeds, str], float | None] | None = None) -> float | None:
    """The one rule for two shard jobs on one GPU of `gpu_type`, in the round's pairing and in its
    exclusions (`shard_exclusions`), on Slurm and in the simulator alike: their predicted combined
    throughput when both have an estimate there, they fit its memory together (`pair_fits`), the slower
    keeps >= MIN_OWN_SPEED (`slower`; None: no bound known, not held against the pair) and the combined
    reaches `threshold`; None when any of these fails (a job without an estimate pairs with no one)."""
    if a.speeds is None or b.speeds is None or gpu_type not in a.speeds.iter_ms or gpu_type not in b.speeds.iter_ms:
        return None
    if not pair_fits((a.peak_gb, b.peak_gb), usable_gb):
        return None
    low = slower(a.speeds, b.speeds, gpu_type) if slower is not None else None
    if low is not None and low < MIN_OWN_SPEED:
        return None
    value = predict(a.speeds, b.speeds, gpu_type)
    return value if value >= threshold else None


def shard_exclusions(pending: Sequence[ShardJob], lone: Mapping[str, Sequence[ShardJob]],
                     node_type: Mapping[str, str], ok: Callable[[ShardJob, ShardJob, str], bool],
                     allowed: Mapping[str, frozenset[str]] | None = None,
                     head: int = EXCLUDE_HEAD) -> dict[str, tuple[str, ...]]:
    """{pending shard job: the shard nodes it must not start on} (sorted names; () for none). Slurm fills
    an open shard with whichever shard job starts next on the node, and within a GPU type the round's
    priorities and features cannot say "not beside this job"; the excluded node list can (`scontrol
    update ExcNodeList=`). `node_type`: every shard node's GPU type; `ok(a, b, type)`: whether a and b
    may share a GPU of the type (`pair_value`'s rule). A pending job is kept off
    - a node where a shard job runs alone on a GPU that it must not pair with (`lone`: node -> those jobs;
      any of them counts, since Slurm may give it any open shard there; the cost is the node's free
      GPUs, which it may not take either while that job runs alone there);
    - among the first `head` pending jobs in start order (`pending` is in it: the round's new
      priorities), every node where a job ahead of it that it must not pair with may start: that job
      starts first and the next may join it before the next round can say where it went. The job
      behind waits (it could start only after the one ahead anyway, unless backfill jumps it) and is
      kept only off that job's node once it runs.
    `allowed`: job -> the GPU types it may land on (nodes of other types are never named: no writes).
    Pure; `ok` is called once per pair and type."""
    memo: dict[tuple[str, str, str], bool] = {}

    def fine(a: ShardJob, b: ShardJob, t: str) -> bool:
        key = (min(a.job_id, b.job_id), max(a.job_id, b.job_id), t)
        if key not in memo:
            memo[key] = ok(a, b, t)
        return memo[key]

    out: dict[str, tuple[str, ...]] = {}
    may: dict[str, set[str]] = {}            # the head's jobs: the nodes each may start on
    for k, p in enumerate(pending):
        types = allowed.get(p.job_id) if allowed is not None else None
        mine = [n for n in node_type if types is None or node_type[n] in types]
        bad = {n for n in mine if any(not fine(p, q, node_type[n]) for q in lone.get(n, ()))}
        if k < head:
            for q in pending[:k]:
                bad.update(n for n in may[q.job_id] if n not in bad and n in mine
                           and not fine(p, q, node_type[n]))
            may[p.job_id] = set(mine) - bad
        out[p.job_id] = tuple(sorted(bad))
    return out


def pair_shard_jobs(jobs: Sequence[ShardJob], predict: Callable[[JobSpeeds, JobSpeeds, str], float],
                    shard_types: Sequence[str], usable_gb: Callable[[str], float | None] = lambda t: None, *,
                    threshold: float = DEFAULT_THRESHOLD,
                    slower: Callable[[JobSpeeds, JobSpeeds, str], float | None] | None = None,
                    own: Callable[[JobSpeeds, JobSpeeds, str], float | None] | None = None,
                    best_type: bool = False) -> PackingPlan:
    """Pair and order the pending shard jobs (module docstring). `predict(a, b, gpu_type)` is the
    interference model's combined throughput; `shard_types` the GPU types of the shard nodes; `slower`
    the slower job's predicted own speed (a pair under MIN_OWN_SPEED is never formed); `own` one job's
    own speed beside the other (the pair's type is the one where it gets most work done, `pair_rate`);
    `best_type` (the guard): a pair only on a type that is both jobs' best shard type (`on_best_type`)."""
    if not shard_types:
        return PackingPlan({}, {})
    pending = sorted((j for j in jobs if not j.running), key=lambda j: -j.priority)[:MAX_PENDING]
    if not pending:
        return PackingPlan({}, {})
    pairs: list[Pair] = []
    gpu_types: dict[str, str] = {}

    def best(a: ShardJob, b: ShardJob, types: Sequence[str]) -> tuple[float, str] | None:
        """(predicted combined throughput, GPU type) of the pair on the type where it gets most work
        done (`pair_rate`), among the types where it fits, pays (the threshold) and neither job crawls."""
        if a.speeds is None or b.speeds is None:
            return None
        options = []
        for t in types:
            if (a.types and t not in a.types) or (b.types and t not in b.types):
                continue        # msub checked each job's partners on its own packed types only (`may_meet`)
            if (a.reach is not None and t not in a.reach) or (b.reach is not None and t not in b.reach):
                continue        # a type its owner's request does not reach: it would never start there
            if best_type and not (on_best_type(a.speeds, t, shard_types) and on_best_type(b.speeds, t, shard_types)):
                continue
            value = pair_value(a, b, t, predict, usable_gb(t), threshold, slower)
            if value is not None:
                options.append((pair_rate(a.speeds, b.speeds, t, value, own), value, t))
        return max(options)[1:] if options else None

    order: list[str] = []
    taken: set[str] = set()
    # an open shard beside a running job that runs alone: the odd one out of the running shard jobs
    running = sorted((j for j in jobs if j.running), key=lambda j: j.start_time)
    if len(running) % 2 == 1:
        lone = running[-1]
        scored = [(s[0], -i, p) for i, p in enumerate(pending)
                  if (s := best(lone, p, [lone.gpu_type] if lone.gpu_type else shard_types)) and s[0] >= threshold]
        if scored:
            value, _, partner = max(scored)
            order.append(partner.job_id)
            taken.add(partner.job_id)
            pairs.append(Pair(lone.job_id, partner.job_id, lone.gpu_type or shard_types[0], value))
    rank = {j.job_id: i for i, j in enumerate(pending)}
    candidates = []
    free = [j for j in pending if j.job_id not in taken]
    for i, a in enumerate(free):
        for b in free[i + 1:]:
            s = best(a, b, shard_types)
            if s is not None and s[0] >= threshold:
                candidates.append((-s[0], rank[a.job_id], rank[b.job_id], s[1], a.job_id, b.job_id))
    candidates.sort()
    chosen = []
    for neg, _ra, _rb, t, a, b in candidates:
        if a in taken or b in taken:
            continue
        taken.update((a, b))
        chosen.append(Pair(a, b, t, -neg))
    # longest first (the pair's longer job), as the planner's makespan order: a long job started late
    # ends the schedule late; ties keep the queue's order
    length = {j.job_id: j.length_s for j in pending}
    chosen.sort(key=lambda p: (-max(length[p.a], length[p.b]), min(rank[p.a], rank[p.b])))
    for p in chosen:
        order += [p.a, p.b] if rank[p.a] < rank[p.b] else [p.b, p.a]
        if len(shard_types) > 1:
            gpu_types[p.a] = gpu_types[p.b] = p.gpu_type
    alone = tuple(j.job_id for j in sorted(pending, key=lambda j: (-j.length_s, rank[j.job_id]))
                  if j.job_id not in taken)
    order += alone
    slots = sorted((j.priority for j in pending), reverse=True)
    return PackingPlan(dict(zip(order, slots, strict=True)), gpu_types, tuple(pairs + chosen), alone)
