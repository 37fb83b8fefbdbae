"""Packing on Gavel's workload: msched with and without shard jobs, and the predictor's error on the pairs.

    python bench/bench_packing.py [--jobs 300] [--seeds 5] [--first-seed 1] [--load 0.9] [--static]
                                  [--shard-nodes N] [--guard bound|mean] [--cluster SPEC]
                                  [--kinds fifo,msched,packed] [--spread S] [--bound] [--json FILE]

Workload (d) of bench/workloads.py: Gavel's job types and K80/P100/V100 throughputs (truth = knowledge),
Poisson arrivals at the given load (or a static batch), on Gavel's cluster (`v100:8x4,p100:8x4,k80:8x4`)
whose nodes all share GPUs through shards (2 per GPU; `slurm_sim.packing.with_shard_nodes`), Slurm's
backfill for every run. Each seed runs the same trace three ways through the same round core:
backfill fifo, msched without packing (every job a `gpu` job), and msched with packing (every 1-GPU job
opted in; msub's decision `msched.policy.packing.submit_verdict` packs those the interference predictor
expects to pair well under the guard, `--guard`: the quantile bound, the default, or the mean forest;
the round pairs the shard jobs). `--kinds` runs only some of the three (the ratios need msched and
packed; fifo only adds the x-fifo figures). Packed jobs run at the pair speeds Gavel measured
(`slurm_sim.packing.PairTruth`); the planner sees only the prediction. Printed per seed and as means:
makespan and mean JCT (ratios packing / no packing in the same run), the shard jobs, the pairs that ran,
the slowest packed job's speed (own / solo), the pairs whose joiner ran out of memory (Gavel measured 0),
the predictor's error on the pairs that ran (predicted at submit vs measured combined), the share of
shard-GPU time with one job alone on the GPU, and the job that ends last with packing and how it ran
without (later start, slower type, itself packed): why the makespans differ. `--bound` prints instead
the ceiling: the LP makespan bound with pairs at the measured speeds against the bound without
(`slurm_sim.packing.pair_lp_bound`); `--spread S` moves every run's arrivals by up to S s (a static batch
whose later jobs see a published plan).
Source: github.com/stanford-futuredata/gavel `scheduler/simulation_throughputs.json` (MIT).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import workloads as wl  # noqa: E402

from msched.estimate.interference import MIN_OWN_SPEED  # noqa: E402
from msched.estimate.perf_table import PerfTable  # noqa: E402
from slurm_sim.cluster import parse_cluster  # noqa: E402
from slurm_sim.compare import Classifier, SimSetup, replay  # noqa: E402
from slurm_sim.metrics import trace_bound  # noqa: E402
from slurm_sim.packing import GavelMemory, PairTruth, SimPacking, memory_check, with_shard_nodes  # noqa: E402

H = 3600.0


KINDS = ("fifo", "msched", "packed")
REAL_MODEL: list = [None]     # the shipped predictor, kept when --predictor measured replaces it


def run_seed(seed: int, n_jobs: int, load: float, static: bool, threshold: float, truth_pairs: PairTruth,  # noqa: PLR0913
             only_when_busy: bool = False, when_waiting: bool = True, wait_share: float | None = None,
             shard_nodes: int | None = None, guard: str = "bound", cluster_spec: str | None = None,
             kinds: tuple[str, ...] = KINDS, memory=None, jitter_s: float | None = None,  # noqa: ANN001
             spread_s: float | None = None, spread_draw: int = 0, queue_share: float = 1.0,
             exclude: bool = False, starvation_h: float | None = 24.0, drain: bool = False) -> dict:
    w = wl.gavel_workload(n_jobs, seed, static=static, load=load,
                          **({"cluster": cluster_spec} if cluster_spec else {}))
    cluster = with_shard_nodes(parse_cluster(w.cluster), shard_nodes)
    truth = PerfTable.load(w.truth)
    starve = {"starvation_age_s": None if starvation_h is None else starvation_h * H,
              "policy_options": {"drain_wide": True} if drain else {}}
    base = SimSetup(cluster, truth, truth, Classifier(list(w.references), truth), scheduler="backfill", **starve)
    packed = SimSetup(cluster, truth, truth, Classifier(list(w.references), truth), scheduler="backfill", **starve,
                      packing=SimPacking(truth_pairs, threshold=threshold, only_when_busy=only_when_busy,
                                         when_waiting=when_waiting, wait_share=wait_share, guard=guard,
                                         memory=memory, reasons=(reasons := {}), packed_types=(types_of := {}),
                                         queue_share=queue_share, refusals=(refusals := {}), exclude=exclude))
    trace = list(w.jobs) if spread_s is None else moved(list(w.jobs), seed + 1000 * spread_draw, spread_s)
    bound = trace_bound(trace, truth, cluster)
    fifo = replay(trace, "fifo", base, bound=bound) if "fifo" in kinds else None
    plain = replay(trace, "msched", base, bound=bound) if "msched" in kinds else None
    if jitter_s is None:
        pack = replay(trace, "msched", packed, bound=bound)
        info = pack.metrics["packing"]
    else:       # the control: no packing, each arrival moved by up to jitter_s (the noise floor of the ratio)
        pack = replay(moved(trace, seed, jitter_s), "msched", base, bound=bound)
        info = {"shard_jobs": 0, "pairs": [], "oom": 0, "history": []}
    tags = {o.job_id: o for o in pack.outcomes}
    pairs = info["pairs"]
    # the predictor's error on the pairs that ran: msub's prediction (the joiner's tag) vs Gavel's measurement
    from msched.estimate.interference import load_model, speeds_from_tag
    from msched.estimate.runtime import TableTimes
    from msched.tag import JobTag

    model, times = REAL_MODEL[0] or load_model(), TableTimes(truth)
    by_id = {j.job_id: j for j in trace}
    errors, predictions = [], []
    crawled = {"predictor": 0, "unchecked": 0}     # pairs with a job measured below 0.5x solo, by cause
    for p in pairs:
        a, b = by_id[p["a"]], by_id[p["b"]]
        sa, sb = (speeds_from_tag(JobTag(model=j.model, ref=j.model, bs=j.batch_size), times) for j in (a, b))
        predicted = model.combined_throughput(sa, sb, p["gpu_type"])
        predictions.append(predicted)
        errors.append(abs(predicted - p["combined"]))
        if min(p["speed_a"], p["speed_b"]) < MIN_OWN_SPEED:
            # predicted here (from the job types' own figures) to pass msched's rule (both >= 0.5x,
            # combined >= threshold): the predictor erred; else msub's prediction at submit (from the
            # tag's reference, or a pair it never checked) differed from this one
            # (the run's own guard: "bound", the shipped one, judges by the quantile bound, not the mean)
            ok = predicted >= threshold and (model.slower_for(guard)(sa, sb, p["gpu_type"]) or 0.0) >= MIN_OWN_SPEED
            crawled["predictor" if ok else "unchecked"] += 1
    slowest = min((min(p["speed_a"], p["speed_b"]) for p in pairs), default=None)
    # why the makespans differ: the job that ends last with packing, as it ran without
    last = max(pack.outcomes, key=lambda o: o.end or 0.0)
    before = {o.job_id: o for o in plain.outcomes}[last.job_id] if plain is not None else last
    in_pair = {p["a"] for p in pairs} | {p["b"] for p in pairs}
    tail = {"job": last.job_id, "model": last.model, "gpus": last.num_gpus, "packed": last.job_id in in_pair,
            "gpu_type": (before.gpu_type, last.gpu_type), "start_h": (before.start / H, last.start / H),
            "end_h": (before.end / H, last.end / H)}
    tail["why"] = ("itself packed" if tail["packed"] else "started later" if last.start > before.start + 60
                   else "slower GPU type" if last.gpu_type != before.gpu_type else "same start and type"
                   if abs(last.end - before.end) < 60 else "other")
    none = {"makespan_s": None, "mean_jct_s": None}
    gpus: dict[str, int] = {}
    for node in cluster.nodes:
        gpus[node.gpu_type] = gpus.get(node.gpu_type, 0) + node.gpus
    gpu_s = info.get("alone_gpu_s", 0.0) + info.get("shared_gpu_s", 0.0)
    return {"seed": seed, "jobs": len(trace), "lb_s": bound.value_s,
            "fifo": fifo.metrics if fifo else none, "msched": plain.metrics if plain else none, "packed": pack.metrics,
            "shard_jobs": info["shard_jobs"], "pairs": len(pairs), "oom": info["oom"],
            "slowest_packed_speed": slowest, "pair_mae": statistics.fmean(errors) if errors else None,
            "pairs_below_1": sum(p["combined"] < 1.0 for p in pairs), "crawled": crawled, "tail": tail,
            "alone_share": info.get("alone_gpu_s", 0.0) / gpu_s if gpu_s else None,
            # the work sharing added, as a share of the cluster's GPU time up to the no-packing makespan
            "gained_share": (info.get("gained_gpu_s", 0.0) / (sum(n.gpus for n in cluster.nodes)
                                                              * plain.metrics["makespan_s"])
                             if plain is not None and plain.metrics.get("makespan_s") else None),
            "pair_list": [{**p, "predicted": v} for p, v in zip(pairs, predictions, strict=True)],
            "reasons": reasons, "refusals": refusals,
            "big_start_h": {k: big_starts(r) for k, r in (("msched", plain), ("packed", pack)) if r is not None},
            "lone": lone_time(info["history"], trace, [n.gpu_type for n in cluster.nodes], types_of, truth_pairs),
            "lone_starts": lone_starts(info["history"], [n.gpu_type for n in cluster.nodes], types_of),
            "unfinished": {k: len(r.unfinished) for k, r in (("fifo", fifo), ("msched", plain), ("packed", pack))
                           if r is not None},
            "room": room(trace, plain, pack, info, set(types_of), sum(n.gpus for n in cluster.nodes)),
            "wide": {k: wide_wait(trace, r, gpus, bound.value_s) for k, r in (("msched", plain), ("packed", pack))
                     if r is not None},
            "wide_types": wide_types(plain, pack) if plain is not None else None,
            "_": len(tags)}


def _union_s(intervals: list[tuple[float, float]]) -> float:
    """The length of the union of [a, b) intervals (seconds)."""
    total, end = 0.0, float("-inf")
    for a, b in sorted(intervals):
        if b <= end:
            continue
        total += b - max(a, end)
        end = b
    return total


def room(trace: list, plain, pack, info: dict, shard_ids, n_gpus: int) -> dict:  # noqa: ANN001 - replays' results
    """Where packing could act (`--room`), from the runs' outcomes (hours unless said):
    - per run: the makespan; the time some 1-GPU job waited (the union of [submit, start) over the
      1-GPU jobs: only then can a pair start a job sooner); the last 1-GPU job's start and the makespan's
      tail after it (no 1-GPU job left to place); the job that ends last (size, model, arrival, start,
      runtime): a tail job that started at its arrival is set by arrival + runtime, which no packing shortens;
    - packed run: the time some shard job waited (a pair can form only then), the share of the 1-GPU jobs'
      running time spent sharing a GPU (2 x shared GPU time / their running time), and the work sharing
      added (GPU h, and as hours of the whole cluster: the most it could take off the makespan were all
      work shifted earlier)."""
    one = {j.job_id for j in trace if j.num_gpus == 1}
    out: dict = {}
    for name, run in (("msched", plain), ("packed", pack)):
        if run is None:
            continue
        ran = [o for o in run.outcomes if o.start is not None and o.end is not None]
        last = max(ran, key=lambda o: o.end)
        one_starts = [o.start for o in ran if o.job_id in one]
        ms = run.metrics["makespan_s"]
        out[name] = {
            "makespan_h": ms / H,
            "one_waiting_h": _union_s([(o.submit, o.start) for o in ran if o.job_id in one and o.start > o.submit]) / H,
            "one_last_start_h": max(one_starts, default=0.0) / H,
            "tail_after_one_h": (last.end - max(one_starts, default=0.0)) / H,
            "last": {"model": last.model, "gpus": last.num_gpus, "gpu_type": last.gpu_type, "submit_h": last.submit / H,
                     "start_h": last.start / H, "run_h": (last.end - last.start) / H},
        }
    ran = [o for o in pack.outcomes if o.start is not None and o.end is not None]
    one_run_s = sum(o.end - o.start for o in ran if o.job_id in one)
    out["shard_waiting_h"] = _union_s([(o.submit, o.start) for o in ran if o.job_id in shard_ids
                                       and o.start > o.submit]) / H
    out["paired_time_share"] = 2 * info.get("shared_gpu_s", 0.0) / one_run_s if one_run_s else None
    out["gained_gpu_h"] = info.get("gained_gpu_s", 0.0) / H
    out["gained_cluster_h"] = info.get("gained_gpu_s", 0.0) / H / n_gpus
    return out


WIDTHS = (("1", 1, 1), ("2-4", 2, 4), ("8", 5, 10 ** 6))


def wide_wait(trace: list, run, gpus: dict[str, int], lb_s: float | None) -> dict:  # noqa: ANN001 - a replay's result
    """Why the job that ends last started when it did (`--wide`), from a run's outcomes (hours; a shard
    job counts as one GPU, so a pair's GPU counts twice): over its wait [arrival, start), the GPU hours
    its type's GPUs ran, split into jobs running at its arrival, jobs that arrived before it and started
    during the wait, and jobs that arrived after it and started before it (overtook it), each by width
    (1, 2-4, 8 GPUs), and the idle GPU hours of each type in the wait; then the cluster's busy share
    after the last 1-GPU job started (the tail) and the makespan over the trace's lower bound."""
    one = {j.job_id for j in trace if j.num_gpus == 1}
    ran = [o for o in run.outcomes if o.start is not None and o.end is not None]
    last = max(ran, key=lambda o: o.end)
    a, b, t = last.submit, last.start, last.gpu_type

    def width(o) -> str:  # noqa: ANN001
        g = max(o.num_gpus, 1)
        return next(name for name, lo, hi in WIDTHS if lo <= g <= hi)

    split: dict[str, float] = {}
    busy: dict[str, float] = dict.fromkeys(gpus, 0.0)
    for o in ran:
        if o.job_id == last.job_id:
            continue
        s = max(0.0, min(o.end, b) - max(o.start, a)) * max(o.num_gpus, 1)
        if s <= 0:
            continue
        busy[o.gpu_type] = busy.get(o.gpu_type, 0.0) + s
        if o.gpu_type == t:
            who = "running" if o.start <= a else "earlier" if o.submit <= a else "overtook"
            key = f"{who} {width(o)}"
            split[key] = split.get(key, 0.0) + s / H
    tail0 = max((o.start for o in ran if o.job_id in one), default=0.0)
    end = max(o.end for o in ran)
    tail_busy = sum(max(0.0, min(o.end, end) - max(o.start, tail0)) * max(o.num_gpus, 1) for o in ran)
    return {"job": {"model": last.model, "gpus": last.num_gpus, "gpu_type": t, "submit_h": a / H, "start_h": b / H,
                    "run_h": (last.end - b) / H},
            "whole": whole_nodes(ran, t, a, b, exclude=last.job_id),
            "split_gpu_h": split, "idle_gpu_h": {k: (g * (b - a) - busy.get(k, 0.0)) / H for k, g in gpus.items()},
            "tail_h": (end - tail0) / H, "tail_busy": tail_busy / (sum(gpus.values()) * (end - tail0)) if end > tail0 else None,
            "makespan_over_lb": run.metrics["makespan_s"] / lb_s if lb_s else None}


