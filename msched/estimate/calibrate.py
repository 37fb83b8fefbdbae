"""Calibration: measure the reference models on the site's own GPU types and make the performance table
the site's own.

msched's estimates are only as good as its performance table; the shipped one was measured elsewhere.
This module times training iterations with the same method as the shared table's source
(pytorch-gpu-benchmark), so site rows and shipped rows mean the same thing and can be merged:
a torchvision model with random weights, synthetic images (224x224 unless told otherwise), 1000
classes, forward + backward (`zero_grad`, cross-entropy loss, `backward`, no optimizer step),
`cudnn.benchmark` on, W warm-up then N timed iterations each closed by a device synchronize, and the
median. Several GPUs on one node use `nn.DataParallel` with the per-GPU batch times the GPU count,
as the source did.

Three pieces, each usable alone:
- `batch_script(...)`: the Slurm batch script that runs `python -m msched.estimate.calibrate run ...` on a node;
- `run_benchmark(...)`: the timing itself (imports torch lazily; the rest of the module stays light);
- `import_results(...)`: merges measured rows into the table, with `source = site:<cluster>:<date>`;
- `refit_cost_model(...)`: refits the per-layer cost model (msched.estimate.cost_model) on the shipped
  measurements plus the site's rows, and says how its error on the site's rows changed.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import re
import shlex
import socket
import statistics
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from msched.estimate.perf_table import PerfRow, PerfTable, PerfTableError
from msched.util.files import write_atomically

PRECISIONS = ("float", "half", "double")
DEFAULT_BATCH_SIZE = 12        # per GPU, as in the shared table's source
DEFAULT_WARMUP = 5
DEFAULT_ITERATIONS = 50
DEFAULT_INPUT_SIZE = 224
NUM_CLASSES = 1000
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]*$")
SITE_RUN = "site"             # the measurement run of a site's own rows (cost_fit.FitRow.run)
_SOURCE_DATE = re.compile(r":(\d{4}-\d{2}-\d{2})$")


class CalibrationError(ValueError):
    """Calibration cannot proceed as asked; the message is one line (the CLI shows it as is)."""


@dataclass(frozen=True)
class BenchSettings:
    """How to time: one GPU type, one configuration, every model alike."""

    gpu_type: str
    device: str = "cuda"
    num_gpus: int = 1
    batch_size: int = DEFAULT_BATCH_SIZE     # per GPU
    precision: str = "float"
    warmup: int = DEFAULT_WARMUP
    iterations: int = DEFAULT_ITERATIONS
    input_size: int | None = None            # None: each model's own (the reference set's), else 224


@dataclass(frozen=True)
class ImportSummary:
    measured: int       # distinct rows read from the files
    replaced: int       # rows of the previous table they replace
    added: int          # rows the previous table did not have
    kept: int           # previous rows left as they were (not measured)
    source: str


def check_name(kind: str, value: str) -> str:
    """GPU-type and model names go into a batch script: allow only plain names."""
    if not _NAME.match(value or ""):
        raise CalibrationError(f"invalid {kind} {value!r}: use letters, digits, '.', '_', '+', '-'")
    return value


def split_names(text: str | Sequence[str] | None) -> list[str]:
    if text is None:
        return []
    items = text.split(",") if isinstance(text, str) else [p for t in text for p in t.split(",")]
    return [s.strip() for s in items if s.strip()]


# ------------------------------------------------------------------------------- default model set
@dataclass(frozen=True)
class RefModel:
    name: str
    measured: bool          # the shipped table has iteration times for it
    input_size: int


def reference_models(config=None) -> list[RefModel]:
    """The reference set as the policy sees it (msched.models.classify), or read from its JSON file."""
    if config is None:
        from msched.config import load_config
        config = load_config()
    try:
        from msched.models.classify import load_references  # the reference set as the policy sees it
        refs = load_references(config)
        return [RefModel(r.name, bool(r.measured), int(r.input_size)) for r in refs.references]
    except Exception:   # similarity not importable or its files missing: read the configured list
        return _reference_entries(config.references)


def default_models(config=None) -> list[str]:
    """The reference models with measured performance: the ones whose rows the policy's estimates
    come from, and that the shipped table can be compared with. Models named as files
    (`file.py:factory`) are left out: a calibration job builds torchvision models by name."""
    refs = reference_models(config)
    models = [r.name for r in refs if r.measured and _NAME.match(r.name)]
    if not models:
        where = config.references if config is not None else "the reference set"
        raise CalibrationError(f"no measured reference models found in {where}; name them with --models")
    return models


def input_size_of(name: str, config=None, default: int = DEFAULT_INPUT_SIZE) -> int:
    """A reference model's own input size (the one its profile and table rows are for), else 224."""
    try:
        sizes = {r.name: r.input_size for r in reference_models(config)}
    except CalibrationError:
        return default
    return sizes.get(name, default)


