"""Precision detection from a submission's text (msched.models.precision)."""

from __future__ import annotations

import pytest

from msched.models.precision import detect_precision, normalise_precision


@pytest.mark.parametrize(("line", "expected"), [
    ("python train.py --amp --arch resnet50", "half"),
    ("python train.py --use-amp", "half"),
    ("python train.py --fp16", "half"),
    ("torchrun main.py --bf16 --model vit_b_16", "bfloat16"),
    ("python main.py --precision 16-mixed", "half"),
    ("python main.py --precision=bf16-mixed", "bfloat16"),
    ("python main.py --precision 64", "double"),
    ("python main.py --mixed-precision fp16", "half"),
    ("python main.py --opt-level O2", "half"),
    ("python main.py --precision=32", "float"),
    ("python main.py --arch resnet50", None),
    ("python main.py --amplitude 3", None),          # not --amp
    ("python main.py --precision fancy", None),       # unknown value: nothing said
])
def test_command_line_flags(line, expected):
    assert detect_precision([f"#!/bin/bash\n#SBATCH --gres=gpu:1\n{line}\n"]) == expected


def test_directive_wins_and_comments_do_not_count():
    script = "#!/bin/bash\n# python old.py --fp16\npython train.py --bf16\n"
    assert detect_precision([script]) == "bfloat16"
    assert detect_precision([script], directive="double") == "double"
    assert detect_precision([script], directive="nonsense") == "bfloat16"
    assert detect_precision(["", "python t.py --fp16"]) == "half"     # --wrap text


def test_normalise():
    assert normalise_precision("FP16") == "half" and normalise_precision("tf32") == "float"
    assert normalise_precision("int8") is None


# ------------------------------------------------------------------ the tag and the estimator call
def test_tag_carries_precision_and_bounds_it():
    from msched.tag import JobTag, parse_tag

    tag = JobTag(model="resnet50", ref="resnet50", prec="half")
    back, _user, why = parse_tag(tag.encode())
    assert why == "" and back.prec == "half"
    # the field's bounds: at most 8 characters of lowercase letters, digits and `_`
    for bad in ("halfhalf1", "HALF", "ha-lf"):
        assert parse_tag(f"msched:v1;model=resnet50;prec={bad}")[0] is None


def test_msub_reads_precision_from_directive_and_script():
    from msched.msub.decide import job_precision
    from msched.msub.directives import msched_directives, settings_from_words
    from msched.msub.sbatch_args import SbatchRequest

    script = "#!/bin/bash\n#MSCHED --precision=bf16\npython train.py --fp16\n"
    settings = settings_from_words(msched_directives(script)[0])
    assert settings.precision == "bfloat16" and not settings.problems
    assert job_precision(settings, SbatchRequest(), script) == "bfloat16"      # the directive wins
    plain = settings_from_words([])
    assert job_precision(plain, SbatchRequest(), "#!/bin/bash\npython train.py --amp\n") == "half"
    assert job_precision(plain, SbatchRequest(values={"wrap": "python t.py --bf16"}), None) == "bfloat16"
    assert job_precision(plain, SbatchRequest(), "#!/bin/bash\npython train.py\n") == ""
    bad = settings_from_words([("precision", "fancy")])
    assert bad.precision is None and "not a precision" in bad.problems[0]


def test_table_estimator_uses_the_tags_precision():
    from msched.estimate.estimators import TagEstimator
    from msched.estimate.perf_table import PerfRow, PerfTable
    from msched.tag import JobTag
    from msched.util.record import record

    @record
    class Job:
        num_gpus: int = 1
        time_limit_s: float | None = None

    perf = PerfTable([PerfRow("resnet50", "a100", 1, 12, "float", 40.0, ""),
                      PerfRow("resnet50", "a100", 1, 12, "half", 25.0, ""),
                      PerfRow("vgg16", "a100", 1, 12, "float", 50.0, "")])
    est = TagEstimator(perf)
    tag = JobTag(model="resnet50", iters=1000, bs=12)
    assert est(Job(), tag)["a100"] == pytest.approx(40.0)            # no precision said: float rows
    half = est.estimates(Job(), tag._replace(prec="half"))["a100"]
    assert half.seconds == pytest.approx(25.0)
    # a model measured only at float: its float rows, and the source says so
    only_float = est.estimates(Job(), JobTag(model="vgg16", iters=1000, bs=12, prec="half"))["a100"]
    assert only_float.seconds == pytest.approx(50.0) and "none at half" in only_float.source


def test_predictor_uses_tensor_cores_for_half():
    """Tensor cores change which type is fastest. Measured (gpu-train-benchmarks, resnet50, batch 12):
    float a100 36.0 ms < titanv 50.5 ms; half titanv 29.1 ms < a100 30.5 ms (a100's float already runs
    convolutions in TF32); titanxp (Pascal, no tensor cores) 75.0 ms float, 93.7 ms half. The predictor,
    told the job's precision, must pick the same fastest type in both cases."""
    from msched.estimate.predictor import PredictorTimes

    times = PredictorTimes(None, types=["a100", "titanv", "titanxp"], memory_check=False)
    f = {t: s for t, (s, _src) in times("resnet50", 1, 12).items()}
    h = {t: s for t, (s, _src) in times("resnet50", 1, 12, precision="half").items()}
    assert min(f, key=f.get) == "a100" and min(h, key=h.get) == "titanv"
    assert h["titanv"] / f["titanv"] < 0.8 and h["titanxp"] / f["titanxp"] > 0.95


@pytest.mark.parametrize("tag_fields, limit, want", [
    ({"iters": 36_000}, None, {"a100": 900.0, "titanv": 3600.0}),
    ({"iters": 36_000}, 1000.0, {"a100": 900.0}),                        # titanv past the limit: dropped
    ({"model": "my_vgg", "iters": 36_000, "flops": 2.0}, None, {"a100": 1800.0, "titanv": 7200.0}),  # by its ref
    ({}, 1800.0, {"a100": 450.0, "titanv": 1800.0}),                     # no iterations: the limit on titanv
    ({"iters": 36_000, "pinned": "a100"}, 1000.0, {"a100": 900.0}),
    ({"iters": 100_000, "pinned": "a100"}, 1000.0, {"a100": 1000.0}),    # over the limit everywhere: limit used
    ({"model": "resnet50", "ref": "resnet50", "iters": 1000}, None, {}),  # not in the table
])
def test_the_rounds_estimate_is_the_estimates_seconds(tag_fields, limit, want):
    """A round asks the estimator for seconds only (`TagEstimator.__call__`, by `job_runtimes`, without the
    texts of `estimates`): the same seconds as `estimates`, and the ones the table gives (vgg16: 25 ms an
    iteration on a100, 100 ms on titanv)."""
    from msched.estimate.estimators import TagEstimator
    from msched.estimate.perf_table import PerfRow, PerfTable
    from msched.tag import JobTag
    from msched.util.record import record

    @record
    class Job:
        num_gpus: int = 1
        time_limit_s: float | None = None
        gres_gpu_type: str | None = None

    perf = PerfTable([PerfRow("vgg16", "a100", 1, 12, "float", 25.0, ""),
                      PerfRow("vgg16", "titanv", 1, 12, "float", 100.0, "")])
    est = TagEstimator(perf)
    tag = JobTag(**{"model": "vgg16", "ref": "vgg16", "bs": 12, **tag_fields})
    job = Job(time_limit_s=limit)
    seconds = est(job, tag)
    assert seconds == pytest.approx(want) and list(seconds) == list(want)
    assert seconds == {t: e.seconds for t, e in est.estimates(job, tag).items()}