def whole_nodes(ran: list, gpu_type: str, since: float, until: float, exclude: str = "") -> dict:
    """When a node of `gpu_type` first stood whole (no job on it) at or after `since` (the last job's
    arrival), from the outcomes' nodes (a shard job holds its node while it runs): hours, the node, the
    job whose end made it whole (width, model, arrival, start); and how many times a node of the type became whole in [since, until)
    (each a chance for a whole-node job). pack16: a wide job waits for the first of these, and no
    V100 node stood whole for 160-210 h of seeds 4 and 6."""
    nodes = sorted({n for o in ran if o.gpu_type == gpu_type for n in o.nodes})
    first: tuple | None = None
    events = 0
    for node in nodes:
        here = sorted((o for o in ran if node in o.nodes and o.job_id != exclude), key=lambda o: o.start)
        on = [o for o in here if o.start <= since < o.end]
        t_whole, leaver = (since, None) if not on else (None, None)
        count = len(on)
        sweep = sorted([(o.end, -1, o) for o in here if o.end > since]
                       + [(o.start, 1, o) for o in here if o.start > since], key=lambda e: (e[0], e[1]))
        for t, step, o in sweep:
            count += step
            if step < 0 and count == 0:
                events += t < until
                if t_whole is None:
                    t_whole, leaver = t, o
        if t_whole is not None and (first is None or t_whole < first[0]):
            first = (t_whole, node, leaver)
    if first is None:
        return {"first_h": None, "events": events}
    t_whole, node, leaver = first
    return {"first_h": t_whole / H, "node": node, "events": events,
            "leaver": None if leaver is None else {"model": leaver.model, "gpus": leaver.num_gpus,
                                                   "submit_h": leaver.submit / H, "start_h": leaver.start / H}}


