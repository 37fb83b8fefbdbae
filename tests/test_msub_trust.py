"""msub never runs code the submitting user does not own, and never as root (issue 13, point 5).

The attack: `msub --msched-dry-run /home/alice/job.sh` run by root (or by bob), where the script says
`#MSCHED --model=/home/alice/evil.py:build`, used to import evil.py as uid 0 (or as bob). Each model
file below writes a marker file when imported, into a directory everyone may write to, so the marker
proves whether its code ran, whoever ran it. A user's own model still gets profiled, in a child with
memory and CPU limits.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

from msched.errors import ProfileError
from msched.models import profile_cache
from msched.models.profiler import profile_subprocess
from msched.msub.directives import detect_model, known_models
from msched.tag import parse_comment

SBATCH = "/usr/bin/sbatch"

EVIL = """
import os
open(os.path.join({markers!r}, {name!r} + "-" + str(os.geteuid())), "w").write("ran")

def build():
    import torch.nn as nn
    return nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 2))
"""


@pytest.fixture
def shared(tmp_path_factory):
    """A world-traversable tree: markers/ (sticky, everyone writes), a site config, scripts."""
    import tempfile
    base = Path(tempfile.mkdtemp(prefix="msub-trust-"))
    base.chmod(0o755)
    markers = base / "markers"
    markers.mkdir()
    markers.chmod(0o1777)
    conf = base / "msched.toml"
    state = base / "state"
    state.mkdir()
    state.chmod(0o755)
    now = time.time()
    free_at = dict.fromkeys(("a100", "titanv", "rtx2080ti", "titanxp"), 0)
    (state / "gpu_free_time.json").write_text(json.dumps({"time": now, "free_at": free_at}))
    (state / "gpu_free_time.json").chmod(0o644)
    conf.write_text(f'sbatch = "{SBATCH}"\nstate_dir = "{state}"\n')
    conf.chmod(0o644)
    yield base
    import shutil
    shutil.rmtree(base, ignore_errors=True)


def _model(directory: Path, name: str, markers: Path, owner: tuple[int, int] | None = None, mode: int = 0o644) -> Path:
    p = directory / f"{name}.py"
    p.write_text(EVIL.format(markers=str(markers), name=name))
    p.chmod(mode)
    if owner:
        os.chown(p, *owner)
    return p


def _ran(markers: Path) -> list[str]:
    return sorted(p.name for p in markers.iterdir())


# ----------------------------------------------------------------------------- the ownership rule
def test_untrusted_reason_file_and_directory(tmp_path):
    d = tmp_path / "models"
    d.mkdir(mode=0o755)
    f = d / "m.py"
    f.write_text("x = 1\n")
    f.chmod(0o644)
    me = os.geteuid()
    assert profile_cache.untrusted_reason(str(f)) is None
    assert "belongs to" in profile_cache.untrusted_reason(str(f), uid=me + 4242)
    f.chmod(0o664)
    assert profile_cache.untrusted_reason(str(f)) == f"model file {f} is writable by other users"
    f.chmod(0o644)
    d.chmod(0o777)
    assert profile_cache.untrusted_reason(str(f)) == f"model directory {d} is writable by other users"
    d.chmod(0o1777)                         # sticky (like /tmp): others may still drop a torch.py beside it
    assert "writable by other users" in profile_cache.untrusted_reason(str(f))
    assert profile_cache.untrusted_reason(str(d / "absent.py")) is None     # the profiler reports it missing


def test_get_profile_refuses_a_file_writable_by_others_before_running_it(tmp_path, monkeypatch):
    monkeypatch.setenv("MSCHED_CACHE_DIR", str(tmp_path / "cache"))
    markers = tmp_path / "markers"
    markers.mkdir()
    d = tmp_path / "open"
    d.mkdir()
    d.chmod(0o777)
    f = _model(d, "opendir", markers)
    with pytest.raises(profile_cache.UntrustedModelError, match="writable by other users: not running its code"):
        profile_cache.get_profile(f"{f}:build")
    assert _ran(markers) == []


# ----------------------------------------------------------------------------- the child's limits
def test_profiler_child_memory_limit(tmp_path):
    f = tmp_path / "hog.py"
    f.write_text("block = bytearray(12 << 30)\n\ndef build():\n    pass\n")
    with pytest.raises(ProfileError) as exc:
        profile_subprocess(f"{f}:build", timeout=60, memory_limit_bytes=2 << 30)
    assert "MemoryError" in str(exc.value) and "memory limit is 2 GiB" in str(exc.value)


def test_profiler_child_cpu_limit(tmp_path):
    f = tmp_path / "spin.py"
    f.write_text("while True:\n    pass\n\ndef build():\n    pass\n")
    start = time.monotonic()
    with pytest.raises(ProfileError, match="more than its 2 s of CPU"):
        profile_subprocess(f"{f}:build", timeout=60, cpu_limit_s=2)
    assert time.monotonic() - start < 30                    # the CPU limit, not the 60 s wall timeout


def test_profiler_child_does_not_import_from_the_working_directory(tmp_path, monkeypatch):
    """`-P`: a `json.py` left in the (shared) directory msub runs in is not imported by the child."""
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    (cwd / "json.py").write_text("raise SystemExit('imported the json.py of the working directory')\n")
    f = tmp_path / "models" / "ok.py"
    f.parent.mkdir()
    f.write_text(EVIL.format(markers=str(tmp_path), name="ok"))
    monkeypatch.chdir(cwd)
    assert profile_subprocess(f"{f}:build", timeout=120).params == (3 * 8 * 9 + 8) + (8 * 2 + 2)


# ----------------------------------------------------------------------------- detection (issue 13, point 7)
@pytest.mark.parametrize("form", ["--model {p}:build", "--model={p}:build", "--arch {p}:build", "--net '{p}:build'"])
def test_model_file_with_factory_is_detected(tmp_path, form):
    p = tmp_path / "net.py"
    p.write_text("def build(): pass\n")
    assert detect_model([f"python train.py {form.format(p=p)} --epochs 3"], known_models()) == f"{p}:build"


def test_missing_model_file_is_not_detected(tmp_path):
    assert detect_model([f"python train.py --model {tmp_path}/none.py:build"], known_models()) is None


# ----------------------------------------------------------------------------- msub as root and as another user
def _msub_argv() -> list[str]:
    return [str(Path(sys.executable).with_name("msub"))]


def _root_msub(args: list[str], conf: Path, cwd: Path):
    import subprocess
    env = {**os.environ, "MSCHED_CONFIG": str(conf)}
    return subprocess.run([*_msub_argv(), *args], capture_output=True, text=True, timeout=120, env=env, cwd=cwd)


def _user_msub(user, args: list[str], conf: Path, cwd: Path, pycache: Path, **kw):
    env = {"MSCHED_CONFIG": str(conf), "PYTHONPYCACHEPREFIX": str(pycache)}
    return user.run([*_msub_argv(), *args], env=env, cwd=cwd, **kw)


def _warnings(stderr: str) -> list[str]:
    return [ln for ln in stderr.splitlines() if ln.startswith("msub: warning:")]


@pytest.fixture
def alice_home(shared, ordinary_user):
    """The ordinary user's own directory (0755, theirs) holding their models and job script."""
    home = shared / "alice"
    home.mkdir()
    os.chown(home, ordinary_user.uid, ordinary_user.gid)
    home.chmod(0o755)
    return home


