"""The local dev cluster script and the command-line backend's behaviour against it that the shared
contract does not cover: idempotent `up`, `down` by pid file, jobs of an ordinary user, every GPU
request option, an unreachable controller, backend selection."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from pathlib import Path

import pytest
from conftest import SCRIPT
from helpers import wait_for

from msched.config import Config
from msched.slurm import get_client
from msched.slurm.base import SlurmError, SlurmUnavailable
from msched.slurm.cli import CliClient


def _client(cluster) -> CliClient:
    return CliClient(Config(), env={"SLURM_CONF": str(cluster.conf)})


def _state(pid: int) -> str:
    return subprocess.run(["ps", "-o", "stat=", "-p", str(pid)], capture_output=True, text=True).stdout.strip()


@pytest.mark.slurm
def test_up_is_idempotent_and_status_reports(slurm_cluster):
    t0 = time.monotonic()
    again = subprocess.run(["bash", str(SCRIPT), "up", "--dir", str(slurm_cluster.dir)],
                           capture_output=True, text=True, timeout=120)
    elapsed = time.monotonic() - t0
    assert again.returncode == 0, again.stderr
    assert "already running" in again.stderr
    assert again.stdout == f"export SLURM_CONF={slurm_cluster.conf}\n"
    assert elapsed < 10
    status = subprocess.run(["bash", str(SCRIPT), "status", "--dir", str(slurm_cluster.dir)],
                            capture_output=True, text=True, timeout=60)
    assert status.returncode == 0, status.stdout + status.stderr
    for node, gpu_type in slurm_cluster.node_types.items():
        assert f"slurmd {node} running" in status.stdout
        assert f"gpu:{gpu_type}:4" in status.stdout


@pytest.mark.slurm
def test_ordinary_user_job_runs_as_that_user_on_the_requested_type(slurm_cluster, ordinary_user, janitor):
    out = ordinary_user.home / "msched-contract-%j.out"
    sub = ordinary_user.run(["sbatch", "--parsable", "--gres=gpu:1", "--constraint=a100", f"--output={out}",
                             "--wrap", "id -un; echo gpus=$CUDA_VISIBLE_DEVICES"])
    assert sub.returncode == 0, sub.stderr
    job_id = janitor.add(sub.stdout.strip().split(";")[0])
    client = _client(slurm_cluster)
    done = wait_for(lambda: next((j for j in client.finished_jobs() if j.job_id == job_id), None), timeout=30,
                    message=f"job {job_id} to finish")
    assert done.state == "COMPLETED"
    assert done.user == ordinary_user.name
    assert done.nodes == "n1" and done.gpu_type == "a100"
    path = Path(str(out).replace("%j", job_id))
    try:
        lines = wait_for(lambda: path.exists() and path.read_text().split(), timeout=10, message=f"{path}")
        assert lines[0] == ordinary_user.name
        assert lines[1].startswith("gpus=") and lines[1] != "gpus="   # Slurm bound one GPU
        assert path.stat().st_uid == ordinary_user.uid
    finally:
        path.unlink(missing_ok=True)


@pytest.mark.slurm
@pytest.mark.parametrize("args,gpus,typed", [
    (["--gpus=2"], 2, None),
    (["--gpus=titanv:2"], 2, "titanv"),
    (["--gres=gpu:rtx2080ti:3"], 3, "rtx2080ti"),
    (["--gpus-per-node=2", "-N", "2"], 4, None),
    (["--gpus-per-task=1", "-n", "3"], 3, None),
])
def test_every_gpu_request_option_is_counted(slurm_cluster, janitor, args, gpus, typed):
    sub = slurm_cluster.run(["sbatch", "--parsable", "--hold", "-o", "/dev/null", *args, "--wrap", "true"])
    assert sub.returncode == 0, sub.stderr
    job_id = janitor.add(sub.stdout.strip())
    job = next(j for j in _client(slurm_cluster).jobs() if j.job_id == job_id)
    assert (job.num_gpus, job.gres_gpu_type) == (gpus, typed)


@pytest.mark.slurm
def test_unreachable_controller_raises_slurm_unavailable(slurm_cluster, tmp_path):
    conf = [ln for ln in slurm_cluster.conf.read_text().splitlines()
            if not ln.startswith(("SlurmctldPort=", "MessageTimeout="))]
    (tmp_path / "slurm.conf").write_text("\n".join([*conf, "SlurmctldPort=9", "MessageTimeout=1"]) + "\n")
    (tmp_path / "gres.conf").write_text((slurm_cluster.dir / "gres.conf").read_text())
    client = CliClient(Config(), env={"SLURM_CONF": str(tmp_path / "slurm.conf")}, timeout_s=30)
    for call in (client.jobs, client.nodes, lambda: client.set_priority("1", 5),
                 lambda: client.set_features("1", "a100")):
        with pytest.raises(SlurmUnavailable) as err:
            call()
        assert "\n" not in str(err.value) and "controller" in str(err.value).lower() or "Unexpected" in str(err.value)


def test_missing_commands_raise_slurm_unavailable(tmp_path):
    client = CliClient(Config(sbatch=str(tmp_path / "sbatch")), bin_dir=tmp_path)
    with pytest.raises(SlurmUnavailable, match="not found"):
        client.jobs()


def test_get_client_falls_back_to_cli_without_pyslurm():
    try:
        import pyslurm  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("pyslurm imports here: auto picks it")
    assert isinstance(get_client("auto", config=Config()), CliClient)
    assert isinstance(get_client("cli", config=Config()), CliClient)
    with pytest.raises(SlurmError, match="pyslurm"):
        get_client("pyslurm", config=Config())
    with pytest.raises(ValueError, match="auto, cli, pyslurm"):
        get_client("slurmrestd")


@pytest.mark.slurm
def test_up_refuses_without_root(slurm_cluster, ordinary_user, tmp_path):
    target = tmp_path / "cluster"
    res = ordinary_user.run(["bash", str(SCRIPT), "up", "--dir", str(target)])
    assert res.returncode != 0
    assert "needs root" in res.stderr or "Permission denied" in res.stderr


@pytest.mark.slurm
@pytest.mark.slow
def test_separate_cluster_up_runs_a_job_and_down_stops_its_daemons(slurm_cluster, tmp_path):
    """A second cluster in its own directory (ports derive from it): up, a job runs, down stops
    exactly its daemons (by pid file), leaving the session's cluster untouched. Something already
    listens on the port the directory hashes to (as another cluster's did when two test directories
    hashed alike, and the new slurmctld died while the other cluster's controller answered for it): up
    takes the next free ports and remembers them."""
    sdir = tmp_path / "c2"
    sdir.mkdir()
    crc = subprocess.run(["cksum"], input=str(sdir), capture_output=True, text=True, check=True)
    hashed = 20000 + int(crc.stdout.split()[0]) % 1200 * 10
    squatter = socket.socket()
    squatter.bind(("127.0.0.1", hashed))
    squatter.listen()
    t0 = time.monotonic()
    try:
        up = subprocess.run(["bash", str(SCRIPT), "up", "--dir", str(sdir)], capture_output=True, text=True,
                            timeout=180)
    finally:
        squatter.close()
    up_s = time.monotonic() - t0
    try:
        assert up.returncode == 0, up.stderr
        assert up.stdout.strip() == f"export SLURM_CONF={sdir / 'slurm.conf'}"
        base = int((sdir / "port-base").read_text())
        assert base != hashed and f"SlurmctldPort={base}\n" in (sdir / "slurm.conf").read_text()
        pids = {p.name: int(p.read_text()) for p in (sdir / "run").glob("*.pid")}
        assert set(pids) == {"slurmctld.pid", "slurmd-n1.pid", "slurmd-n2.pid", "slurmd-n3.pid", "slurmd-n4.pid"}
        client = CliClient(Config(), env={"SLURM_CONF": str(sdir / "slurm.conf")})
        assert {n.state for n in client.nodes()} == {"IDLE"}
        res = subprocess.run(["sbatch", "--parsable", "-o", "/dev/null", "--gres=gpu:1", "--constraint=titanxp",
                              "--wrap", "true"], capture_output=True, text=True,
                             env=dict(os.environ, SLURM_CONF=str(sdir / "slurm.conf")))
        job_id = res.stdout.strip()
        done = wait_for(lambda: next((j for j in client.finished_jobs() if j.job_id == job_id), None), timeout=30)
        assert done.state == "COMPLETED" and done.gpu_type == "titanxp"
    finally:
        down = subprocess.run(["bash", str(SCRIPT), "down", "--dir", str(sdir)], capture_output=True, text=True,
                              timeout=120)
    assert down.returncode == 0, down.stderr
    for name, pid in pids.items():
        state = _state(pid)
        assert state == "" or state.startswith("Z"), f"{name} (pid {pid}) still running: {state}"
    assert not list((sdir / "run").glob("*.pid"))
    status = subprocess.run(["bash", str(SCRIPT), "status", "--dir", str(sdir)], capture_output=True, text=True)
    assert status.returncode == 1
    # the session's own cluster still answers
    assert len(_client(slurm_cluster).nodes()) == 4
    print(f"second cluster up in {up_s:.2f}s")


@pytest.mark.slurm
def test_root_retypes_and_reprioritises_an_ordinary_users_job(slurm_cluster, ordinary_user, janitor):
    """The reorderer runs as the Slurm admin and changes users' pending jobs."""
    sub = ordinary_user.run(["sbatch", "--parsable", "--hold", "-o", "/dev/null", "--gres=gpu:1",
                             "--constraint=titanv", "--wrap", "sleep 5"])
    assert sub.returncode == 0, sub.stderr
    job_id = janitor.add(sub.stdout.strip())
    client = _client(slurm_cluster)
    client.set_features(job_id, "titanxp")
    client.release(job_id)
    job = wait_for(lambda: (j := client.job(job_id)) and j.state == "RUNNING" and j, timeout=30)
    assert job.user == ordinary_user.name and job.gpu_type == "titanxp"


@pytest.mark.slurm
@pytest.mark.parametrize("require,outcome", [("1", "failed"), ("", "skipped")])
def test_fixture_skips_without_root_and_fails_when_required(slurm_cluster, ordinary_user, require, outcome):
    """Run one Slurm test as the ordinary user: the fixture cannot start Slurm there, so it must skip
    with the reason, or fail when MSCHED_REQUIRE_SLURM=1 (what .ci/run sets)."""
    import sys

    from helpers import REPO
    res = ordinary_user.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "-o", "addopts=",
         f"{REPO}/tests/test_slurm_cluster.py::test_up_is_idempotent_and_status_reports"],
        env={"MSCHED_REQUIRE_SLURM": require, "PYTHONDONTWRITEBYTECODE": "1"}, cwd=REPO, timeout=120)
    out = res.stdout + res.stderr
    assert f"1 {outcome}" in out or (outcome == "failed" and "1 error" in out), out[-2000:]
    assert "needs root" in out


