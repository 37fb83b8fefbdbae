"""The simulator's shard jobs (slurm_sim.packing): they share a GPU as Slurm's shards do and run at the
pair speeds of the truth, which moves both jobs' ends when a partner starts or ends.

The pair speeds are the test's own (a hand-made PairTruth), so every expected time below is worked out
by hand from them: a 100 s job at half speed beside a partner, alone again after it ends.
"""

from __future__ import annotations

import pytest

from msched.estimate.perf_table import PerfRow, PerfTable
from slurm_sim.cluster import parse_cluster
from slurm_sim.packing import PairTruth, ShardRuns, with_shard_nodes
from slurm_sim.simulator import SimError, Simulator

R18, LM = "ResNet-18 (batch size 32)", "LM (batch size 20)"


def _sim(fractions: dict) -> tuple[Simulator, ShardRuns]:
    truth = PerfTable([PerfRow("resnet18", "v100", 1, 32, "float", 100.0), PerfRow("lm", "v100", 1, 20, "float", 100.0)])
    sim = Simulator(with_shard_nodes(parse_cluster("v100:1x1")), truth)
    return sim, ShardRuns(PairTruth(fractions)).attach(sim)


def _submit(sim: Simulator, model: str, batch: int, iterations: int, shards: int = 1, **kw) -> str:
    return sim.submit(num_gpus=1, model=model, iterations=iterations, batch_size=batch, shards=shards,
                      partition="shared" if shards else "", **kw)


def test_two_shard_jobs_share_the_gpu_at_the_measured_pair_speeds():
    sim, runs = _sim({(R18, LM, "v100"): (0.5, 0.8), (LM, R18, "v100"): (0.8, 0.5)})
    a = _submit(sim, "resnet18", 32, 1000)          # 100 s alone
    sim.run_until(20.0)
    b = _submit(sim, "lm", 20, 1000)                # 100 s alone
    sim.run_until(20.0)
    assert sim.jobs[b].state == "RUNNING" and sim.jobs[b].nodes == sim.jobs[a].nodes
    assert sim.free[0] == 0                         # one GPU, held once
    assert sim.job_view(sim.jobs[a]).num_gpus == 0  # squeue: a shard job asks for no whole GPU
    sim.run()
    # a runs alone 0-20 s (20 s of work done), then at 0.5 beside b, which runs at 0.8:
    # b ends at 20 + 100/0.8 = 145 s; a then has 100 - 20 - 0.5*125 = 17.5 s left, alone: ends at 162.5 s
    assert sim.jobs[b].end_time == pytest.approx(145.0)
    assert sim.jobs[a].end_time == pytest.approx(162.5)
    assert {sim.jobs[a].state, sim.jobs[b].state} == {"COMPLETED"}
    assert runs.pairs and runs.pairs[0]["combined"] == pytest.approx(1.3)
    assert runs.gained_s == pytest.approx(125.0 * (1.3 - 1.0))     # shared 20-145 s at 1.3 GPUs' worth
    assert sim.free[0] == 1                         # the GPU is free once both ended


def test_a_pair_that_does_not_fit_never_runs_together():
    sim, runs = _sim({})                            # nothing measured: the pair does not fit
    a = _submit(sim, "resnet18", 32, 1000)
    b = _submit(sim, "lm", 20, 1000)
    sim.run_until(0.0)
    assert sim.jobs[a].state == "RUNNING" and sim.jobs[b].state == "PENDING"
    assert runs.oom == [(b, a, "v100")]
    sim.run()
    assert sim.jobs[b].start_time == pytest.approx(100.0) and sim.jobs[b].end_time == pytest.approx(200.0)


def test_a_gpu_job_never_takes_a_gpu_that_shard_jobs_hold():
    sim, _ = _sim({(R18, R18, "v100"): (0.6, 0.6)})
    a = _submit(sim, "resnet18", 32, 1000)
    g = _submit(sim, "resnet18", 32, 1000, shards=0)
    sim.run_until(0.0)
    assert sim.jobs[a].state == "RUNNING" and sim.jobs[g].state == "PENDING"
    sim.run()
    assert sim.jobs[g].start_time == pytest.approx(100.0)


