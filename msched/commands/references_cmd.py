"""`msched references list|evaluate`: show the reference set, and judge it against measured speeds."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import click

from msched.config import DATA_DIR, METRICS, ConfigError

DEFAULT_EVAL_PERF = Path(DATA_DIR) / "measured_perf.csv"


@click.group()
def references() -> None:
    """List and evaluate the reference model set."""


def _load(references_opt: str | None):
    from msched.config import load_config
    from msched.models.classify import ClassifyError, resolve_references

    try:
        config = load_config()
        return config, resolve_references(references_opt, config)
    except (ClassifyError, ConfigError) as exc:
        raise click.ClickException(str(exc)) from None


@references.command("list")
@click.option("--references", "references_opt", metavar="NAMES|FILE", default=None,
              help="Reference set: comma-separated torchvision names or a JSON file (default: the site's).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def list_cmd(references_opt: str | None, as_json: bool) -> None:
    """The reference models: group, whether their performance is measured, size and FLOPs."""
    from msched.models.profile_cache import shipped_profile

    _config, refset = _load(references_opt)
    rows = []
    for r in refset.references:
        prof = shipped_profile(r.name)
        rows.append({"name": r.name, "group": r.group, "family": r.family,
                     "performance": "measured" if r.measured else "unknown", "input_size": r.input_size,
                     "gflops": r.flops / 1e9, "params": prof.params if prof else None})
    if as_json:
        click.echo(json.dumps({"source": refset.source, "references": rows}, indent=2))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"reference models ({refset.source})")
    for col, just in (("model", "left"), ("group", "left"), ("performance", "left"), ("input", "right"),
                      ("GFLOPs", "right"), ("params", "right")):
        table.add_column(col, justify=just)
    for row in rows:
        table.add_row(row["name"], row["group"], row["performance"], str(row["input_size"]),
                      f"{row['gflops']:.2f}", f"{row['params']:,}" if row["params"] else "")
    Console(width=None if sys.stdout.isatty() else 160).print(table)


def _fmt(x: float, pct: bool = False) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return f"{x:.1%}" if pct else f"{x:.3f}"


@references.command("evaluate")
@click.option("--perf", "perf_path", type=click.Path(dir_okay=False, path_type=Path), default=str(DEFAULT_EVAL_PERF),
              show_default=True, help="Performance table (DESIGN's CSV format) holding the measured truth.")
@click.option("--references", "references_opt", metavar="NAMES|FILE", default=None,
              help="Reference set to judge: comma-separated torchvision names or a JSON file (default: the site's).")
@click.option("--num-gpus", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("--precision", default="float", show_default=True)
@click.option("--gpu-types", default=None, metavar="LIST", help="Comma-separated GPU types to compare over (default: all).")
@click.option("--metric", type=click.Choice(METRICS), default=None, help="Similarity measure (default: the site's).")
@click.option("--random-sets", type=click.IntRange(min=1), default=None, metavar="N",
              help="Also evaluate N random reference sets of one measured model per family.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed for --random-sets.")
@click.option("--hold-out-family", is_flag=True,
              help="Also evaluate each family predicted with all its members removed from the references.")
@click.option("--leave-out-type", "leave_out_types", multiple=True, metavar="TYPE",
              help="Also remove TYPE's rows from everything, refit the cost model without them and predict "
                   "them from TYPE's spec row alone (repeatable; needs scipy).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON: `models` and the five totals.")
def evaluate_cmd(perf_path: Path, references_opt: str | None, num_gpus: int, precision: str, gpu_types: str | None,
                 metric: str | None, random_sets: int | None, seed: int, hold_out_family: bool, leave_out_types: tuple[str, ...],
                 as_json: bool) -> None:
    """Predict each non-reference model's per-GPU-type times from its nearest reference and compare.

    Totals: best_type_accuracy (predicted fastest type is the true one), mean_regret (true time on the
    predicted fastest type over the true best, minus 1), profile_error (mean |centred log predicted -
    centred log true|: is the relative speed across types right?), agnostic_error (the same for the
    references' mean profile, what a model-blind scheduler knows) and time_error (mean |log predicted -
    log true|, which also checks the FLOPs scaling).
    """
    from msched.estimate.perf_table import PerfTable, PerfTableError
    from msched.models import reference_eval as ev
    from msched.models.classify import ClassifyError

    config, refset = _load(references_opt)
    metric = metric or config.metric
    try:
        perf = PerfTable.load(perf_path)
    except PerfTableError as exc:
        raise click.ClickException(str(exc)) from None
    precisions = sorted({r.precision for r in perf.rows})
    if precision not in precisions:
        raise click.BadParameter(f"{precision!r} is not in {perf_path}; choose from {', '.join(precisions)}",
                                 param_hint="--precision")
    counts = sorted({r.num_gpus for r in perf.rows if r.precision == precision})
    if num_gpus not in counts:
        raise click.BadParameter(f"no rows at {num_gpus} GPU(s) in {perf_path}; measured counts: "
                                 f"{', '.join(map(str, counts))}", param_hint="--num-gpus")
    types = None
    if gpu_types:
        known = perf.gpu_types()
        types = [config.canonical_gpu_type(t) for t in gpu_types.split(",") if t.strip()]
        bad = [t for t in types if t not in known]
        if bad or len(types) < 2:
            raise click.BadParameter(
                (f"unknown GPU type(s) {', '.join(bad)}" if bad else "give at least two GPU types")
                + f"; the table has {', '.join(known)}", param_hint="--gpu-types")
    left_out = []
    for name in leave_out_types:
        t = config.canonical_gpu_type(name)
        if t not in perf.gpu_types():
            raise click.BadParameter(f"{name!r} has no rows in {perf_path}; its types: {', '.join(perf.gpu_types())}",
                                     param_hint="--leave-out-type")
        left_out.append(t)
    opts = {"num_gpus": num_gpus, "precision": precision, "gpu_types": types, "metric": metric}
    try:
        result = ev.evaluate(perf, refset, **opts)
        rand = ev.random_sets(perf, random_sets, seed, **opts) if random_sets else None
        held = ev.hold_out_families(perf, refset, **opts) if hold_out_family else None
        loto = [ev.leave_out_type(perf, t) for t in left_out]
    except ClassifyError as exc:
        raise click.ClickException(str(exc)) from None
    if not result.models:
        raise click.ClickException(f"no model of {perf_path} outside the reference set could be evaluated"
                                   + (f" ({'; '.join(result.skipped)})" if result.skipped else ""))
    out = {**result.to_dict(), "perf": str(perf_path), "metric": metric, **{k: v for k, v in opts.items() if k != "metric"}}
    if rand:
        out["random_sets"] = {
            "n": len(rand), "seed": seed,
            "sets": [{"references": list(e.references), **e.totals()} for e in rand],
            **{k: ev.summarise([getattr(e, k) for e in rand]) for k in
               ("best_type_accuracy", "mean_regret", "profile_error", "agnostic_error", "time_error")},
            "profile_over_agnostic": ev.summarise([e.profile_error / e.agnostic_error for e in rand]),
        }
    if held is not None:
        pooled = ev.pooled(list(held.values()))
        out["hold_out_family"] = {"families": {f: {"models": [m.model for m in e.models], **e.totals()}
                                               for f, e in held.items()}, **pooled.totals()}
    if loto:
        out["leave_out_type"] = {r.gpu_type: r.to_dict() for r in loto}
    if as_json:
        click.echo(json.dumps(out, indent=2, default=str))
        return
    _print(out, result)
    for r in loto:
        sib = "a sibling of its generation measured" if r.generation_sibling else "no sibling of its generation"
        click.echo(f"left out {r.gpu_type} (spec row {r.spec_row}, {sib}): time_error {_fmt(r.time_error)} "
                   + " ".join(f"{p} {_fmt(v)}" for p, v in r.by_precision.items())
                   + "; by GPUs " + " ".join(f"{n}:{_fmt(v)}" for n, v in r.by_num_gpus.items())
                   + f"; best_type_accuracy {_fmt(r.best_type_accuracy, pct=True)} of {r.configs}")


def _print(out: dict, result) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=None if sys.stdout.isatty() else 160)
    table = Table(title=f"{len(result.models)} models predicted from {len(result.references)} references "
                        f"({out['metric']}, {out['num_gpus']} GPU, {out['precision']})")
    for col in ("model", "reference", "sim", "pred. best", "true best", "regret", "profile err",
                "agnostic err", "time err"):
        table.add_column(col, justify="left" if col in ("model", "reference", "pred. best", "true best") else "right")
    for m in result.models:
        table.add_row(m.model, m.nearest_reference, f"{m.similarity:.3f}", m.predicted_best, m.true_best,
                      _fmt(m.regret, pct=True), _fmt(m.profile_error), _fmt(m.agnostic_error), _fmt(m.time_error))
    console.print(table)
    console.print(f"best_type_accuracy {_fmt(out['best_type_accuracy'], pct=True)}   mean_regret "
                  f"{_fmt(out['mean_regret'], pct=True)}   profile_error {_fmt(out['profile_error'])}   "
                  f"agnostic_error {_fmt(out['agnostic_error'])} (ratio "
                  f"{out['profile_error'] / out['agnostic_error']:.2f})   time_error {_fmt(out['time_error'])}")
    if out.get("skipped"):
        console.print("skipped: " + "; ".join(out["skipped"]))
    if "random_sets" in out:
        rs = out["random_sets"]
        pe, ag, ratio = rs["profile_error"], rs["agnostic_error"], rs["profile_over_agnostic"]
        console.print(f"random sets (n={rs['n']}, seed {rs['seed']}): profile_error median {pe['median']:.3f} "
                      f"[{pe['min']:.3f}, {pe['max']:.3f}], agnostic_error median {ag['median']:.3f}, "
                      f"profile/agnostic median {ratio['median']:.2f} [{ratio['min']:.2f}, {ratio['max']:.2f}]")
    if "hold_out_family" in out:
        ho = out["hold_out_family"]
        for fam, tot in ho["families"].items():
            console.print(f"held out {fam:12s}: profile_error {_fmt(tot['profile_error'])} "
                          f"agnostic_error {_fmt(tot['agnostic_error'])} best_type_accuracy "
                          f"{_fmt(tot['best_type_accuracy'], pct=True)}")
        console.print(f"held out, pooled: profile_error {_fmt(ho['profile_error'])} agnostic_error "
                      f"{_fmt(ho['agnostic_error'])} best_type_accuracy {_fmt(ho['best_type_accuracy'], pct=True)}")
