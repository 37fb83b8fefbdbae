"""The submit price of the scarce fast GPU types (msched.policy.price) and the free slack
(msched.policy.choice.completion_choice): hand-worked figures, the site option, the file the reorderer
publishes for msub, and the round that sets the prices. Both are off by default; BENCHMARKS.md (jct10)
has what they measured."""

from __future__ import annotations

import json

import pytest

from msched.config import Config, ConfigError, load_config
from msched.policy import get_policy
from msched.policy.choice import completion_choice
from msched.policy.price import clean_prices, priced_types, saving, submit_prices

H = 3600.0


def test_a_saving_is_against_the_median_type():
    est = {"a100": 1 * H, "titanv": 2 * H, "rtx2080ti": 3 * H, "titanxp": 4 * H, "gtx1080ti": 5 * H}
    assert saving(est, "a100") == 2 * H                 # median 3 h
    assert saving(est, "titanxp") == -1 * H
    assert saving(est, "a100", "ratio") == pytest.approx(2.0)    # 3 h / 1 h - 1
    assert saving({"a": 2.0, "b": 4.0}, "a") == 1.0       # the median of two: their mean


def test_prices_are_a_quantile_of_the_recent_savings():
    # ten jobs, each 1x on a100 and 2x, 3x elsewhere: median = 2x, so a100 saves 1x the job's a100 time
    samples = [{"a100": k * 100.0, "titanv": k * 200.0, "titanxp": k * 300.0} for k in range(1, 11)]
    prices = submit_prices(samples, 0.5)
    assert prices == {"a100": 500.0}         # savings 100..1000: the 5th of 10; titanv saves 0, titanxp < 0
    assert submit_prices(samples, 0.9) == {"a100": 900.0}
    assert submit_prices(samples, 1.0) == {"a100": 1000.0}
    assert submit_prices(samples, 0.5, measure="ratio") == {"a100": 1.0}    # every job 2x / 1x - 1
    assert submit_prices(samples[:9], 0.5) == {}          # fewer than 10 jobs: no price
    assert submit_prices([*samples, {"a100": 5.0}], 0.5) == {"a100": 500.0}   # a one-type job says nothing
    with pytest.raises(ValueError, match="quantile"):
        submit_prices(samples, 1.5)


def test_a_priced_type_is_kept_for_the_jobs_that_clear_its_price():
    short = {"a100": 100.0, "titanv": 200.0, "titanxp": 300.0}       # saves 100 s on a100
    long = {"a100": 1000.0, "titanv": 2000.0, "titanxp": 3000.0}     # saves 1000 s
    price = {"a100": 500.0}
    assert priced_types(short, price) == {"titanv": 200.0, "titanxp": 300.0}
    assert priced_types(long, price) == long
    assert priced_types(short, {"a100": 500.0, "titanv": 500.0, "titanxp": 500.0}) == short   # none left: all
    assert priced_types({"a100": 5.0}, price) == {"a100": 5.0}
    assert priced_types(short, None) == short
    # the ratio measure: a100 is 2x the median for both, so a 1.5x price keeps both off it
    assert "a100" not in priced_types(long, {"a100": 1.5}, "ratio")
    assert "a100" in priced_types(long, {"a100": 0.9}, "ratio")


def test_published_prices_are_bounded():
    assert clean_prices({"a100": 60.0, "titanv": 1}, known={"a100"}) == {"a100": 60.0}
    for bad in ({"a100": 0.0}, {"a100": -1.0}, {"a100": float("inf")}, {"a100": "60"}, {"a100": False},
                {"a100": 1e9}, {1: 60.0}, {"x" * 65: 60.0}, {f"t{k}": 1.0 for k in range(65)}, ["a100", 60.0],
                "a100=60", None):
        assert clean_prices(bad) == {}, bad


