"""The profiler's input spec for models that are not image classifiers: a factory returning (model,
example input), or `#MSCHED --input-shape` in the file; and the per-layer-kind fields the cost model reads."""

from __future__ import annotations

import pytest

from msched.errors import ProfileError
from msched.models.profiler import input_shape_directive, profile_in_process, sync_steps_directive

LSTM_LM = '''
import torch
import torch.nn as nn


class LanguageModel(nn.Module):
    def __init__(self, vocab=10000, dim=256):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.lstm = nn.LSTM(dim, dim, num_layers=2, batch_first=True)
        self.out = nn.Linear(dim, vocab)

    def forward(self, tokens):
        h, _ = self.lstm(self.embed(tokens))
        return self.out(h)


def lm():
    # token ids: a batch of 4 sequences of 35 tokens
    return LanguageModel(), torch.zeros(4, 35, dtype=torch.long)
'''

SMALL_CNN = '''
#MSCHED --input-shape=3,32,32
import torch.nn as nn


def cifar_cnn():
    return nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(16 * 32 * 32, 10))
'''


def test_factory_returning_model_and_example_input(tmp_path):
    path = tmp_path / "lm.py"
    path.write_text(LSTM_LM)
    prof = profile_in_process(f"{path}:lm")
    assert prof.input_shape == (35,)
    # per sample: the output projection over 35 tokens, 2 x 256 x 10000 FLOPs each (the batch of 4 divided out)
    assert prof.flops_by_kind["linear"] == pytest.approx(35 * 2 * 256 * 10000)
    assert prof.calls_by_kind["linear"] == 1
    assert prof.bytes_by_kind["linear"] == 35 * 10000 * 4
    # the LSTM runs 2 layers x 35 time steps per forward pass, whatever the batch
    assert prof.recurrent_steps == 2 * 35


def test_input_shape_directive(tmp_path):
    path = tmp_path / "cnn.py"
    path.write_text(SMALL_CNN)
    assert input_shape_directive(str(path)) == (3, 32, 32)
    prof = profile_in_process(f"{path}:cifar_cnn")
    assert prof.input_shape == (3, 32, 32)
    assert prof.flops_by_kind["conv_spatial"] == pytest.approx(2 * 16 * 32 * 32 * 3 * 9)
    assert prof.params_by_kind == {"conv_spatial": 16 * 3 * 9 + 16, "linear": 16 * 32 * 32 * 10 + 10}


def test_bad_input_shape_directive_is_one_line(tmp_path):
    path = tmp_path / "bad.py"
    path.write_text("#MSCHED --input-shape=3,big,32\nimport torch.nn as nn\ndef f():\n    return nn.Linear(2, 2)\n")
    with pytest.raises(ProfileError, match="expected integers"):
        profile_in_process(f"{path}:f")


def test_sync_steps_directive(tmp_path):
    """`#MSCHED --sync-steps=N`: a loop whose host waits for the GPU every step (an RL rollout) says so in
    its file; the profile carries it, a file without the line gets 0, a bad value is one line."""
    path = tmp_path / "rollout.py"
    path.write_text("#MSCHED --sync-steps=20 --input-shape=3,32,32\n" + SMALL_CNN)
    assert sync_steps_directive(str(path)) == 20
    assert profile_in_process(f"{path}:cifar_cnn").sync_steps == 20
    plain = tmp_path / "cnn.py"
    plain.write_text(SMALL_CNN)
    assert sync_steps_directive(str(plain)) == 0
    assert profile_in_process(f"{plain}:cifar_cnn").sync_steps == 0
    bad = tmp_path / "bad_sync.py"
    bad.write_text("#MSCHED --sync-steps=many\nimport torch.nn as nn\ndef f():\n    return nn.Linear(2, 2)\n")
    with pytest.raises(ProfileError, match="whole number"):
        profile_in_process(f"{bad}:f")


def test_gavel_a3c_file_declares_its_synchronous_rollout():
    from msched.estimate.training_data import gavel_model_spec

    assert sync_steps_directive(gavel_model_spec("a3c").rpartition(":")[0]) == 20
    for other in ("resnet18", "transformer", "lm", "recommendation", "cyclegan"):
        assert sync_steps_directive(gavel_model_spec(other).rpartition(":")[0]) == 0


def test_per_kind_fields_of_a_torchvision_model():
    prof = profile_in_process("resnet50")
    # ReLU modules are reused inside each bottleneck: calls count every use, counts the modules
    assert prof.calls_by_kind["act_relu"] > prof.counts["act_relu"]
    assert sum(prof.bytes_by_kind.values()) == prof.activation_bytes
    assert sum(prof.params_by_kind.values()) == prof.params


def test_gavel_recommendation_file_is_items_based():
    """Gavel's recommendation workload (recoder's DynamicAutoencoder, hidden 200, user_based=False) spans
    MovieLens-20M's 20,108 items: 2 x 20,108 x 200 weights plus 200 + 20,108 biases."""
    from msched.estimate.training_data import gavel_model_spec

    prof = profile_in_process(gavel_model_spec("recommendation"))
    assert prof.input_shape == (20_108,)
    assert prof.params == 2 * 20_108 * 200 + 200 + 20_108 == 8_063_508
    # forward FLOPs per sample: the two linear layers' multiply-adds
    assert prof.flops_by_kind["linear"] == pytest.approx(2 * 2 * 20_108 * 200)


BIGRU = '''
import torch
import torch.nn as nn


class Tagger(nn.Module):
    def __init__(self):
        super().__init__()
        self.gru = nn.GRU(16, 32, num_layers=3, bidirectional=True)   # time-major input
        self.cell = nn.LSTMCell(64, 8)
        self.out = nn.Linear(8, 5)

    def forward(self, x):
        h, _ = self.gru(x)
        c, _ = self.cell(h[-1])
        return self.out(c)


def tagger():
    return Tagger(), torch.zeros(12, 2, 16)   # time-major: 12 steps of 2 sequences
'''


def test_recurrent_steps_of_a_time_major_bidirectional_gru_and_a_cell(tmp_path):
    path = tmp_path / "tagger.py"
    path.write_text(BIGRU)
    prof = profile_in_process(f"{path}:tagger")
    # 3 layers x 12 steps x 2 directions, and one step of the cell
    assert prof.recurrent_steps == 3 * 12 * 2 + 1


def test_profile_version_is_part_of_the_cache_key(tmp_path, monkeypatch):
    from msched.models import profile_cache

    path = tmp_path / "cnn.py"
    path.write_text(SMALL_CNN)
    before = profile_cache._file_key(str(path), "cifar_cnn", None)
    assert profile_cache._file_key(str(path), "cifar_cnn", None) == before
    monkeypatch.setattr(profile_cache, "PROFILE_VERSION", profile_cache.PROFILE_VERSION + 1)
    assert profile_cache._file_key(str(path), "cifar_cnn", None) != before
