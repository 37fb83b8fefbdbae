"""`msched report`: over a real SQLite file filled through the store's own API (a recorded reorderer
history), over a simulated run (`msched sim --db`), over real-cluster jobs (a reorder round on the
local Slurm cluster); the empty cases; the HTML page in headless Chromium."""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from click.testing import CliRunner
from sqlalchemy import create_engine, select
from sqlalchemy.orm import Session

sys.path.insert(0, str(Path(__file__).resolve().parent))
import report_fill  # noqa: E402
from helpers import measured_rows  # noqa: E402

from msched.commands.report_cmd import report as report_cmd  # noqa: E402
from msched.report.data import build_report, parse_duration, percentile, to_jsonable  # noqa: E402
from msched.report.html import render_html  # noqa: E402
from msched.store.db import Store  # noqa: E402
from msched.store.schema import Job, Round  # noqa: E402

NOW = 1_796_000_000.0     # a fixed wall clock for the recorded history


@pytest.fixture(scope="module")
def history_db(tmp_path_factory):
    """A reorderer history written through Store + records (ingest, rounds, completions)."""
    path = tmp_path_factory.mktemp("report") / "msched.db"
    store = Store(f"sqlite:///{path}")
    jobs = report_fill.fill(store, NOW)
    store.dispose()
    return path, jobs


def _report(path: Path, **kw):
    engine = create_engine(f"sqlite:///{path}")
    with Session(engine) as s:
        rep = build_report(s, database=str(path), now=NOW, **kw)
    engine.dispose()
    return rep


def test_parse_duration():
    assert parse_duration("2h") == 7200 and parse_duration("7d") == 7 * 86400
    assert parse_duration("1d12h") == 36 * 3600 and parse_duration("90") == 90 and parse_duration("1w") == 604800
    for bad in ("", "2x", "h2", "-1h", "0"):
        with pytest.raises(ValueError):
            parse_duration(bad)


def test_report_figures_match_the_recorded_history(history_db):
    path, jobs = history_db
    rep = _report(path)
    assert len(rep.runs) == 1
    rr = rep.runs[0]
    assert rr.run.kind == "slurm" and rr.run.gpus == report_fill.GPUS

    # queue now: what the last recorded state says is pending / running, per group
    active = [j for j in jobs if j.end is None or j.end > NOW]
    pending = {g: sum(1 for j in active if report_fill.GROUP[j.model] == g and (j.start is None or j.start > NOW))
               for g in report_fill.GROUP.values()}
    for q in rr.queue:
        assert q.pending == pending[q.group]
        assert sum(q.planned.values()) == q.pending
    assert sum(q.pending + q.running for q in rr.queue) == len(active)

    # waits: mean over the jobs that started, by group, from the schedule itself
    for w in rr.waits:
        started = [j.start - j.submit for j in jobs if j.start is not None and report_fill.GROUP[j.model] == w.group]
        assert w.jobs == len(started)
        assert w.mean_wait_s == pytest.approx(sum(started) / len(started))
        assert w.p95_wait_s <= w.max_wait_s == pytest.approx(max(started))
    # the 30-hour-old job is the one past the starvation age, and the longest wait
    assert [s.job_id for s in rr.starving] == ["999"]
    assert rr.longest_waits[0].job_id == "999" and rr.longest_waits[0].wait_s == pytest.approx(30 * 3600)

    # estimates: each group's actual/estimated ratio is the factor the history was made with
    assert {e.group: round(e.median_ratio, 6) for e in rr.estimates} == {
        g: f for g, f in report_fill.ACTUAL_FACTOR.items() if g in {e.group for e in rr.estimates}}
    assert len(rr.estimates) >= 3
    assert rr.reference_misses[0].reference == "densenet121"       # factor 2.0: the worst estimates
    assert rr.reference_misses[0].miss_factor == pytest.approx(2.0)

    # per GPU type: busy share from the rounds' samples, close to the schedule's true busy time
    rounds = [r for r in _rows(path, Round) if r.total_gpus]
    for u in rr.gpu_types:
        assert u.basis == "rounds" and u.gpus == 4
        t0, t1 = rounds[0].time, NOW
        busy = sum(max(0.0, min(j.end, t1) - max(j.start, t0)) for j in jobs
                   if j.gpu_type == u.gpu_type and j.start is not None)
        assert u.busy_share == pytest.approx(busy / (4 * (t1 - t0)), abs=0.05)
        assert sum(u.jobs_by_group.values()) == sum(1 for j in jobs if j.gpu_type == u.gpu_type)

    # rounds: all recorded, the failed one's error shown, plan times averaged over the others
    all_rounds = _rows(path, Round)
    assert rr.rounds.count == len(all_rounds)
    assert [e.error for e in rr.rounds.errors] == ["squeue: error: Unable to contact slurm controller"]
    ok = [r.plan_seconds for r in all_rounds if not r.error]
    assert rr.rounds.mean_plan_s == pytest.approx(sum(ok) / len(ok))


