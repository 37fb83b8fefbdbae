"""`msched calibrate script|submit|run|import`: measure the reference models on this site's GPU types."""

from __future__ import annotations

import os
from pathlib import Path

import click

from msched.config import ConfigError, load_config
from msched.estimate.calibrate import (
    DEFAULT_BATCH_SIZE,
    DEFAULT_INPUT_SIZE,
    DEFAULT_ITERATIONS,
    DEFAULT_WARMUP,
    PRECISIONS,
    CalibrationError,
    split_names,
)


def _config():
    try:
        return load_config()
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None


def _models(value: str | None, config) -> list[str]:
    from msched.estimate.calibrate import default_models

    try:
        return split_names(value) if value else default_models(config)
    except CalibrationError as exc:
        raise click.ClickException(str(exc)) from None


def _bench_options(f):
    """Options shared by script, submit and run: what to time and how."""
    options = [
        click.option("--models", metavar="NAMES",
                     help="Comma-separated torchvision models (default: the reference set's models)."),
        click.option("--iterations", type=click.IntRange(1), default=DEFAULT_ITERATIONS, show_default=True,
                     help="Timed iterations per model (the median is kept)."),
        click.option("--warmup", type=click.IntRange(0), default=DEFAULT_WARMUP, show_default=True,
                     help="Untimed warm-up iterations per model."),
        click.option("--batch-size", type=click.IntRange(1), default=DEFAULT_BATCH_SIZE, show_default=True,
                     help="Batch size per GPU."),
        click.option("--num-gpus", type=click.IntRange(1), default=1, show_default=True,
                     help="GPUs on one node (nn.DataParallel above 1)."),
        click.option("--precision", type=click.Choice(PRECISIONS), default="float", show_default=True),
        click.option("--input-size", type=click.IntRange(32), default=None,
                     help=f"Synthetic image side in pixels (default: each model's own, else {DEFAULT_INPUT_SIZE})."),
    ]
    for opt in reversed(options):
        f = opt(f)
    return f


def _job_options(f):
    """Options shared by script and submit: the Slurm side."""
    options = [
        click.option("--output-dir", type=click.Path(file_okay=False),
                     help="Where the job writes its CSV (default: the directory it is submitted from)."),
        click.option("--time", "time_limit", default="01:00:00", show_default=True, help="Slurm time limit."),
        click.option("--partition", help="Slurm partition."),
        click.option("--exclusive/--no-exclusive", default=True, show_default=True,
                     help="Take the whole node so nothing else disturbs the timing."),
        click.option("--python", "python", type=click.Path(dir_okay=False),
                     help="Python interpreter on the nodes that has msched and torch (default: this one)."),
    ]
    for opt in reversed(options):
        f = opt(f)
    return f


@click.group("calibrate")
def calibrate() -> None:
    """Measure the reference models on this site's GPU types and merge the results into the
    performance table, so msched's estimates come from the site's own GPUs."""


@calibrate.command("script")
@click.option("--gpu-type", required=True, help="GPU type (the Slurm feature of its nodes).")
@_bench_options
@_job_options
@click.option("--output", type=click.Path(dir_okay=False), help="CSV path the job writes (default: in --output-dir).")
def script_cmd(gpu_type, models, iterations, warmup, batch_size, num_gpus, precision, input_size,
               output_dir, time_limit, partition, exclusive, python, output) -> None:
    """Print a batch script that times the models on a node of GPU-TYPE and writes performance rows."""
    from msched.estimate.calibrate import batch_script

    config = _config()
    try:
        text = batch_script(gpu_type=gpu_type, models=_models(models, config), iterations=iterations,
                            warmup=warmup, batch_size=batch_size, num_gpus=num_gpus, precision=precision,
                            input_size=input_size, output=output, output_dir=output_dir, python=python,
                            time_limit=time_limit, partition=partition, exclusive=exclusive)
    except CalibrationError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(text, nl=False)