def _reference_entries(refs: str | list[str]) -> list[RefModel]:
    if isinstance(refs, list):
        return [RefModel(str(r), True, DEFAULT_INPUT_SIZE) for r in refs]
    try:
        data = json.loads(Path(refs).read_text())
    except (OSError, ValueError) as exc:
        raise CalibrationError(f"cannot read the reference set {refs}: {exc}; name models with --models") from None
    if isinstance(data, dict):
        data = data.get("references", data.get("models", data))
    if isinstance(data, dict):
        data = [{"name": k, **(v if isinstance(v, dict) else {})} for k, v in data.items()]
    out = []
    for item in data:
        if isinstance(item, dict):
            out.append(RefModel(str(item.get("name", "")), item.get("performance", "measured") == "measured",
                                int(item.get("input_size", DEFAULT_INPUT_SIZE))))
        else:
            out.append(RefModel(str(item), True, DEFAULT_INPUT_SIZE))
    return out


# ------------------------------------------------------------------------------------- the script
def batch_script(
    *, gpu_type: str, models: Sequence[str], iterations: int = DEFAULT_ITERATIONS,
    warmup: int = DEFAULT_WARMUP, batch_size: int = DEFAULT_BATCH_SIZE, num_gpus: int = 1,
    precision: str = "float", input_size: int | None = None, output: str | None = None,
    output_dir: str | None = None, python: str | None = None, time_limit: str = "01:00:00",
    partition: str | None = None, exclusive: bool = True, job_name: str | None = None,
) -> str:
    """A bash batch script that times `models` on one node of `gpu_type` and writes perf-table rows.

    Every value is checked or shell-quoted: the script is run by bash as the submitting user."""
    check_name("GPU type", gpu_type)
    for m in models:
        check_name("model", m)
    _check_numbers(iterations=iterations, warmup=warmup, batch_size=batch_size, num_gpus=num_gpus,
                   **({"input_size": input_size} if input_size is not None else {}))
    if precision not in PRECISIONS:
        raise CalibrationError(f"unknown precision {precision!r}; choose one of {', '.join(PRECISIONS)}")
    if not re.fullmatch(r"(\d+-)?\d+(:\d+){0,2}", time_limit):
        raise CalibrationError(f"invalid time limit {time_limit!r}: use Slurm's [D-]HH:MM:SS or minutes")
    if partition is not None:
        check_name("partition", partition)
    name = check_name("job name", job_name or f"msched-calibrate-{gpu_type}")
    python = python or sys.executable
    if output:
        out = shlex.quote(str(Path(output).expanduser().absolute()))
    else:
        directory = str(Path(output_dir).expanduser().absolute()) if output_dir else None
        base = f'"msched-calibrate-{gpu_type}-${{SLURM_JOB_ID:-local}}.csv"'
        out = f"{shlex.quote(directory)}/{base}" if directory else f'"$PWD"/{base}'
    lines = [
        "#!/bin/bash",
        f"#SBATCH --job-name={name}",
        "#SBATCH --nodes=1",
        "#SBATCH --ntasks=1",
        f"#SBATCH --gres=gpu:{num_gpus}",
        f"#SBATCH --constraint={gpu_type}",
        f"#SBATCH --time={time_limit}",
        f"#SBATCH --output={name}-%j.out",
    ]
    if partition:
        lines.append(f"#SBATCH --partition={partition}")
    if exclusive:
        lines.append("#SBATCH --exclusive")
    args = ["-m", "msched.estimate.calibrate", "run", "--device", "cuda", "--gpu-type", gpu_type,
            "--models", ",".join(models), "--num-gpus", str(num_gpus), "--batch-size", str(batch_size),
            "--precision", precision, "--warmup", str(warmup), "--iterations", str(iterations)]
    if input_size is not None:
        args += ["--input-size", str(input_size)]
    size = f"{input_size}x{input_size}" if input_size else "(each model's own size, 224x224 for most)"
    lines += [
        "#",
        f"# msched calibration of GPU type {gpu_type}: times the training iterations of",
        f"# {', '.join(models)} ({warmup} warm-up then {iterations} timed iterations, median; random weights,",
        f"# synthetic {size} images, 1000 classes, forward + backward) and writes",
        "# performance-table rows. Merge them with: msched calibrate import <the CSV>",
        "set -euo pipefail",
        f"OUT={out}",
        'echo "msched calibrate: $(hostname) ${CUDA_VISIBLE_DEVICES:+GPUs $CUDA_VISIBLE_DEVICES} -> $OUT"',
        " ".join([shlex.quote(python), *map(shlex.quote, args), "--output", '"$OUT"']),
        "",
    ]
    return "\n".join(lines)


