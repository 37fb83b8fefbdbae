"""The submit decision's caller: from a classified model and the user's request to msub's tag and the
GPU types it adds to the job's constraint.

The decision itself is the policy's (`msched.policy.choice`); this module gathers what it needs at
submit time without the database: the model's classification, the performance rows of its reference,
the GPU types the cluster has (the reorderer's published free-time file, else one cached `sinfo`), and
the free time per type the last round published.
"""

from __future__ import annotations

import os
import time

from msched.msub.directives import MschedSettings, known_models
from msched.msub.sbatch_args import SbatchRequest

FREE_TIME_MAX_AGE_S = 900.0                          # older published free times are ignored (reorderer down)


def read_free_time(config, now: float | None = None) -> tuple[dict[str, float], bool]:
    """The projected free time per GPU type that the last reorder round published.

    Returns (free_at per canonical type as epoch seconds, fresh). A missing, unreadable or stale file
    means "all types free now" for the choice (fresh=False); its type names are still returned
    (they tell msub which GPU types the cluster has).
    """
    import json
    now = time.time() if now is None else now
    try:
        with open(config.free_time_path, encoding="utf-8") as fh:
            data = json.load(fh)
        free_at = {config.canonical_gpu_type(str(k)): float(v) for k, v in dict(data.get("free_at", {})).items()}
        published = float(data.get("time", 0))
    except (OSError, ValueError, TypeError, AttributeError):
        return {}, False
    fresh = (now - published) <= FREE_TIME_MAX_AGE_S
    if not fresh:
        free_at = dict.fromkeys(free_at, now)
    return free_at, fresh


CLUSTER_TYPES_MAX_AGE_S = 600.0                     # how long msub trusts its cached `sinfo` answer


