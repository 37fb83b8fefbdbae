"""The profiler: real torchvision models built on the meta device, user model files in a subprocess."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from msched.models import profile_cache
from msched.models.profiler import ProfileError, parse_spec, profile_in_process, torchvision_names

REPO = Path(__file__).resolve().parent.parent
SHIPPED = REPO / "msched" / "data" / "torchvision_features.json"

USER_MODEL = textwrap.dedent("""
    import torch.nn as nn

    def make():
        return nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
            nn.Conv2d(16, 16, 1), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10))

    def not_a_module():
        return {"layers": 3}

    def broken():
        raise ValueError("factory exploded")
""")


@pytest.fixture
def cache(tmp_path, monkeypatch):
    d = tmp_path / "cache"
    monkeypatch.setenv("MSCHED_CACHE_DIR", str(d))
    return d


@pytest.fixture
def user_model(tmp_path) -> Path:
    p = tmp_path / "mymodel.py"
    p.write_text(USER_MODEL)
    return p


# --------------------------------------------------------------------------- torchvision models
def test_resnet50_profile_matches_published_figures():
    prof = profile_in_process("resnet50")
    assert prof.input_size == 224
    assert prof.params == 25_557_032
    assert prof.conv2d == 53
    assert prof.flops == pytest.approx(8.18e9, rel=0.005)         # ~4.1 GMACs per 224x224 sample
    assert prof.counts["conv_pointwise"] + prof.counts["conv_spatial"] == 53
    assert prof.counts["linear"] == 1 and prof.counts["batchnorm"] == 53
    assert prof.ops["residual_add"] == 16                          # 3 + 4 + 6 + 3 bottleneck blocks
    assert prof.build == "meta"
    # the per-kind FLOPs (from the layer hooks) add up to the counter's total
    assert sum(prof.flops_by_kind.values()) == pytest.approx(prof.flops, rel=1e-6)


def test_default_input_sizes_and_eval_mode():
    inception = profile_in_process("inception_v3")
    assert inception.input_size == 299          # its own size; it returns a tuple in train mode
    assert profile_in_process("googlenet").input_size == 224
    vit = profile_in_process("vit_h_14")
    assert vit.input_size == 224                # built without weights, ViT takes only 224
    assert vit.counts["attention"] == 32
    bigger = profile_in_process("resnet50", input_size=448)
    assert bigger.flops == pytest.approx(4 * profile_in_process("resnet50").flops, rel=0.01)


def test_depthwise_and_grouped_convolutions_are_split_out():
    mb = profile_in_process("mobilenet_v2")
    assert mb.counts["conv_grouped"] == 17        # one depthwise conv per inverted residual block
    assert mb.counts["conv_pointwise"] > mb.counts["conv_spatial"]
    rx = profile_in_process("resnext50_32x4d")
    assert rx.counts["conv_grouped"] == 16 and "conv_grouped" in rx.flops_by_kind


def test_tensor_computing_constructor_uses_the_fallback():
    prof = profile_in_process("regnet_y_400mf")   # computes its widths with tensors: fails under meta
    assert prof.build == "meta-params"
    assert prof.params == 4_344_144 and prof.flops > 7e8


@pytest.fixture(scope="module")
def all_profiles():
    """Every torchvision classification model, profiled once for the module, on two worker processes
    (about 40 CPU-seconds in all)."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    names = torchvision_names()
    start = time.perf_counter()
    workers = max(1, min(2, os.cpu_count() or 1))
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        profiles = list(pool.map(profile_in_process, names, chunksize=4))
    return dict(zip(names, profiles, strict=True)), time.perf_counter() - start


@pytest.mark.slow
def test_all_torchvision_classification_models_profile(all_profiles):
    profiles, seconds = all_profiles
    import torchvision

    assert sorted(profiles) == sorted(torchvision.models.list_models(module=torchvision.models))
    assert len(profiles) == 80
    for name, p in profiles.items():
        assert p.flops > 1e7 and p.params > 1e5 and p.depth > 0 and p.activation_bytes > 0, name
    assert {p.build for p in profiles.values()} == {"meta", "meta-params"}
    print(f"profiled {len(profiles)} models in {seconds:.1f} s")


@pytest.mark.slow
def test_shipped_table_matches_a_fresh_profile(all_profiles):
    profiles, _ = all_profiles
    shipped = json.loads(SHIPPED.read_text())
    assert sorted(shipped["models"]) == sorted(profiles)
    for name, fresh in profiles.items():
        s = shipped["models"][name]
        assert (s["params"], s["counts"], s["ops"], s["input_size"]) == \
            (fresh.params, fresh.counts, fresh.ops, fresh.input_size), name
        assert s["flops"] == pytest.approx(fresh.flops, rel=1e-9), name


# --------------------------------------------------------------------------- bad specs
@pytest.mark.parametrize("spec, message", [
    ("resnet5", "did you mean resnet50"),
    ("", "empty model spec"),
    ("model.py", "needs its factory"),
    ("dir/model", "needs its factory"),
    ("model.py:1bad", "not a Python name"),
])
def test_bad_specs_give_one_line_errors(spec, message, cache):
    with pytest.raises(ProfileError) as exc:
        profile_cache.get_profile(spec)
    assert message in str(exc.value) and "\n" not in str(exc.value)


