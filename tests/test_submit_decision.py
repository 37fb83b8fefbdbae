"""The one submit decision: msub's path and the simulator's replay of msub agree, job for job; the
feasibility rule keeps a job off a type whose nodes cannot hold it; a burst spreads without a round.

msub's path is `msched.msub.main.build_submission` (argv in, sbatch's argv out), reading the site's
config, the published free-time file and its cached `sinfo` answer, as on a cluster. The simulator's
path is `slurm_sim.compare.submit_decision` on a trace job, with the simulated cluster's node shapes.
Neither result is computed by the test: it only compares the two and checks hand-made cases.
"""

from __future__ import annotations

import json
import random
import time

import pytest

from msched.config import Config
from msched.estimate.estimators import TagEstimator
from msched.estimate.perf_table import PerfTable
from msched.msub.main import build_submission
from msched.policy import get_policy
from msched.policy.choice import ClusterView, SubmitJob, decide_submit
from msched.tag import JobTag, parse_comment
from slurm_sim.cluster import parse_cluster
from slurm_sim.compare import Classifier, cluster_node_gpus, submit_decision
from slurm_sim.trace import TraceJob

SBATCH = "/usr/bin/sbatch"
SLURM_CONF = "/nonexistent/slurm.conf"       # only part of msub's cache key: no Slurm is asked
MODELS = ("resnet50", "vgg16", "densenet121", "resnet18", "efficientnet_b0", "mobilenet_v3_small",
          "convnext_tiny", "shufflenet_v2_x1_0", "resnet101", "swin_t")
CLUSTERS = ("a100:8x2,titanv:4x2,rtx2080ti:2x4,titanxp:4x1",
            "a100:4x1,titanv:8x1,gtx1080ti:2x2",
            "a100:2x2,titanrtx:4x2,titanxp:8x1,rtx2080ti:4x2")


def _site(tmp_path, monkeypatch, cluster_spec: str, free_at: dict[str, float], *, fresh: bool = True,
          published: dict | None = None, conf_lines: str = ""):
    """A site: config, a published free-time file (with `published`'s keys added), msub's cached sinfo
    answer for the cluster."""
    state = tmp_path / "state"
    state.mkdir(exist_ok=True)
    now = time.time()
    (state / "gpu_free_time.json").write_text(json.dumps(
        {"time": now if fresh else now - 3600, "free_at": free_at, **(published or {})}))
    conf = tmp_path / "msched.toml"
    conf.write_text(f'sbatch = "{SBATCH}"\nstate_dir = "{state}"\n{conf_lines}')
    cache = tmp_path / "cache"
    cache.mkdir(exist_ok=True)
    cluster = parse_cluster(cluster_spec)
    nodes = [[f"n{k}", f"gpu:{n.gpu_type}:{n.gpus}", [n.gpu_type], ["gpu"]] for k, n in enumerate(cluster.nodes)]
    (cache / "cluster_nodes.json").write_text(json.dumps({"key": f"{SLURM_CONF}|{SBATCH}", "time": now,
                                                          "nodes": nodes}))
    monkeypatch.setenv("MSCHED_CONFIG", str(conf))
    monkeypatch.setenv("MSCHED_CACHE_DIR", str(cache))
    monkeypatch.setenv("SLURM_CONF", SLURM_CONF)
    return cluster


def _msub(argv: list[str]) -> tuple[JobTag | None, tuple[str, ...]]:
    sub, warnings = build_submission([*argv, "--wrap", "true"])
    assert not [w for w in warnings if "plain" in w], warnings
    comment = [w.split("=", 1)[1] for w in sub.argv if w.startswith("--comment=")]
    constraint = [w.split("=", 1)[1] for w in sub.argv if w.startswith("--constraint=")]
    tag = parse_comment(comment[-1])[0] if comment else None
    types = tuple(constraint[-1].split("|")) if constraint and tag is not None and tag.added else ()
    return tag, types


def _generated_jobs(rng: random.Random, n: int, types: list[str]) -> list[dict]:
    jobs = []
    for k in range(n):
        jobs.append({
            "model": rng.choice(MODELS),
            "gpus": rng.choice((1, 1, 2, 4, 8, 16)),
            "iterations": rng.choice((None, 500, 10000, 200000)),
            "limit_min": rng.choice((None, 5, 15, 60, 600)),
            "batch": rng.choice((None, 32, 64)),
            "pin": rng.choice(("",) * 6 + (types[-1], f"{types[0]}|{types[1]}")),   # pins name present types
            "id": str(k),
        })
    return jobs