def _check_numbers(**values: int) -> None:
    for key, v in values.items():
        minimum = 0 if key == "warmup" else 1
        if not isinstance(v, int) or v < minimum:
            raise CalibrationError(f"--{key.replace('_', '-')} must be an integer >= {minimum}, got {v!r}")


# ---------------------------------------------------------------------------------- the benchmark
def _device_gpu_type(device: str) -> str:
    if device.startswith("cuda"):
        import torch

        from msched.config import load_config
        if not torch.cuda.is_available():
            raise CalibrationError(f"CUDA is not available here (torch {torch.__version__}); "
                                   "use --device cpu to time on the CPU")
        raw = torch.cuda.get_device_name(0)
        return load_config().canonical_gpu_type(re.sub(r"[^a-z0-9_.+-]+", "-", raw.lower()).strip("-"))
    return "cpu"


def time_model(model_name: str, settings: BenchSettings) -> list[float]:
    """Milliseconds of each timed training iteration of one model (warm-up iterations excluded)."""
    import torch
    import torchvision

    device = torch.device(settings.device)
    dtype = {"float": torch.float32, "half": torch.float16, "double": torch.float64}[settings.precision]
    if device.type == "cuda":
        torch.backends.cudnn.benchmark = True
    torch.manual_seed(0)
    try:
        model = torchvision.models.get_model(model_name, weights=None, num_classes=NUM_CLASSES)
    except (ValueError, KeyError) as exc:
        raise CalibrationError(f"unknown torchvision model {model_name!r}: {exc}") from None
    model = model.to(device=device, dtype=dtype).train()
    if settings.num_gpus > 1:
        model = torch.nn.DataParallel(model, device_ids=list(range(settings.num_gpus)))
    batch = settings.batch_size * settings.num_gpus
    size = settings.input_size or input_size_of(model_name)
    x = torch.rand(batch, 3, size, size, device=device, dtype=dtype)
    y = torch.randint(0, NUM_CLASSES, (batch,), device=device)
    criterion = torch.nn.CrossEntropyLoss()

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    times = []
    sync()
    for i in range(settings.warmup + settings.iterations):
        t0 = time.perf_counter()
        model.zero_grad()
        out = model(x)
        if isinstance(out, tuple):        # inception/googlenet in train mode: (logits, aux...)
            out = out[0]
        loss = criterion(out, y)
        loss.backward()
        sync()
        if i >= settings.warmup:
            times.append((time.perf_counter() - t0) * 1000.0)
    return times


