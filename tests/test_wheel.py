"""The wheel a site installs works without the checkout: built from this tree, installed into a fresh venv
without torch, msub (dry run) tags and constrains a torchvision job and `msched classify` answers; and,
on the dev cluster, the installed msub run by an ordinary user submits a real job, tagged and constrained.

Why: every other test runs from the checkout, where the shipped tables sit beside the code whether or not
the packaging ships them. This one sees what a site sees.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest
from helpers import REPO

pytestmark = pytest.mark.slow
DATA_FILES = ("torchvision_features.json", "reference_models.json", "gpu_performance.csv", "measured_perf.csv")


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """A fresh venv holding the wheel and, of msched's dependencies, only click (copied from this
    environment, so no network is needed): torch, numpy and the rest are absent on purpose."""
    work = tmp_path_factory.mktemp("wheel")
    wheel = _wheel(work)
    names = zipfile.ZipFile(wheel).namelist()
    assert all(f"msched/data/{f}" in names for f in DATA_FILES), names
    env_dir = _venv_with(wheel, work / "venv")
    py = env_dir / "bin" / "python"
    probe = subprocess.run([str(py), "-c", "import torch"], capture_output=True, text=True)
    assert probe.returncode != 0, "the fresh venv must not see torch"
    return env_dir


def _wheel(work: Path) -> Path:
    """The wheel built from a copy of this tree (setuptools leaves build/ in the source tree, and a stale
    build/lib would put deleted modules into later wheels)."""
    src = work / "src"
    shutil.copytree(REPO, src, ignore=shutil.ignore_patterns(".git", ".venv", "build", "dist", ".slurm-dev*",
                                                             "__pycache__", "*.egg-info", "out", ".pytest_cache"))
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                            "-w", str(work / "dist"), str(src)], capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stderr
    return next((work / "dist").glob("msched-*.whl"))


def _venv_with(wheel: Path, env_dir: Path, python: str | None = None) -> Path:
    """A fresh venv (of `python`, default this interpreter) holding the wheel and, of msched's
    dependencies, only click (copied from this environment, so no network is needed)."""
    if python is None:
        venv.EnvBuilder(with_pip=False).create(env_dir)
    else:
        subprocess.run([python, "-m", "venv", "--without-pip", str(env_dir)], check=True, capture_output=True)
    py = env_dir / "bin" / "python"
    site = Path(subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    with zipfile.ZipFile(wheel) as zf:                      # a wheel is a zip of files laid out for site-packages
        zf.extractall(site)
    click_dir = Path(importlib.util.find_spec("click").origin).parent
    subprocess.run(["cp", "-r", str(click_dir), str(site)], check=True)
    subprocess.run([str(py), "-m", "compileall", "-q", str(site)], capture_output=True)   # as pip would
    return env_dir


def _run(env_dir: Path, module: str, args: list[str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    conf = tmp_path / "msched.toml"
    conf.write_text(f'sbatch = "/bin/true"\nstate_dir = "{tmp_path}"\n')
    env = {"PATH": "/usr/bin:/bin", "MSCHED_CONFIG": str(conf), "HOME": str(tmp_path),
           "XDG_CACHE_HOME": str(tmp_path / "cache")}
    return subprocess.run([str(env_dir / "bin" / "python"), "-m", module, *args], capture_output=True, text=True,
                          timeout=120, env=env, cwd=tmp_path)            # cwd far from the checkout


def test_msub_dry_run_from_the_wheel_tags_and_constrains(installed, tmp_path):
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/bash\n#SBATCH --gres=gpu:1\npython train.py --arch resnet50 --epochs 3\n")
    proc = _run(installed, "msched.msub.main", ["--msched-dry-run", "--time=600", str(script)], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "msub: warning" not in proc.stderr, proc.stderr
    assert "msched:v1;model=resnet50" in proc.stdout and "--constraint=" in proc.stdout, proc.stdout


def test_msched_classify_from_the_wheel(installed, tmp_path):
    proc = _run(installed, "msched.cli", ["classify", "efficientnet_b3", "--json"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    answer = json.loads(proc.stdout)
    refs = json.loads((REPO / "msched" / "data" / "reference_models.json").read_text())
    assert answer["nearest_reference"] in {r["name"] for r in refs["references"]}
    checkout = subprocess.run([sys.executable, "-m", "msched.cli", "classify", "efficientnet_b3", "--json"],
                              capture_output=True, text=True, timeout=120)
    assert answer == json.loads(checkout.stdout)           # the installed wheel answers as the checkout does


def test_unreadable_tables_give_a_warning_never_a_silent_untagged_job(installed, tmp_path):
    site = next((installed / "lib").glob("python3*/site-packages"))
    table = site / "msched" / "data" / "torchvision_features.json"
    saved = table.read_bytes()
    os.unlink(table)
    try:
        script = tmp_path / "job.sh"
        script.write_text("#!/bin/bash\n#SBATCH --gres=gpu:1\npython train.py --arch resnet50\n")
        proc = _run(installed, "msched.msub.main", ["--msched-dry-run", str(script)], tmp_path)
    finally:
        table.write_bytes(saved)
    assert proc.returncode == 0, proc.stderr
    warnings = [ln for ln in proc.stderr.splitlines() if ln.startswith("msub: warning:")]
    assert len(warnings) == 1 and "torchvision_features.json" in warnings[0], proc.stderr
    assert "model=" not in proc.stdout and "why=cannot%20read%20shipped%20profiles" in proc.stdout  # untagged, reason kept


@pytest.mark.slurm
def test_installed_msub_submits_a_real_job_tagged_and_constrained(slurm_cluster, janitor, ordinary_user, tmp_path):
    """What a site sees after `pip install` of the wheel (README "Installing msub on a real cluster"): an
    ordinary user's msub, from a venv of Debian's own Python (a venv of the checkout's pyenv Python is not
    runnable by other users: SLURM-NOTES), in a world-readable prefix, submits to the real cluster; the job
    carries msched's tag in its comment and a constraint of the dev cluster's GPU types."""
    import stat
    import tempfile

    if not Path("/usr/bin/python3").exists():
        pytest.skip("no /usr/bin/python3 to make a venv other users can run")
    prefix = Path(tempfile.mkdtemp(prefix="msched-site-"))
    try:
        os.chmod(prefix, 0o755)
        env_dir = _venv_with(_wheel(tmp_path), prefix / "venv", "/usr/bin/python3")
        for p in prefix.rglob("*"):        # a site's install: readable by everyone, writable by root only
            p.chmod(p.stat().st_mode | stat.S_IROTH | (stat.S_IXOTH if p.is_dir() or p.stat().st_mode & stat.S_IXUSR else 0))
        conf = prefix / "msched.toml"
        conf.write_text(f'sbatch = "{shutil.which("sbatch", path="/usr/bin:/bin")}"\nstate_dir = "{prefix / "state"}"\n')
        conf.chmod(0o644)
        work = Path(tempfile.mkdtemp(dir=ordinary_user.home))
        script = work / "job.sh"
        script.write_text("#!/bin/bash\n#SBATCH --gres=gpu:1\npython train.py --arch resnet50 --epochs 3\n")
        os.chown(work, ordinary_user.uid, ordinary_user.gid)
        os.chown(script, ordinary_user.uid, ordinary_user.gid)
        proc = ordinary_user.run([str(env_dir / "bin" / "python"), "-m", "msched.msub.main", "--hold", "--time=10",
                                  "--output=/dev/null", str(script)], cwd=work,
                                 env={"SLURM_CONF": str(slurm_cluster.conf), "MSCHED_CONFIG": str(conf)})
        assert proc.returncode == 0, proc.stderr
        assert "msub: warning" not in proc.stderr, proc.stderr
        assert proc.stdout.startswith("Submitted batch job "), proc.stdout          # sbatch's own output
        job = janitor.add(proc.stdout.split()[-1])
        shown = slurm_cluster.run(["squeue", "-h", "-j", job, "-o", "%u|%f"]).stdout.strip()
        user, features = shown.split("|")
        comment = slurm_cluster.run(["squeue", "-h", "-j", job, "-O", "Comment:1000"]).stdout.strip()
        assert user == ordinary_user.name
        assert comment.startswith("msched:v1;model=resnet50"), comment
        types = set(features.split("|"))
        assert types and types <= set(slurm_cluster.node_types.values()), features   # msub's constraint
    finally:
        shutil.rmtree(prefix, ignore_errors=True)
