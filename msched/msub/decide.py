"""The submit decision's caller: from a classified model and the user's request to msub's tag and the
GPU types it adds to the job's constraint.

The decision itself is the policy's (`msched.policy.choice.decide_submit`, the one the simulator
replays); this module gathers what it needs at submit time without the database: the model's
classification, the performance rows that may estimate it, and what msub knows of the cluster
(`msched.msub.cluster_view`: the published free time, the nodes' sizes, and without a fresh round the
queue's load).
"""

from __future__ import annotations

import os

from msched.msub.directives import MschedSettings, known_models
from msched.msub.sbatch_args import SbatchRequest


def reference_rows(path, models):  # noqa: ANN001, ANN201 - a PerfTable
    """The performance table restricted to a few models: msub needs only the rows that may estimate
    this job, and filtering lines before parsing keeps a large site table off the submission's
    critical path."""
    from msched.estimate.perf_table import PerfTable, PerfTableError, _parse_rows
    from msched.util.light import DictReader

    prefixes = tuple(p for m in dict.fromkeys(m for m in models if m) for p in (f"{m},", f'"{m}",'))
    try:
        with open(path, newline="") as fh:
            header = fh.readline()
            lines = [header] + [ln for ln in fh if ln.startswith(prefixes)]
    except OSError as exc:
        raise PerfTableError(f"cannot read performance table {path}: {exc.strerror}") from exc
    return PerfTable(_parse_rows(DictReader(lines), str(path)))


def job_precision(settings: MschedSettings, req: SbatchRequest, script: str | None) -> str:
    """The job's precision for its tag: `#MSCHED --precision=` (or msub's option), else a precision flag on
    the script's command lines or in --wrap (msched.models.precision); "" when nothing says."""
    if settings.precision:
        return settings.precision
    from msched.models.precision import detect_precision
    from msched.msub.directives import script_command_lines

    texts = [script_command_lines(script)] if script else []
    if req.wrap:
        texts.append(req.wrap)
    return detect_precision(texts) or ""