def wide_types(plain, pack) -> dict:  # noqa: ANN001 - two replays' results
    """Where the 8-GPU jobs ran without and with packing (`--wide`): {"v100 -> k80": count, ...} over
    the jobs of 8 GPUs or more that ran in both, and for those whose type differs, the hours each waited
    in either run (pack16: with packing some wide jobs started on an idle K80 or P100 node within hours
    of arriving that waited 200+ h for a whole V100 node without)."""
    before = {o.job_id: o for o in plain.outcomes if o.num_gpus >= 8 and o.start is not None}
    moves: dict[str, int] = {}
    moved = []
    for o in pack.outcomes:
        b = before.get(o.job_id)
        if b is None or o.start is None:
            continue
        key = f"{b.gpu_type} -> {o.gpu_type}"
        moves[key] = moves.get(key, 0) + 1
        if b.gpu_type != o.gpu_type:
            moved.append({"model": o.model, "submit_h": o.submit / H, "types": key,
                          "wait_h": ((b.start - b.submit) / H, (o.start - o.submit) / H),
                          "run_h": ((b.end - b.start) / H, (o.end - o.start) / H)})
    return {"moves": moves, "moved": moved}


def wide_lines(rows: list[dict]) -> list[str]:
    """The --wide table: per seed and run, the last job's wait and what its type's GPUs ran meanwhile."""
    out = []
    for r in rows:
        for name, w in r["wide"].items():
            j = w["job"]
            split = ", ".join(f"{k} {v:.0f}" for k, v in sorted(w["split_gpu_h"].items(), key=lambda kv: -kv[1]))
            idle = ", ".join(f"{k} {v:.0f}" for k, v in w["idle_gpu_h"].items())
            out.append(f"seed {r['seed']} {name}: last {j['model']} x{j['gpus']} {j['gpu_type']} arrived "
                       f"{j['submit_h']:.0f} h, started {j['start_h']:.0f} h, ran {j['run_h']:.0f} h; its type's "
                       f"GPU h in the wait: {split}; idle GPU h: {idle}; tail {w['tail_h']:.0f} h at "
                       f"{_pct(w['tail_busy'])} busy; makespan / bound {_fmt(w['makespan_over_lb'])}; "
                       f"{_whole_line(w.get('whole') or {}, j['gpu_type'])}")
        if (wt := r.get("wide_types")) is not None:
            moved = "; ".join(f"{m['model']} arrived {m['submit_h']:.0f} h {m['types']}: waited {m['wait_h'][0]:.0f} -> "
                              f"{m['wait_h'][1]:.0f} h, ran {m['run_h'][0]:.0f} -> {m['run_h'][1]:.0f} h" for m in wt["moved"])
            out.append(f"seed {r['seed']} 8-GPU jobs' types, no packing -> packing: "
                       + ", ".join(f"{k} {v}" for k, v in sorted(wt["moves"].items())) + (f"; moved: {moved}" if moved else ""))
    return out


