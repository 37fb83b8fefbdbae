"""Traces: bad ones give one line naming the row; synthetic ones are reproducible; `msched sim` end to end."""

from __future__ import annotations

import csv
import json

import pytest
from click.testing import CliRunner

from msched.cli import cli
from msched.estimate.perf_table import PerfRow, PerfTable
from slurm_sim.cluster import parse_cluster
from slurm_sim.trace import TraceError, load_trace, parse_size_dist, synth

TYPES = {"a100": 1.0, "titanrtx": 1.6, "rtx2080ti": 1.9}
# per-model iteration time on a100 (ms) and how each model's speed-up differs by family
MODELS = {"resnet50": (90.0, 1.0), "vgg16": (120.0, 1.6), "mobilenet_v2": (40.0, 0.6), "densenet121": (70.0, 0.8),
          "resnet101": (150.0, 1.0), "vgg19": (140.0, 1.6)}


@pytest.fixture
def truth_csv(tmp_path):
    rows = []
    for m, (ms, skew) in MODELS.items():
        for t, slow in TYPES.items():
            for g in (1, 2, 4):
                rows.append(PerfRow(m, t, g, 12, "float", ms * slow ** skew * (1 + 0.05 * (g - 1)), "test"))
    path = tmp_path / "truth.csv"
    PerfTable(rows).write(path)
    return path


def write(tmp_path, text: str):
    p = tmp_path / "trace.csv"
    p.write_text(text)
    return p


HEADER = "job_id,submit_time,user,model,num_gpus,batch_size,iterations\n"


def error_of(tmp_path, truth_csv, body: str, header: str = HEADER, cluster: str = "a100:4x2,rtx2080ti:4x1") -> str:
    with pytest.raises(TraceError) as exc:
        load_trace(write(tmp_path, header + body), PerfTable.load(truth_csv), parse_cluster(cluster))
    msg = str(exc.value)
    assert "\n" not in msg
    return msg


def test_missing_columns_named(tmp_path, truth_csv):
    msg = error_of(tmp_path, truth_csv, "1,0,u,resnet50,1,12\n", header="job_id,submit_time,user,model,num_gpus,batch_size\n")
    assert "line 1" in msg and "missing column(s) iterations" in msg


def test_unknown_model_names_the_row(tmp_path, truth_csv):
    msg = error_of(tmp_path, truth_csv, "1,0,u,resnet50,1,12,100\n2,5,u,notamodel,1,12,100\n")
    assert "line 3 (job 2)" in msg and "'notamodel' is not in the truth table" in msg


def test_more_gpus_than_the_cluster_gives(tmp_path, truth_csv):
    msg = error_of(tmp_path, truth_csv, "1,0,u,resnet50,16,12,100\n")
    assert "line 2 (job 1)" in msg and "16 GPUs" in msg and "at most 8" in msg
    msg = error_of(tmp_path, truth_csv, "7,0,u,resnet50,6,12,100\n")     # not one node, not whole nodes
    assert "line 2 (job 7)" in msg and "6 GPUs" in msg
    msg = error_of(tmp_path, truth_csv, "1,0,u,resnet50,8,12,100,rtx2080ti\n",
                   header=HEADER.strip() + ",gpu_type\n")                  # pinned to a type with one node
    assert "of type rtx2080ti" in msg and "at most 4" in msg


def test_bad_numbers_and_types(tmp_path, truth_csv):
    assert "num_gpus 'two' is not an integer" in error_of(tmp_path, truth_csv, "1,0,u,resnet50,two,12,100\n")
    assert "iterations must be >= 1" in error_of(tmp_path, truth_csv, "1,0,u,resnet50,1,12,0\n")
    assert "submit_time" in error_of(tmp_path, truth_csv, "1,-5,u,resnet50,1,12,10\n")
    assert "duplicate job_id" in error_of(tmp_path, truth_csv, "1,0,u,resnet50,1,12,10\n1,0,u,vgg16,1,12,10\n")
    assert "gpu_type 'k80'" in error_of(tmp_path, truth_csv, "1,0,u,resnet50,1,12,10,k80\n",
                                        header=HEADER.strip() + ",gpu_type\n")


