"""`msched calibrate`: the in-process benchmark on CPU (real torch), importing its rows into the
performance table and what that does to the policy's estimates, the batch script, and submitting it
to the real local Slurm cluster."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from msched.commands.calibrate_cmd import calibrate
from msched.config import DATA_DIR
from msched.estimate.calibrate import CalibrationError, batch_script, import_results
from msched.estimate.perf_table import PerfTable
from msched.estimate.runtime import estimate_runtime

# A few rows of the shared table (pytorch-gpu-benchmark via ../shared/data/gpu-train-benchmarks), used
# as the "previous" table when the project's shipped table is not there.
BASE_ROWS = """model,gpu_type,num_gpus,batch_size,precision,iter_ms,source
resnet18,a100,1,12,float,16.0437,pytorch-gpu-benchmark
resnet18,titanv,1,12,float,16.5231,pytorch-gpu-benchmark
resnet18,rtx2080ti,1,12,float,19.8164,pytorch-gpu-benchmark
vgg16,a100,1,12,float,27.6802,pytorch-gpu-benchmark
densenet121,a100,1,12,float,74.4245,pytorch-gpu-benchmark
"""


@pytest.fixture
def base_table(tmp_path) -> Path:
    shipped = Path(DATA_DIR) / "gpu_performance.csv"
    path = tmp_path / "perf.csv"
    if shipped.exists() and PerfTable.load(shipped).types_for("resnet18"):
        shutil.copy(shipped, path)
    else:
        path.write_text(BASE_ROWS)
    return path


def test_run_local_cpu_rows_import_and_change_estimates(tmp_path, base_table):
    """The acceptance path: time resnet18 on the CPU, import the row, and the policy's estimate for a
    resnet18-like job on that type now comes from the measurement; nothing unmeasured changes."""
    out = tmp_path / "cal.csv"
    runner = CliRunner()
    res = runner.invoke(calibrate, ["run", "--local", "--device", "cpu", "--models", "resnet18",
                                    "--iterations", "3", "--warmup", "1", "--batch-size", "2",
                                    "--input-size", "112", "--gpu-type", "a100", "--output", str(out)])
    assert res.exit_code == 0, res.output
    measured = PerfTable.load(out)            # valid rows in the table's own format
    assert len(measured.rows) == 1
    row = measured.rows[0]
    assert (row.model, row.gpu_type, row.num_gpus, row.batch_size, row.precision) == ("resnet18", "a100", 1, 2, "float")
    assert row.iter_ms > 0 and row.source.startswith("calibrate:")

    before_table = PerfTable.load(base_table)
    res = runner.invoke(calibrate, ["import", str(out), "--perf", str(base_table), "--cluster", "testsite"])
    assert res.exit_code == 0, res.output
    after_table = PerfTable.load(base_table)  # imported in place, and loads cleanly
    assert len(after_table.rows) == len(before_table.rows) + 1    # batch 2 is a new row; nothing lost
    site = [r for r in after_table.rows if r.source.startswith("site:")]
    assert len(site) == 1 and site[0].source.startswith("site:testsite:20")
    assert site[0].iter_ms == pytest.approx(row.iter_ms, rel=1e-5)

    job = dict(num_gpus=1, batch_size=2, flops_ratio=1.0, iterations=1000)
    before = estimate_runtime(before_table, "resnet18", **job)
    after = estimate_runtime(after_table, "resnet18", **job)
    assert after["a100"] == pytest.approx(1000 * row.iter_ms / 1000, rel=1e-5)
    assert after["a100"] != pytest.approx(before["a100"], rel=0.01)
    assert {t: v for t, v in after.items() if t != "a100"} == {t: v for t, v in before.items() if t != "a100"}


def test_run_writes_csv_to_stdout_naming_the_cpu():
    """Without --output the rows go to standard output (progress to standard error); without
    --gpu-type the CPU's rows are named `cpu`."""
    res = CliRunner().invoke(calibrate, ["run", "--local", "--device", "cpu", "--models", "squeezenet1_0",
                                         "--iterations", "2", "--warmup", "0", "--batch-size", "1",
                                         "--input-size", "64"])
    assert res.exit_code == 0, res.output
    lines = res.stdout.strip().splitlines()
    assert lines[0] == "model,gpu_type,num_gpus,batch_size,precision,iter_ms,source"
    model, gpu_type, n, bs, prec, ms, _src = lines[1].split(",")
    assert (model, gpu_type, n, bs, prec) == ("squeezenet1_0", "cpu", "1", "1", "float") and float(ms) > 0
    assert "ms/iteration" in res.stderr


