"""msub's packing decision (the Packing issue): submit a packable 1-GPU job as a shard job.

Slurm 22.05 cannot retype a pending job between `gpu` and `shard` (SLURM-NOTES), so whether a job may
share a GPU is decided here, once. A job is *packable* when
- its owner asked for it (`#MSCHED --pack`, `msub --pack`), or the site packs its partitions by default
  (config `pack_partitions`; "*" stands for jobs that name no partition) and the owner did not opt out
  (`--no-pack`): an opted-out job is never a shard job;
- it asks for exactly one GPU on one node through `--gres=gpu:1`, with no GPU type of its own (a
  `--gpus` request cannot be turned into a shard request by adding options);
- the cluster has shard nodes: nodes in the partition `shard_partition` (msub's cluster view).
It is then *packed* when the interference predictor (msched.estimate.interference) expects it to pair
well with the jobs it would likely share a GPU with: the managed shard jobs pending or running in the
shard partition (one `squeue`, only for packable jobs), else the reference mix (every model the site's
performance table measured at one GPU). The mean predicted combined throughput on the shard nodes'
GPU type must reach `pack_threshold`, and the job must fit one GPU beside its likely partners'
memory (a shipped model's estimate; a user's own model counts as fitting: the predictor decides).
Under the guard (config `pack_guard = "bound"`, the default) each job of a pair must keep 0.5x solo at
the quantile bound (msched.estimate.interference.guard_slower: no bound outside the data), the type must
be the job's best shard type (`on_best_type`), and with the reference mix one safe pair is enough.

A packed job is submitted with `--partition=<shard_partition> --gres=shard:1` (the user's other gres
kept) and the GPU types msub chose that shard nodes have (the constraint, as for any job); its tag's
`pack` holds the prediction and `why` says why. The round
(msched.policy.packing) then orders the shard jobs so that good pairs start together.
Pure Python, loaded only for packable jobs (msub's light path stays light).
"""

from __future__ import annotations

import os

from msched.estimate.interference import (
    DEFAULT_THRESHOLD,
    InterferenceError,
    JobSpeeds,
    load_model,
    peak_gb,
    speeds_from_tag,
    type_usable_gb,
)
from msched.policy.packing import solo_runtime_s, submit_verdict

MAX_PARTNERS = 128           # shard jobs read from the queue at most (each must be a good partner)


def pack_wanted(pack: bool | None, partition: str | None, config) -> bool:  # noqa: ANN001
    """The owner's choice, else the site's default for every partition the job names."""
    if pack is not None:
        return pack
    sites = set(getattr(config, "pack_partitions", ()) or ())
    parts = [p for p in (partition or "").split(",") if p]
    return bool(sites) and (all(p in sites for p in parts) if parts else "*" in sites)


def packable_shape(req, gpus, pinned) -> str:  # noqa: ANN001 - SbatchRequest, GpuRequest, pinned types
    """Why the request cannot become a shard request ("" when it can)."""
    if gpus is None or gpus.total != 1 or max(1, req.nodes) != 1:
        return "packing needs a 1-GPU job on one node"
    if pinned or gpus.typed:
        return "packing needs a GPU request without a GPU type"
    if tuple(gpus.options) != ("gres",):
        return "packing needs the GPU asked as --gres=gpu:1"
    if req.has("exclude"):
        return "packing needs no --exclude (the round sets a shard job's excluded nodes: config pack_exclude)"
    return ""


def shard_types(nodes, config) -> list[str]:  # noqa: ANN001 - cluster_view nodes
    """GPU types of the nodes in the shard partition, most GPUs first."""
    gpus: dict[str, int] = {}
    for _name, gpu_type, count, _feats, parts in nodes:
        if config.shard_partition in parts:
            gpus[gpu_type] = gpus.get(gpu_type, 0) + count
    return sorted(gpus, key=lambda t: -gpus[t])