def test_no_data_on_any_type_that_fits(tmp_path):
    truth = tmp_path / "t.csv"
    PerfTable([PerfRow("vgg16", "titanv", 1, 12, "float", 50.0)]).write(truth)
    msg = error_of(tmp_path, truth, "1,0,u,vgg16,1,12,10\n", cluster="a100:4x1")
    assert "no data where 1 job(s) may be sent: vgg16 on a100" in msg


def test_cli_trace_error_is_one_line(tmp_path, truth_csv):
    trace = write(tmp_path, HEADER + "1,0,u,resnet50,1,12,100\n2,0,u,bogus,1,12,100\n")
    r = CliRunner().invoke(cli, ["sim", "--cluster", "a100:4x1", "--trace", str(trace), "--truth", str(truth_csv),
                                 "--perf", str(truth_csv), "--policy", "fifo"])
    assert r.exit_code != 0
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and "line 3 (job 2)" in lines[0] and "Traceback" not in r.output
    r = CliRunner().invoke(cli, ["sim", "--cluster", "a100:4x1", "--trace", str(trace), "--truth", str(truth_csv),
                                 "--policy", "fifo,best"])
    assert r.exit_code == 2 and "unknown best" in r.output and "msched-once" in r.output


# ------------------------------------------------------------------------------ synthesis
def test_synth_reproducible_by_seed(tmp_path, truth_csv):
    truth = PerfTable.load(truth_csv)
    models = sorted(MODELS)
    a = synth(200, models, truth, seed=7, arrival="poisson:60")
    b = synth(200, models, truth, seed=7, arrival="poisson:60")
    c = synth(200, models, truth, seed=8, arrival="poisson:60")
    assert a == b and a != c
    times = [j.submit_time for j in a]
    assert times == sorted(times) and times[0] == 0 and times[-1] > 0
    assert {j.num_gpus for j in a} <= {1, 2, 4, 8}
    assert all(j.iterations >= 1 and j.model in MODELS for j in a)
    static = synth(50, models, truth, seed=1, arrival="static", time_limit_factor=1.5)
    assert all(j.submit_time == 0 for j in static)
    for j in static:   # a limit of 1.5 x the runtime on the slowest type: the job fits everywhere
        slowest = max(truth.iter_ms(j.model, t, j.num_gpus, j.batch_size) for t in TYPES) * j.iterations / 1000
        assert j.time_limit_s >= 1.5 * slowest - 1e-6