def test_run_refuses_outside_a_job_without_local_and_bad_inputs():
    runner = CliRunner()
    env = {k: v for k, v in os.environ.items() if k != "SLURM_JOB_ID"}
    res = runner.invoke(calibrate, ["run", "--device", "cpu", "--models", "resnet18"], env=env)
    assert res.exit_code == 2 and "--local" in res.output
    import torch
    if not torch.cuda.is_available():      # the default device is cuda: a clear line, not a traceback
        for extra in ([], ["--gpu-type", "a100"]):
            res = runner.invoke(calibrate, ["run", "--local", "--models", "resnet18", *extra])
            assert res.exit_code == 1 and "CUDA is not available" in res.output and "--device cpu" in res.output
    res = runner.invoke(calibrate, ["run", "--local", "--device", "tpu", "--models", "resnet18"])
    assert res.exit_code == 1 and "choose cpu or cuda" in res.output
    res = runner.invoke(calibrate, ["run", "--local", "--device", "cpu", "--models", "resnet18", "--num-gpus", "2"])
    assert res.exit_code == 1 and "--num-gpus must be 1" in res.output
    res = runner.invoke(calibrate, ["run", "--local", "--device", "cpu", "--models", "not_a_model",
                                    "--iterations", "1", "--warmup", "0"])
    assert res.exit_code == 1 and "unknown torchvision model 'not_a_model'" in res.output
    assert "Traceback" not in res.output


def test_import_validates_rows_naming_file_and_line(tmp_path, base_table):
    bad = tmp_path / "bad.csv"
    bad.write_text("model,gpu_type,num_gpus,batch_size,precision,iter_ms,source\n"
                   "resnet18,a100,1,12,float,15.0,x\n"
                   "resnet50,a100,one,12,float,30.0,x\n")
    res = CliRunner().invoke(calibrate, ["import", str(bad), "--perf", str(base_table)])
    assert res.exit_code == 1
    assert f"{bad} line 3" in res.output and "Traceback" not in res.output
    neg = tmp_path / "neg.csv"
    neg.write_text("model,gpu_type,num_gpus,batch_size,precision,iter_ms\nresnet18,a100,1,12,float,-1\n")
    res = CliRunner().invoke(calibrate, ["import", str(neg), "--perf", str(base_table)])
    assert res.exit_code == 1 and f"{neg} line 2" in res.output
    cols = tmp_path / "cols.csv"
    cols.write_text("model,gpu,ms\nresnet18,a100,3\n")
    res = CliRunner().invoke(calibrate, ["import", str(cols), "--perf", str(base_table)])
    assert res.exit_code == 1 and "missing column" in res.output
    assert PerfTable.load(base_table).rows == PerfTable.load(base_table).rows   # untouched, still valid