def queued_partners(config, sbatch: str) -> tuple[list, int, set[int]]:  # noqa: ANN001
    """(tags of the managed shard jobs pending or running in the shard partition, the shard jobs there
    msched cannot predict: untagged ones) from one squeue; ([], 0) when none or squeue fails. A shard
    job is one whose gres request names shards (`%b`). Only the tags' models and batch sizes are used,
    to predict; nothing here is trusted (a comment that forges a line only adds a partner to check).
    Reading stops past MAX_PARTNERS (then the job is not packed: not every partner was checked). A third
    item: the indices of the running ones among the tags (`%t`: the looser queue rule's `required`)."""
    from msched.msub.cluster_view import _run
    from msched.tag import parse_comment

    out = _run([os.path.join(os.path.dirname(sbatch), "squeue"), "-h", "-t", "PD,R",
                "-p", config.shard_partition, "-o", "%b %t %k"])
    tags, unknown, running = [], 0, set()
    for line in (out or "").splitlines():
        gres, _, rest = line.strip().partition(" ")
        if "shard" not in gres:
            continue                      # a whole-GPU job in the partition: never a partner
        state, _, comment = rest.partition(" ")
        tag = parse_comment(comment.strip())[0]
        if tag is not None:
            if state == "R":
                running.add(len(tags))
            tags.append(tag)
        else:
            unknown += 1
        if len(tags) + unknown > MAX_PARTNERS:
            break
    return tags, unknown, running


def may_meet(tag, gpu_type: str) -> bool:  # noqa: ANN001 - a JobTag
    """Whether a queued shard job may share a GPU of `gpu_type`: its tag's `added` (the shard types msub
    packed it for, which the round keeps it to) names the type, or names none (any shard type). A
    shard job packed for the P100 only never meets a job on a V100, so it is no partner to check there."""
    added = getattr(tag, "added", "") or ""
    return not added or gpu_type in added.split("|")


def reference_mix(perf, gpu_type: str) -> list[tuple[str, int, JobSpeeds]]:  # noqa: ANN001 - a PerfTable
    """(model, batch, speeds) of every model measured at one GPU on `gpu_type`, at its batch sizes there."""
    out = []
    seen = set()
    for r in perf.rows:
        key = (r.model, r.batch_size)
        if r.gpu_type != gpu_type or r.num_gpus != 1 or r.precision != "float" or key in seen:
            continue
        seen.add(key)
        iter_ms = {t: ms for t in perf.gpu_types()
                   if (ms := perf.iter_ms(r.model, t, 1, r.batch_size, "float")) is not None}
        out.append((r.model, r.batch_size, JobSpeeds(iter_ms=iter_ms, batch_size=r.batch_size)))
    return out