def test_shards_need_shard_nodes():
    sim = Simulator(parse_cluster("v100:1x1"), PerfTable([PerfRow("resnet18", "v100", 1, 32, "float", 100.0)]))
    with pytest.raises(SimError, match="shard"):
        sim.submit(num_gpus=1, model="resnet18", iterations=10, batch_size=32, shards=1)


def test_squeue_says_which_gpu_each_shard_job_holds_after_a_partner_leaves():
    """As real Slurm's gres_detail (tests/data/slurm/squeue_shards.json): a and b share GPU 0, c is alone
    on GPU 1; b leaves, and d joins c (the first open shard), not a, though a started first. The round
    reads the index and pairs c with d (start order would pair a with c)."""
    from msched.rounds.packing import _by_gpu

    truth = PerfTable([PerfRow("resnet18", "v100", 1, 32, "float", 100.0)])
    sim = Simulator(with_shard_nodes(parse_cluster("v100:2x1")), truth)
    ShardRuns(PairTruth({(R18, R18, "v100"): (0.5, 0.5)})).attach(sim)
    a, b, c = (_submit(sim, "resnet18", 32, n) for n in (1000, 50, 1000))
    sim.run_until(0.0)
    view = {j: sim.job_view(sim.jobs[j]) for j in (a, b, c)}
    assert view[a].gpu_index == view[b].gpu_index != view[c].gpu_index
    sim.run_until(20.0)                             # b: 5 s of work at half speed, done at 10 s
    assert sim.jobs[b].state == "COMPLETED"
    d = _submit(sim, "resnet18", 32, 1000)
    sim.run_until(20.0)
    view = {j: sim.job_view(sim.jobs[j]) for j in (a, c, d)}
    assert view[d].gpu_index == view[c].gpu_index != view[a].gpu_index
    assert [[j.job_id for j in g] for g in _by_gpu(list(view.values()))] == [[a], [c, d]]


@pytest.mark.parametrize("guard", ["bound", "mean"])
def test_the_replay_takes_its_guard_to_msubs_decision_and_to_the_round(guard, monkeypatch):
    """SimPacking.guard reaches both halves: the round is run with it (`run_round(pack_guard=)`), and
    msub's decision at submit follows it. ResNet-18 and ResNet-50 at batch 32 on a v100 of this
    hand-made table are outside Gavel's data, so the quantile guard packs none of them and the mean
    forest packs some (jobs queue behind four long ones, so each would wait)."""
    import msched.rounds.core as core
    from slurm_sim.compare import Classifier, SimSetup, replay
    from slurm_sim.packing import SimPacking
    from slurm_sim.trace import TraceJob

    seen = []
    real = core.packing_round
    monkeypatch.setattr(core, "packing_round", lambda *a, **kw: seen.append(kw.get("guard")) or real(*a, **kw))
    truth = PerfTable([PerfRow("resnet18", "v100", 1, 32, "float", 50.0), PerfRow("resnet50", "v100", 1, 32, "float", 150.0)])
    r50 = "ResNet-50 (batch size 32)"
    pairs = PairTruth({(R18, R18, "v100"): (0.7, 0.7), (r50, r50, "v100"): (0.6, 0.6),
                       (R18, r50, "v100"): (0.8, 0.45), (r50, R18, "v100"): (0.45, 0.8)})
    setup = SimSetup(with_shard_nodes(parse_cluster("v100:2x1")), truth, truth, Classifier(["resnet18", "resnet50"], truth),
                     scheduler="backfill", round_s=60.0, packing=SimPacking(pairs, guard=guard))
    trace = [TraceJob(str(i), 60.0 * i, "u1", "resnet18" if i % 3 else "resnet50", 1, 32, 100000 if i < 4 else 20000)
             for i in range(12)]
    result = replay(trace, "msched", setup)
    assert seen and set(seen) == {guard}
    shard_jobs = result.metrics["packing"]["shard_jobs"]
    assert shard_jobs == 0 if guard == "bound" else shard_jobs > 0