def _rows(path: Path, table):
    engine = create_engine(f"sqlite:///{path}")
    with Session(engine) as s:
        rows = list(s.scalars(select(table)))
    engine.dispose()
    return rows


def test_since_limits_the_period(history_db):
    path, _ = history_db
    full = _report(path).runs[0]
    last2h = _report(path, since_s=2 * 3600).runs[0]
    assert last2h.run.period_start == pytest.approx(NOW - 7200)
    assert last2h.rounds.count < full.rounds.count
    assert all(r_time >= NOW - 7200 for r_time, _, _ in last2h.series.queue)
    assert sum(w.jobs for w in last2h.waits) < sum(w.jobs for w in full.waits)


def test_estimates_fall_back_to_the_table_for_jobs_no_round_planned(history_db, tmp_path):
    path, _ = history_db
    copy = tmp_path / "copy.db"
    shutil.copy(path, copy)
    engine = create_engine(f"sqlite:///{copy}")
    with Session(engine) as s:          # forget the rounds' estimates for the resnet jobs
        for j in s.scalars(select(Job).where(Job.group == "resnet")):
            j.est_runtime = {}
        s.commit()
    engine.dispose()
    without = {e.group for e in _report(copy).runs[0].estimates}
    assert "resnet" not in without
    speeds = report_fill.SPEED

    def table(job):   # what the current performance table would say: here, twice the recorded speed
        return {t: 2 * job.iterations * s for t, s in speeds[job.reference].items()}
    est = {e.group: e for e in _report(copy, estimator=table).runs[0].estimates}
    assert est["resnet"].from_table == est["resnet"].jobs > 0
    assert est["resnet"].median_ratio == pytest.approx(0.5)
    # other groups: only their jobs that no round ever planned (they started before a round saw them)
    unplanned = sum(1 for j in _rows(copy, Job) if j.group == "vgg" and j.end_time and not j.est_runtime)
    assert est["vgg"].from_table == unplanned < est["vgg"].jobs


def test_cli_tables_json_and_choices(history_db):
    path, _ = history_db
    runner = CliRunner()
    res = runner.invoke(report_cmd, ["--db", str(path), "--no-slurm"])
    assert res.exit_code == 0, res.output
    for heading in ("Queue now", "Per GPU type", "Waits", "Longest waits", "Pending past the starvation age",
                    "Estimates", "References whose estimates miss most", "Rounds", "Last round errors"):
        assert heading in res.output
    res = runner.invoke(report_cmd, ["--db", str(path), "--no-slurm", "--json"])
    assert res.exit_code == 0
    data = json.loads(res.stdout)
    assert data["runs"][0]["run"]["name"] == "testcluster"
    assert {e["group"] for e in data["runs"][0]["estimates"]} <= set(report_fill.ACTUAL_FACTOR)
    res = runner.invoke(report_cmd, ["--db", str(path), "--no-slurm", "--run", "nosuch"])
    assert res.exit_code == 1 and "runs: testcluster" in res.output
    res = runner.invoke(report_cmd, ["--db", str(path), "--no-slurm", "--kind", "sim"])
    assert res.exit_code == 0 and "No sim runs" in res.output
    res = runner.invoke(report_cmd, ["--db", str(path), "--since", "two days"])
    assert res.exit_code == 2 and "--since" in res.output and "Traceback" not in res.output