def _job(home: Path, model_spec: str, owner: tuple[int, int]) -> Path:
    s = home / "job.sh"
    s.write_text(f"#!/bin/sh\n#SBATCH --gres=gpu:1\n#MSCHED --model={model_spec} --iterations=100\npython train.py\n")
    s.chmod(0o644)
    os.chown(s, *owner)
    return s


@pytest.mark.slurm
def test_root_msub_runs_no_model_code(slurm_cluster, ordinary_user, shared, alice_home, janitor):
    """Root submits alice's job (as a site's helper might): neither alice's unknown model file nor one
    named after a torchvision model is imported; the first goes in plain, the second is classified by
    its name; one warning each; both jobs are submitted."""
    owner = (ordinary_user.uid, ordinary_user.gid)
    markers = shared / "markers"
    evil = _model(alice_home, "evil", markers, owner)
    named = _model(alice_home, "vgg16", markers, owner)
    for spec, expect_tag in ((f"{evil}:build", False), (f"{named}:build", True)):
        job = _job(alice_home, spec, owner)
        proc = _root_msub(["--hold", "--parsable", str(job)], shared / "msched.toml", alice_home)
        assert proc.returncode == 0, proc.stderr
        job_id = janitor.add(proc.stdout.strip().split(";")[0])
        warns = _warnings(proc.stderr)
        assert len(warns) == 1 and "msub runs no model code as root" in warns[0], proc.stderr
        comment = slurm_cluster.run(["squeue", "-h", "-j", job_id, "-o", "%k"], check=True).stdout.strip()
        tag, _ = parse_comment(comment)
        if expect_tag:
            assert "classified by its name vgg16" in warns[0]
            assert tag is not None and tag.model == spec and tag.ref == "vgg16"
        else:
            assert "plain sbatch job" in warns[0] and tag is None
    assert _ran(markers) == []