@pytest.mark.parametrize("peak_gb, packed", [(8.0, False), (1.0, True)])
def test_the_replays_packing_decision_checks_memory(peak_gb, packed):
    """SimPacking.memory is the peak memory msub's decision and the round see: jobs of 8 GB each cannot
    share a 16 GB V100 (14.6 GB usable: 2 x 8 GB x 1.2 + a second CUDA context is over it), so none is
    packed though the mean forest would pack them (the setting of the test above); at 1 GB each some
    are, and their tags carry that memory for the round."""
    from slurm_sim.compare import Classifier, SimSetup, replay
    from slurm_sim.packing import SimPacking
    from slurm_sim.trace import TraceJob

    truth = PerfTable([PerfRow("resnet18", "v100", 1, 32, "float", 50.0), PerfRow("resnet50", "v100", 1, 32, "float", 150.0)])
    r50 = "ResNet-50 (batch size 32)"
    pairs = PairTruth({(R18, R18, "v100"): (0.7, 0.7), (r50, r50, "v100"): (0.6, 0.6),
                       (R18, r50, "v100"): (0.8, 0.45), (r50, R18, "v100"): (0.45, 0.8)})
    setup = SimSetup(with_shard_nodes(parse_cluster("v100:2x1")), truth, truth, Classifier(["resnet18", "resnet50"], truth),
                     scheduler="backfill", round_s=60.0,
                     packing=SimPacking(pairs, guard="mean", memory=lambda model, batch: peak_gb))
    trace = [TraceJob(str(i), 60.0 * i, "u1", "resnet18" if i % 3 else "resnet50", 1, 32, 100000 if i < 4 else 20000)
             for i in range(12)]
    result = replay(trace, "msched", setup)
    info = result.metrics["packing"]
    assert (info["shard_jobs"] > 0) == packed
    assert bool(info["pairs"]) == packed and info["oom"] == 0


def test_gavel_memory_keeps_apart_the_pairs_gavel_measured_out_of_memory():
    """The peaks of Gavel's job types from their model files' profiles (torch on the meta device), checked
    as a pair (pair_fits) on a V100, against what Gavel measured there: ResNet-50 at batch 128 beside
    ResNet-50 at 64, and Transformer at 256 beside ResNet-50 at 128, measured 0 (they did not fit
    together); ResNet-18 at 32 beside LM at 20, and two ResNet-50s at 32, ran."""
    from msched.estimate.interference import pair_fits, type_usable_gb
    from slurm_sim.packing import GavelMemory

    mem = GavelMemory.load()
    usable = type_usable_gb("v100")
    assert not pair_fits((mem("resnet50", 128), mem("resnet50", 64)), usable)
    assert not pair_fits((mem("transformer", 256), mem("resnet50", 128)), usable)
    assert pair_fits((mem("resnet18", 32), mem("lm", 20)), usable)
    assert pair_fits((mem("resnet50", 32), mem("resnet50", 32)), usable)
    assert mem("resnet18", 256) < 2.0 < 5.0 < mem("resnet50", 64)    # CIFAR's 32 x 32, not ImageNet's 224
    assert mem("no-such-model", 32) is None


def test_the_transformers_memory_counts_what_its_attention_keeps_and_gavels_fits_agree():
    """Gavel's Transformer: the profile holds module outputs only, 4.47 GB at batch 256. Autograd also
    keeps, per sample, in each of the 18 attention calls three score tensors (8 heads x 30 x 30 floats)
    and four 30 x 512 copies, and 30 residual outputs of 30 x 512: by hand 18 x 4 x (3 x 8 x 900 + 4 x
    30 x 512) + 30 x 4 x 30 x 512 = 7,822,080 bytes, 2.0 GB more at batch 256. Against Gavel's V100
    measurements: two at 256, and one at 256 beside ResNet-50 at 64, measured 0 (out of memory) and are
    now kept apart; one at 256 beside ResNet-50 at 32 ran, and still fits."""
    from msched.estimate.interference import pair_fits, type_usable_gb
    from msched.estimate.memory import peak_memory_gb
    from slurm_sim.packing import GavelMemory

    mem = GavelMemory.load()
    raw = peak_memory_gb(mem.profiles["transformer"], 256, "float", "adam").peak_gb
    assert mem("transformer", 256) - raw == pytest.approx(256 * 7_822_080 / 1e9, abs=0.002)
    usable = type_usable_gb("v100")
    assert pair_fits((raw, raw), usable) and pair_fits((raw, mem("resnet50", 64)), usable)    # the old estimate
    assert not pair_fits((mem("transformer", 256), mem("transformer", 256)), usable)
    assert not pair_fits((mem("transformer", 256), mem("resnet50", 64)), usable)
    assert pair_fits((mem("transformer", 256), mem("resnet50", 32)), usable)