def test_report_never_writes_the_database(history_db):
    path, _ = history_db
    before = path.stat().st_mtime_ns, path.read_bytes()
    assert CliRunner().invoke(report_cmd, ["--db", str(path), "--no-slurm", "--json"]).exit_code == 0
    assert (path.stat().st_mtime_ns, path.read_bytes()) == before


def test_empty_database_gives_a_short_friendly_report(tmp_path):
    runner = CliRunner()
    missing = tmp_path / "none.db"
    res = runner.invoke(report_cmd, ["--db", str(missing), "--no-slurm"])
    assert res.exit_code == 0 and "No database at" in res.output and "msched reorder" in res.output
    assert not missing.exists()                  # the report did not create it
    Store(f"sqlite:///{tmp_path / 'fresh.db'}").dispose()     # schema, no runs
    res = runner.invoke(report_cmd, ["--db", str(tmp_path / "fresh.db"), "--no-slurm"])
    assert res.exit_code == 0 and "holds no runs yet" in res.output
    assert len(res.output.splitlines()) == 2
    html_path = tmp_path / "empty.html"
    res = runner.invoke(report_cmd, ["--db", str(tmp_path / "fresh.db"), "--no-slurm", "--json",
                                     "--html", str(html_path)])
    assert res.exit_code == 0
    assert json.loads(res.stdout)["runs"] == [] and "holds no runs yet" in html_path.read_text()
    plain = tmp_path / "other.db"                 # a SQLite file that is not msched's
    con = sqlite3.connect(plain)
    con.execute("create table x(a)")
    con.commit()
    con.close()
    res = runner.invoke(report_cmd, ["--db", str(plain), "--no-slurm"])
    assert res.exit_code == 0 and "no msched tables" in res.output
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"this is not a database" * 100)
    res = runner.invoke(report_cmd, ["--db", str(garbage), "--no-slurm"])
    assert res.exit_code == 1 and "cannot read the database" in res.output and "Traceback" not in res.output


def test_json_has_no_nan(history_db):
    path, _ = history_db
    data = to_jsonable(_report(path))
    text = json.dumps(data, allow_nan=False)     # raises on NaN/inf
    assert "testcluster" in text
    assert math.isnan(percentile([], 50))


# ------------------------------------------------------------------------------- simulated run
SIM_MODELS = ("resnet18", "resnet50", "vgg16", "densenet121")
# The simulator's truth: rows of the shared measured table
TRUTH = measured_rows(SIM_MODELS, ("a100", "titanv"))


@pytest.fixture(scope="module")
def sim_db(tmp_path_factory):
    """`msched sim --db` on a small trace, where the policy's table believes DenseNet-121 runs twice as
    fast as it really does (so its estimates miss by 2x, the others' not at all)."""
    d = tmp_path_factory.mktemp("sim")
    (d / "truth.csv").write_text(TRUTH)
    perf_lines = [ln if not ln.startswith("densenet121,") else
                  ",".join(ln.split(",")[:5] + [f"{float(ln.split(',')[5]) / 2:.4f}", "halved"])
                  for ln in TRUTH.strip().splitlines()]
    (d / "perf.csv").write_text("\n".join(perf_lines) + "\n")
    rows = ["job_id,submit_time,user,model,num_gpus,batch_size,iterations"]
    for i in range(32):
        rows.append(f"{i + 1},{i * 90},u{i % 3},{SIM_MODELS[i % 4]},1,12,{60000 + 30000 * (i % 5)}")
    (d / "trace.csv").write_text("\n".join(rows) + "\n")
    db = d / "sim.db"
    from slurm_sim.commands import sim
    res = CliRunner().invoke(sim, ["--cluster", "a100:2x1,titanv:2x1", "--trace", str(d / "trace.csv"),
                                   "--truth", str(d / "truth.csv"), "--perf", str(d / "perf.csv"),
                                   "--references", ",".join(SIM_MODELS), "--policy", "msched,fifo",
                                   "--round", "300", "--json", str(d / "results.json"), "--db", str(db)])
    assert res.exit_code == 0, res.output
    return db, json.loads((d / "results.json").read_text())