def run_benchmark(models: Iterable[str], settings: BenchSettings, *, source: str | None = None,
                  progress: Callable[[str], None] | None = None) -> list[PerfRow]:
    """Time each model and return one performance-table row per model (iter_ms = the median)."""
    _check_numbers(iterations=settings.iterations, warmup=settings.warmup, batch_size=settings.batch_size,
                   num_gpus=settings.num_gpus,
                   **({"input_size": settings.input_size} if settings.input_size is not None else {}))
    if settings.precision not in PRECISIONS:
        raise CalibrationError(f"unknown precision {settings.precision!r}; choose one of {', '.join(PRECISIONS)}")
    check_name("GPU type", settings.gpu_type)
    import torch

    dev = settings.device
    if dev.startswith("cuda"):
        if not torch.cuda.is_available():
            raise CalibrationError(f"CUDA is not available here (torch {torch.__version__}); "
                                   "use --device cpu to time on the CPU")
        if torch.cuda.device_count() < settings.num_gpus:
            raise CalibrationError(f"--num-gpus {settings.num_gpus} but only {torch.cuda.device_count()} "
                                   "GPU(s) are visible")
    elif dev == "cpu":
        if settings.num_gpus != 1:
            raise CalibrationError("--num-gpus must be 1 with --device cpu")
    else:
        raise CalibrationError(f"unknown device {dev!r}; choose cpu or cuda")
    source = source or f"calibrate:{socket.gethostname()}:{_dt.datetime.now(_dt.UTC):%Y-%m-%d}"
    rows = []
    for name in models:
        check_name("model", name)
        times = time_model(name, settings)
        ms = statistics.median(times)
        if progress:
            size = settings.input_size or input_size_of(name)
            progress(f"{name} on {settings.gpu_type} x{settings.num_gpus} ({dev}, batch {settings.batch_size}"
                     f"/GPU, {size}x{size}, {settings.precision}): {ms:.2f} ms/iteration (median of {len(times)})")
        rows.append(PerfRow(model=name, gpu_type=settings.gpu_type, num_gpus=settings.num_gpus,
                            batch_size=settings.batch_size, precision=settings.precision, iter_ms=ms,
                            source=source))
    return rows


# -------------------------------------------------------------------------------------- import
def site_source(cluster: str, date: str) -> str:
    return f"site:{cluster}:{date}"


def import_results(files: Sequence[str | os.PathLike], base: PerfTable, *, cluster: str,
                   today: str | None = None) -> tuple[PerfTable, ImportSummary]:
    """`base` with the measured rows of `files` merged in (a measured row replaces the row with the same
    model, type, GPU count, batch size and precision; everything not measured is kept).

    The source of each row becomes `site:<cluster>:<date>`, the date being the day it was measured
    (from the `calibrate:<host>:<date>` source `run` writes) or else `today`."""
    check_name("cluster name", cluster)
    today = today or f"{_dt.datetime.now(_dt.UTC):%Y-%m-%d}"
    measured: dict[tuple, PerfRow] = {}
    for f in files:
        try:
            table = PerfTable.load(f)
        except PerfTableError as exc:
            raise CalibrationError(str(exc)) from None
        if not table.rows:
            raise CalibrationError(f"{f}: no rows (was the calibration job's output empty?)")
        for lineno, r in enumerate(table.rows, start=2):
            try:
                check_name("model", r.model)
                check_name("GPU type", r.gpu_type)
            except CalibrationError as exc:
                raise CalibrationError(f"{f} line {lineno}: {exc}") from None
            if r.precision not in PRECISIONS:
                raise CalibrationError(f"{f} line {lineno}: unknown precision {r.precision!r}; "
                                       f"expected one of {', '.join(PRECISIONS)}")
            m = _SOURCE_DATE.search(r.source or "")
            date = m.group(1) if m else today
            key = (r.model, r.gpu_type, r.num_gpus, r.batch_size, r.precision)
            measured[key] = PerfRow(*key, iter_ms=r.iter_ms, source=site_source(cluster, date))
    old_keys = {(r.model, r.gpu_type, r.num_gpus, r.batch_size, r.precision) for r in base.rows}
    replaced = sum(1 for k in measured if k in old_keys)
    merged = base.merged_with(measured.values())
    summary = ImportSummary(measured=len(measured), replaced=replaced, added=len(measured) - replaced,
                            kept=len(base.rows) - replaced,
                            source=", ".join(sorted({r.source for r in measured.values()})))
    return merged, summary