def room_lines(rows: list[dict]) -> list[str]:
    """The --room table (one line per seed, then the run's means)."""
    out = [f"{'seed':>4} | {'makespan':>8} {'1-GPU wait':>10} {'last 1-GPU':>10} {'tail':>6} | "
           f"{'shard wait':>10} {'paired':>6} {'gain GPU h':>10} {'= cluster h':>11} | {'LP paired':>9} "
           f"{'LP ratio':>8} | last job without packing (arrival / start / runtime, h)"]
    for r in rows:
        m, q = r["room"].get("msched") or r["room"]["packed"], r["room"]
        lp = r.get("lp") or {}
        last = m["last"]
        out.append(f"{r['seed']:4d} | {m['makespan_h']:8.1f} {m['one_waiting_h']:10.1f} {m['one_last_start_h']:10.1f} "
                   f"{m['tail_after_one_h']:6.1f} | {q['shard_waiting_h']:10.1f} "
                   f"{_pct(q['paired_time_share']):>6} {q['gained_gpu_h']:10.1f} {q['gained_cluster_h']:11.2f} | "
                   f"{_pct(lp.get('paired_share')):>9} {_fmt(lp.get('ratio')):>8} | {last['model']} x{last['gpus']} "
                   f"{last['gpu_type']}: {last['submit_h']:.0f} / {last['start_h']:.0f} / {last['run_h']:.0f}")
    return out


def _whole_line(whole: dict, gpu_type: str) -> str:
    if whole.get("first_h") is None:
        return f"no {gpu_type} node whole after its arrival"
    lv = whole["leaver"]
    by = "whole at its arrival" if lv is None else (f"made whole by {lv['model']} x{lv['gpus']} (arrived "
                                                     f"{lv['submit_h']:.0f} h, started {lv['start_h']:.0f} h)")
    return (f"first {gpu_type} node whole {whole['first_h']:.1f} h ({whole['node']}, {by}), "
            f"{whole['events']} whole-node moments in its wait")


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.0%}"


def big_starts(run) -> dict:  # noqa: ANN001 - a replay's result
    """The 8-GPU (whole-node) jobs' start times, hours: mean and latest (pack10: the makespan is decided
    by which node stays whole for an 8-GPU job)."""
    starts = [o.start / H for o in run.outcomes if o.num_gpus >= 8 and o.start is not None]
    return {"n": len(starts), "mean": _mean(starts), "max": max(starts, default=None)}


def moved(trace: list, seed: int, jitter_s: float) -> list:
    """The trace with each arrival moved by up to `jitter_s` (uniform, seeded by `seed`; none before 0):
    the control's jitter, and `--spread`'s workload variant (the same moves)."""
    import random
    from dataclasses import replace

    rng = random.Random(seed)
    return [replace(j, submit_time=max(0.0, j.submit_time + rng.uniform(-jitter_s, jitter_s))) for j in trace]


LONE_KINDS = ("good partner pending", "partner pending, not good", "partner pending, no fit",
              "shard jobs pending, other types", "another shard GPU of its type alone", "no shard job pending")


def lone_time(history: list, trace: list, node_types: list[str], types_of: dict, truth_pairs: PairTruth) -> dict:
    """Where shard GPUs ran one job alone (GPU seconds), by what else was there at the time, first match
    of LONE_KINDS: a pending shard job that may land on the GPU's type and that Gavel measured as a good
    partner of the lone job (combined >= 1.0, each >= 0.5x), a pending one that pairs badly or does not
    fit, pending shard jobs of other types only, another GPU of the type with a shard job alone (two
    lone jobs that could share), none of these. Post hoc from the run's start/join/end history."""
    by_id = {j.job_id: j for j in trace}
    start = {j: t for t, k, j, _n, _g in history if k in ("start", "join")}
    lone: dict[tuple[int, int], tuple[str, float]] = {}     # (node, gpu) -> (the job alone, since)
    on_gpu: dict[tuple[int, int], list[str]] = {}
    out = dict.fromkeys(LONE_KINDS, 0.0)

    def account(t0: float, t1: float) -> None:
        if t1 <= t0 or not lone:
            return
        cuts = sorted({t0, t1, *(by_id[j].submit_time for j in start if t0 < by_id[j].submit_time < t1),
                       *(s for s in start.values() if t0 < s < t1)})
        for a, b in zip(cuts, cuts[1:], strict=False):
            mid = (a + b) / 2
            pending = [j for j, s in start.items() if by_id[j].submit_time <= mid < s]
            for (node, _gpu), (job, _since) in lone.items():
                gtype = node_types[node]
                mine = (by_id[job].model, by_id[job].batch_size)
                here = [p for p in pending if gtype in types_of.get(p, ())]
                fits = [truth_pairs.pair(mine, (by_id[p].model, by_id[p].batch_size), gtype) for p in here]
                if any(fa + fb >= 1.0 and min(fa, fb) >= MIN_OWN_SPEED for fa, fb in fits):
                    kind = LONE_KINDS[0]
                elif any(fa > 0 for fa, _ in fits):
                    kind = LONE_KINDS[1]
                elif here:
                    kind = LONE_KINDS[2]
                elif pending:
                    kind = LONE_KINDS[3]
                elif sum(node_types[n] == gtype for n, _g in lone) > 1:
                    kind = LONE_KINDS[4]
                else:
                    kind = LONE_KINDS[5]
                out[kind] += b - a

    last = 0.0
    for t, kind, job, node, gpu in sorted(history, key=lambda h: (h[0], h[1] != "end")):
        account(last, t)
        last = t
        key = (node, gpu)
        if kind == "end":
            on_gpu[key].remove(job)
            lone.pop(key, None)
            if on_gpu[key]:
                lone[key] = (on_gpu[key][0], t)
        else:
            on_gpu.setdefault(key, []).append(job)
            if len(on_gpu[key]) == 1:
                lone[key] = (job, t)
            else:
                lone.pop(key, None)
    return out