def test_the_measured_predictor_answers_with_gavels_measurements():
    """bench_packing --predictor measured: the interference model's questions answered by the truth.
    By hand from the sample file (tests/test_interference.py): on a v100 ResNet-50 (b64) keeps 0.8430 of
    its solo speed beside ResNet-18 (b32), which keeps 0.5027; a pair Gavel did not measure predicts 0."""
    from pathlib import Path

    from msched.estimate.interference import read_gavel
    from slurm_sim.packing import MeasuredPredictor

    sample = Path(__file__).resolve().parent / "data" / "gavel_pairs_sample.json"
    jobs, _ = read_gavel(sample)
    oracle = MeasuredPredictor(sample)
    r50, r18 = jobs["ResNet-50 (batch size 64)"], jobs[R18]
    assert oracle.own_speed(r50, r18, "v100") == pytest.approx(0.8430, abs=1e-3)
    assert oracle.own_speed(r18, r50, "v100") == pytest.approx(0.5027, abs=1e-3)
    assert oracle.combined_throughput(r18, r50, "v100") == pytest.approx(1.3457, abs=1e-3)
    assert oracle.slower_for("bound")(r50, r18, "v100") == pytest.approx(0.5027, abs=1e-3)
    assert oracle.combined_throughput(r18, r50, "a100") == 0.0