@calibrate.command("submit")
@click.option("--gpu-types", required=True, metavar="TYPES", help="Comma-separated GPU types, one job each.")
@_bench_options
@_job_options
@click.option("--hold", is_flag=True, help="Submit held (release with `scontrol release ID` when the nodes are free).")
@click.option("--backend", type=click.Choice(["auto", "cli", "pyslurm"]), help="Slurm backend (default: config).")
def submit_cmd(gpu_types, models, iterations, warmup, batch_size, num_gpus, precision, input_size,
               output_dir, time_limit, partition, exclusive, python, hold, backend) -> None:
    """Submit one calibration job per GPU type through Slurm and print the job ids."""
    from msched.estimate.calibrate import batch_script, check_name
    from msched.slurm import JobRequest, SlurmError, get_client

    config = _config()
    types = split_names(gpu_types)
    if not types:
        raise click.BadParameter("name at least one GPU type", param_hint="--gpu-types")
    chosen = _models(models, config)
    out_dir = str(Path(output_dir or os.getcwd()).absolute())
    scripts = {}
    try:
        for t in types:
            check_name("GPU type", t)
            scripts[t] = batch_script(gpu_type=t, models=chosen, iterations=iterations, warmup=warmup,
                                      batch_size=batch_size, num_gpus=num_gpus, precision=precision,
                                      input_size=input_size, output_dir=out_dir, python=python,
                                      time_limit=time_limit, partition=partition, exclusive=exclusive)
    except CalibrationError as exc:
        raise click.ClickException(str(exc)) from None
    try:
        client = get_client(backend or config.backend)
    except (SlurmError, ValueError) as exc:
        raise click.ClickException(str(exc)) from None
    limit_s = _limit_seconds(time_limit)
    submitted = []
    for t, text in scripts.items():
        request = JobRequest(name=f"msched-calibrate-{t}", num_gpus=num_gpus, constraint=t, script=text,
                             time_limit_s=limit_s, partition=partition or "", hold=hold)
        try:
            job_id = client.submit(request)
        except SlurmError as exc:
            done = f" (already submitted: {', '.join(f'{j} for {g}' for g, j in submitted)})" if submitted else ""
            raise click.ClickException(f"submitting the {t} calibration failed: {exc}{done}") from None
        submitted.append((t, job_id))
        click.echo(f"Submitted calibration job {job_id} for {t}")
    click.echo(f"When they finish: msched calibrate import {out_dir}/msched-calibrate-*.csv", err=True)


def _limit_seconds(text: str) -> float | None:
    """Slurm's [D-]HH:MM:SS / MM:SS / MM as seconds (batch_script has validated the form)."""
    days, _, rest = text.rpartition("-")
    parts = [int(p) for p in rest.split(":")]
    if len(parts) == 1:
        secs = parts[0] * 60
    elif len(parts) == 2:
        secs = parts[0] * 60 + parts[1]
    else:
        secs = parts[0] * 3600 + parts[1] * 60 + parts[2]
    return float(secs + (int(days) * 86400 if days else 0))


@calibrate.command("run")
@click.option("--local", is_flag=True, help="Measure this machine, outside a Slurm job (e.g. --device cpu).")
@click.option("--device", default="cuda", show_default=True, help="cuda or cpu.")
@click.option("--gpu-type", help="Name for the rows' gpu_type (default: the device's name, `cpu` on CPU).")
@_bench_options
@click.option("--output", type=click.Path(dir_okay=False), help="CSV file to write (default: standard output).")
def run_cmd(local, device, gpu_type, models, iterations, warmup, batch_size, num_gpus, precision, input_size,
            output) -> None:
    """Time the models here, in this process, and write performance-table rows."""
    from msched.estimate.calibrate import BenchSettings, _device_gpu_type, run_benchmark
    from msched.estimate.perf_table import rows_csv

    if not local and not os.environ.get("SLURM_JOB_ID"):
        raise click.UsageError("`run` times the machine it runs on: pass --local to measure this one "
                               "(outside a Slurm job), or use `msched calibrate submit`")
    config = _config()
    chosen = _models(models, config)
    try:
        gtype = gpu_type or _device_gpu_type(device)
        settings = BenchSettings(gpu_type=gtype, device=device, num_gpus=num_gpus, batch_size=batch_size,
                                 precision=precision, warmup=warmup, iterations=iterations, input_size=input_size)
        rows = run_benchmark(chosen, settings, progress=lambda line: click.echo(line, err=True))
    except CalibrationError as exc:
        raise click.ClickException(str(exc)) from None
    except RuntimeError as exc:   # torch: out of memory, an op the device lacks
        raise click.ClickException(f"benchmark failed: {str(exc).splitlines()[0]}") from None
    text = rows_csv(rows)
    if output:
        try:
            Path(output).write_text(text)
        except OSError as exc:
            raise click.ClickException(f"cannot write {output}: {exc.strerror}") from None
        click.echo(f"wrote {len(rows)} row(s) to {output}", err=True)
    else:
        click.echo(text, nl=False)