@pytest.mark.slurm
def test_user_squeue_environment_does_not_filter_the_client(slurm_cluster, janitor, monkeypatch):
    """SQUEUE_USERS/SQUEUE_FORMAT in the admin's shell must not hide jobs or break the parse."""
    sub = slurm_cluster.run(["sbatch", "--parsable", "--hold", "-o", "/dev/null", "--gres=gpu:1", "--wrap", "true"])
    job_id = janitor.add(sub.stdout.strip())
    monkeypatch.setenv("SQUEUE_USERS", "nobody")
    monkeypatch.setenv("SQUEUE_FORMAT", "%i %j")
    monkeypatch.setenv("SQUEUE_STATES", "RUNNING")
    assert job_id in {j.job_id for j in _client(slurm_cluster).jobs()}


def _accounting_available() -> bool:
    return os.path.exists("/usr/sbin/slurmdbd") and os.path.exists("/usr/sbin/mariadbd")


@pytest.mark.slurm
@pytest.mark.slow
def test_accounting_cluster_history_survives_a_controller_restart(slurm_cluster, tmp_path):
    """With `up --accounting` (slurmdbd + a private MariaDB), finished_jobs() reads sacct: a job's
    tag, GPUs and type are still there after the controller restarts with its state cleared."""
    if not _accounting_available() and os.environ.get("MSCHED_TEST_ACCOUNTING") != "1":
        pytest.skip("slurmdbd/mariadb-server not installed (MSCHED_TEST_ACCOUNTING=1 lets the script install them)")
    sdir = tmp_path / "acct"
    up = subprocess.run(["bash", str(SCRIPT), "up", "--dir", str(sdir), "--accounting"], capture_output=True,
                        text=True, timeout=400)
    try:
        assert up.returncode == 0, up.stderr
        env = dict(os.environ, SLURM_CONF=str(sdir / "slurm.conf"))
        client = CliClient(Config(), env={"SLURM_CONF": str(sdir / "slurm.conf")})
        comment = "msched:v1;model=vgg16;ref=vgg16;added=titanv|titanxp kept"
        res = subprocess.run(["sbatch", "--parsable", "-o", "/dev/null", "--gres=gpu:2", "--constraint=titanxp",
                              f"--comment={comment}", "--wrap", "true"], capture_output=True, text=True, env=env)
        job_id = res.stdout.strip()
        wait_for(lambda: any(j.job_id == job_id for j in client.finished_jobs()), timeout=30)
        # Stop only the controller: `up` then starts a fresh one (state cleared, jobcomp rotated)
        # next to the still-running slurmdbd.
        ctld = int((sdir / "run" / "slurmctld.pid").read_text())
        os.kill(ctld, 15)
        wait_for(lambda: _state(ctld) in ("",) or _state(ctld).startswith("Z"), timeout=20)
        r = subprocess.run(["bash", str(SCRIPT), "up", "--dir", str(sdir)], capture_output=True, text=True,
                           timeout=120)
        assert r.returncode == 0, r.stderr
        fresh = CliClient(Config(), env={"SLURM_CONF": str(sdir / "slurm.conf")})
        assert job_id not in {j.job_id for j in fresh.jobs(states=("COMPLETED",))}   # squeue forgot it
        job = wait_for(lambda: next((j for j in fresh.finished_jobs() if j.job_id == job_id), None), timeout=30,
                       message="the job in sacct")
        assert job.state == "COMPLETED" and job.num_gpus == 2 and job.gpu_type == "titanxp"
        assert job.comment == comment and job.tag.model == "vgg16"
    finally:
        subprocess.run(["bash", str(SCRIPT), "down", "--dir", str(sdir)], capture_output=True, timeout=120)