@pytest.mark.parametrize("cluster_spec", CLUSTERS)
def test_msub_and_the_simulator_make_the_same_decision(tmp_path, monkeypatch, cluster_spec):
    """>= 200 generated jobs over three clusters of different node sizes: the same tag (reference
    fields, iterations, batch size, pin, added types) and the same constraint from both paths."""
    rng = random.Random(cluster_spec)
    cluster = parse_cluster(cluster_spec)
    now = time.time()
    types = cluster.gpu_types
    free_at = {t: now + rng.choice((0.0, 0.0, 600.0, 7200.0)) for t in types}
    _site(tmp_path, monkeypatch, cluster_spec, free_at)
    config = Config()
    perf = PerfTable.load(config.performance)
    classifier = Classifier(None, perf)
    # a fresh round's free times: msub's choice is the re-planning policy's (its slack narrows once a
    # type is busy: msched.policy.choice.submit_slack)
    policy = get_policy("msched", slack=config.constraint_slack, informed_slack=config.constraint_informed_slack)
    estimator = TagEstimator(perf)
    view = ClusterView(node_gpus=cluster_node_gpus(cluster), free_at=free_at, fresh=True)
    constrained = differ = 0
    for j in _generated_jobs(rng, 80, types):
        argv = [f"--model={j['model']}"]
        argv += [f"--iterations={j['iterations']}"] if j["iterations"] else []
        argv += [f"--batch-size={j['batch']}"] if j["batch"] else []
        argv += [f"--time={j['limit_min']}"] if j["limit_min"] else []
        argv += [f"--constraint={j['pin']}"] if j["pin"] else []
        argv += [f"--gpus={j['gpus']}"]
        m_tag, m_types = _msub(argv)
        tj = TraceJob(j["id"], 0.0, "u", j["model"], j["gpus"], j["batch"], j["iterations"], j["pin"] or None,
                      60.0 * j["limit_min"] if j["limit_min"] else None)
        d = submit_decision(tj, classifier, policy, estimator, view, time.time())
        assert m_tag is not None
        assert (m_tag.encode(), m_types) == (JobTag(*(d.tag)).encode(), d.types), (j, argv)
        constrained += bool(d.types)
        differ += len(set(d.types)) != len(types)
    assert constrained >= 20 and differ >= 20        # the grid really exercises the choice


@pytest.mark.parametrize(("measure", "price_of"), [("saving", lambda t, k: 600.0 * (k + 1)),
                                                   ("ratio", lambda t, k: 0.1 * (k + 1))])
def test_msub_and_the_simulator_agree_with_submit_prices_and_free_slack(tmp_path, monkeypatch, measure, price_of):
    """The submit price (msched.policy.price) and the free slack: msub reading the published prices and
    `constraint_free_slack`, the simulator's replay with the policy's `free_slack` and the round's prices
    in its view: the same tag and constraint for 80 generated jobs; and the prices change some choices."""
    cluster_spec = CLUSTERS[0]
    rng = random.Random(measure)
    cluster = parse_cluster(cluster_spec)
    now = time.time()
    types = cluster.gpu_types
    free_at = {t: now + (0.0 if k % 2 else 1800.0) for k, t in enumerate(types)}
    price = {t: price_of(t, k) for k, t in enumerate(types[:2])}
    _site(tmp_path, monkeypatch, cluster_spec, free_at, published={"price": price, "price_measure": measure},
          conf_lines="constraint_free_slack = 1.0\n")
    config = Config()
    perf = PerfTable.load(config.performance)
    classifier = Classifier(None, perf)
    policy = get_policy("msched", slack=config.constraint_slack, free_slack=1.0)
    estimator = TagEstimator(perf)
    view = ClusterView(node_gpus=cluster_node_gpus(cluster), free_at=free_at, fresh=True, price=price,
                       price_measure=measure)
    unpriced = view._replace(price=None)
    moved = 0
    for j in _generated_jobs(rng, 80, types):
        argv = [f"--model={j['model']}", f"--gpus={j['gpus']}"]
        argv += [f"--iterations={j['iterations']}"] if j["iterations"] else []
        argv += [f"--constraint={j['pin']}"] if j["pin"] else []
        m_tag, m_types = _msub(argv)
        tj = TraceJob(j["id"], 0.0, "u", j["model"], j["gpus"], None, j["iterations"], j["pin"] or None, None)
        d = submit_decision(tj, classifier, policy, estimator, view, time.time())
        assert m_tag is not None
        assert (m_tag.encode(), m_types) == (JobTag(*(d.tag)).encode(), d.types), (j, argv)
        moved += d.types != submit_decision(tj, classifier, policy, estimator, unpriced, time.time()).types
    assert moved >= 3                                   # the prices really steer some jobs