@pytest.mark.slurm
def test_dry_run_as_root_runs_no_model_code(ordinary_user, shared, alice_home):
    owner = (ordinary_user.uid, ordinary_user.gid)
    markers = shared / "markers"
    evil = _model(alice_home, "evil", markers, owner)
    proc = _root_msub(["--msched-dry-run", str(_job(alice_home, f"{evil}:build", owner))],
                      shared / "msched.toml", alice_home)
    assert proc.returncode == 0 and proc.stdout.startswith("sbatch command: "), proc.stderr
    assert len(_warnings(proc.stderr)) == 1 and _ran(markers) == []


@pytest.mark.slurm
def test_another_users_model_file_is_not_run(slurm_cluster, ordinary_user, shared, alice_home, janitor):
    """The ordinary user names a model file that belongs to root (another user, to them): not run."""
    markers = shared / "markers"
    theirs = shared / "root-models"
    theirs.mkdir()
    theirs.chmod(0o755)
    evil = _model(theirs, "evil", markers)                         # owned by root, readable by all
    owner = (ordinary_user.uid, ordinary_user.gid)
    job = _job(alice_home, f"{evil}:build", owner)
    proc = _user_msub(ordinary_user, ["--hold", "--parsable", str(job)], shared / "msched.toml", alice_home,
                      shared / "pycache")
    assert proc.returncode == 0, proc.stderr
    janitor.add(proc.stdout.strip().split(";")[0])
    warns = _warnings(proc.stderr)
    assert len(warns) == 1 and f"model file {evil} belongs to root, not to {ordinary_user.name}" in warns[0]
    assert _ran(markers) == []


@pytest.mark.slurm
@pytest.mark.slow
def test_own_model_file_is_profiled_and_an_open_directory_is_not(slurm_cluster, ordinary_user, shared, alice_home,
                                                               janitor):
    owner = (ordinary_user.uid, ordinary_user.gid)
    markers = shared / "markers"
    mine = _model(alice_home, "mine", markers, owner)
    proc = _user_msub(ordinary_user, ["--hold", "--parsable", str(_job(alice_home, f"{mine}:build", owner))],
                      shared / "msched.toml", alice_home, shared / "pycache", timeout=300)
    assert proc.returncode == 0 and _warnings(proc.stderr) == [], proc.stderr
    job_id = janitor.add(proc.stdout.strip().split(";")[0])
    assert _ran(markers) == [f"mine-{ordinary_user.uid}"]          # ran, as the user, not as root
    comment = slurm_cluster.run(["squeue", "-h", "-j", job_id, "-o", "%k"], check=True).stdout.strip()
    assert parse_comment(comment)[0].model == f"{mine}:build"
    # the same user's file in a directory anyone can write to (a torch.py could be dropped beside it)
    open_dir = shared / "open"
    open_dir.mkdir()
    os.chown(open_dir, *owner)
    open_dir.chmod(0o1777)
    exposed = _model(open_dir, "exposed", markers, owner)
    proc = _user_msub(ordinary_user, ["--hold", "--parsable", str(_job(alice_home, f"{exposed}:build", owner))],
                      shared / "msched.toml", alice_home, shared / "pycache", timeout=300)
    assert proc.returncode == 0, proc.stderr
    janitor.add(proc.stdout.strip().split(";")[0])
    warns = _warnings(proc.stderr)
    assert len(warns) == 1 and "is writable by other users" in warns[0]
    assert _ran(markers) == [f"mine-{ordinary_user.uid}"]
