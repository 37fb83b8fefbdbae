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