def test_a_corrupt_or_stale_price_is_the_choice_without_prices(tmp_path, monkeypatch):
    """What msub reads of the root-written file is bounded: prices that are not positive finite numbers,
    too many types, an unknown measure or a stale file leave the choice as without prices, silently."""
    now = time.time()
    free_at = {"a100": now, "titanv": now + 600, "rtx2080ti": now}
    argv = ["--model=vgg16", "--iterations=200000", "--gres=gpu:1"]
    _site(tmp_path, monkeypatch, "a100:4x1,titanv:4x1,rtx2080ti:4x1", free_at)
    plain = _msub(argv)
    _site(tmp_path, monkeypatch, "a100:4x1,titanv:4x1,rtx2080ti:4x1", free_at,
          published={"price": {"a100": 1e6}, "price_measure": "saving"})
    priced = _msub(argv)
    assert "a100" in plain[1] and "a100" not in priced[1]       # a price no job clears keeps it off a100
    for bad in ({"price": {"a100": "1e6"}}, {"price": {"a100": float("nan")}}, {"price": {"a100": -5.0}},
                {"price": {"a100": 1e6}, "price_measure": "speed"}, {"price": [["a100", 1e6]]},
                {"price": {f"t{k}": 1.0 for k in range(100)} | {"a100": 1e6}}, {"price": {"a100": True}}):
        _site(tmp_path, monkeypatch, "a100:4x1,titanv:4x1,rtx2080ti:4x1", free_at, published=bad)
        assert _msub(argv) == plain, bad
    _site(tmp_path, monkeypatch, "a100:4x1,titanv:4x1,rtx2080ti:4x1", free_at, fresh=False,
          published={"price": {"a100": 1e6}, "price_measure": "saving"})
    stale_plain = _msub(argv)
    _site(tmp_path, monkeypatch, "a100:4x1,titanv:4x1,rtx2080ti:4x1", free_at, fresh=False)
    assert stale_plain == _msub(argv)


def test_an_8_gpu_job_never_gets_a_type_of_4_gpu_nodes(tmp_path, monkeypatch):
    """`a100:8x1,titanv:4x1` (issue 15): from msub and from every policy's submit choice, titanv never."""
    now = time.time()
    _site(tmp_path, monkeypatch, "a100:8x1,titanv:4x1", {"a100": now + 10 * 3600, "titanv": now})
    # resnet50 is faster on a100 but a100 is busy for 10 h: titanv would win if it could hold the job
    _, types = _msub(["--model=resnet50", "--iterations=1000", "--gres=gpu:8"])
    assert types == ("a100",)
    _, types = _msub(["--model=resnet50", "--iterations=1000", "--gres=gpu:4"])
    assert "titanv" in types                          # the same job at 4 GPUs may go there
    perf = PerfTable.load(Config().performance)
    tag = JobTag(model="resnet50", ref="resnet50", iters=1000)
    view = ClusterView(node_gpus={"a100": (8,), "titanv": (4,)}, free_at={"a100": now + 36000, "titanv": now},
                       fresh=True)
    for name in ("fastest", "msched-once", "msched", "oracle"):
        policy = get_policy(name, ranking=["titanv", "a100"]) if name == "fastest" else get_policy(name)
        for shape in (SubmitJob(8, 8), SubmitJob(8), SubmitJob(8, None, 2)):
            d = decide_submit(tag, shape, view, TagEstimator(perf), now=now, choose=policy.submit_choice)
            assert "titanv" not in d.types and "titanv" not in (d.estimates or {}), (name, shape)


def test_a_burst_spreads_over_the_types_without_a_fresh_round(tmp_path, monkeypatch):
    """No fresh round: 16 one-GPU jobs of one model, each seeing the ones before it pending; on an idle
    cluster of four 4-GPU types the constraints cover more than one type, and no type is given more
    jobs than it has GPUs while another within the slack still has free ones."""
    perf = PerfTable.load(Config().performance)
    tag = JobTag(model="densenet121", ref="densenet121", iters=20000)
    sizes = {"a100": (4,), "titanv": (4,), "rtx2080ti": (4,), "titanxp": (4,)}
    now = 1000.0
    stale = ClusterView(node_gpus=sizes, free_at=dict.fromkeys(sizes, now), fresh=False)
    first = decide_submit(tag, SubmitJob(1), stale, TagEstimator(perf), now=now)
    pending: dict[str, float] = {}
    used: set[str] = set()
    for _ in range(16):
        view = stale._replace(free_gpus={t: 4 for t in sizes}, pending_gpus=dict(pending))
        d = decide_submit(tag, SubmitJob(1), view, TagEstimator(perf), now=now)
        assert d.types
        for t in d.types:
            pending[t] = pending.get(t, 0.0) + 1.0 / len(d.types)
        used.update(d.types)
    assert len(used) > len(first.types) >= 1
    assert len(used) > 1