def write_table_atomically(table: PerfTable, path: str | os.PathLike) -> None:
    """Write beside the target then rename, so msub never reads a half-written table."""
    write_atomically(path, table.to_csv(), mode=0o644, keep_mode=True)


if __name__ == "__main__":   # `python -m msched.estimate.calibrate run ...` on a node, from the batch script
    from msched.commands.calibrate_cmd import calibrate as _group

    _group.main(args=sys.argv[1:], prog_name="python -m msched.estimate.calibrate")


@dataclass(frozen=True)
class RefitSummary:
    """How a refit changed the cost model's error on the site's rows (mean |log(predicted / measured)|)."""

    site_rows: int          # the site's rows the cost model can see (a shipped profile, a spec row)
    skipped: int            # the site's rows it cannot (a model without a shipped profile, a type without a spec row)
    fit_rows: int
    error_before: float     # the parameters in use before (shipped, or the site's previous refit)
    error_after: float
    by_type: tuple[tuple[str, float, float, int], ...] = ()   # (type, before, after, rows)


def refit_cost_model(site: PerfTable, *, base_params: str | None = None, specs=None,  # noqa: ANN001
                     shipped_table: str | None = None) -> tuple[dict, RefitSummary]:
    """Fit the cost model on the shipped table's rows with the site's rows merged in (same model, type,
    GPU count, batch and precision: the site's row wins) and compare its error on the site's rows with
    the parameters in use before (`base_params`, default the shipped file). The site's rows are those of
    `site` whose source is not the shipped table's. Imports numpy/scipy (the fit)."""
    import math

    from msched.config import DATA_DIR
    from msched.estimate.cost_fit import fit, rows_from_perf
    from msched.estimate.cost_model import SHIPPED_PARAMS, CostModel
    from msched.estimate.gpu_specs import load_specs
    from msched.models.shipped import load_table

    specs = specs or load_specs()
    profiles = load_table()["models"]
    shipped = PerfTable.load(shipped_table or os.path.join(DATA_DIR, "measured_perf.csv"))
    def key(r: PerfRow) -> tuple:       # as the CSV writes it (6 significant digits)
        return r.model, r.gpu_type, r.num_gpus, r.batch_size, r.precision, f"{r.iter_ms:.6g}"

    shipped_keys = {key(r) for r in shipped.rows}
    own = [r for r in site.rows if key(r) not in shipped_keys]
    if not own:
        raise CalibrationError("the performance table holds no rows of the site's own (import measurements "
                               "first: msched calibrate import)")
    usable = [r for r in own if r.model in profiles and specs.get(r.gpu_type) is not None]
    if not usable:
        raise CalibrationError(f"none of the site's {len(own)} row(s) has both a shipped model profile and a GPU "
                               "spec row (add the type to the config's gpu_specs file)")
    own_keys = {key(r) for r in own}
    from msched.estimate.training_data import torchvision_run

    rows = rows_from_perf(shipped.merged_with(own).rows,
                          run=lambda r: SITE_RUN if key(r) in own_keys else torchvision_run(r))
    params = fit(rows, profiles, specs)
    # a type of this site never measured runs on the site's machines and software: the site's host factor
    if params.get("run_host", {}).get(SITE_RUN):
        params["default_host"] = params["run_host"][SITE_RUN]
        params["default_run"] = SITE_RUN
    before = CostModel.load(base_params or SHIPPED_PARAMS)
    after = CostModel(params)

    def err(model: CostModel, subset) -> float:
        return sum(abs(math.log(model.iteration_ms(profiles[r.model], specs.get(r.gpu_type), r.precision,
                                                   r.batch_size, r.num_gpus) / r.iter_ms)) for r in subset) / len(subset)

    by_type = []
    for t in sorted({r.gpu_type for r in usable}):
        sub = [r for r in usable if r.gpu_type == t]
        by_type.append((t, err(before, sub), err(after, sub), len(sub)))
    summary = RefitSummary(len(usable), len(own) - len(usable), params["fit"]["rows"], err(before, usable),
                           err(after, usable), tuple(by_type))
    return params, summary