def cluster_gpu_types(config, sbatch: str) -> list[str]:
    """The GPU types the cluster's nodes carry as features, when no published file says so.

    One `sinfo` call (the sibling of the configured sbatch, never found through PATH), remembered for
    ten minutes in the user's cache so a burst of submissions pays for it once; a feature counts as a
    GPU type when the performance table knows it.
    """
    import json

    from msched.config import user_cache_dir

    cache = os.path.join(user_cache_dir(), "cluster_gpu_types.json")
    key = os.environ.get("SLURM_CONF", "") + "|" + sbatch
    try:
        with open(cache, encoding="utf-8") as fh:
            cached = json.load(fh)
        if cached.get("key") == key and time.time() - float(cached["time"]) < CLUSTER_TYPES_MAX_AGE_S:
            return [config.canonical_gpu_type(f) for f in cached["features"]]
    except (OSError, ValueError, KeyError, TypeError):
        pass
    import subprocess

    sinfo = os.path.join(os.path.dirname(sbatch), "sinfo")
    try:
        out = subprocess.run([sinfo, "-h", "-o", "%f"], capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return []
    if out.returncode != 0:
        return []
    raw: set[str] = set()
    for line in out.stdout.splitlines():
        raw.update(f for f in line.strip().split(",") if f and f != "(null)")
    try:
        os.makedirs(os.path.dirname(cache), mode=0o700, exist_ok=True)
        tmp = os.path.join(os.path.dirname(cache), f".cluster_gpu_types.json.{os.getpid()}")
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump({"key": key, "time": time.time(), "features": sorted(raw)}, fh)
        os.replace(tmp, cache)
    except OSError:
        pass                                      # a cache that cannot be written is no error
    return sorted({config.canonical_gpu_type(f) for f in raw})


def reference_rows(path, model: str):
    """The performance table restricted to one model: msub needs only its reference's rows, and
    filtering lines before parsing keeps a large site table off the submission's critical path."""
    import csv

    from msched.estimate.perf_table import PerfTable, PerfTableError, _parse_rows

    try:
        with open(path, newline="") as fh:
            header = fh.readline()
            prefixes = (f"{model},", f'"{model}",')
            lines = [header] + [ln for ln in fh if ln.startswith(prefixes)]
    except OSError as exc:
        raise PerfTableError(f"cannot read performance table {path}: {exc.strerror}") from exc
    return PerfTable(_parse_rows(csv.DictReader(lines), str(path)))


def plan_tag_and_types(spec: str, settings: MschedSettings, req: SbatchRequest, config, sbatch: str,
                       warnings: list[str] | None = None):
    """Classify the model and choose the GPU types: (JobTag, types to add, pinned types).

    Every exception raised here means "submit as a plain job with a warning"; a model classified by
    name only (`classify_model`) adds its one warning to WARNINGS and keeps the job managed.
    """
    from msched import __version__
    from msched.msub.gpu_request import gpu_request, pinned_types
    from msched.tag import JobTag

    if ".py:" not in spec and spec not in known_models():
        # not a shipped torchvision name: say so now rather than start torch to find out
        import difflib
        close = difflib.get_close_matches(spec, sorted(known_models()), n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else "; use a torchvision name or path/to/file.py:factory"
        raise ValueError(f"unknown model {spec!r}{hint}")
    cls = classify_model(spec, config, warnings if warnings is not None else [])
    # the estimate's source, as the reorderer's TagEstimator picks it: the model's own rows when the
    # table has them, else the nearest reference *with measurements* (DESIGN, policy point 3)
    est_model, est_flops = spec, 1.0
    perf = reference_rows(config.performance, spec) if ".py:" not in spec else None
    if perf is None or not perf.rows:
        est_model = getattr(cls, "perf_reference", "") or cls.nearest_reference
        est_flops = float(getattr(cls, "perf_flops_ratio", cls.flops_ratio))
        perf = reference_rows(config.performance, est_model)
    gpus = gpu_request(req, config.canonical_gpu_type)
    free_at, fresh = read_free_time(config)
    cluster_types = sorted(free_at) if free_at else cluster_gpu_types(config, sbatch)
    known_types = set(perf.gpu_types()) | set(cluster_types) | set(config.gpu_aliases.values())
    pinned = pinned_types(req, gpus, known_types, config.canonical_gpu_type)
    tag = JobTag(
        model=spec, ref=cls.nearest_reference, group=cls.group, sim=float(cls.similarity),
        flops=float(cls.flops_ratio), iters=settings.iterations, bs=settings.batch_size,
        pinned="|".join(pinned), ver=__version__,
        pref=est_model if est_model not in (spec, cls.nearest_reference) else "",
        pflops=est_flops if est_model not in (spec, cls.nearest_reference) else None,
    )
    if gpus is None or pinned:
        why = "no GPU request" if gpus is None else f"GPU type {tag.pinned} chosen by the user"
        return tag._replace(why=why), (), pinned
    types = choose_types(tag, gpus, req, perf, config, cluster_types, free_at, est_model, est_flops)
    if types:
        return tag._replace(added="|".join(types)), types, pinned
    return tag._replace(why=why_no_types(tag, gpus, req, perf, cluster_types, est_model, est_flops)), types, pinned


def why_no_types(tag, gpus, req: SbatchRequest, perf, cluster_types, est_model: str, est_flops: float) -> str:
    """Why the submit decision named no GPU type, in words the job's owner reads in `msched jobs`."""
    from msched.estimate.runtime import estimate_runtime

    allowed = [t for t in perf.types_for(est_model) if not cluster_types or t in cluster_types]
    if not allowed:
        return f"no measurements of {est_model} on this cluster's GPU types"
    unbounded = estimate_runtime(perf, est_model, num_gpus=gpus.total, batch_size=tag.bs, flops_ratio=est_flops,
                                 iterations=tag.iters, time_limit_s=req.time_limit_s, types=allowed,
                                 within_time_limit=False)
    if not unbounded:
        return f"no measurements of {est_model} at {gpus.total} GPUs" + (f", batch size {tag.bs}" if tag.bs else "")
    if req.time_limit_s and min(unbounded.values()) > req.time_limit_s:
        return "claim longer than the time limit on every GPU type"
    return "no GPU type chosen"


def classify_model(spec: str, config, warnings: list[str]):
    """The model's classification, never running code the submitting user does not own, never as root.

    A torchvision name is a table lookup. A user's `file.py:factory` is profiled (in a limited child,
    msched.models.profile_cache) only when this msub is not root and the file and its directory are
    the user's own and writable by no one else; otherwise the job is classified by name only: the
    factory's or the file's name when it is a torchvision model (`nets/resnet50.py:build`,
    `models.py:vgg16`), else it goes in as a plain job. Either way, one warning says why.
    """
    from msched.models.classify import classify

    if ".py:" not in spec:
        return classify(spec, config=config)
    path, _, factory = spec.rpartition(":")
    if os.geteuid() == 0:
        reason = "msub runs no model code as root"
    else:
        from msched.models.profile_cache import untrusted_reason  # the profiler's own check, asked first

        reason = untrusted_reason(os.path.realpath(os.path.expanduser(path)))
        if reason is None:
            return classify(spec, config=config)
    stem = os.path.splitext(os.path.basename(path))[0]
    name = next((n for n in (factory, stem, factory.lower(), stem.lower()) if n in known_models()), None)
    if name is None:
        raise ValueError(f"{reason}: {spec} not profiled, and neither {factory!r} nor {stem!r} names a "
                         "known model")
    warnings.append(f"{reason}: {spec} not profiled; classified by its name {name}")
    return classify(name, config=config)


def choose_types(tag, gpus, req: SbatchRequest, perf, config, cluster_types, free_at,
                 est_model: str, est_flops: float) -> tuple[str, ...]:
    """The GPU types to OR into the constraint, by the policy's submit-time choice (shared with msched-once)."""
    from msched.estimate.runtime import estimate_runtime
    from msched.policy.choice import DEFAULT_UNKNOWN_RUNTIME_S, completion_choice

    allowed = [t for t in perf.types_for(est_model) if not cluster_types or t in cluster_types]
    if not allowed:
        return ()
    # no iterations and no time limit: the policies' guess for an unknown runtime stands in for the
    # time limit (the partition's default is not known here), so the relative speeds still decide
    limit = req.time_limit_s or (None if tag.iters else DEFAULT_UNKNOWN_RUNTIME_S)
    est = estimate_runtime(
        perf, est_model, num_gpus=gpus.total, batch_size=tag.bs, flops_ratio=est_flops,
        iterations=tag.iters, time_limit_s=limit, types=allowed,
    )
    types = completion_choice(est, dict(free_at), None, config.constraint_slack)
    return tuple(t for t in types if t in allowed)