def test_report_over_a_simulated_run(sim_db):
    db, results = sim_db
    runner = CliRunner()
    res = runner.invoke(report_cmd, ["--db", str(db), "--kind", "sim", "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    runs = {r["run"]["policy"]: r for r in data["runs"]}
    assert set(runs) == {"msched", "fifo"}
    metrics = {m["policy"]: m for m in results}
    for policy, rr in runs.items():
        assert rr["run"]["kind"] == "sim" and rr["run"]["gpus"] == {"a100": 2, "titanv": 2}
        assert rr["run"]["jobs"] == 32 and rr["queue"] == []             # the trace ran to the end
        waits = [w for g in rr["waits"] for w in [g]]
        assert sum(w["jobs"] for w in waits) == 32
        # mean wait over all jobs equals the simulator's own figure
        mean_wait = sum(w["mean_wait_s"] * w["jobs"] for w in waits) / 32
        assert mean_wait == pytest.approx(metrics[policy]["mean_wait_s"], rel=1e-6)
        # the period is the simulator's makespan (first submit .. last end)
        period = rr["run"]["period_end"] - rr["run"]["period_start"]
        assert period == pytest.approx(metrics[policy]["makespan_s"], rel=1e-6)
    # fifo records no rounds: its busy share comes from the jobs' own intervals, and matches the
    # simulator's utilisation (busy GPU-seconds / (GPUs x makespan))
    fifo = runs["fifo"]
    assert all(u["basis"] == "jobs" for u in fifo["gpu_types"])
    util = sum(u["busy_share"] * u["gpus"] for u in fifo["gpu_types"]) / 4
    assert util == pytest.approx(metrics["fifo"]["gpu_utilization"], rel=1e-6)
    assert fifo["rounds"]["count"] == 0
    # msched planned in rounds: estimates are checked against what really happened
    ms = runs["msched"]
    assert ms["rounds"]["count"] > 0 and ms["rounds"]["mean_plan_s"] > 0
    est = {e["group"]: e for e in ms["estimates"]}
    dense = [e for g, e in est.items() if g.startswith("dense")]
    assert dense and dense[0]["median_ratio"] == pytest.approx(2.0, rel=1e-3)
    assert ms["reference_misses"][0]["reference"] == "densenet121"
    assert ms["reference_misses"][0]["miss_factor"] == pytest.approx(2.0, rel=1e-3)
    others = [e for g, e in est.items() if not g.startswith("dense")]
    assert others and all(e["median_ratio"] == pytest.approx(1.0, rel=1e-3) for e in others)
    # the terminal and HTML forms of the same run
    res = runner.invoke(report_cmd, ["--db", str(db), "--run", "sim:msched"])
    assert res.exit_code == 0 and "densenet121" in res.output and "t+" in res.output


# ------------------------------------------------------------------------------- the HTML page
CHECK_SCRIPT = """<script>
window.addEventListener("load", function () {
  var widths = [];
  document.querySelectorAll("img").forEach(function (img) { widths.push(img.naturalWidth); });
  var pre = document.createElement("pre");
  pre.id = "msched-check";
  pre.textContent = JSON.stringify({images: widths, tables: document.querySelectorAll("table").length,
    packed_rows: Array.from(document.querySelectorAll("#packing tbody tr")).map(function (tr) {
      return Array.from(tr.cells).map(function (td) { return td.textContent; }); })});
  document.body.appendChild(pre);
});
</script>"""


def render_in_chromium(html_text: str, workdir: Path) -> dict:
    """Load the page in headless Chromium and read back, from the DOM, every image's natural width
    (0 = the browser could not decode it) and the number of tables."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        if os.environ.get("MSCHED_REQUIRE_BROWSER") == "1":
            pytest.fail("MSCHED_REQUIRE_BROWSER=1 but chromium is not installed", pytrace=False)
        pytest.skip("chromium is not installed (apt-get install --no-install-recommends chromium)")
    page = workdir / "page.html"
    page.write_text(html_text.replace("</body>", CHECK_SCRIPT + "</body>"), encoding="utf-8")
    profile = workdir / "chromium-profile"
    proc = subprocess.run(
        [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         f"--user-data-dir={profile}", "--virtual-time-budget=10000", "--dump-dom", page.as_uri()],
        capture_output=True, text=True, timeout=120)
    m = re.search(r'<pre id="msched-check">([^<]*)</pre>', proc.stdout)
    assert m, f"chromium did not run the page's check (rc {proc.returncode}): {proc.stderr[-500:]}"
    return json.loads(m.group(1).replace("&quot;", '"'))


@pytest.mark.browser
def test_html_page_renders_in_chromium_with_every_plot_decoded(history_db, tmp_path):
    path, _ = history_db
    out = tmp_path / "report.html"
    res = CliRunner().invoke(report_cmd, ["--db", str(path), "--no-slurm", "--html", str(out)])
    assert res.exit_code == 0, res.output
    text = out.read_text()
    assert "src=\"http" not in text and "<link" not in text     # self-contained
    seen = render_in_chromium(text, tmp_path)
    assert len(seen["images"]) == 4                  # utilisation, queue, waits, estimates
    assert all(w > 0 for w in seen["images"]), seen
    assert seen["tables"] >= 7


@pytest.mark.browser
def test_chromium_check_catches_a_broken_image(tmp_path):
    """The browser check itself: a corrupt PNG decodes to width 0, so the assertion above means something."""
    html_text = ('<!DOCTYPE html><html><body><img src="data:image/png;base64,iVBORw0KGgoAAAAAAAA=">'
                 "</body></html>")
    seen = render_in_chromium(html_text, tmp_path)
    assert seen["images"] == [0]


def test_html_is_self_contained_with_inline_pngs(history_db):
    path, _ = history_db
    text = render_html(_report(path))
    imgs = re.findall(r'<img alt="[^"]*" src="data:image/png;base64,([A-Za-z0-9+/=]+)">', text)
    assert len(imgs) == 4
    import base64
    for b64 in imgs:
        raw = base64.b64decode(b64)
        assert raw[:8] == b"\x89PNG\r\n\x1a\n"
        assert int.from_bytes(raw[16:20], "big") > 0          # IHDR width


# ------------------------------------------------------------------------------- the real cluster
REAL_PERF = measured_rows(["vgg16", "densenet169"], ("a100", "titanv", "rtx2080ti", "titanxp"))


@pytest.mark.slurm
def test_report_over_real_cluster_jobs(slurm_cluster, janitor, tmp_path):
    """Tagged jobs on the real local cluster, two reorder rounds (plan, then completion tracking) into
    a real SQLite file, then `msched report` with Slurm's live queue: the queue by group with the
    types Slurm now holds, and the short job's estimated vs actual runtime."""
    from helpers import VENV_BIN, wait_for

    from msched.config import load_config
    from msched.rounds.reorder import Reorderer, open_site_store
    from msched.slurm import get_client
    from msched.tag import JobTag, with_tag

    (tmp_path / "perf.csv").write_text(REAL_PERF)
    cfg = tmp_path / "msched.toml"
    state = tmp_path / "state"
    cfg.write_text(f'state_dir = "{state}"\nperformance = "{tmp_path / "perf.csv"}"\ncluster_name = "h6-report"\n'
                   f'backend = "cli"\ndatabase_url = "sqlite:///{state}/msched.db"\n')
    site = load_config(cfg)
    # groups of our own (the cluster is shared, and finished jobs of earlier runs are still listed)
    token = uuid.uuid4().hex[:8]
    groups = {"vgg16": f"vgg-{token}", "densenet169": f"densenet-{token}"}

    def submit(model: str, iters: int, begin: str, seconds: int) -> str:
        tag = JobTag(model=model, ref=model, group=groups[model], sim=1.0, flops=1.0, iters=iters, bs=12,
                     added="titanxp", ver="test")
        proc = slurm_cluster.run(["sbatch", "--parsable", f"--job-name=h6-{model}", "--gres=gpu:1",
                                  "--constraint=titanxp", "--time=60", "--output=/dev/null", f"--begin={begin}",
                                  f"--comment={with_tag(tag, None)}", f"--wrap=sleep {seconds}"])
        assert proc.returncode == 0, proc.stderr
        return janitor.add(proc.stdout.strip().split(";")[0])

    # vgg16 x 108 iterations is estimated at 3.0 s on a100 (108 x 27.68 ms); it sleeps 3 s
    short = submit("vgg16", 108, "now+4", 3)
    later = [submit("vgg16", 5000, "now+3600", 1), submit("densenet169", 5000, "now+3600", 1)]
    mine = {short, *later}
    client = get_client("cli", config=site)
    store = open_site_store(site)
    reorderer = Reorderer(site, client, store)

    def my_jobs():
        return [j for j in client.jobs() if j.job_id in mine]

    def one_round():
        """A round over our jobs. The cluster is shared with other tests: a round that meets a job
        changing under it fails with one line and leaves the queue valid, and the next round
        re-plans (reorder's contract), so one retry is that next round."""
        from msched.rounds.reorder import ReorderError
        try:
            return reorderer.round(jobs=my_jobs(), nodes=client.nodes())
        except ReorderError as first:
            try:
                return reorderer.round(jobs=my_jobs(), nodes=client.nodes())
            except ReorderError as second:
                pytest.fail(f"two rounds failed: {first} / {second}")

    out1 = one_round()
    assert out1.result.update_calls > 0
    wait_for(lambda: slurm_cluster.run(["squeue", "-h", "-t", "all", "-j", short, "-o", "%T"]).stdout.strip()
             == "COMPLETED", 120, interval=0.5, message="the short job completed")
    out2 = one_round()
    store.dispose()

    env = {**os.environ, "MSCHED_CONFIG": str(cfg), "SLURM_CONF": str(slurm_cluster.conf)}
    proc = subprocess.run([str(VENV_BIN / "msched"), "report", "--json"], capture_output=True, text=True,
                          env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    (rr,) = data["runs"]
    assert rr["run"]["kind"] == "slurm" and rr["run"]["name"] == "h6-report" and rr["run"]["live"] is True
    assert rr["run"]["gpus"] == {t: 4 for t in slurm_cluster.node_types.values()}
    held = {line.split("|")[0]: line.split("|")[1] for line in slurm_cluster.run(
        ["squeue", "-h", "-j", ",".join(later), "-o", "%i|%f"]).stdout.split()}
    queue = {q["group"]: q for q in rr["queue"] if q["group"] in groups.values()}
    assert queue[groups["vgg16"]]["pending"] == 1 and queue[groups["densenet169"]]["pending"] == 1
    assert queue[groups["vgg16"]]["planned"] == {held[later[0]]: 1}            # the type Slurm holds now
    assert queue[groups["densenet169"]]["planned"] == {held[later[1]]: 1}
    # the rounds retyped them as planned (which type depends on what else the shared cluster runs, and
    # the second round may re-plan once the short job has freed its GPU)
    planned = out2.result.plan.by_job()
    for job_id in later:
        assert held[job_id] != "titanxp" and held[job_id] == "|".join(planned[job_id].gpu_types)
    # our pending jobs are among the longest waits, unless (shared cluster) ten others waited longer
    waits = {w["job_id"]: w for w in rr["longest_waits"]}
    for jid in later:
        if jid in waits:
            assert waits[jid]["state"] == "PENDING" and waits[jid]["wait_s"] >= 0
        else:
            assert len(waits) == 10

    rows = {r.job_id: r for r in _rows(state / "msched.db", Job)}
    done = rows[short]
    assert done.state == "COMPLETED" and done.actual_type and done.est_runtime
    est = {e["group"]: e for e in rr["estimates"]}[groups["vgg16"]]
    expected = (done.end_time - done.start_time) / done.est_runtime[done.actual_type]
    assert est["jobs"] == 1 and est["median_ratio"] == pytest.approx(expected)
    assert 0.3 < est["median_ratio"] < 3.0                    # Slurm's clock has whole seconds
    per_type = {u["gpu_type"]: u for u in rr["gpu_types"]}
    assert per_type[done.actual_type]["jobs_by_group"].get(groups["vgg16"]) == 1
    assert rr["rounds"]["count"] >= 2 and rr["rounds"]["mean_plan_s"] > 0

    # the database alone (no Slurm): the same queue as of the last round
    proc = subprocess.run([str(VENV_BIN / "msched"), "report", "--json", "--no-slurm"], capture_output=True,
                          text=True, env=env, timeout=120)
    (rr2,) = json.loads(proc.stdout)["runs"]
    assert rr2["run"]["live"] is False
    queue2 = {q["group"]: q for q in rr2["queue"] if q["group"] in groups.values()}
    assert {g: q["pending"] for g, q in queue2.items()} == {groups["vgg16"]: 1, groups["densenet169"]: 1}


def test_unreachable_slurm_never_fails_the_report(history_db, tmp_path):
    """SLURM_CONF names a controller nobody answers for: the report says so in one note and shows the
    database's last state."""
    path, _ = history_db
    conf = tmp_path / "dead" / "slurm.conf"
    conf.parent.mkdir()
    conf.write_text("ClusterName=dead\nSlurmctldHost=localhost(127.0.0.1)\nSlurmctldPort=9\nMessageTimeout=1\n"
                    "AuthType=auth/none\nCredType=cred/none\nNodeName=x CPUs=1 State=UNKNOWN\n"
                    "PartitionName=p Nodes=x Default=YES\n")
    from helpers import VENV_BIN

    t0 = time.monotonic()
    proc = subprocess.run([str(VENV_BIN / "msched"), "report", "--db", str(path), "--json"], capture_output=True,
                          text=True, timeout=120, env={**os.environ, "SLURM_CONF": str(conf)})
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["runs"][0]["run"]["live"] is False
    assert "Traceback" not in proc.stderr
    if shutil.which("squeue"):
        assert "note: Slurm's live queue not read" in proc.stderr
    assert time.monotonic() - t0 < 60


def test_live_queue_replaces_the_last_round_only_for_this_cluster(history_db):
    from msched.report.data import LiveJob

    path, _ = history_db
    live = [LiveJob("5001", "PENDING", "vgg", "vgg16", NOW - 600, "a100"),
            LiveJob("5002", "PENDING", "vgg", "vgg19", NOW - 60, "titanv"),
            LiveJob("5003", "RUNNING", "resnet", "resnet50", NOW - 900, "")]
    rr = _report(path, live_jobs=live, live_run="testcluster").runs[0]
    assert rr.run.live
    assert [(q.group, q.pending, q.running, q.planned) for q in rr.queue] == [
        ("resnet", 0, 1, {}), ("vgg", 2, 0, {"a100": 1, "titanv": 1})]
    pending_waits = {w.job_id: w.wait_s for w in rr.longest_waits if w.state == "PENDING"}
    assert pending_waits.get("5001") == pytest.approx(600) or len(rr.longest_waits) == 10
    other = _report(path, live_jobs=live, live_run="another-cluster").runs[0]
    assert not other.run.live and other.queue == _report(path).runs[0].queue


# ------------------------------------------------------------------------------- packed pairs
R18, R50 = "ResNet-18 (batch size 32)", "ResNet-50 (batch size 32)"


@pytest.fixture(scope="module")
def packed_db(tmp_path_factory):
    """A simulated run with packing (slurm_sim.packing) written to a store through the replay's own
    recorder: two v100s shared through shards, jobs arriving faster than they end so that msub's
    decision packs some; the pair speeds are the test's own (a ResNet-18 beside a ResNet-50 runs at
    0.8x solo, the ResNet-50 at 0.45x; two of a kind at 0.7x or 0.6x each), so what the report must
    show is known before it runs. The mean guard: under the quantile guard these jobs are outside
    Gavel's data and nothing would pack (tests/test_packing.py checks the guard)."""
    from msched.estimate.perf_table import PerfRow, PerfTable
    from slurm_sim.cluster import parse_cluster
    from slurm_sim.compare import Classifier, SimSetup, replay
    from slurm_sim.packing import PairTruth, SimPacking, with_shard_nodes
    from slurm_sim.trace import TraceJob

    truth = PerfTable([PerfRow("resnet18", "v100", 1, 32, "float", 50.0),
                       PerfRow("resnet50", "v100", 1, 32, "float", 150.0)])
    pairs = PairTruth({(R18, R18, "v100"): (0.7, 0.7), (R50, R50, "v100"): (0.6, 0.6),
                       (R18, R50, "v100"): (0.8, 0.45), (R50, R18, "v100"): (0.45, 0.8)})
    setup = SimSetup(with_shard_nodes(parse_cluster("v100:2x1")), truth, truth,
                     Classifier(["resnet18", "resnet50"], truth), scheduler="backfill", round_s=60.0,
                     packing=SimPacking(pairs, guard="mean"))     # the guard packs no torchvision model
    trace = [TraceJob(str(i), 60.0 * i, "u1", "resnet18" if i % 3 else "resnet50", 1, 32, 100000 if i < 4 else 20000)
             for i in range(16)]     # four long jobs, then short ones that wait behind them: those pack
    db = tmp_path_factory.mktemp("packed") / "sim.db"
    store = Store(f"sqlite:///{db}")
    result = replay(trace, "msched", setup, store=store)
    store.dispose()
    return db, result.metrics["packing"]["pairs"]


def test_report_shows_the_packed_pairs_with_predicted_and_measured_speeds(packed_db):
    db, ran = packed_db
    assert ran, "the run packed nothing: the fixture no longer exercises the report's pairs"
    res = CliRunner().invoke(report_cmd, ["--db", str(db), "--kind", "sim", "--json"])
    assert res.exit_code == 0, res.output
    (rr,) = json.loads(res.stdout)["runs"]
    pk = rr["packing"]
    assert pk["pairs"] >= len(ran) and pk["measured"] == len(ran)      # every pair that ran has its truth
    # measured = the hand-made truth of the pairs that ran
    measured = sorted(sorted((p["measured_a"], p["measured_b"])) for p in pk["shown"] if p["measured_a"] is not None)
    assert measured == sorted(sorted((p["speed_a"], p["speed_b"])) for p in ran)
    assert pk["slowest"] == pytest.approx(min(min(p["speed_a"], p["speed_b"]) for p in ran))
    assert pk["below_half"] == sum(min(p["speed_a"], p["speed_b"]) < 0.5 for p in ran)
    # the rounds that saw a pair recorded the predictor's speeds for it (the shipped model's, in (0, 2))
    seen = [p for p in pk["shown"] if p["predicted_a"] is not None]
    assert seen and all(0 < p["predicted_a"] < 2 and 0 < p["predicted_b"] < 2 for p in seen)
    models = {p["model_a"] for p in seen} | {p["model_b"] for p in seen}
    assert models <= {"resnet18", "resnet50"}
    text = CliRunner().invoke(report_cmd, ["--db", str(db), "--kind", "sim"]).output
    assert "Packed pairs" in text and f"{pk['slowest']:.2f}" in text     # the slowest pair that ran


def test_a_store_written_before_packing_reports_no_pairs(history_db):
    (rr,) = _report(history_db[0]).runs
    assert rr.packing.pairs == 0 and not rr.packing.shown
    assert "No jobs shared a GPU" in render_html(_report(history_db[0]))


@pytest.mark.browser
def test_html_packed_pairs_render_in_chromium(packed_db, tmp_path):
    db, ran = packed_db
    out = tmp_path / "report.html"
    res = CliRunner().invoke(report_cmd, ["--db", str(db), "--kind", "sim", "--html", str(out)])
    assert res.exit_code == 0, res.output
    seen = render_in_chromium(out.read_text(), tmp_path)
    rows = seen["packed_rows"]
    assert len(rows) >= len(ran) and all(len(r) == 11 for r in rows)
    # the measured columns, as the browser shows them: the truth's own speeds of the pairs that ran
    shown = sorted(sorted((r[7], r[8])) for r in rows if r[7] != "-")
    assert shown == sorted(sorted((f"{p['speed_a']:.2f}", f"{p['speed_b']:.2f}")) for p in ran)