def plan_tag_and_types(spec: str, settings: MschedSettings, req: SbatchRequest, config, sbatch: str,  # noqa: ANN001, ANN201
                       warnings: list[str] | None = None, script: str | None = None, *, packing: bool = False):
    """Classify the model and make the submit decision: (JobTag, types to add, pinned types). `script`:
    the batch script's text, where the job's precision flags are found.

    `packing=True` (msub, which can retype the request; not the cli_filter) also decides whether a
    packable job goes in as a shard job (msched.msub.packing): then the tag carries `pack` and no types
    are added.

    Every exception raised here means "submit as a plain job with a warning"; a model classified by
    name only (`classify_model`) adds its one warning to WARNINGS and keeps the job managed.
    """
    from msched import __version__
    from msched.estimate.estimators import TagEstimator
    from msched.estimate.runtime import times_for
    from msched.msub.cluster_view import cluster_nodes, queue_load, read_free_time, read_plan_end, read_price
    from msched.msub.gpu_request import gpu_request, pinned_types
    from msched.policy.choice import ClusterView, SubmitJob, decide_submit, reference_fields
    from msched.policy.feasibility import node_sizes
    from msched.tag import JobTag

    if ".py:" not in spec and spec not in known_models():
        # not a shipped torchvision name: say so now rather than start torch to find out
        import difflib
        close = difflib.get_close_matches(spec, sorted(known_models()), n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else "; use a torchvision name or path/to/file.py:factory"
        raise ValueError(f"unknown model {spec!r}{hint}")
    cls = classify_model(spec, config, warnings if warnings is not None else [])
    fields = reference_fields(cls)
    perf = reference_rows(config.performance, [spec, fields["pref"], fields["ref"]])
    gpus = gpu_request(req, config.canonical_gpu_type)
    free_at, fresh = read_free_time(config)
    table_types = set(perf.gpu_types()) | set(config.gpu_aliases.values()) | set(free_at)
    nodes = cluster_nodes(config, sbatch, table_types) if gpus is not None else []
    known_types = table_types | {n[1] for n in nodes}
    pinned = pinned_types(req, gpus, known_types, config.canonical_gpu_type)
    prec = job_precision(settings, req, script)
    from msched.estimate.memory import job_peak_gb

    mem = job_peak_gb(spec, settings.batch_size, prec) if cls.spec == spec else None
    tag = JobTag(model=spec, iters=settings.iterations, bs=settings.batch_size, pinned="|".join(pinned),
                 ver=__version__, prec=prec, mem=mem, **fields)
    if gpus is None or pinned:
        why = "no GPU request" if gpus is None else f"GPU type {tag.pinned} chosen by the user"
        tag = tag._replace(why=why)
        if packing and settings.pack:       # the owner asked: say why not (never packed here)
            tag = _packed(tag, settings, req, gpus, pinned, config, sbatch, nodes, warnings)
        return tag, (), pinned
    sizes = None
    if nodes:      # the nodes the user's own constraint and partitions reach (it names no GPU type here)
        sizes = node_sizes([n[1:] for n in nodes], constraint=req.constraint or "",
                           partitions=(req.partition or "").split(","))
    free_gpus = pending = None
    if nodes and not fresh:
        free_gpus, pending = queue_load(config, sbatch, nodes)
    usable = None
    if mem:
        from msched.estimate.gpu_specs import specs_for_config
        from msched.estimate.memory import usable_by_type

        usable = usable_by_type(known_types, specs_for_config(config))
    price, measure = read_price(config, known_types) if fresh else ({}, "saving")
    view = ClusterView(node_gpus=sizes, free_at=free_at or None, fresh=fresh, free_gpus=free_gpus,
                       pending_gpus=pending, usable_gb=usable, price=price or None, price_measure=measure)
    per_node_fixed = any(o in ("gres", "gpus-per-node", "gpus-per-socket") for o in gpus.options)
    job = SubmitJob(num_gpus=gpus.total, gpus_per_node=gpus.per_node if per_node_fixed else None,
                    num_nodes=max(1, req.nodes), time_limit_s=req.time_limit_s, peak_memory_gb=mem)
    decision = decide_submit(tag, job, view, TagEstimator(times_for(config, perf)), slack=config.constraint_slack,
                             informed_slack=config.constraint_informed_slack, free_slack=config.constraint_free_slack)
    if packing and (settings.pack or (settings.pack is None and config.pack_partitions)):
        tag = _packed(decision.tag, settings, req, gpus, pinned, config, sbatch, nodes, warnings, decision.types,
                      free_at=free_at if fresh else None, estimates=decision.estimates,
                      plan_end=read_plan_end(config) if fresh else None)
        if tag.pack is not None:                 # a shard job, on the chosen types that shard nodes have
            return tag, tuple(t for t in tag.added.split("|") if t), pinned
        return tag, decision.types, pinned       # an owner who asked reads why not in `why`
    return decision.tag, decision.types, pinned      # its `why` says why no type was added, if none was


def _packed(tag, settings, req, gpus, pinned, config, sbatch, nodes, warnings, types=(), **wait):  # noqa: ANN001, ANN202, PLR0913
    """The tag after msub's packing decision (msched.msub.packing), its warning added to WARNINGS."""
    from msched.estimate.perf_table import PerfTable
    from msched.estimate.runtime import times_for
    from msched.msub.packing import consider_packing

    def times_of(models):  # noqa: ANN001, ANN202
        perf = PerfTable.load(config.performance) if models is None else reference_rows(config.performance, models)
        return times_for(config, perf)

    tag, warning = consider_packing(tag, settings, req, gpus, pinned, config, sbatch, nodes, times_of, tuple(types),
                                    **wait)
    if warning and warnings is not None:
        warnings.append(warning)
    return tag


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


def lever_options(req: SbatchRequest, types: tuple[str, ...], config) -> list[str]:  # noqa: ANN001
    """The sbatch options that steer the job to `types`, by the site's lever (config `type_lever`):
    the GPU-type feature constraint ANDed with the user's own (`feature`), or the partitions of the
    types (`partition`, config `type_partitions`), only when the user named no partition and every type
    has one. [] = leave the request as it is (a user expression too complex to extend, say)."""
    from msched.msub.gpu_request import add_types

    if not types:
        return []
    if config.type_lever == "partition":
        parts = [config.type_partitions.get(t) for t in types]
        if req.partition or not all(parts):
            return []
        return [f"--partition={','.join(dict.fromkeys(parts))}"]
    expr = add_types(req.constraint, types, multi_node=req.nodes > 1)
    return [f"--constraint={expr}"] if expr is not None else []