def consider_packing(tag, settings, req, gpus, pinned, config, sbatch: str, nodes, times_of,  # noqa: ANN001, ANN201, PLR0913
                     types: tuple[str, ...] = (), *, free_at=None, estimates=None, now: float | None = None,
                     plan_end: float | None = None):
    """The tag to submit: with `pack` (the prediction) and `why` when the job is packed, else as it was
    (an owner who asked for packing gets the reason in `why` and in the returned warning). `types`: the
    GPU types msub's decision chose (none chosen: any shard type). The job is judged on each of them
    that shard nodes have, since it may land on any it names and meet a partner there, and keeps only
    those where it passes (a job fast on a P100 may crawl beside a partner on a V100, where it is slow
    anyway: bench/bench_packing.py); its prediction is the first's. Returns (tag, warning or "") - a
    packed tag's `added` lists the shard types kept.

    `times_of(models)` gives an iteration-time source over the performance rows of those models (None:
    the whole table). `free_at` (the round's published free time per type; None: no fresh one) and
    `estimates` (the submit decision's, per type): a job is packed only when it would wait for a GPU of
    its own (`submit_verdict`), so without a fresh published plan nothing is packed; `plan_end` (the
    round's published plan end): neither it nor a queued partner is slowed past it (not judged when
    unknown).
    Returns (tag, warning or "")."""
    if settings.pack is False or not pack_wanted(settings.pack, req.partition, config):
        return tag, ""
    asked = settings.pack is True

    def no(reason: str):  # noqa: ANN202
        if not asked:
            return tag, ""
        return tag._replace(why=tag.why or f"not packed: {reason}"), f"not packed: {reason}"

    shape = packable_shape(req, gpus, pinned)
    if shape:
        return no(shape)
    sharing = shard_types(nodes, config)
    if not sharing:
        return no(f"no shard nodes seen (partition {config.shard_partition})")
    kept = [t for t in types if t in sharing] if types else sharing
    if not kept:
        return no(f"shard nodes have none of the GPU types chosen for it ({'|'.join(types)})")
    partners, unknown, running_at = queued_partners(config, sbatch)
    running = {id(partners[i]) for i in running_at}
    share = float(getattr(config, "pack_queue_share", 1.0))
    if unknown or len(partners) > MAX_PARTNERS:
        return no(f"{unknown or 'too many'} shard job(s) in the queue msched cannot check as partners")
    times = times_of([tag.model, tag.pref, tag.ref, *(m for p in partners for m in (p.model, p.pref, p.ref))])
    judged, refused = [], []              # (type, prediction, why) where it may share; why not elsewhere
    guard = getattr(config, "pack_guard", "bound")
    try:
        model = load_model()
        slower = model.slower_for(guard)
        mine = speeds_from_tag(tag, times)
        if mine is None:
            return no("no estimate of its speed")
        for gpu_type in kept:             # each type it may land on: a partner there is one it was checked against
            if guard == "bound" and gpu_type in mine.iter_ms and not model.is_seen(mine, gpu_type):
                refused.append(f"outside the interference model's data on {gpu_type} (pack_guard bound)")
                continue
            here = [p for p in partners if may_meet(p, gpu_type)]     # the shard jobs it may meet on the type
            others = [(p.model, p.bs, s, p.mem, solo_runtime_s(s, p.iters, gpu_type)) for p in here
                      if (s := speeds_from_tag(p, times)) and gpu_type in s.iter_ms]
            if len(others) < len(here):          # one it may meet has no estimate here: no pair is vouched for
                refused.append(f"{len(here) - len(others)} queued shard job(s) without an estimate on {gpu_type}")
                continue
            required = [o[2] for o, p in zip(others, here, strict=True) if id(p) in running]
            where = f"{len(others)} shard jobs in the queue"
            every = bool(others)
            if not others:
                others = [(*o, None, None) for o in reference_mix(times_of(None).perf, gpu_type)]
                where = f"the reference mix ({len(others)} models)"
            predicted, reason = submit_verdict(
                mine, tag.mem if tag.mem is not None else peak_gb(tag.model, tag.bs),
                [(s, mem if mem is not None else peak_gb(m, bs), run) for m, bs, s, mem, run in others], gpu_type,
                model.combined_throughput, type_usable_gb(gpu_type),
                float(getattr(config, "pack_threshold", DEFAULT_THRESHOLD)), slower,
                every=every, own=model.own_speed, some=guard == "bound", best_types=kept if guard == "bound" else (),
                queue_share=share if every else 1.0, required=required if every else (),
                **_wait(gpu_type, [gpu_type], free_at, estimates, now, plan_end))
            if predicted is None:
                refused.append(f"{reason} with {where}" + (f" on {gpu_type}" if len(kept) > 1 else ""))
            else:
                judged.append((gpu_type, predicted, f"{reason} with {where}"))
    except InterferenceError as exc:
        return no(str(exc))
    if not judged:
        return no(refused[0])
    if free_at is None:       # whether it would wait, and the plan's end, are the last round's to say
        return no("no fresh plan from the reorderer to judge whether it would wait (is `msched reorder` running?)")
    gpu_type, predicted, reason = judged[0]
    ok = [t for t, _, _ in judged]
    why = f"packed on {'|'.join(ok)}: {reason}"
    return tag._replace(pack=round(predicted, 3), added="|".join(ok) if types or len(ok) < len(kept) else "",
                        why=why), ""


def _wait(gpu_type: str, kept, free_at, estimates, now: float | None, plan_end: float | None) -> dict:  # noqa: ANN001
    """submit_verdict's wait_s, runtime_s and horizon_s: the earliest published free time of the kept
    types, the job's estimate on the type it is predicted on, the published plan end ({} when the
    free times or the estimate are unknown)."""
    import time

    now = time.time() if now is None else now
    waits = [float(free_at[t]) for t in kept if free_at and t in free_at]
    est = (estimates or {}).get(gpu_type)
    if not waits:
        return {}
    return {"wait_s": max(0.0, min(waits) - now), "runtime_s": est.seconds if est is not None else None,
            "horizon_s": plan_end - now if plan_end is not None else None}


def pack_options(req, config) -> list[str]:  # noqa: ANN001 - SbatchRequest, Config
    """The sbatch options that make the job a shard job: the shard partition and the user's gres with
    its GPU item replaced by one shard (sbatch takes the last `--gres` and `--partition` given)."""
    others = [g for g in (req.get("gres") or "").split(",")
              if g.strip() and g.strip().removeprefix("gres:").removeprefix("gres/").split(":")[0] != "gpu"]
    return [f"--partition={config.shard_partition}", f"--gres={','.join([*others, 'shard:1'])}"]