@calibrate.command("import")
@click.argument("files", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False))
@click.option("--perf", type=click.Path(dir_okay=False),
              help="The performance table to merge into (default: the site config's `performance`).")
@click.option("--cluster", help="Cluster name for the rows' source (default: the site config's cluster_name).")
@click.option("--out", type=click.Path(dir_okay=False), help="Where to write the merged table (default: --perf, in place).")
def import_cmd(files, perf, cluster, out) -> None:
    """Merge calibration results into the performance table (source `site:<cluster>:<date>`), keeping
    the previous rows for whatever was not measured."""
    from msched.estimate.calibrate import import_results, write_table_atomically
    from msched.estimate.perf_table import PerfTable, PerfTableError

    config = _config()
    perf_path = Path(perf or config.performance)
    try:
        base = PerfTable.load(perf_path) if perf_path.exists() else PerfTable([])
    except PerfTableError as exc:
        raise click.ClickException(str(exc)) from None
    if not perf_path.exists():
        click.echo(f"note: {perf_path} does not exist; the merged table holds the measured rows only", err=True)
    try:
        merged, summary = import_results(files, base, cluster=cluster or config.cluster_name)
    except CalibrationError as exc:
        raise click.ClickException(str(exc)) from None
    if not out and _is_shipped(perf_path):
        raise click.ClickException(
            f"{perf_path} is the table shipped with msched (an upgrade would replace it): write the merged "
            f"table to a site path with --out FILE and set `performance = \"FILE\"` in the site config")
    target = Path(out) if out else perf_path
    try:
        write_table_atomically(merged, target)
    except OSError as exc:
        raise click.ClickException(f"cannot write {target}: {exc.strerror}") from None
    click.echo(f"{summary.measured} measured row(s) ({summary.replaced} replaced, {summary.added} new), "
               f"{summary.kept} previous row(s) kept -> {target} [{summary.source}]")


@calibrate.command("refit")
@click.option("--perf", type=click.Path(dir_okay=False, exists=True),
              help="The performance table holding the site's imported rows (default: the site config's `performance`).")
@click.option("--out", type=click.Path(dir_okay=False),
              help="Where to write the refitted parameters (default: the site config's `cost_model`).")
def refit_cmd(perf, out) -> None:
    """Refit the predictor's cost model on the shipped measurements plus this site's rows, and say how its
    error on the site's rows changed (mean |log(predicted / measured)|, per type). Set
    `cost_model = "FILE"` (and `estimator = "predictor"`) in the site config to use the refit."""
    import json

    from msched.estimate.calibrate import refit_cost_model
    from msched.estimate.gpu_specs import specs_for_config
    from msched.estimate.perf_table import PerfTable, PerfTableError
    from msched.util.files import write_atomically

    config = _config()
    target = out or config.cost_model
    if not target:
        raise click.ClickException("no place for the refitted parameters: give --out FILE or set "
                                   "`cost_model = \"FILE\"` in the site config")
    try:
        site = PerfTable.load(perf or config.performance)
    except PerfTableError as exc:
        raise click.ClickException(str(exc)) from None
    try:
        previous = config.cost_model if config.cost_model and os.path.exists(config.cost_model) else None
        params, summary = refit_cost_model(site, base_params=previous,
                                           specs=specs_for_config(config))
    except CalibrationError as exc:
        raise click.ClickException(str(exc)) from None
    try:
        write_atomically(target, json.dumps(params, indent=1, sort_keys=True) + "\n", mode=0o644)  # msub reads it
    except OSError as exc:
        raise click.ClickException(f"cannot write {target}: {exc.strerror}") from None
    click.echo(f"refitted on {summary.fit_rows} rows ({summary.site_rows} of this site's; {summary.skipped} "
               f"skipped: no shipped profile or no spec row) -> {target}")
    click.echo(f"{'TYPE':<20} {'ROWS':>5} {'BEFORE':>8} {'AFTER':>8}")
    for t, before, after, n in summary.by_type:
        click.echo(f"{t:<20} {n:>5} {before:>8.3f} {after:>8.3f}")
    click.echo(f"{'all':<20} {summary.site_rows:>5} {summary.error_before:>8.3f} {summary.error_after:>8.3f}  "
               "(mean |log(predicted / measured)| of the iteration time)")


def _is_shipped(path: Path) -> bool:
    from msched.config import DATA_DIR

    try:
        return path.resolve().is_relative_to(Path(DATA_DIR).resolve())
    except OSError:
        return False