def test_the_free_slack_narrows_only_when_the_best_type_is_free_and_another_busy():
    now = 0.0
    est = {"a100": 100.0, "titanrtx": 120.0, "titanxp": 200.0}
    busy = {"a100": now, "titanrtx": now, "titanxp": now + 1000.0}
    assert completion_choice(est, busy, now, 1.25) == ("a100", "titanrtx")
    assert completion_choice(est, busy, now, 1.25, free_slack=1.0) == ("a100",)
    assert completion_choice(est, busy, now, 1.25, free_slack=2.0) == ("a100", "titanrtx")   # never wider
    idle = dict.fromkeys(est, now)                 # every type free (no round yet): the burst still spreads
    assert completion_choice(est, idle, now, 1.25, free_slack=1.0) == ("a100", "titanrtx")
    waiting = {"a100": now + 10.0, "titanrtx": now, "titanxp": now}     # the best (a100, 110 s) is busy
    assert completion_choice(est, waiting, now, 1.25, free_slack=1.0) == ("a100", "titanrtx")
    # the wait factor: a100's 10 s wait taken three times over (130 s) makes titanrtx (120 s) the best
    assert completion_choice(est, waiting, now, 1.0) == ("a100",)
    assert completion_choice(est, waiting, now, 1.0, wait_factor=3.0) == ("titanrtx",)


def test_the_site_option_and_the_policy_options(tmp_path):
    conf = tmp_path / "msched.toml"
    conf.write_text('submit_price = "ratio:0.75"\nconstraint_free_slack = 1.1\n')
    config = load_config(conf)
    assert config.price_options == {"price_quantile": 0.75, "price_measure": "ratio"}
    assert config.constraint_free_slack == 1.1
    assert Config().price_options == {}
    for bad in ('submit_price = "ratio"', 'submit_price = "speed:0.5"', 'submit_price = "saving:2"',
                "constraint_free_slack = 0.9"):
        conf.write_text(bad + "\n")
        with pytest.raises(ConfigError):
            load_config(conf)
    policy = get_policy("msched", price_quantile=0.5, price_measure="ratio", free_slack=1.0, wait_factor=1.5)
    assert (policy.price_quantile, policy.price_measure, policy.free_slack, policy.wait_factor) == (0.5, "ratio", 1.0, 1.5)
    for opts in ({"price_quantile": 2.0}, {"price_measure": "speed"}, {"free_slack": 0.5}, {"wait_factor": 0.5}):
        with pytest.raises(ValueError):
            get_policy("msched", **opts)


def test_the_reorderer_publishes_the_prices_and_carries_them_on(tmp_path):
    from msched.rounds.reorder import publish_free_time

    path = tmp_path / "gpu_free_time.json"
    publish_free_time(path, 100.0, {"a100": 160.0}, 900.0, {"price": {"a100": 42.0}, "price_measure": "ratio"})
    data = json.loads(path.read_text())
    assert (data["price"], data["price_measure"], data["plan_end"]) == ({"a100": 42.0}, "ratio", 900.0)
    publish_free_time(path, 100.0, {"a100": 160.0}, None, {"price": {}, "price_measure": "ratio"})
    assert "price" not in json.loads(path.read_text())          # no prices set: no key


def test_a_round_sets_prices_from_the_recent_jobs():
    """A simulated cluster with 11 jobs of one model on a fast and a slow type: the round's prices (the
    policy's `price_quantile`) name the fast type only; without the option the round publishes none."""
    from msched.estimate.estimators import TagEstimator
    from msched.estimate.perf_table import PerfTable
    from msched.rounds.core import run_round
    from msched.slurm.base import JobRequest
    from msched.tag import JobTag, with_tag
    from slurm_sim.client import SimClient
    from slurm_sim.cluster import parse_cluster
    from slurm_sim.simulator import Simulator

    perf = PerfTable.load(Config().performance)
    sim = Simulator(parse_cluster("a100:4x1,titanxp:4x2,rtx2080ti:4x1"), perf, scheduler="backfill")
    client = SimClient(sim)
    for k in range(11):
        tag = JobTag(model="vgg16", ref="vgg16", iters=1000 * (k + 1), bs=32)
        client.submit(JobRequest(name=f"j{k}", num_gpus=1, comment=with_tag(tag, None), time_limit_s=86400.0,
                                 extra={"model": "vgg16", "iterations": 1000 * (k + 1), "batch_size": 32}))
    sim.run_until(sim.now + 1.0)
    est = TagEstimator(perf)
    priced = run_round(client, get_policy("msched", price_quantile=0.5), est, now=sim.now, dry_run=True)
    off = run_round(client, get_policy("msched"), est, now=sim.now, dry_run=True)
    assert off.submit_price == {}
    fast = min(("a100", "titanxp", "rtx2080ti"), key=lambda t: perf.runtime_s("vgg16", t, 1, 32, 1000) or 1e9)
    assert set(priced.submit_price) == {fast}
    assert priced.submit_price[fast] > 0