def test_a_site_that_splits_types_by_partition_gets_partitions_not_features(tmp_path, monkeypatch):
    """type_lever = "partition": msub steers the job with -p (the types' partitions), never a feature;
    a partition the user chose is theirs; a bad lever name is one line listing the valid ones."""
    from msched.config import ConfigError, load_config

    now = time.time()
    _site(tmp_path, monkeypatch, "a100:4x1,titanv:4x1", {"a100": now, "titanv": now})
    conf = tmp_path / "msched.toml"
    conf.write_text(conf.read_text() + 'type_lever = "partition"\n[type_partitions]\na100 = "p-a100"\n'
                    'titanv = "p-titanv"\n')
    sub, _ = build_submission(["--model=vgg16", "--iterations=1000", "--gres=gpu:1", "--wrap", "true"])
    parts = [w.split("=", 1)[1] for w in sub.argv if w.startswith("--partition=")]
    tag = parse_comment([w.split("=", 1)[1] for w in sub.argv if w.startswith("--comment=")][-1])[0]
    assert parts and set(parts[-1].split(",")) == {f"p-{t}" for t in tag.added.split("|")}
    assert not [w for w in sub.argv if w.startswith("--constraint=")]
    sub, _ = build_submission(["--model=vgg16", "--iterations=1000", "--gres=gpu:1", "-p", "mine", "--wrap", "true"])
    assert [w for w in sub.argv if w.startswith("--partition=")] == []
    conf.write_text(conf.read_text().replace('"partition"', '"queue"'))
    with pytest.raises(ConfigError, match="type_lever 'queue' is not one of feature, partition"):
        load_config(conf)


@pytest.mark.slurm
def test_on_real_slurm_a_job_is_never_sent_to_nodes_too_small_and_a_burst_spreads(tmp_path, monkeypatch):
    """A dev cluster whose titanv node has 2 GPUs: msub never constrains a 4-GPU job to titanv (while a
    2-GPU job of the same models may go there); 16 one-GPU jobs of one model submitted through msub with
    no round running use more than one GPU type."""
    import os
    import subprocess
    from pathlib import Path

    from msched.msub.main import main as msub_main

    if os.geteuid() != 0:
        pytest.skip("the dev cluster needs root")
    script = Path(__file__).resolve().parent.parent / "scripts" / "slurm-dev-cluster.sh"
    sdir = tmp_path / "slurm"
    up = subprocess.run(["bash", str(script), "up", "--dir", str(sdir), "--node-gpus", "n2=2"],
                        capture_output=True, text=True, timeout=600)
    assert up.returncode == 0, up.stderr
    try:
        monkeypatch.setenv("SLURM_CONF", str(sdir / "slurm.conf"))
        state = tmp_path / "state"
        state.mkdir()
        conf = tmp_path / "msched.toml"
        conf.write_text(f'sbatch = "{SBATCH}"\nstate_dir = "{state}"\n')
        monkeypatch.setenv("MSCHED_CONFIG", str(conf))
        monkeypatch.setenv("MSCHED_CACHE_DIR", str(tmp_path / "cache"))
        wide, narrow = set(), set()
        for model in MODELS:
            for gpus, seen in ((4, wide), (2, narrow)):
                _, types = _msub([f"--model={model}", "--iterations=2000", f"--gres=gpu:{gpus}", "--time=600"])
                seen.update(types)
        assert "titanv" not in wide and "titanv" in narrow
        # the burst: real submissions, no free-time file (no round), the queue read at each one
        for k in range(16):
            assert msub_main(["--model=densenet121", "--iterations=20000", "--gres=gpu:1", "--time=600",
                              "-J", f"burst{k}", "--wrap", "sleep 300"], allow_exec=False) == 0
        out = subprocess.run(["squeue", "-h", "-o", "%j|%f"], capture_output=True, text=True, timeout=60).stdout
        feats = {line.split("|")[1] for line in out.splitlines() if line.startswith("burst")}
        assert len({t for f in feats for t in f.split("|")}) > 1, feats
    finally:
        subprocess.run(["scancel", "-u", "root"], capture_output=True, timeout=60)
        subprocess.run(["bash", str(script), "down", "--dir", str(sdir)], capture_output=True, timeout=120)