def test_parse_spec_resolves_paths(tmp_path):
    ms = parse_spec(f"{tmp_path}/../{tmp_path.name}/m.py:make")
    assert ms.is_file and ms.path == str(tmp_path / "m.py") and ms.factory == "make"
    assert parse_spec("resnet50").name == "resnet50"


# --------------------------------------------------------------------------- user model files
def test_user_factory_file_is_profiled_in_a_subprocess_and_cached(user_model, cache, monkeypatch):
    spec = f"{user_model}:make"
    prof = profile_cache.get_profile(spec)
    # parameters and FLOPs of the little model, from the layer formulas
    assert prof.params == (3 * 16 * 9 + 16) + 2 * 16 + (16 * 16 + 16) + (16 * 10 + 10)
    expected = 2 * 16 * 224 * 224 * (3 * 9) + 2 * 16 * 224 * 224 * 16 + 2 * 10 * 16
    assert prof.flops == expected
    assert prof.counts["conv_spatial"] == 1 and prof.counts["conv_pointwise"] == 1
    files = list(profile_cache.cache_dir().glob("*.json"))
    assert len(files) == 1 and stat.S_IMODE(files[0].stat().st_mode) == 0o600
    assert stat.S_IMODE(profile_cache.cache_dir().stat().st_mode) == 0o700

    def must_not_run(*a, **k):
        raise AssertionError("a cached profile must not start a subprocess")

    monkeypatch.setattr(profile_cache, "profile_subprocess", must_not_run)
    assert profile_cache.get_profile(spec) == prof
    # editing the file changes its hash: the cache no longer answers
    user_model.write_text(USER_MODEL + "\n# edited\n")
    with pytest.raises(AssertionError, match="must not start"):
        profile_cache.get_profile(spec)


@pytest.mark.parametrize("factory, message", [
    ("not_a_module", "returned dict, not a torch.nn.Module"),
    ("broken", "factory exploded"),
    ("missing", "has no 'missing'; callables there: broken, make, not_a_module"),
])
def test_user_factory_errors(user_model, cache, factory, message):
    with pytest.raises(ProfileError) as exc:
        profile_cache.get_profile(f"{user_model}:{factory}")
    assert message in str(exc.value) and "\n" not in str(exc.value)
    assert not list(cache.rglob("*.json"))


def test_file_that_does_not_import(tmp_path, cache):
    bad = tmp_path / "bad.py"
    bad.write_text("import no_such_package_for_msched\n")
    with pytest.raises(ProfileError, match="does not import: ModuleNotFoundError"):
        profile_cache.get_profile(f"{bad}:make")
    with pytest.raises(ProfileError, match="no such file|cannot read"):
        profile_cache.get_profile(f"{tmp_path}/absent.py:make")


def test_hanging_factory_times_out_with_a_clear_error(tmp_path, cache):
    hang = tmp_path / "hang.py"
    hang.write_text("import time\ntime.sleep(3600)\ndef make():\n    pass\n")
    start = time.monotonic()
    with pytest.raises(ProfileError, match="did not finish within 2 s"):
        profile_cache.get_profile(f"{hang}:make", timeout=2)
    assert time.monotonic() - start < 15


# --------------------------------------------------------------------------- no torch on the cached path
def _modules_after(code: str, env: dict[str, str]) -> dict:
    probe = textwrap.dedent("""
        import atexit, json, sys
        def report():
            heavy = [m for m in ("torch", "torchvision", "numpy", "sklearn", "sqlalchemy") if m in sys.modules]
            print("MODULES " + json.dumps(heavy), file=sys.stderr)
        atexit.register(report)
    """) + textwrap.dedent(code)
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, timeout=120,
                          cwd=REPO)
    line = [ln for ln in proc.stderr.splitlines() if ln.startswith("MODULES ")][-1]
    return {"heavy": json.loads(line[8:]), "stdout": proc.stdout, "rc": proc.returncode}


def test_shipped_and_cached_profiles_do_not_import_torch(user_model, cache):
    env = {**os.environ, "MSCHED_CACHE_DIR": str(cache)}
    res = _modules_after("""
        from msched.cli import main
        main(["profile", "resnet50", "--json"])
    """, env)
    assert res["rc"] == 0 and json.loads(res["stdout"])["params"] == 25_557_032
    assert res["heavy"] == []
    spec = f"{user_model}:make"
    profile_cache.get_profile(spec)          # fills the cache (subprocess with torch)
    res = _modules_after(f"""
        from msched.models.profile_cache import get_profile
        print(get_profile({spec!r}).params)
    """, env)
    assert res["rc"] == 0 and int(res["stdout"]) == 922
    assert res["heavy"] == []


def test_profile_command(cache):
    msched = [sys.executable, "-m", "msched.cli"]
    out = subprocess.run([*msched, "profile", "densenet121"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "densenet121 at 224x224" in out.stdout and "conv_pointwise" in out.stdout
    bad = subprocess.run([*msched, "profile", "vgg1"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 1 and "Traceback" not in bad.stderr
    assert bad.stderr.strip().startswith("Error: unknown model 'vgg1'") and "vgg11" in bad.stderr
