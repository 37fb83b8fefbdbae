"""The packing interference predictor (msched.estimate.interference) on a slice of Gavel's pair measurements
(tests/data/gavel_pairs_sample.json: 8 single-GPU job types of Gavel's simulation_throughputs.json, MIT)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from msched.estimate.interference import (
    JobSpeeds,
    family_of,
    fit,
    job_type_of,
    leave_one_out,
    load_model,
    pair_features,
    read_gavel,
)

SAMPLE = Path(__file__).resolve().parent / "data" / "gavel_pairs_sample.json"
R50, R18 = "ResNet-50 (batch size 64)", "ResNet-18 (batch size 32)"


@pytest.fixture(scope="module")
def gavel():
    return read_gavel(SAMPLE)


def test_reading_gavel_turns_steps_per_second_into_combined_throughput(gavel):
    jobs, pairs = gavel
    # by hand from the file: on a v100, ResNet-50 (b64) alone 4.3948 steps/s, ResNet-18 (b32) alone
    # 29.9472; together 3.7047 and 15.0552 steps/s -> 3.7047/4.3948 + 15.0552/29.9472 = 0.8430 + 0.5027
    assert json.loads(SAMPLE.read_text())["v100"][f"('{R18}', 1)"]["null"] == pytest.approx(29.9472, abs=1e-4)
    assert jobs[R50].iter_ms["v100"] == pytest.approx(1000 / 4.3948, rel=1e-4)
    (pair,) = [p for p in pairs if (p.a, p.b, p.gpu_type) == (R50, R18, "v100")]
    assert pair.combined == pytest.approx(1.3457, abs=1e-3)
    assert jobs[R50].batch_size == 64 and jobs["A3C"].batch_size == 1
    assert all(p.combined > 0 for p in pairs)                       # pairs that did not fit are dropped


def test_pair_features_are_symmetric(gavel):
    jobs, _ = gavel
    assert pair_features(jobs[R50], jobs[R18], "p100") == pair_features(jobs[R18], jobs[R50], "p100")


def test_pure_python_forest_predicts_what_scikit_learn_predicts(gavel):
    from sklearn.ensemble import RandomForestRegressor
    jobs, pairs = gavel
    model = fit(jobs, pairs, trees=10, max_depth=4, seed=3)
    x = [pair_features(jobs[p.a], jobs[p.b], p.gpu_type) for p in pairs]
    ref = RandomForestRegressor(n_estimators=10, max_depth=4, min_samples_leaf=3, max_features=0.5, random_state=3)
    ref.fit(x, [p.combined for p in pairs])
    for row, expected in zip(x, ref.predict(x), strict=True):
        assert model.predict_features(row) == pytest.approx(expected)


@pytest.mark.parametrize("key", [job_type_of, family_of])
def test_leave_one_out_never_trains_on_the_held_out_job_type_or_family(gavel, key, monkeypatch):
    """The issue's validation: every pair holding the held-out job type (or, stricter, any type of the
    held-out family) is left out of the fit that predicts it, and every pair holding it is predicted."""
    import msched.estimate.interference as interference

    jobs, pairs = gavel
    fitted = []
    real_fit = interference.fit
    monkeypatch.setattr(interference, "fit", lambda j, train, **kw: fitted.append(train) or real_fit(j, train, **kw))
    results = leave_one_out(jobs, pairs, key, trees=3, max_depth=3)
    expected = {key(t) for t in jobs}
    assert [r.held_out for r in results] == sorted(expected)
    assert len(expected) == len({t if key is job_type_of else t.split(" (")[0] for t in jobs}) > 1
    for r, train in zip(results, fitted, strict=True):
        held = [p for p in pairs if r.held_out in (key(p.a), key(p.b))]
        assert not any(r.held_out in (key(p.a), key(p.b)) for p in train)
        assert len(train) + len(held) == len(pairs)
        assert r.pairs == len(held) and r.measured == [p.combined for p in held]
        assert r.mean_abs_error == pytest.approx(
            sum(abs(a - b) for a, b in zip(r.predicted, r.measured, strict=True)) / len(held))


def test_shipped_model_loads_and_answers_in_pure_python():
    model = load_model()
    a = JobSpeeds({"k80": 300.0, "p100": 120.0, "v100": 80.0}, batch_size=64)
    b = JobSpeeds({"k80": 40.0, "p100": 30.0, "v100": 28.0}, batch_size=16)
    value = model.combined_throughput(a, b, "v100")
    assert 0.0 < value < 2.5 and value == model.combined_throughput(b, a, "v100")
    assert model.meta["pairs"] > 1000                               # fitted on the whole Gavel table


# ------------------------------------------------------------------------------------------ the guard
def test_pure_python_quantile_guard_predicts_what_scikit_learn_predicts(gavel):
    """The guard is evaluated from its JSON in pure Python on msub's path: on the training rows and on
    2,000 random feature vectors spread past the data's range, it gives what scikit-learn's own
    `predict` gives (the trees compare float32 features, as scikit-learn's do)."""
    import random

    from msched.estimate.interference import Boosted, fit_quantile

    jobs, pairs = gavel
    x = [jobs[p.a].features(p.gpu_type) + jobs[p.b].features(p.gpu_type) for p in pairs]
    boosted, ref = fit_quantile(x, [p.own_a for p in pairs], seed=1, estimators=40, raw=True)
    boosted = Boosted.from_dict(json.loads(json.dumps(boosted.to_dict())))        # as stored
    rng = random.Random(0)
    lows = [min(col) - 1.0 for col in zip(*x, strict=True)]
    highs = [max(col) + 1.0 for col in zip(*x, strict=True)]
    probe = x + [[rng.uniform(lo, hi) for lo, hi in zip(lows, highs, strict=True)] for _ in range(2000)]
    for row, expected in zip(probe, ref.predict(probe), strict=True):
        assert boosted.predict(row) == pytest.approx(expected, rel=1e-9, abs=1e-12)
    assert len({round(boosted.predict(r), 6) for r in probe}) > 20        # not a constant


def test_the_shipped_guard_is_a_low_quantile_of_measured_own_speeds(gavel):
    """Alpha 0.1: about one job in ten runs slower than its bound (in-sample on the sample's pairs,
    which the shipped fit saw), and the bound sits below the mean forest's prediction for most."""
    model = load_model()
    assert model.bound_own is not None and model.meta["guard"] == {"alpha": 0.1, "seen_radius": 0.5}
    jobs, pairs = gavel
    below = n = under_mean = 0
    for p in pairs:
        for x, y, measured in ((p.a, p.b, p.own_a), (p.b, p.a, p.own_b)):
            bound = model.own_bound(jobs[x], jobs[y], p.gpu_type)
            assert bound is not None                                    # Gavel's own job types are seen
            n += 1
            below += measured < bound
            under_mean += bound < model.own_speed(jobs[x], jobs[y], p.gpu_type)
    assert 0.02 <= below / n <= 0.25, (below, n)
    assert under_mean / n > 0.8


def test_a_job_outside_the_data_gets_no_bound(gavel):
    """SEEN_RADIUS: a job whose features are more than 0.5 (log units) from every job type the fit saw
    gets no bound, and the guard then calls the pair unsafe (0.0)."""
    from msched.estimate.interference import SEEN_RADIUS

    model = load_model()
    jobs, _ = gavel
    r18, r50 = jobs[R18], jobs[R50]
    assert model.is_seen(r18, "v100") and model.guard_slower(r18, r50, "v100") > 0.0
    near = JobSpeeds({t: ms * math.exp(SEEN_RADIUS * 0.5) for t, ms in r18.iter_ms.items()}, r18.batch_size)
    far = JobSpeeds({t: ms * math.exp(4.0) for t, ms in r18.iter_ms.items()}, r18.batch_size)
    assert model.is_seen(near, "v100")
    assert not model.is_seen(far, "v100")
    assert model.own_bound(far, r50, "v100") is None and model.own_bound(r50, far, "v100") is None
    assert model.guard_slower(far, r50, "v100") == 0.0 == model.guard_slower(r50, far, "v100")
    assert model.slower_for("mean") == model.slower_speed and model.slower_for("bound") == model.guard_slower


def test_a_fitted_guard_survives_its_json(gavel):
    from msched.estimate.interference import InterferenceModel

    jobs, pairs = gavel
    model = fit(jobs, pairs, trees=3, max_depth=3)
    again = InterferenceModel.from_json(model.to_json())
    a, b = jobs[R18], jobs[R50]
    for t in ("k80", "p100", "v100"):
        assert again.own_bound(a, b, t) == model.own_bound(a, b, t) is not None
    assert fit(jobs, pairs, trees=3, max_depth=3, guard=False).bound_own is None