def lone_starts(history: list, node_types: list[str], types_of: dict) -> dict:
    """How shard jobs that started on a GPU of their own stood (counts): with no shard GPU of a type they
    may use running one job alone ("no open shard"), or beside such an open shard they did not join
    ("open shard of its type"): the simulator's main pass joins an open shard first, its backfill pass
    does not (it places a job on a free GPU only). Post hoc from the run's history."""
    on_gpu: dict[tuple[int, int], list[str]] = {}
    out = {"no open shard": 0, "open shard of its type": 0}
    for _t, kind, job, node, gpu in sorted(history, key=lambda h: (h[0], h[1] != "end")):
        key = (node, gpu)
        if kind == "start":
            open_types = {node_types[n] for (n, _g), jobs in on_gpu.items() if len(jobs) == 1}
            out["open shard of its type" if open_types & set(types_of.get(job, ())) else "no open shard"] += 1
        if kind == "end":
            on_gpu[key].remove(job)
        else:
            on_gpu.setdefault(key, []).append(job)
    return out


def guard_report(path: Path, memory) -> list[str]:  # noqa: ANN001 - a GavelMemory
    """Which of Gavel's measured pairs the default decision (shipped model, guard "bound", the memory
    check, both jobs on their best type) lets through on each GPU type, in-sample: the "good" pairs
    (measured combined > 1.2, each job >= 0.5x solo) passed, and why each rejected good pair was."""
    from collections import Counter

    from msched.estimate.interference import (
        batch_of,
        family_of,
        load_model,
        pair_fits,
        read_gavel,
        type_usable_gb,
    )
    from msched.policy.packing import on_best_type
    from slurm_sim.packing import GAVEL_FAMILIES

    jobs, pairs = read_gavel(path)
    model, inverse, types = (REAL_MODEL[0] or load_model()), {v: k for k, v in GAVEL_FAMILIES.items()}, ("k80", "p100", "v100")
    seen, total, passed, why_not = set(), Counter(), Counter(), Counter()
    for p in pairs:
        if (key := (frozenset((p.a, p.b)), p.gpu_type)) in seen:
            continue
        seen.add(key)
        a, b, g = jobs[p.a], jobs[p.b], p.gpu_type
        good = p.combined > 1.2 and min(p.own_a, p.own_b) >= MIN_OWN_SPEED
        why = [w for w, bad in (
            ("not both on their best type", not (on_best_type(a, g, types) and on_best_type(b, g, types))),
            ("memory", not pair_fits(tuple(memory(inverse[family_of(j)], batch_of(j)) for j in (p.a, p.b)),
                                     type_usable_gb(g))),
            ("bound < 0.5", model.guard_slower(a, b, g) < MIN_OWN_SPEED),
            ("mean combined < 1.0", model.combined_throughput(a, b, g) < 1.0)) if bad]
        total[(g, good)] += 1
        passed[(g, good)] += not why
        if good and why:
            why_not[(g, " + ".join(why))] += 1
    out = [f"{g}: good pairs {total[(g, True)]}, passed {passed[(g, True)]}; other pairs {total[(g, False)]}, "
           f"passed {passed[(g, False)]}" for g in types]
    out += [f"  {g} good pair rejected: {w}: {n}" for (g, w), n in sorted(why_not.items(), key=lambda kv: (kv[0][0], -kv[1]))]
    return out


BOUND_KINDS = ("lp", "lp_any", "area", "area_any", "lp_rule")


class RulePairs:
    """Gavel's measured pair speeds, only for the pairs msched's own rule would form on the type
    (`pair_value` with the shipped model, guard "bound", the bench's memory, threshold 1.0: what msub and
    the round predict, not what was measured); (0, 0) for the others. `pair_lp_bound` with it bounds what
    packing can gain when it forms only the pairs msched's predictor passes."""

    def __init__(self, truth_pairs: PairTruth, truth: PerfTable, memory, threshold: float = 1.0) -> None:  # noqa: ANN001
        from msched.estimate.interference import load_model
        from msched.estimate.runtime import TableTimes

        self.truth_pairs, self.memory, self.threshold = truth_pairs, memory, threshold
        self.model, self.times = REAL_MODEL[0] or load_model(), TableTimes(truth)
        self.slower = self.model.slower_for("bound")
        self.jobs: dict = {}
        self.seen: dict = {}

    def _job(self, key: tuple[str, int]):  # noqa: ANN202 - a ShardJob
        from msched.estimate.interference import speeds_from_tag
        from msched.policy.packing import ShardJob
        from msched.tag import JobTag

        if key not in self.jobs:
            model, bs = key
            self.jobs[key] = ShardJob(f"{model}/{bs}", 0, speeds_from_tag(JobTag(model=model, ref=model, bs=bs),
                                                                          self.times),
                                      peak_gb=self.memory(model, bs) if self.memory is not None else None)
        return self.jobs[key]

    def pair(self, a: tuple[str, int], b: tuple[str, int], gpu_type: str) -> tuple[float, float]:
        from msched.estimate.interference import type_usable_gb
        from msched.policy.packing import pair_value

        key = (a, b, gpu_type)
        if key not in self.seen:
            ok = pair_value(self._job(a), self._job(b), gpu_type, self.model.combined_throughput,
                            type_usable_gb(gpu_type), self.threshold, self.slower) is not None
            self.seen[key] = self.truth_pairs.pair(a, b, gpu_type) if ok else (0.0, 0.0)
        return self.seen[key]