def test_import_merges_several_files_keeps_unmeasured_rows(tmp_path, base_table):
    a = tmp_path / "a100.csv"
    a.write_text("model,gpu_type,num_gpus,batch_size,precision,iter_ms,source\n"
                 "resnet18,a100,1,12,float,12.5,calibrate:n1:2026-11-30\n"
                 "vgg16,a100,1,12,float,20.0,calibrate:n1:2026-11-30\n")
    c = tmp_path / "cpu.csv"
    c.write_text("model,gpu_type,num_gpus,batch_size,precision,iter_ms\nresnet18,cpu,1,12,float,900\n")
    base = PerfTable.load(base_table)
    merged, summary = import_results([a, c], base, cluster="lab", today="2026-12-02")
    assert (summary.measured, summary.replaced, summary.added) == (3, 2, 1)
    assert summary.kept == len(base.rows) - 2
    got = {(r.model, r.gpu_type): (r.iter_ms, r.source) for r in merged.rows if r.batch_size == 12 and r.num_gpus == 1}
    assert got[("resnet18", "a100")] == (12.5, "site:lab:2026-11-30")      # the day it was measured
    assert got[("resnet18", "cpu")] == (900.0, "site:lab:2026-12-02")       # no date in it: the import's
    assert got[("resnet18", "titanv")][1] == "pytorch-gpu-benchmark"        # not measured: kept as it was
    out = tmp_path / "merged.csv"
    res = CliRunner().invoke(calibrate, ["import", str(a), str(c), "--perf", str(base_table), "--cluster", "lab",
                                         "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert "3 measured row(s) (2 replaced, 1 new)" in res.output
    assert len(PerfTable.load(out).rows) == len(base.rows) + 1
    assert PerfTable.load(base_table).rows == base.rows          # --out leaves the input alone
    assert estimate_runtime(PerfTable.load(out), "resnet18", num_gpus=1, batch_size=12,
                            iterations=100)["cpu"] == pytest.approx(90.0)
    with pytest.raises(CalibrationError, match="invalid cluster name"):
        import_results([a], base, cluster="a b")


def test_import_never_overwrites_the_shipped_table(tmp_path):
    shipped = Path(DATA_DIR) / "gpu_performance.csv"
    if not shipped.exists():
        pytest.skip("no shipped table in this checkout")
    before = shipped.read_bytes()
    a = tmp_path / "a100.csv"
    a.write_text("model,gpu_type,num_gpus,batch_size,precision,iter_ms\nresnet18,a100,1,12,float,12.5\n")
    res = CliRunner().invoke(calibrate, ["import", str(a), "--perf", str(shipped)])
    assert res.exit_code == 1 and "--out" in res.output and shipped.read_bytes() == before
    out = tmp_path / "site.csv"
    res = CliRunner().invoke(calibrate, ["import", str(a), "--perf", str(shipped), "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert shipped.read_bytes() == before
    merged = PerfTable.load(out)
    assert len(merged.rows) == len(PerfTable.load(shipped).rows)      # resnet18 a100 x1 b12 replaced
    assert merged.iter_ms("resnet18", "a100", 1, 12) == pytest.approx(12.5)


def test_script_is_valid_bash_with_the_right_sbatch_lines(tmp_path):
    res = CliRunner().invoke(calibrate, ["script", "--gpu-type", "titanv", "--models", "resnet18,vgg16",
                                         "--iterations", "20", "--batch-size", "8", "--num-gpus", "2",
                                         "--output-dir", str(tmp_path), "--time", "30"])
    assert res.exit_code == 0, res.output
    text = res.output
    path = tmp_path / "cal.sh"
    path.write_text(text)
    assert subprocess.run(["bash", "-n", str(path)], capture_output=True).returncode == 0
    sbatch = [ln for ln in text.splitlines() if ln.startswith("#SBATCH")]
    assert "#SBATCH --gres=gpu:2" in sbatch and "#SBATCH --constraint=titanv" in sbatch
    assert "#SBATCH --job-name=msched-calibrate-titanv" in sbatch and "#SBATCH --time=30" in sbatch
    assert text.startswith("#!/bin/bash\n")
    # every #SBATCH line comes before the first command, or sbatch ignores it
    first_cmd = next(i for i, ln in enumerate(text.splitlines()[1:], 1) if ln and not ln.startswith("#"))
    assert all(text.splitlines().index(ln) < first_cmd for ln in sbatch)
    # the command it runs, with the shell's own expansion of the job id: run it here with a fake job id,
    # after swapping the GPU device for the CPU and shrinking the work
    run_line = next(ln for ln in text.splitlines() if "-m msched.estimate.calibrate run" in ln)
    assert "--models resnet18,vgg16" in run_line and "--iterations 20" in run_line and "--num-gpus 2" in run_line


@pytest.mark.slow
def test_script_runs_as_written(tmp_path):
    """The script itself, run by bash with a job id set, through `python -m msched.estimate.calibrate` (the entry
    point the nodes use): only the device, model and amount of work swapped for a CPU-sized run."""
    res = CliRunner().invoke(calibrate, ["script", "--gpu-type", "titanv", "--models", "resnet18,vgg16",
                                         "--iterations", "20", "--batch-size", "8", "--num-gpus", "2",
                                         "--output-dir", str(tmp_path)])
    assert res.exit_code == 0, res.output
    text = res.output
    path = tmp_path / "cal.sh"
    cpu = text.replace("--device cuda", "--device cpu").replace("--models resnet18,vgg16", "--models squeezenet1_1")
    cpu = cpu.replace("--num-gpus 2", "--num-gpus 1").replace("--iterations 20", "--iterations 1 --input-size 64")
    cpu = cpu.replace("--warmup 5", "--warmup 0")
    path.write_text(cpu)
    proc = subprocess.run(["bash", str(path)], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "SLURM_JOB_ID": "4242"})
    assert proc.returncode == 0, proc.stderr
    written = PerfTable.load(tmp_path / "msched-calibrate-titanv-4242.csv")
    assert [(r.model, r.gpu_type, r.batch_size) for r in written.rows] == [("squeezenet1_1", "titanv", 8)]


def test_script_rejects_what_could_break_the_shell():
    for bad in ("a100;reboot", "$(id)", "a 100", ""):
        with pytest.raises(CalibrationError):
            batch_script(gpu_type=bad, models=["resnet18"])
    with pytest.raises(CalibrationError):
        batch_script(gpu_type="a100", models=["resnet18`id`"])
    with pytest.raises(CalibrationError, match="time limit"):
        batch_script(gpu_type="a100", models=["resnet18"], time_limit="1h; id")
    res = CliRunner().invoke(calibrate, ["script", "--gpu-type", "a100;id", "--models", "resnet18"])
    assert res.exit_code == 1 and "invalid GPU type" in res.output
    # an output path with spaces and quotes is quoted, not interpreted
    text = batch_script(gpu_type="a100", models=["resnet18"], output="/tmp/my results/'x'.csv")
    assert "OUT='/tmp/my results/'\"'\"'x'\"'\"'.csv'" in text


def test_default_models_are_the_measured_references(tmp_path):
    """By default a calibration measures the reference models the shipped table has rows for, at
    each one's own input size."""
    res = CliRunner().invoke(calibrate, ["script", "--gpu-type", "a100"])
    refs = Path(DATA_DIR) / "reference_models.json"
    if not refs.exists():
        assert res.exit_code == 1 and "--models" in res.output
        return
    assert res.exit_code == 0, res.output
    from msched.estimate.calibrate import default_models, input_size_of, reference_models

    refset = reference_models()
    models = default_models()
    assert models == [r.name for r in refset if r.measured] and len(models) >= 2
    assert f"--models {','.join(models)} " in res.output and "--input-size" not in res.output
    shipped = PerfTable.load(Path(DATA_DIR) / "gpu_performance.csv")
    assert all(shipped.has_model(m) for m in models)
    assert input_size_of(models[0]) == next(r.input_size for r in refset if r.name == models[0])
    assert input_size_of("not_a_reference") == 224
    # the JSON read directly (where msched.models.classify cannot be used) gives the same set
    from msched.estimate.calibrate import _reference_entries
    assert [r.name for r in _reference_entries(str(refs)) if r.measured] == models


@pytest.mark.slurm
def test_submit_creates_one_job_per_type_with_its_constraint(slurm_cluster, janitor, tmp_path, monkeypatch):
    """On the real local cluster: one held job per GPU type, asking for untyped GPUs constrained to the
    type (the way msched types jobs, SLURM-NOTES), named for it, running the calibration command."""
    monkeypatch.chdir(tmp_path)
    res = CliRunner().invoke(calibrate, ["submit", "--gpu-types", "a100,titanv", "--models", "resnet18,vgg16",
                                         "--iterations", "10", "--hold", "--backend", "cli",
                                         "--output-dir", str(tmp_path)])
    assert res.exit_code == 0, res.output
    ids = dict(re.findall(r"Submitted calibration job (\d+) for (\S+)", res.stdout))
    janitor.extend(ids)
    assert sorted(ids.values()) == ["a100", "titanv"]
    for job_id, gpu_type in ids.items():
        out = slurm_cluster.run(["scontrol", "show", "job", job_id], check=True).stdout
        fields = dict(re.findall(r"(\w+)=(\S*)", out))
        assert fields["JobName"] == f"msched-calibrate-{gpu_type}"
        assert fields["Features"] == gpu_type
        assert re.search(r"gres[:/]gpu[:=]1\b", out), out          # untyped: gpu:1
        assert fields["JobState"] == "PENDING" and "Held" in fields["Reason"]
        assert fields["WorkDir"] == str(tmp_path)
        script = slurm_cluster.run(["scontrol", "write", "batch_script", job_id, "-"]).stdout
        assert f"--gpu-type {gpu_type}" in script and "--models resnet18,vgg16" in script
    res = CliRunner().invoke(calibrate, ["submit", "--gpu-types", "a100,bad;type", "--backend", "cli",
                                         "--models", "resnet18"])
    assert res.exit_code == 1 and "invalid GPU type" in res.output       # checked before anything is submitted
