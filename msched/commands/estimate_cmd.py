"""`msched estimate SPEC`: a model's iteration time on each GPU type, where each figure came from, and
whether its training step fits the type's memory."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from msched.config import ConfigError

PRECISIONS = ("float", "half", "bfloat16", "double")
OPTIMIZERS = ("sgd", "adam", "none")


@click.command()
@click.argument("spec")
@click.option("--gpu-types", default=None, metavar="LIST",
              help="Comma-separated GPU types (site names or spec-table names; default: every type of the "
                   "performance table and the spec table).")
@click.option("--num-gpus", type=click.IntRange(min=1), default=1, show_default=True,
              help="GPUs of one node the job uses (data parallel).")
@click.option("--batch-size", type=click.IntRange(min=1), default=12, show_default=True,
              help="Per-GPU batch size.")
@click.option("--precision", type=click.Choice(PRECISIONS), default="float", show_default=True,
              help="Training precision (half: autocast / AMP or .half()).")
@click.option("--optimizer", type=click.Choice(OPTIMIZERS), default="sgd", show_default=True,
              help="Optimizer state kept per parameter, for the memory check.")
@click.option("--perf", "perf_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Performance table of measured rows (default: the site's `performance`).")
@click.option("--input-size", type=click.IntRange(min=1), default=None, help="Input size in pixels.")
@click.option("--json", "as_json", is_flag=True,
              help="Print a JSON list, one object per type: gpu_type, iter_ms, source, reference, "
                   "cost_model_ms, peak_memory_gb, usable_memory_gb, fits.")
def estimate(spec: str, gpu_types: str | None, num_gpus: int, batch_size: int, precision: str, optimizer: str,
             perf_path: Path | None, input_size: int | None, as_json: bool) -> None:
    """Predict SPEC's training iteration time (a torchvision name or path/to/file.py:factory) per GPU type.

    Each figure says where it came from: `measured` (the model's own rows), `reference-corrected` (the
    cost model times the measured/predicted ratio of the most similar reference measured on the type) or
    `cost-model` (the per-layer cost model against the type's spec row alone). A type whose memory the
    training step does not fit is marked and never chosen by msched.
    """
    from msched.config import load_config
    from msched.errors import ProfileError
    from msched.estimate.gpu_specs import GpuSpecError, specs_for_config
    from msched.estimate.memory import fits
    from msched.estimate.perf_table import PerfTable, PerfTableError
    from msched.estimate.predictor import PredictorTimes, predict
    from msched.models.classify import ClassifyError, load_references
    from msched.models.profile_cache import get_profile

    try:
        config = load_config()
        specs = specs_for_config(config)
        perf = PerfTable.load(perf_path or config.performance)
        refset = load_references(config)
        profile = get_profile(spec.strip(), input_size=input_size)
    except (ConfigError, GpuSpecError, PerfTableError, ClassifyError, ProfileError) as exc:
        raise click.ClickException(str(exc)) from None
    name = spec.strip()
    if gpu_types:
        types = [config.canonical_gpu_type(t) for t in gpu_types.split(",") if t.strip()]
        known = set(perf.gpu_types())
        bad = [t for t in types if t not in known and specs.get(t) is None]
        if bad:
            raise click.BadParameter(
                f"unknown GPU type(s) {', '.join(bad)}; measured: {', '.join(sorted(known)) or 'none'}; "
                f"spec rows: {', '.join(specs.names())}", param_hint="--gpu-types")
    else:
        types = list(dict.fromkeys([*perf.gpu_types(), *(t for t in specs.names()
                                                           if not any(specs.canonical(m) == t for m in perf.gpu_types()))]))
    source = PredictorTimes(perf, precision, specs=specs, refset=refset, profiles={name: profile})
    refs = source.references(name)
    rows = []
    for t in types:
        p = predict(profile, t, num_gpus, batch_size, precision, model=name, perf=perf, references=refs,
                    profiles={name: profile}, specs=specs)
        spec_row = specs.get(t)
        mem = fits(profile, spec_row, batch_size, precision, optimizer) if spec_row else None
        rows.append({
            "gpu_type": t, "spec": spec_row.gpu_type if spec_row else "",
            "iter_ms": round(p.iter_ms, 3) if p else None, "source": p.source if p else "unknown",
            "reference": p.reference if p else "", "cost_model_ms": round(p.cost_model_ms, 3) if p else None,
            "peak_memory_gb": round(mem.peak_gb, 3) if mem else None,
            "usable_memory_gb": round(mem.usable_gb, 3) if mem else None,
            "fits": mem.fits if mem else None,
        })
    rows.sort(key=lambda r: (r["fits"] is False, r["iter_ms"] is None, r["iter_ms"] or 0.0))
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    _print(name, rows, num_gpus, batch_size, precision)


def _print(name: str, rows: list[dict], num_gpus: int, batch_size: int, precision: str) -> None:
    """Slurm-style columns: one line per type, fastest fitting type first."""
    out = sys.stdout
    out.write(f"# {name}: {num_gpus} GPU(s), batch {batch_size} per GPU, {precision}\n")
    header = f"{'GPU_TYPE':<16} {'ITER_MS':>10} {'SOURCE':<20} {'REFERENCE':<20} {'PEAK_GB':>8} {'USABLE_GB':>9} FITS"
    out.write(header + "\n")
    for r in rows:
        ms = f"{r['iter_ms']:.1f}" if r["iter_ms"] is not None else "-"
        peak = f"{r['peak_memory_gb']:.2f}" if r["peak_memory_gb"] is not None else "-"
        usable = f"{r['usable_memory_gb']:.1f}" if r["usable_memory_gb"] is not None else "-"
        fit = {True: "yes", False: "NO", None: "?"}[r["fits"]]
        out.write(f"{r['gpu_type']:<16} {ms:>10} {r['source']:<20} {r['reference'] or '-':<20} {peak:>8} "
                  f"{usable:>9} {fit}\n")