def bound_row(seed: int, n_jobs: int, load: float, static: bool, truth_pairs: PairTruth,  # noqa: PLR0913
              cluster_spec: str | None = None, kinds: tuple[str, ...] = BOUND_KINDS) -> dict:
    """One seed's LP makespan bounds (hours) without and with pairs: the full LP (elapsed rows: no job
    shorter than its runtime) and the area bound (capacity rows only), pairs with each job >= 0.5x solo
    (msched's rule) and any pair Gavel measured; the longest job's release + fastest runtime beside them."""
    from slurm_sim.metrics import true_runtimes
    from slurm_sim.packing import pair_lp_bound

    w = wl.gavel_workload(n_jobs, seed, static=static, load=load,
                          **({"cluster": cluster_spec} if cluster_spec else {}))
    cluster = with_shard_nodes(parse_cluster(w.cluster))
    truth = PerfTable.load(w.truth)
    trace = list(w.jobs)
    out: dict = {"seed": seed, "jobs": len(trace), "one_gpu": sum(j.num_gpus == 1 for j in trace),
                 "last_arrival_h": max(j.submit_time for j in trace) / H}
    longest = max(trace, key=lambda j: j.submit_time + min(true_runtimes(j, truth, cluster).values()))
    out["longest"] = {"model": longest.model, "gpus": longest.num_gpus, "release_h": longest.submit_time / H,
                      "runtime_h": min(true_runtimes(longest, truth, cluster).values()) / H}
    for name, lengths, min_own in (("lp", True, MIN_OWN_SPEED), ("lp_any", True, 0.0),
                                   ("area", False, MIN_OWN_SPEED), ("area_any", False, 0.0),
                                   ("lp_rule", True, MIN_OWN_SPEED)):
        if name not in kinds:
            continue
        offered = RulePairs(truth_pairs, truth, GavelMemory.load()) if name == "lp_rule" else truth_pairs
        b = pair_lp_bound(trace, truth, cluster, offered, min_own=min_own, lengths=lengths)
        out[name] = {"solo_h": b.solo_s / H, "packed_h": b.value_s / H, "ratio": b.value_s / b.solo_s,
                     "pair_kinds": b.pair_kinds, "paired_share": b.paired_share}
    return out


def bound_lines(rows: list[dict]) -> list[str]:
    """The --bound table: per seed, and the mean ratios (a bound not computed, `--bound-kinds`: "-")."""
    def cell(r: dict, kind: str, key: str, form: str) -> str:
        v = r.get(kind, {}).get(key)
        return "-".rjust(6) if v is None else format(v, form)

    out = [f"{'seed':>4} | {'LP h':>6} {'packed':>6} {'ratio':>6} {'any':>6} | {'area h':>6} {'packed':>6} "
           f"{'ratio':>6} {'any':>6} {'paired':>6} | last arrival | longest (release + runtime)"]
    for r in rows:
        g = r["longest"]
        out.append(f"{r['seed']:4d} | {cell(r, 'lp', 'solo_h', '6.1f')} {cell(r, 'lp', 'packed_h', '6.1f')} "
                   f"{cell(r, 'lp', 'ratio', '6.3f')} {cell(r, 'lp_any', 'ratio', '6.3f')} | "
                   f"{cell(r, 'area', 'solo_h', '6.1f')} {cell(r, 'area', 'packed_h', '6.1f')} "
                   f"{cell(r, 'area', 'ratio', '6.3f')} {cell(r, 'area_any', 'ratio', '6.3f')} "
                   f"{cell(r, 'area', 'paired_share', '6.0%')} | {r['last_arrival_h']:10.1f} h | "
                   f"{g['model']} x{g['gpus']} {g['release_h']:.0f} + {g['runtime_h']:.0f} h")
    for k in BOUND_KINDS:
        if xs := [r[k]["ratio"] for r in rows if k in r]:
            out.append(f"{k}: bound with pairs / without, mean {statistics.fmean(xs):.3f} (min {min(xs):.3f}, "
                       f"max {max(xs):.3f})")
    return out


def _tail(t: dict) -> str:
    """The job that ends last with packing: what it is, and how it ran without packing -> with."""
    (ta, tb), (sa, sb), (ea, eb) = t["gpu_type"], t["start_h"], t["end_h"]
    return (f"{t['model']} x{t['gpus']}: {t['why']} ({ta} -> {tb}, start {sa:.0f} -> {sb:.0f} h, "
            f"end {ea:.0f} -> {eb:.0f} h)")


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def _mean(xs: list[float]) -> float | None:
    return statistics.fmean(xs) if xs else None