def test_synth_users_time_limits_overestimate_heavy_tailed_and_round(truth_csv):
    """Limits as users set them: never below the runtime on the slowest type, mostly popular round values,
    some at the maximum, the ratio limit/runtime heavy-tailed (median well above 1, a long upper tail)."""
    from slurm_sim.trace import POPULAR_LIMITS_S
    truth = PerfTable.load(truth_csv)
    jobs = synth(2000, sorted(MODELS), truth, seed=5, arrival="static",
                 sizes=parse_size_dist("1:0.7,2:0.2,4:0.1"), cluster=parse_cluster("a100:4x2,rtx2080ti:4x2"))
    ratios = []
    for j in jobs:
        slowest = max(truth.iter_ms(j.model, t, j.num_gpus, j.batch_size) for t in ("a100", "rtx2080ti"))
        runtime = slowest * j.iterations / 1000
        assert j.time_limit_s >= runtime - 1e-6
        ratios.append(j.time_limit_s / runtime)
    popular = sum(1 for j in jobs if j.time_limit_s in POPULAR_LIMITS_S) / len(jobs)
    at_max = sum(1 for j in jobs if j.time_limit_s == POPULAR_LIMITS_S[-1]) / len(jobs)
    ratios.sort()
    assert popular > 0.8 and 0.05 < at_max < 0.4
    assert ratios[len(ratios) // 2] > 1.5 and ratios[int(len(ratios) * 0.9)] > 10
    none = synth(20, sorted(MODELS), truth, seed=5, time_limits="none")
    assert all(j.time_limit_s is None for j in none)


def test_synth_with_a_cluster_never_draws_a_model_the_truth_lacks_there(tmp_path):
    rows = [PerfRow(m, t, 1, 12, "float", 50.0) for m in ("a", "b") for t in ("a100", "titanv")]
    rows.append(PerfRow("c", "a100", 1, 12, "float", 50.0))           # c: no titanv rows
    truth = PerfTable(rows)
    cluster = parse_cluster("a100:1x1,titanv:1x1")
    jobs = synth(300, ["a", "b", "c"], truth, seed=2, sizes=parse_size_dist("1:1"), cluster=cluster)
    assert {j.model for j in jobs} == {"a", "b"}
    assert {j.model for j in synth(300, ["a", "b", "c"], truth, seed=2, sizes=parse_size_dist("1:1"))} == {"a", "b", "c"}


def test_synth_gavel_distribution_when_no_philly(tmp_path, truth_csv):
    truth = PerfTable.load(truth_csv)
    jobs = synth(2000, ["resnet50"], truth, seed=3, arrival="static", sizes=parse_size_dist("1:0.7,2:0.1,4:0.15,8:0.05"))
    share = sum(1 for j in jobs if j.num_gpus == 1) / len(jobs)
    assert 0.65 < share < 0.75
    # durations 60*10^U(1.5,3) s (w.p. 0.8) or 60*10^U(3,4) s, on the median type
    per_s = {g: sorted(truth.iter_ms("resnet50", t, g, 12) for t in TYPES)[1] / 1000 for g in (1, 2, 4, 8)}
    durations = [j.iterations * per_s[j.num_gpus] for j in jobs]
    assert min(durations) >= 60 * 10 ** 1.5 * 0.99 and max(durations) <= 600_000 * 1.01
    with pytest.raises(TraceError, match="bad --gpus-per-job"):
        parse_size_dist("1:0.5,x")
    with pytest.raises(TraceError, match="bad --arrival"):
        synth(1, ["resnet50"], truth, arrival="uniform")


def test_synth_philly_shapes(tmp_path, truth_csv):
    philly = tmp_path / "philly.csv"
    philly.write_text("timestamp,duration,num_gpus,gpu_time,cluster\n" + "".join(
        f"2017-10-0{1 + i // 10} 0{i % 10}:00:00,{600 * (i + 1)},{(1, 2, 4, 16)[i % 4]},0,x\n" for i in range(40)))
    truth = PerfTable.load(truth_csv)
    jobs = synth(20, ["resnet50", "vgg16"], truth, seed=2, arrival="philly", philly=philly)
    assert {j.num_gpus for j in jobs} <= {1, 2, 4}                      # 16-GPU jobs are outside the distribution
    gaps = [b.submit_time - a.submit_time for a, b in zip(jobs, jobs[1:], strict=False)]
    assert jobs[0].submit_time == 0 and all(g >= 0 for g in gaps) and max(gaps) >= 3600


def test_cli_synth_and_sim_outputs(tmp_path, truth_csv):
    runner = CliRunner()
    out = tmp_path / "t.csv"
    r = runner.invoke(cli, ["trace", "synth", "--jobs", "40", "--models", "vgg16,mobilenet_v2,densenet121,resnet101",
                            "--seed", "4", "--arrival", "static", "--no-philly", "--truth", str(truth_csv),
                            "--cluster", "a100:4x1,titanrtx:4x1,rtx2080ti:4x1", "--out", str(out)])
    assert r.exit_code == 0, r.output
    r2 = runner.invoke(cli, ["trace", "synth", "--jobs", "40", "--models", "vgg16,mobilenet_v2,densenet121,resnet101",
                             "--seed", "4", "--arrival", "static", "--no-philly", "--truth", str(truth_csv),
                             "--cluster", "a100:4x1,titanrtx:4x1,rtx2080ti:4x1"])
    assert r2.exit_code == 0 and r2.stdout == out.read_text()            # same seed, same trace
    bad = runner.invoke(cli, ["trace", "synth", "--jobs", "3", "--models", "alexnet", "--truth", str(truth_csv)])
    assert bad.exit_code == 2 and "unknown model(s) alexnet" in bad.output and "resnet50" in bad.output

    res, jobs_csv, png, db = tmp_path / "r.json", tmp_path / "jobs.csv", tmp_path / "sim.png", tmp_path / "sim.db"
    r = runner.invoke(cli, ["sim", "--cluster", "a100:4x1,titanrtx:4x1,rtx2080ti:4x1", "--trace", str(out),
                            "--truth", str(truth_csv), "--perf", str(truth_csv), "--references", "resnet50,vgg19",
                            "--policy", "fifo,fastest,msched-once,msched,oracle", "--round", "60",
                            "--json", str(res), "--jobs-csv", str(jobs_csv), "--plot", str(png), "--db", str(db)])
    assert r.exit_code == 0, r.output
    for word in ("fifo", "msched-once", "oracle", "makespan", "x fifo"):
        assert word in r.output
    results = json.loads(res.read_text())
    assert [x["policy"] for x in results] == ["fifo", "fastest", "msched-once", "msched", "oracle"]
    for x in results:
        assert x["jobs"] == 40 and x["finished"] == 40
        assert x["makespan_s"] >= x["lower_bound_s"] * (1 - 1e-9) > 0
        assert 0 < x["gpu_utilization"] <= 1
        assert x["p99_jct_s"] >= x["mean_jct_s"] >= x["mean_wait_s"] >= 0
    assert results[0]["ratio_to_fifo"] == 1.0
    assert results[3]["rounds"] >= 1 and results[0]["rounds"] == 0
    with open(jobs_csv) as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 200 and set(rows[0]) == {"job_id", "policy", "gpu_type", "submit", "start", "end"}
    assert all(float(r_["end"]) > float(r_["start"]) >= float(r_["submit"]) for r_ in rows)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    from sqlalchemy import func, select

    from msched.store.db import Store
    from msched.store.schema import Job, Round, Run
    store = Store(f"sqlite:///{db}")
    with store.read() as s:
        runs = {r_.policy: r_.id for r_ in s.scalars(select(Run).where(Run.kind == "sim"))}
        assert set(runs) == {"fifo", "fastest", "msched-once", "msched", "oracle"}
        assert s.scalar(select(func.count()).select_from(Round).where(Round.run_id == runs["msched"])) >= 1
        done = s.scalar(select(func.count()).select_from(Job).where(Job.run_id == runs["msched"],
                                                                    Job.end_time.is_not(None)))
        assert done == 40


def test_cli_sim_backfill_and_pinned_jobs(tmp_path, truth_csv):
    """Pinned jobs (typed gres) run only on their type under every policy; backfill runs end to end."""
    trace = write(tmp_path, HEADER.strip() + ",gpu_type,time_limit_s\n" + "".join(
        f"{i},{i * 30},u,{m},{g},12,{it},{pin},{lim}\n" for i, (m, g, it, pin, lim) in enumerate([
            ("vgg16", 4, 20000, "", 20000), ("resnet50", 2, 30000, "rtx2080ti", 20000),
            ("mobilenet_v2", 1, 50000, "", 10000), ("densenet121", 2, 10000, "", 5000),
            ("resnet101", 4, 8000, "a100", 5000), ("vgg19", 1, 9000, "", 5000)], start=1)))
    out = tmp_path / "jobs.csv"
    r = CliRunner().invoke(cli, ["sim", "--cluster", "a100:4x1,rtx2080ti:4x1", "--trace", str(trace), "--truth",
                                 str(truth_csv), "--perf", str(truth_csv), "--references", "resnet50,vgg19",
                                 "--policy", "fifo,msched", "--scheduler", "backfill", "--jobs-csv", str(out)])
    assert r.exit_code == 0, r.output
    with open(out) as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 12
    assert {r_["gpu_type"] for r_ in rows if r_["job_id"] == "2"} == {"rtx2080ti"}
    assert {r_["gpu_type"] for r_ in rows if r_["job_id"] == "5"} == {"a100"}


# ------------------------------------------------------------------------------ shapes Slurm has: arrays, dependencies
def test_arrays_become_one_job_per_task_and_dependencies_wait(tmp_path, truth_csv):
    """An array row is N jobs (ID_K); `afterok:ID` on an array waits for every task; in `msched sim` the
    dependent starts only after the last task ended, though GPUs were idle."""
    trace = write(tmp_path, HEADER.strip() + ",time_limit_s,dependency,array\n"
                  "a,0,u,resnet50,1,12,2000,3600,,3\n"
                  "b,0,u,vgg16,1,12,100,3600,afterok:a,\n"
                  "c,0,u,vgg16,1,12,100,3600,afterany:b,0-1\n")
    jobs = load_trace(trace, PerfTable.load(truth_csv), parse_cluster("a100:4x2"))
    assert [j.job_id for j in jobs] == ["a_0", "a_1", "a_2", "b", "c_0", "c_1"]
    assert jobs[3].dependency == "afterok:a_0:a_1:a_2" and jobs[4].dependency == "afterany:b"
    out = tmp_path / "jobs.csv"
    r = CliRunner().invoke(cli, ["sim", "--cluster", "a100:4x2", "--trace", str(trace), "--truth", str(truth_csv),
                                 "--perf", str(truth_csv), "--policy", "fifo,msched", "--jobs-csv", str(out)])
    assert r.exit_code == 0, r.output
    with open(out) as fh:
        rows = [x for x in csv.DictReader(fh) if x["policy"] == "fifo"]
    end = {x["job_id"]: float(x["end"]) for x in rows}
    start = {x["job_id"]: float(x["start"]) for x in rows}
    assert start["b"] == max(end["a_0"], end["a_1"], end["a_2"]) > 0
    assert start["c_0"] == start["c_1"] == end["b"]
    for body, why in [("x,0,u,vgg16,1,12,1,,afterok:nope,\n", "not an earlier row"),
                      ("x,0,u,vgg16,1,12,1,,,0-\n", "array '0-'"),
                      ("x,9,u,vgg16,1,12,1,,,\ny,0,u,vgg16,1,12,1,,afterok:x,\n", "submitted later")]:
        assert why in error_of(tmp_path, truth_csv, body, header=HEADER.strip() + ",time_limit_s,dependency,array\n")


def test_truth_gaps_refused_up_front_unless_filled_and_unfinished_jobs_fail_the_run(tmp_path, truth_csv):
    """The old simulator took "no truth row on titanv" as "cannot run there": a policy that sent the job
    to titanv lost it, and the metrics left it out. Now the trace is refused in one line naming the gap;
    --truth-fill runs it with every job finished; a run with unfinished jobs exits 1 naming them."""
    rows = list(PerfTable.load(truth_csv).rows)
    gappy = tmp_path / "gappy.csv"
    PerfTable([r for r in rows if not (r.model == "vgg16" and r.gpu_type == "titanrtx")]).write(gappy)
    trace = write(tmp_path, HEADER + "".join(f"{i},{i},u,{m},1,12,3000\n"
                                             for i, m in enumerate(["vgg16", "resnet50", "vgg16"])))
    base = ["sim", "--cluster", "a100:1x1,titanrtx:1x1", "--trace", str(trace), "--truth", str(gappy),
            "--perf", str(truth_csv), "--policy", "fifo,msched-once,msched"]
    r = CliRunner().invoke(cli, base)
    assert r.exit_code == 1
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and "vgg16 on titanrtx (2 jobs)" in lines[0] and "--truth-fill" in lines[0]
    out = tmp_path / "r.json"
    r = CliRunner().invoke(cli, base + ["--truth-fill", "median-type-ratio", "--json", str(out)])
    assert r.exit_code == 0, r.output
    for m in json.loads(out.read_text()):
        assert m["submitted"] == m["finished"] == 3 and m["unfinished"] == 0
    # a run that ends with an unfinished job: afterok on a job killed at its limit is cancelled
    trace = write(tmp_path, HEADER.strip() + ",time_limit_s,dependency\n1,0,u,resnet50,1,12,100000,60,\n"
                  "2,0,u,resnet50,1,12,10,3600,afterok:1\n")
    r = CliRunner().invoke(cli, ["sim", "--cluster", "a100:4x1", "--trace", str(trace), "--truth", str(truth_csv),
                                 "--perf", str(truth_csv), "--policy", "fifo", "--json", str(out)])
    assert r.exit_code == 1 and "unfinished jobs: fifo: 1 (2)" in r.output
    m = json.loads(out.read_text())[0]
    assert (m["submitted"], m["finished"], m["unfinished"], m["makespan_s"]) == (2, 1, 1, None)


def test_truth_rows_stopping_below_the_gpu_count_and_small_nodes_lose_no_job(tmp_path):
    """vgg16's rows stop at 4 GPUs on every type; 8-GPU jobs run by the table's fill rule (the nearest
    count below), never parked. The titanv node has 4 GPUs, so no policy may put an 8-GPU job there:
    every policy finishes every job, and every 8-GPU job ran on a100."""
    rows = [PerfRow(m, t, g, 12, "float", ms * slow * (1 + 0.05 * (g - 1)), "test")
            for m, ms in (("vgg16", 120.0), ("resnet50", 90.0)) for t, slow in (("a100", 1.0), ("titanv", 1.5))
            for g in (1, 2, 4)]
    truth = tmp_path / "truth.csv"
    PerfTable(rows).write(truth)
    trace = write(tmp_path, HEADER + "".join(f"{i},{i * 10},u,{m},{g},12,{it}\n" for i, (m, g, it) in enumerate(
        [("vgg16", 8, 4000), ("resnet50", 4, 9000), ("vgg16", 8, 3000), ("resnet50", 1, 20000), ("vgg16", 2, 5000),
         ("vgg16", 8, 2000)], start=1)))
    out, res = tmp_path / "jobs.csv", tmp_path / "r.json"
    r = CliRunner().invoke(cli, ["sim", "--cluster", "a100:8x1,titanv:4x1", "--trace", str(trace), "--truth", str(truth),
                                 "--perf", str(truth), "--references", "resnet50,vgg16",
                                 "--policy", "fifo,fastest,msched-once,msched,oracle", "--jobs-csv", str(out),
                                 "--json", str(res)])
    assert r.exit_code == 0, r.output
    for m in json.loads(res.read_text()):
        assert (m["submitted"], m["finished"], m["unfinished"]) == (6, 6, 0), m["policy"]
    with open(out) as fh:
        ran = list(csv.DictReader(fh))
    assert len(ran) == 30
    assert {x["gpu_type"] for x in ran if x["job_id"] in ("1", "3", "6")} == {"a100"}


def test_a_per_partition_cluster_is_planned_through_partitions(tmp_path, truth_csv):
    """A site that splits GPU types by partition: `a100` holds the a100 nodes, `rtx` the rtx2080ti ones,
    `all` (the default) both. Jobs that name `rtx` run only there under every policy (msched's plan and
    its constraint stay inside the job's partitions), every job finishes, and the `a100` partition's
    DefaultTime is what a limitless job there runs under."""
    spec = tmp_path / "cluster.toml"
    spec.write_text('[[partitions]]\nname = "all"\ndefault = true\n'
                    '[[partitions]]\nname = "a100"\nnodes = ["a100"]\ndefault_time_s = 86400\n'
                    '[[partitions]]\nname = "rtx"\nnodes = ["rtx2080ti"]\n'
                    '[[nodes]]\ntype = "a100"\ngpus = 4\n[[nodes]]\ntype = "rtx2080ti"\ngpus = 4\n')
    trace = write(tmp_path, HEADER.strip() + ",time_limit_s,partition\n" + "".join(
        f"{i},{i * 20},u,{m},{g},12,{it},{lim},{part}\n" for i, (m, g, it, lim, part) in enumerate([
            ("vgg16", 2, 20000, 36000, "rtx"), ("resnet50", 4, 20000, "", "a100"), ("vgg19", 1, 30000, 36000, ""),
            ("densenet121", 2, 20000, 36000, "rtx"), ("mobilenet_v2", 4, 30000, 36000, "\"a100,rtx\""),
            ("resnet101", 1, 10000, 36000, "")], start=1)))
    out, res = tmp_path / "jobs.csv", tmp_path / "r.json"
    r = CliRunner().invoke(cli, ["sim", "--cluster", str(spec), "--trace", str(trace), "--truth", str(truth_csv),
                                 "--perf", str(truth_csv), "--references", "resnet50,vgg16",
                                 "--policy", "fifo,msched-once,msched,oracle", "--jobs-csv", str(out),
                                 "--json", str(res)])
    assert r.exit_code == 0, r.output
    assert all(m["finished"] == m["submitted"] == 6 for m in json.loads(res.read_text()))
    with open(out) as fh:
        ran = list(csv.DictReader(fh))
    assert {x["gpu_type"] for x in ran if x["job_id"] in ("1", "4")} == {"rtx2080ti"}
    assert {x["gpu_type"] for x in ran if x["job_id"] == "2"} == {"a100"}
    with pytest.raises(TraceError, match="partition gpu is not in the cluster"):
        load_trace(write(tmp_path, HEADER.strip() + ",partition\n1,0,u,vgg16,1,12,10,gpu\n"),
                   PerfTable.load(truth_csv), parse_cluster(str(spec)))