def test_the_lone_time_says_what_was_pending_beside_a_gpu_running_one_job():
    """bench_packing --why, post hoc from the run's start/join/end history: a runs alone 0-20 s, b (a
    good partner by the test's own truth: 0.6x each) joins at 20 s, and after b ends a runs alone to its
    end; nothing else is pending, so all of a's lone time is "no shard job pending". Told that b arrived
    at 10 s (the trace, not the run), 10 s of it had a good partner pending; told that b was packed for
    another type, those 10 s had only shard jobs of other types pending."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
    import bench_packing as bp

    from slurm_sim.trace import TraceJob

    sim, runs = _sim({(R18, R18, "v100"): (0.6, 0.6)})
    a = _submit(sim, "resnet18", 32, 1000)          # 100 s alone
    sim.run_until(20.0)
    b = _submit(sim, "resnet18", 32, 200)           # 20 s alone: 20/0.6 s beside a
    sim.run()
    kinds = [(round(t, 3), k, j) for t, k, j, _n, _g in runs.history]
    end_b = 20.0 + 20.0 / 0.6
    assert kinds == [(0.0, "start", a), (20.0, "join", b), (round(end_b, 3), "end", b),
                     (round(sim.jobs[a].end_time, 3), "end", a)]
    trace = [TraceJob(a, 0.0, "u", "resnet18", 1, 32, 1000), TraceJob(b, 20.0, "u", "resnet18", 1, 32, 200)]
    lone = bp.lone_time(runs.history, trace, ["v100"], {a: ("v100",), b: ("v100",)}, runs.truth)
    alone_s = 20.0 + (sim.jobs[a].end_time - end_b)
    assert lone["no shard job pending"] == pytest.approx(alone_s)
    assert sum(lone.values()) == pytest.approx(alone_s)
    # b submitted at 10 s but started at 20 s: those 10 s a good partner (0.6 + 0.6 >= 1.0) was pending
    trace[1] = TraceJob(b, 10.0, "u", "resnet18", 1, 32, 200)
    lone = bp.lone_time(runs.history, trace, ["v100"], {a: ("v100",), b: ("v100",)}, runs.truth)
    assert lone["good partner pending"] == pytest.approx(10.0)
    assert lone["no shard job pending"] == pytest.approx(alone_s - 10.0)
    # packed for another type only: pending, but not a partner there
    lone = bp.lone_time(runs.history, trace, ["v100"], {a: ("v100",), b: ("p100",)}, runs.truth)
    assert lone["shard jobs pending, other types"] == pytest.approx(10.0)


def test_lone_starts_tells_a_start_beside_an_open_shard_of_its_type():
    """bench_packing --why: a starts alone on GPU 0; b starts on GPU 1 of the same v100 node while a's
    shard beside it is open (what the simulator's backfill pass does); c joins b; d starts after a ended.
    Only b started beside an open shard of a type it may use. Packed for the p100 only, b would not have."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
    import bench_packing as bp

    history = [(0.0, "start", "a", 0, 0), (5.0, "start", "b", 0, 1), (6.0, "join", "c", 0, 1),
               (9.0, "end", "a", 0, 0), (9.0, "start", "d", 0, 0)]
    types = {j: ("v100",) for j in "abcd"}
    assert bp.lone_starts(history, ["v100"], types) == {"no open shard": 2, "open shard of its type": 1}
    types["b"] = ("p100",)
    assert bp.lone_starts(history, ["v100"], types) == {"no open shard": 3, "open shard of its type": 0}


@pytest.mark.parametrize(("limit_b", "joins"), [(100.0, True), (300.0, False)])
def test_backfill_fills_an_open_shard_whose_limits_hold_the_gpu_no_longer(limit_b, joins):
    """One node, 2 GPUs: shard job a alone on GPU 0 (limit 200 s), a gpu job on GPU 1, then a 2-GPU job
    that cannot start blocks the main pass in the node's partitions, so the shard job b behind it is left
    to backfill. Backfill joins b to a's open shard (as Slurm fills a GPU's shards) when b's limit ends
    no later than a's (the GPU is then held no longer than the reservations count); with a longer limit
    b waits, since a join could delay the 2-GPU job."""
    truth = PerfTable([PerfRow("resnet18", "v100", 1, 32, "float", 100.0),
                       PerfRow("resnet18", "v100", 2, 32, "float", 60.0)])
    sim = Simulator(with_shard_nodes(parse_cluster("v100:2x1")), truth)
    ShardRuns(PairTruth({(R18, R18, "v100"): (0.6, 0.6)})).attach(sim)
    a = _submit(sim, "resnet18", 32, 1000, time_limit_s=200.0)
    sim.submit(num_gpus=1, model="resnet18", iterations=1000, batch_size=32, time_limit_s=200.0)
    sim.run_until(10.0)
    big = sim.submit(num_gpus=2, model="resnet18", iterations=1000, batch_size=32, time_limit_s=100.0)
    b = _submit(sim, "resnet18", 32, 100, time_limit_s=limit_b)
    sim.run_until(10.0)
    assert sim.jobs[big].state == "PENDING"
    assert (sim.jobs[b].state == "RUNNING") == joins
    if joins:
        assert sim.jobs[b].nodes == sim.jobs[a].nodes and sim.packing.pairs[-1]["b"] == b


def _bound_case(fractions: tuple[float, float], gpus: str = "v100:1x1", limit_s: float | None = None):  # noqa: ANN202
    """Two 1-GPU ResNet-18 jobs of 10 h each (36,000 iterations at 1 s), both at t=0, and a pair speed."""
    from slurm_sim.trace import TraceJob

    truth = PerfTable([PerfRow("resnet18", "v100", 1, 32, "float", 1000.0)])
    jobs = [TraceJob(f"j{i}", 0.0, "u", "resnet18", 1, 32, 36_000, time_limit_s=limit_s) for i in range(2)]
    return jobs, truth, with_shard_nodes(parse_cluster(gpus)), PairTruth({(R18, R18, "v100"): fractions})


def test_the_pair_bound_runs_a_good_pair_together_and_keeps_a_crawling_one_apart():
    from slurm_sim.packing import pair_lp_bound

    # one GPU: alone the two jobs take 20 h one after the other; together at 0.75x each they need
    # 10 h / 0.75 = 13.33 h of the shared GPU
    b = pair_lp_bound(*_bound_case((0.75, 0.75)))
    assert b.solo_s == pytest.approx(20 * 3600, rel=1e-5)
    assert b.value_s == pytest.approx(10 * 3600 / 0.75, rel=1e-5)
    assert b.pair_kinds == 1
    assert b.paired_share == pytest.approx(1.0, abs=1e-6)
    # 0.4x beside a 0.9x partner: below the 0.5x rule, never paired (min_own 0 lets it in: combined 1.3)
    crawl = pair_lp_bound(*_bound_case((0.4, 0.9)))
    assert (crawl.value_s, crawl.pair_kinds) == (pytest.approx(20 * 3600, rel=1e-5), 0)
    assert pair_lp_bound(*_bound_case((0.4, 0.9)), min_own=0.0).value_s < 19 * 3600
    # two GPUs: each job on its own ends at 10 h, and no job is shorter than its runtime, whatever pairs do
    two = pair_lp_bound(*_bound_case((0.75, 0.75), "v100:1x2"))
    assert (two.solo_s, two.value_s) == (pytest.approx(10 * 3600, rel=1e-5), pytest.approx(10 * 3600, rel=1e-5))
    # the area bound alone (no elapsed rows): 20 GPU-hours of work on 2 GPUs, or 13.33 shared ones
    area = pair_lp_bound(*_bound_case((0.75, 0.75), "v100:1x2"), lengths=False)
    assert area.solo_s == pytest.approx(10 * 3600, rel=1e-5)
    assert area.value_s == pytest.approx(10 * 3600 / 0.75 / 2, rel=1e-5)


def test_the_pair_bound_counts_a_capped_job_by_its_elapsed_time():
    from slurm_sim.packing import pair_lp_bound

    # limits of 5 h: each job is killed at 5 h whatever its speed, so a paired hour uses up an hour of it;
    # sharing the one GPU the two end together at 5 h, alone one after the other at 10 h
    b = pair_lp_bound(*_bound_case((0.75, 0.75), limit_s=5 * 3600))
    assert b.solo_s == pytest.approx(10 * 3600, rel=1e-5)
    assert b.value_s == pytest.approx(5 * 3600, rel=1e-5)


def test_spread_moves_arrivals_as_the_control_does():
    """bench_packing --spread (a workload variant) and --control-jitter move the same seed's arrivals the
    same way, so a packed run with --spread compares with the control's unpacked run: by at most S
    seconds each, none before 0."""
    import sys
    from pathlib import Path

    from slurm_sim.trace import TraceJob

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
    import bench_packing as bp

    trace = [TraceJob(f"j{i}", 30.0 * i, "u", "resnet18", 1, 32, 10) for i in range(20)]
    a, b = bp.moved(trace, 3, 60.0), bp.moved(trace, 3, 60.0)
    assert [j.submit_time for j in a] == [j.submit_time for j in b]
    assert all(0.0 <= m.submit_time and abs(m.submit_time - j.submit_time) <= 60.0 + 1e-9 and m.job_id == j.job_id
               for m, j in zip(a, trace, strict=True))
    assert [j.submit_time for j in a] != [j.submit_time for j in trace]
    assert [j.submit_time for j in bp.moved(trace, 4, 60.0)] != [j.submit_time for j in a]


def test_a_guard_refusal_is_judged_by_the_measured_pairs():
    """judge_refusal: the queue holds an LM and a ResNet-18; the guard (here: any partner that is an LM)
    flags the LM. Gavel's truth for the job beside the LM decides: 0.3x -> the refusal was right; 0.6x
    each -> cautious (the pair would have kept the 0.5x rule). The queue's measured make-up counts the
    ResNet-18 (0.7 + 0.7 >= 1) as good either way; a pair measured out of memory (absent) is bad."""
    from msched.estimate.interference import JobSpeeds
    from msched.tag import JobTag
    from slurm_sim.packing import SimPacking

    tag = JobTag(model="resnet18", bs=32)
    r18, lm = JobSpeeds({"v100": 10.0}, 32), JobSpeeds({"v100": 50.0}, 20)
    queue = [(r18, JobTag(model="resnet18", bs=32)), (lm, JobTag(model="lm", bs=20))]
    flag_lm = lambda a, b, t: 0.3 if b is lm else 0.9  # noqa: E731
    good = {(R18, R18, "v100"): (0.7, 0.7)}
    right = SimPacking(PairTruth({**good, (R18, LM, "v100"): (0.3, 0.9)})).judge_refusal(tag, r18, queue, "v100", flag_lm)
    assert right == {"refusals": 1, "queued partners": 2, "queue measured good": 1,
                     "flagged, measured < 0.5x": 1, "refusal right": 1}
    cautious = SimPacking(PairTruth({**good, (R18, LM, "v100"): (0.6, 0.6)})).judge_refusal(tag, r18, queue, "v100", flag_lm)
    assert cautious == {"refusals": 1, "queued partners": 2, "queue measured good": 2,
                        "flagged, measured >= 0.5x": 1, "refusal cautious": 1}
    unfit = SimPacking(PairTruth(good)).judge_refusal(tag, r18, queue, "v100", flag_lm)
    assert unfit["refusal right"] == 1 and unfit["queue measured good"] == 1


def _bench():  # noqa: ANN202 - the bench module
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
    import bench_packing as bp

    return bp


def test_the_room_counts_the_time_some_one_gpu_job_waited_and_the_tail_after_the_last():
    """bench_packing --room on hand-made outcomes: 1-GPU jobs a (waits 0-2 h), b (waits 1-3 h), c (no
    wait); an 8-GPU job z ends last at 10 h. Some 1-GPU job waited 0-3 h (the union, 3 h); the last
    1-GPU start is b's at 3 h, so 7 h of the makespan come after it; the work sharing added and the
    shared time come from the packed run's figures (2 x 1 h shared of 12 h of 1-GPU running time)."""
    from types import SimpleNamespace as NS

    from slurm_sim.metrics import JobOutcome
    from slurm_sim.trace import TraceJob

    bp = _bench()
    H = 3600.0
    outs = [JobOutcome("a", "p", "v100", 0.0, 2 * H, 6 * H, 1, "COMPLETED"),
            JobOutcome("b", "p", "v100", 1 * H, 3 * H, 7 * H, 1, "COMPLETED"),
            JobOutcome("c", "p", "v100", 0.0, 0.0, 4 * H, 1, "COMPLETED"),
            JobOutcome("z", "p", "v100", 0.5 * H, 4 * H, 10 * H, 8, "COMPLETED", model="transformer")]
    trace = [TraceJob(o.job_id, o.submit, "u", "m", o.num_gpus, 32, 10) for o in outs]
    run = NS(outcomes=outs, metrics={"makespan_s": 10 * H})
    r = bp.room(trace, run, run, {"shared_gpu_s": 1 * H, "gained_gpu_s": 0.96 * H}, {"a", "b"}, 96)
    m = r["msched"]
    assert (m["makespan_h"], m["one_waiting_h"], m["one_last_start_h"], m["tail_after_one_h"]) == (10, 3, 3, 7)
    assert m["last"] == {"model": "transformer", "gpus": 8, "gpu_type": "v100", "submit_h": 0.5, "start_h": 4,
                         "run_h": 6}
    assert r["shard_waiting_h"] == 3 and r["paired_time_share"] == pytest.approx(2 / 12)
    assert r["gained_gpu_h"] == pytest.approx(0.96) and r["gained_cluster_h"] == pytest.approx(0.01)


def test_wide_reports_when_a_node_of_the_last_jobs_type_first_stood_whole():
    """bench_packing --wide's whole_nodes on hand-made outcomes: the 8-GPU job z (v100) arrives at 1 h.
    v100-1 holds a (0-5 h) and b (2-6 h): whole at 6 h; v100-2 holds c (0-3 h) and d, which starts as
    c ends (3-8 h): whole for a moment at 3 h, the first, made so by c, and d took it; z starts at 6 h
    on v100-1. One whole-node moment in z's wait [1, 6) h; the p100 node, empty throughout, is not z's type."""
    from slurm_sim.metrics import JobOutcome

    bp = _bench()
    H = 3600.0

    def out(job, submit, start, end, gpus, node, gpu_type="v100"):  # noqa: ANN001, ANN202, PLR0913
        return JobOutcome(job, "p", gpu_type, submit * H, start * H, end * H, gpus, "COMPLETED", model=job,
                          nodes=(node,))
    ran = [out("a", 0, 0, 5, 4, "v100-1"), out("b", 0, 2, 6, 4, "v100-1"), out("c", 0, 0, 3, 8, "v100-2"),
           out("d", 2, 3, 8, 2, "v100-2"), out("z", 1, 6, 10, 8, "v100-1"), out("p", 0, 0, 0.5, 1, "p100-1", "p100")]
    w = bp.whole_nodes(ran, "v100", 1 * H, 6 * H, exclude="z")
    assert (w["first_h"], w["node"], w["events"]) == (3, "v100-2", 1)
    assert w["leaver"] == {"model": "c", "gpus": 8, "submit_h": 0, "start_h": 0}
    # a node with no job at the arrival is whole then
    w = bp.whole_nodes([out("a", 0, 0, 0.5, 4, "v100-1"), *ran[1:]], "v100", 1 * H, 6 * H, exclude="z")
    assert (w["first_h"], w["node"], w["leaver"]) == (1, "v100-1", None)


def test_wide_types_counts_where_the_8_gpu_jobs_ran_in_either_run():
    """bench_packing --wide's wide_types: z ran on a v100 after a 200 h wait without packing and on a k80
    at once with it; y ran on a p100 in both; the 1-GPU job a is not counted."""
    from types import SimpleNamespace as NS

    from slurm_sim.metrics import JobOutcome

    bp = _bench()
    H = 3600.0
    plain = NS(outcomes=[JobOutcome("z", "p", "v100", 10 * H, 210 * H, 212 * H, 8, "COMPLETED", model="lm"),
                         JobOutcome("y", "p", "p100", 0.0, 0.0, 5 * H, 8, "COMPLETED"),
                         JobOutcome("a", "p", "v100", 0.0, 0.0, 5 * H, 1, "COMPLETED")])
    pack = NS(outcomes=[JobOutcome("z", "p", "k80", 10 * H, 12 * H, 52 * H, 8, "COMPLETED", model="lm"),
                        JobOutcome("y", "p", "p100", 0.0, 1 * H, 6 * H, 8, "COMPLETED"),
                        JobOutcome("a", "p", "k80", 0.0, 0.0, 5 * H, 1, "COMPLETED")])
    w = bp.wide_types(plain, pack)
    assert w["moves"] == {"v100 -> k80": 1, "p100 -> p100": 1}
    assert w["moved"] == [{"model": "lm", "submit_h": 10, "types": "v100 -> k80", "wait_h": (200, 2), "run_h": (2, 40)}]


def test_the_rule_bound_offers_only_the_pairs_mscheds_rule_passes():
    """bench_packing --bound-kinds lp_rule: a pair the predictor (here a stub) passes keeps its measured
    speeds, one it refuses (combined below 1.0, or the slower under 0.5x) is offered as (0, 0)."""
    from types import SimpleNamespace as NS

    bp = _bench()
    truth = PerfTable([PerfRow("resnet18", "v100", 1, 32, "float", 100.0), PerfRow("lm", "v100", 1, 20, "float", 100.0)])
    measured = PairTruth({(R18, R18, "v100"): (0.6, 0.6), (R18, LM, "v100"): (0.7, 0.7), (LM, LM, "v100"): (0.8, 0.8)})
    rule = bp.RulePairs(measured, truth, None)
    verdict = {("resnet18", "resnet18"): (1.2, 0.6), ("lm", "resnet18"): (0.9, 0.6), ("lm", "lm"): (1.3, 0.4)}

    def key(a, b):  # noqa: ANN001, ANN202 - the two jobs' models, told apart by their batch sizes
        return tuple(sorted("resnet18" if j.batch_size == 32 else "lm" for j in (a, b)))
    rule.model = NS(combined_throughput=lambda a, b, t: verdict[key(a, b)][0])
    rule.slower = lambda a, b, t: verdict[key(a, b)][1]
    assert rule.pair(("resnet18", 32), ("resnet18", 32), "v100") == (0.6, 0.6)
    assert rule.pair(("resnet18", 32), ("lm", 20), "v100") == (0.0, 0.0)      # predicted combined 0.9 < 1.0
    assert rule.pair(("lm", 20), ("lm", 20), "v100") == (0.0, 0.0)            # the guard: 0.4x < 0.5x