def _fmt1(x: float | None) -> str:
    return "-" if x is None else f"{x:.0f}"


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=300, help="jobs per seed")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--first-seed", type=int, default=1, help="seeds first-seed .. first-seed + seeds - 1")
    ap.add_argument("--guard", choices=("bound", "mean"), default="bound",
                    help="the packing guard (config pack_guard): the quantile bound or the mean forest")
    ap.add_argument("--cluster", help="cluster spec (default Gavel's v100:8x4,p100:8x4,k80:8x4)")
    ap.add_argument("--kinds", default=",".join(KINDS),
                    help="which runs, comma-separated, of fifo,msched,packed (packed always runs)")
    ap.add_argument("--load", type=float, default=0.9, help="offered load of the arrivals")
    ap.add_argument("--static", action="store_true", help="every job at t=0 (the makespan setting)")
    ap.add_argument("--threshold", type=float, default=1.0, help="least predicted combined throughput packed")
    ap.add_argument("--when-busy", action="store_true", help="pack only when no GPU of the job's types is free")
    ap.add_argument("--any-wait", action="store_true",
                    help="pack whatever the wait (not only when sharing ends the job no later than waiting)")
    ap.add_argument("--wait-share", type=float,
                    help="pack only when the wait is at least this share of the stretch sharing costs (default 0)")
    ap.add_argument("--shard-nodes", type=int, metavar="N",
                    help="only the first N nodes of each GPU type share their GPUs (default: every node)")
    ap.add_argument("--gavel", type=Path, help="Gavel's simulation_throughputs.json (default: the shared data)")
    ap.add_argument("--memory", choices=("gavel", "shipped"), default="gavel",
                    help="peak memory the packing decisions see: the Gavel model files' profiles (default) or "
                         "msched's shipped torchvision table only (the earlier runs: wrong or none for Gavel's types)")
    ap.add_argument("--predictor", choices=("model", "measured"), default="model",
                    help="what msub and the round predict with: the shipped interference model (default) or "
                         "Gavel's measurements themselves (a perfect predictor: the ceiling)")
    ap.add_argument("--control-jitter", type=float, metavar="S",
                    help="the control: instead of packing, msched without packing with every arrival moved by up "
                         "to S seconds (uniform, seeded): how far the ratio moves when nothing but chance changes")
    ap.add_argument("--spread", type=float, metavar="S",
                    help="the workload variant: every run's arrivals moved by up to S seconds as --control-jitter "
                         "moves them (the same moves), so that a static batch's later jobs see a published plan")
    ap.add_argument("--spread-draw", type=int, default=0, metavar="K",
                    help="--spread's K-th draw of moves (0: the control's; another: a second noise sample)")
    ap.add_argument("--guard-report", action="store_true",
                    help="print which of Gavel's measured pairs the default decision passes, per GPU type, and why "
                         "good pairs (combined > 1.2, each >= 0.5x) are rejected, and exit")
    ap.add_argument("--memory-check", action="store_true",
                    help="print the pair memory check against Gavel's measured pairs (ran / out of memory) and exit")
    ap.add_argument("--why", action="store_true",
                    help="print why opted-in 1-GPU jobs were not packed and what shard GPUs running one job "
                         "alone had pending beside them (summed over the seeds)")
    ap.add_argument("--bound", action="store_true",
                    help="print the LP makespan bound per seed without and with pairs (slurm_sim.packing.pair_lp_bound, "
                         "Gavel's measured pair speeds, each job >= 0.5x and any pair), with and without the "
                         "elapsed rows (the area bound), and exit: the ceiling of what packing can gain")
    ap.add_argument("--bound-kinds", default=",".join(BOUND_KINDS),
                    help="which bounds --bound solves, comma-separated, of " + ",".join(BOUND_KINDS)
                         + " (each job >= 0.5x or any pair; with the elapsed rows or the area alone)")
    ap.add_argument("--queue-share", type=float, default=1.0, metavar="X",
                    help="the looser queue rule: pack when at least this share of the queued shard jobs it may "
                         "meet are good partners (default 1: each of them, msub's rule)")
    ap.add_argument("--exclude", action="store_true",
                    help="the round keeps pending shard jobs off the nodes of bad partners (ExcNodeList; "
                         "config pack_exclude)")
    ap.add_argument("--room", action="store_true",
                    help="print where packing could act, per seed (`room`), and the LP bound with pairs beside it "
                         "(the share of the 1-GPU work it pairs, its ratio with pairs / without)")
    ap.add_argument("--starvation-age", type=float, default=24.0, metavar="H",
                    help="the planner's starvation guard in hours (SimSetup.starvation_age_s; default 24, the "
                         "shipped one); 0 or less: no guard")
    ap.add_argument("--wide", action="store_true",
                    help="print, per seed and run, the wait of the job that ends last and what its GPU type ran "
                         "meanwhile (`wide_wait`)")
    ap.add_argument("--drain", action="store_true",
                    help="every msched run keeps narrow jobs off the types whole-node jobs wait on (policy option "
                         "drain_wide, msched.policy.drain); with --kinds packed --control-jitter 0: msched alone, drained")
    ap.add_argument("--json", type=Path, help="write the figures here")
    args = ap.parse_args(argv)
    kinds = tuple(k for k in args.kinds.split(",") if k)
    if not set(kinds) <= set(KINDS):
        ap.error(f"--kinds takes {','.join(KINDS)}")
    try:
        path = args.gavel or wl.shared_data_dir() / "gavel" / "simulation_throughputs.json"
        truth_pairs = PairTruth.from_gavel(path)
    except (wl.WorkloadError, OSError) as exc:
        print(f"Gavel's pair throughputs not found ({exc}); give --gavel", file=sys.stderr)
        return 1
    memory = GavelMemory.load() if args.memory == "gavel" else None
    if args.predictor == "measured":
        import msched.estimate.interference as interference
        from slurm_sim.packing import MeasuredPredictor

        REAL_MODEL[0] = interference.load_model()
        oracle = MeasuredPredictor(path)
        interference.load_model = lambda *_a, **_k: oracle
    if args.guard_report:
        print("\n".join(guard_report(path, memory or GavelMemory.load())))
        return 0
    if args.bound:
        bound_kinds = tuple(k for k in args.bound_kinds.split(",") if k)
        if not set(bound_kinds) <= set(BOUND_KINDS):
            ap.error(f"--bound-kinds takes {','.join(BOUND_KINDS)}")
        rows = [bound_row(seed, args.jobs, args.load, args.static, truth_pairs, args.cluster, bound_kinds)
                for seed in range(args.first_seed, args.first_seed + args.seeds)]
        print("\n".join(bound_lines(rows)))
        if args.json:
            args.json.write_text(json.dumps(rows, indent=1) + "\n")
        return 0
    if args.memory_check:
        from msched.estimate.interference import type_usable_gb

        usable = {t: type_usable_gb(t) for t in ("k80", "p100", "v100")}
        c = memory_check(memory or GavelMemory.load(), path, usable)
        oom, ran = c["fit_oom"] + c["apart_oom"], c["fit_ran"] + c["apart_ran"]
        print(f"pair memory check on Gavel's {oom + ran} measured single-GPU pairs (usable GB {usable}): "
              f"of {oom} measured out of memory, {c['apart_oom']} kept apart and {c['fit_oom']} predicted to fit; "
              f"of {ran} that ran, {c['apart_ran']} kept apart")
        return 0
    print(f"Gavel workload, {args.jobs} jobs x {args.seeds} seeds, "
          f"{'static batch' if args.static else f'load {args.load:g}'}, backfill, "
          f"{'every node' if args.shard_nodes is None else f'{args.shard_nodes} node(s) per GPU type'} shard-capable "
          f"(2 shards/GPU), threshold {args.threshold:g}, guard {args.guard}"
          f", memory {args.memory}, predictor {args.predictor}"
          f"{f', CONTROL: no packing, arrivals moved by up to {args.control_jitter:g} s' if args.control_jitter else ''}{', packing only when busy' if args.when_busy else ''}{f', arrivals spread by up to {args.spread:g} s (draw {args.spread_draw})' if args.spread else ''}{', any wait' if args.any_wait else ''}{f', queue share {args.queue_share:g}' if args.queue_share < 1 else ''}{', ExcNodeList lever' if args.exclude else ''}{'' if args.starvation_age == 24 else f', starvation guard {args.starvation_age:g} h' if args.starvation_age > 0 else ', no starvation guard'}{f', cluster {args.cluster}' if args.cluster else ''}{', drain_wide' if args.drain else ''}")
    print(f"{'seed':>4} | {'fifo':>7} {'msched':>7} {'packed':>7} {'ratio':>6} | {'JCT ratio':>9} | "
          f"{'shard':>5} {'pairs':>5} {'<1.0':>4} {'oom':>4} {'slowest':>7} {'pair MAE':>8} {'alone':>5} {'gain':>6} | last job (packing)")
    rows = []
    for seed in range(args.first_seed, args.first_seed + args.seeds):
        r = run_seed(seed, args.jobs, args.load, args.static, args.threshold, truth_pairs, args.when_busy,
                     not args.any_wait, args.wait_share, args.shard_nodes, args.guard, args.cluster, kinds, memory,
                     args.control_jitter, args.spread, args.spread_draw, args.queue_share, args.exclude,
                     args.starvation_age if args.starvation_age > 0 else None, args.drain)
        rows.append(r)
        ms = {k: r[k]["makespan_s"] for k in KINDS}
        jct = _ratio(r["packed"]["mean_jct_s"], r["msched"]["mean_jct_s"])
        slow = f"{r['slowest_packed_speed']:.2f}" if r["slowest_packed_speed"] is not None else "-"
        mae = f"{r['pair_mae']:.3f}" if r["pair_mae"] is not None else "-"
        alone = f"{r['alone_share']:.0%}" if r["alone_share"] is not None else "-"
        gain = f"{r['gained_share']:+.2%}" if r["gained_share"] is not None else "-"
        hours = " ".join(f"{v / H:6.1f}h" if v is not None else f"{'-':>7}" for v in ms.values())
        print(f"{seed:4d} | {hours} {_fmt(_ratio(ms['packed'], ms['msched'])):>6} | {_fmt(jct):>9} | "
              f"{r['shard_jobs']:5d} {r['pairs']:5d} "
              f"{r['pairs_below_1']:4d} {r['oom']:4d} {slow:>7} {mae:>8} {alone:>5} {gain:>6} | {_tail(r['tail'])}")
    if args.room:
        for r in rows:
            r["lp"] = bound_row(r["seed"], args.jobs, args.load, args.static, truth_pairs, args.cluster, ("lp",))["lp"]
        print("\n".join(room_lines(rows)))
    if args.wide:
        print("\n".join(wide_lines(rows)))
    if args.why:
        reasons: dict[str, int] = {}
        lone = dict.fromkeys(LONE_KINDS, 0.0)
        for r in rows:
            for k, v in r["reasons"].items():
                reasons[k] = reasons.get(k, 0) + v
            for k, v in r["lone"].items():
                lone[k] += v
        judged: dict[str, int] = {}
        for r in rows:
            for k, v in r["refusals"].items():
                judged[k] = judged.get(k, 0) + v
        print("the guard's queue refusals judged by Gavel's measurements: "
              + "; ".join(f"{k} {v}" for k, v in judged.items()))
        big = [(r["big_start_h"].get("msched", {}), r["big_start_h"]["packed"]) for r in rows]
        print("8-GPU jobs' start, h (mean / latest), no packing -> packing: " + "; ".join(
            f"seed {r['seed']}: {_fmt1(a.get('mean'))}/{_fmt1(a.get('max'))} -> {_fmt1(b['mean'])}/{_fmt1(b['max'])}"
            for r, (a, b) in zip(rows, big, strict=True)))
        print("opted-in 1-GPU jobs at submit, packed or why not (the first type's reason): "
              + "; ".join(f"{k} {v}" for k, v in sorted(reasons.items(), key=lambda kv: -kv[1])))
        starts = {k: sum(r["lone_starts"][k] for r in rows) for k in rows[0]["lone_starts"]} if rows else {}
        print("shard jobs that started on a GPU of their own: " + "; ".join(f"{k} {v}" for k, v in starts.items()))
        total = sum(lone.values())
        print(f"shard-GPU time alone ({total / H:.0f} GPU h), by what else was there: "
              + "; ".join(f"{k} {v / total:.0%}" for k, v in lone.items() if total))
    ratio = [x for r in rows if (x := _ratio(r["packed"]["makespan_s"], r["msched"]["makespan_s"])) is not None]
    jct = [x for r in rows if (x := _ratio(r["packed"]["mean_jct_s"], r["msched"]["mean_jct_s"])) is not None]
    vs_fifo = [x for r in rows if (x := _ratio(r["packed"]["makespan_s"], r["fifo"]["makespan_s"])) is not None]
    plain_fifo = [x for r in rows if (x := _ratio(r["msched"]["makespan_s"], r["fifo"]["makespan_s"])) is not None]
    maes = [r["pair_mae"] for r in rows if r["pair_mae"] is not None]
    slowest = min((r["slowest_packed_speed"] for r in rows if r["slowest_packed_speed"] is not None), default=None)
    summary = {"guard": args.guard, "seeds": [r["seed"] for r in rows],
               "makespan_packed_over_msched": _mean(ratio), "sd": statistics.pstdev(ratio) if ratio else None,
               "mean_jct_packed_over_msched": _mean(jct),
               "makespan_msched_over_fifo": _mean(plain_fifo),
               "makespan_packed_over_fifo": _mean(vs_fifo),
               "slowest_packed_speed": slowest,
               "gained_share": _mean([r["gained_share"] for r in rows if r["gained_share"] is not None]), "pair_mae": statistics.fmean(maes) if maes else None,
               "pairs": sum(r["pairs"] for r in rows), "pairs_below_1": sum(r["pairs_below_1"] for r in rows),
               "oom": sum(r["oom"] for r in rows), "shard_jobs": sum(r["shard_jobs"] for r in rows),
               "crawled": {k: sum(r["crawled"][k] for r in rows) for k in ("predictor", "unchecked")},
               "unfinished": sum(sum(r["unfinished"].values()) for r in rows)}
    print(f"mean makespan, packing / no packing: {_fmt(summary['makespan_packed_over_msched'])} "
          f"(sd {_fmt(summary['sd'])}); mean JCT: {_fmt(summary['mean_jct_packed_over_msched'])}; work sharing added: "
          f"{'-' if summary['gained_share'] is None else format(summary['gained_share'], '+.2%')} of the cluster's GPU time")
    print(f"makespan x backfill fifo: msched {_fmt(summary['makespan_msched_over_fifo'])}, "
          f"msched+packing {_fmt(summary['makespan_packed_over_fifo'])}")
    print(f"pairs that ran: {summary['pairs']} ({summary['pairs_below_1']} measured below 1.0 combined), "
          f"slowest packed job at {slowest if slowest is None else round(slowest, 3)} x solo, "
          f"{summary['oom']} joins out of memory, predictor MAE on the pairs that ran "
          f"{summary['pair_mae'] if summary['pair_mae'] is None else round(summary['pair_mae'], 3)}; "
          f"unfinished jobs {summary['unfinished']}")
    print(f"pairs with a job measured below {MIN_OWN_SPEED:g}x solo: {summary['crawled']['predictor']} predicted "
          f"above it (the predictor's error), {summary['crawled']['unchecked']} predicted below it from the job "
          f"types' own figures (msub's prediction from the tag's reference passed, or it never checked the pair)")
    if args.json:
        for r in rows:
            for k in KINDS:
                r[k] = {m: r[k].get(m) for m in ("makespan_s", "mean_jct_s", "gpu_utilization", "jobs")}
        args.json.write_text(json.dumps({"summary": summary, "seeds": rows}, indent=1, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
