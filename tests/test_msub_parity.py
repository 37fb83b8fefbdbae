"""msub never refuses what sbatch accepts (issue 13, point 6), and never submits twice.

Each case runs as an ordinary user through plain sbatch and through msub on the dev cluster and
compares exit codes and output: where sbatch accepts, msub accepts (with one warning when it had to
drop what msched added); where sbatch refuses, msub prints exactly sbatch's output. `--begin=now+1hour`
keeps the jobs pending without skipping the controller's checks (`--hold` skips the node-configuration
check, so it would hide the very refusal under test). Without Slurm, a stand-in sbatch shows which
refusals lead to a second submission and which never do.
"""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from msched.msub.main import build_submission
from msched.msub.spawn import REFUSALS, SUBMISSION_FAILED, refusal, run_sbatch
from msched.tag import parse_comment

SBATCH = "/usr/bin/sbatch"
TYPES = ("a100", "titanv", "rtx2080ti", "titanxp")
BEGIN = "--begin=now+3600"


@pytest.fixture(scope="module")
def site():
    """A site config every user can read, with a fresh published free-time file (all types free now)."""
    d = Path(tempfile.mkdtemp(prefix="msub-parity-"))
    d.chmod(0o755)
    (d / "gpu_free_time.json").write_text(json.dumps({"time": time.time(), "free_at": dict.fromkeys(TYPES, 0)}))
    (d / "msched.toml").write_text(f'sbatch = "{SBATCH}"\nstate_dir = "{d}"\n')
    for f in d.iterdir():
        f.chmod(0o644)
    yield d
    import shutil
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="module")
def workdir(ordinary_user, site):
    d = site / "work"
    d.mkdir()
    os.chown(d, ordinary_user.uid, ordinary_user.gid)
    (d / "job.sh").write_text("#!/bin/sh\n#SBATCH --gres=gpu:1\npython t.py --arch resnet50\n")
    (d / "job.sh").chmod(0o644)
    return d


def _both(user, args: list[str], site: Path, workdir: Path, cache: Path | None = None):
    env = {"MSCHED_CONFIG": str(site / "msched.toml"), "PYTHONPYCACHEPREFIX": str(workdir / ".pycache")}
    plain = user.run([SBATCH, *args], env=env, cwd=workdir)
    if cache is not None:
        env["XDG_CACHE_HOME"] = str(cache)
    mine = user.run([str(Path(sys.executable).with_name("msub")), *args], env=env, cwd=workdir)
    return plain, mine


def _job_ids(*procs) -> list[str]:
    return [m.group(1) for p in procs for m in [re.search(r"Submitted batch job (\d+)", p.stdout)] if m]


def stale_node_cache(user, workdir: Path, nodes: list[list]) -> Path:
    """The user's cached `sinfo` answer (msub trusts it for ten minutes), as it was before the cluster
    changed: msub then names a GPU type or a node shape that is no longer there, and Slurm refuses."""
    cache = workdir / f"cache-{len(list(workdir.glob('cache-*')))}"
    (cache / "msched").mkdir(parents=True)
    key = os.environ.get("SLURM_CONF", "") + "|" + SBATCH
    (cache / "msched" / "cluster_nodes.json").write_text(json.dumps({"key": key, "time": time.time(), "nodes": nodes}))
    for p in (cache, cache / "msched", cache / "msched" / "cluster_nodes.json"):
        os.chown(p, user.uid, user.gid)
    return cache


DEV_NODES = [["n1", "gpu:a100:4", ["a100"], ["gpu"]], ["n2", "gpu:titanv:4", ["titanv"], ["gpu"]],
             ["n3", "gpu:rtx2080ti:4", ["rtx2080ti"], ["gpu"]], ["n4", "gpu:titanxp:4", ["titanxp"], ["gpu"]]]
# before the change: two a100 nodes (n5 since retired), and a titanrtx node
STALE_NODES = [*DEV_NODES, ["n5", "gpu:a100:4", ["a100"], ["gpu"]]]
ACCEPTED = {
    # (msub's arguments, the stale node list msub believes or None, the refusal it then meets)
    "two nodes, one GPU each": (["-N", "2", "--gres=gpu:1", "--wrap", "python t.py --arch resnet50"], None, None),
    "-G 2 with #SBATCH --gres=gpu:1": (["-G", "2", "job.sh"], None, None),
    "two nodes, one GPU each, stale nodes": (["-N", "2", "--gres=gpu:1", "--wrap", "python t.py --arch resnet50"],
                                             STALE_NODES, "Requested node configuration is not available"),
    "-G 2 with #SBATCH --gres=gpu:1, stale nodes": (["-G", "2", "job.sh"], STALE_NODES,
                                                    "Requested node configuration is not available"),
    "a retired GPU type": (["--gres=gpu:1", "--wrap", "python t.py --arch resnet50"],
                           [["n9", "gpu:titanrtx:4", ["titanrtx"], ["gpu"]]], "Invalid feature specification"),
}


@pytest.mark.slurm
@pytest.mark.parametrize("case", sorted(ACCEPTED))
def test_msub_accepts_what_sbatch_accepts(slurm_cluster, ordinary_user, site, workdir, janitor, case):
    """The issue's cases, as the cluster is (the submit decision's feasibility already keeps msched's
    constraint off: no refusal, no warning) and as msub's stale view of it makes msub add what Slurm
    refuses (then the fallback: one warning, the job in without msched's constraint, tag kept)."""
    args, stale, refused = ACCEPTED[case]
    cache = stale_node_cache(ordinary_user, workdir, stale) if stale else None
    if stale and not any(n[0] == "n1" for n in stale):       # only the retired type is published
        site_conf = site / "retired"
        site_conf.mkdir(exist_ok=True)
        site_conf.chmod(0o755)
        (site_conf / "gpu_free_time.json").write_text(json.dumps({"time": time.time(), "free_at": {"titanrtx": 0}}))
        (site_conf / "msched.toml").write_text(f'sbatch = "{SBATCH}"\nstate_dir = "{site_conf}"\n')
        for f in site_conf.iterdir():
            f.chmod(0o644)
        site = site_conf
    plain, mine = _both(ordinary_user, [BEGIN, *args], site, workdir, cache)
    for j in _job_ids(plain, mine):
        janitor.add(j)
    assert plain.returncode == 0 and plain.stdout.startswith("Submitted batch job "), plain.stderr
    assert mine.returncode == plain.returncode
    assert re.sub(r"\d+", "N", mine.stdout) == re.sub(r"\d+", "N", plain.stdout)
    job = _job_ids(mine)[0]
    comment, features = slurm_cluster.run(["squeue", "-h", "-j", job, "-o", "%k|%f"], check=True).stdout.strip().rsplit("|", 1)
    tag = parse_comment(comment)[0]
    assert tag.model == "resnet50"
    how = "submitted without msched's GPU-type constraint"
    if refused is None and mine.stderr == plain.stderr:
        # the decision's feasibility kept an impossible constraint off by itself
        assert features.strip("[]()") == tag.added if tag.added else features in ("", "(null)")
    else:                   # the fallback did (the decision missed the shape, or believed stale nodes)
        refused = refused or "Requested node configuration is not available"
        assert mine.stderr == f"msub: warning: sbatch refused what msched added ({refused}); {how}\n" + plain.stderr
        assert tag.added == "" and tag.why == "sbatch refused msched's GPU-type constraint"
        assert features in ("", "(null)")


@pytest.mark.slurm
def test_comment_of_950_characters(slurm_cluster, ordinary_user, site, workdir, janitor):
    mine_comment = "c" * 950
    args = [BEGIN, f"--comment={mine_comment}", "--gres=gpu:1", "--wrap", "python t.py --arch resnet50"]
    plain, mine = _both(ordinary_user, args, site, workdir)
    for j in _job_ids(plain, mine):
        janitor.add(j)
    assert plain.returncode == mine.returncode == 0, (plain.stderr, mine.stderr)
    assert re.sub(r"\d+", "N", mine.stdout) == re.sub(r"\d+", "N", plain.stdout)
    assert mine.stderr == ("msub: warning: the job's comment leaves no room for msched's tag (Slurm keeps at most "
                           "1024 bytes); submitting as a plain sbatch job\n")
    comment = slurm_cluster.run(["squeue", "-h", "-j", _job_ids(mine)[0], "-o", "%k"], check=True).stdout.strip()
    assert comment == mine_comment


@pytest.mark.slurm
@pytest.mark.parametrize("args", [
    [BEGIN, "--constraint=ib", "--gres=gpu:1", "--wrap", "python t.py --arch resnet50"],   # no such feature
    [BEGIN, "-p", "nosuchpartition", "job.sh"],
    [BEGIN, "--gres=gpu:9", "job.sh"],                                                     # no node has 9
], ids=["nonexistent feature", "no such partition", "more GPUs than a node"])
def test_what_sbatch_refuses_msub_refuses_with_sbatchs_own_words(slurm_cluster, ordinary_user, site, workdir,
                                                                 janitor, args):
    plain, mine = _both(ordinary_user, args, site, workdir)
    for j in _job_ids(plain, mine):
        janitor.add(j)
    assert plain.returncode != 0
    assert (mine.returncode, mine.stdout, mine.stderr) == (plain.returncode, plain.stdout, plain.stderr)


# ----------------------------------------------------------------------------- a stand-in sbatch (no Slurm)
FAKE = """#!/bin/sh
echo "$*" >> {log}
case "$*" in
  *{needle}*) echo "sbatch: error: Batch job submission failed: {message}" >&2; exit 1;;
esac
echo "Submitted batch job 77"
"""


def _fake_sbatch(tmp_path: Path, needle: str, message: str) -> tuple[Path, Path]:
    log = tmp_path / "calls.log"
    fake = tmp_path / "sbatch"
    fake.write_text(FAKE.format(log=log, needle=needle, message=message))
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    return fake, log


def _fake_site(tmp_path: Path, monkeypatch, fake: Path) -> None:
    (tmp_path / "gpu_free_time.json").write_text(json.dumps({"time": time.time(), "free_at": dict.fromkeys(TYPES, 0)}))
    (tmp_path / "msched.toml").write_text(f'sbatch = "{fake}"\nstate_dir = "{tmp_path}"\n')
    monkeypatch.setenv("MSCHED_CONFIG", str(tmp_path / "msched.toml"))


def test_the_refusals_are_listed_once_with_what_they_name():
    assert set(REFUSALS.values()) == {"constraint", "comment"}
    line = SUBMISSION_FAILED + b"Invalid feature specification\n"
    assert refusal(1, b"sbatch: warning: x\n" + line) == ("constraint", "Invalid feature specification")
    assert refusal(0, line) == ("", "")                          # a success is never a refusal


@pytest.mark.parametrize("message", [
    "Socket timed out on send/recv operation",                  # the first job may be queued
    "Unable to contact slurm controller (connect failure)",
    "Invalid feature specification, or something new",          # not exactly a listed message
])
def test_no_second_submission_after_a_timeout_or_unknown_error(tmp_path, monkeypatch, capfd, message):
    fake, log = _fake_sbatch(tmp_path, "", message)              # every call fails
    _fake_site(tmp_path, monkeypatch, fake)
    sub, _ = build_submission(["--gres=gpu:1", "--model=resnet50", "--wrap", "true"])
    assert sub.fallbacks
    assert run_sbatch(sub, allow_exec=False) == 1
    assert len(log.read_text().splitlines()) == 1
    out, err = capfd.readouterr()
    assert out == "" and err == f"sbatch: error: Batch job submission failed: {message}\n"


def test_refused_constraint_then_submitted_without_it(tmp_path, monkeypatch, capfd):
    fake, log = _fake_sbatch(tmp_path, "--constraint=", "Requested node configuration is not available")
    _fake_site(tmp_path, monkeypatch, fake)
    sub, _ = build_submission(["--gres=gpu:1", "--model=resnet50", "--wrap", "true"])
    assert run_sbatch(sub, allow_exec=False) == 0
    calls = log.read_text().splitlines()
    assert len(calls) == 2 and "--constraint=" in calls[0] and "--constraint=" not in calls[1]
    assert "msched:v1;model=resnet50" in calls[1]                # the tag stays: it cannot cause this refusal
    out, err = capfd.readouterr()
    assert out == "Submitted batch job 77\n"
    assert err == ("msub: warning: sbatch refused what msched added (Requested node configuration is not "
                   "available); submitted without msched's GPU-type constraint\n")


def test_refused_comment_then_submitted_as_typed(tmp_path, monkeypatch, capfd):
    fake, log = _fake_sbatch(tmp_path, "msched:v1", "Pathname of a file, directory or other parameter too long")
    _fake_site(tmp_path, monkeypatch, fake)
    sub, _ = build_submission(["--gres=gpu:1", "--model=resnet50", "--comment=mine", "--wrap", "true"])
    assert run_sbatch(sub, allow_exec=False) == 0
    calls = log.read_text().splitlines()
    assert len(calls) == 2 and calls[1] == "--gres=gpu:1 --comment=mine --wrap true"    # exactly as typed
    assert "submitted as typed" in capfd.readouterr().err


@pytest.mark.parametrize(("needle", "message", "code", "calls", "out", "err"), [
    # refused once (msched's constraint), then accepted: sbatch's stdout, msub's one warning, exit 0
    ("--constraint=", "Requested node configuration is not available", 0, 2, "Submitted batch job 77\n",
     "msub: warning: sbatch refused what msched added (Requested node configuration is not available); "
     "submitted without msched's GPU-type constraint\n"),
    # refused for a reason of its own: exactly sbatch's words and exit code, one call
    ("", "Socket timed out on send/recv operation", 1, 1, "",
     "sbatch: error: Batch job submission failed: Socket timed out on send/recv operation\n"),
])
def test_msub_process_ends_with_sbatchs_output_and_code(tmp_path, needle, message, code, calls, out, err):
    """msub's own process (the launcher, as users run it) ends itself once sbatch has finished
    (msched.msub.main._end_process, skipping the interpreter's teardown): what it printed before and what
    sbatch printed all arrive, and its exit code is sbatch's last."""
    fake, log = _fake_sbatch(tmp_path, needle, message)
    (tmp_path / "gpu_free_time.json").write_text(json.dumps({"time": time.time(), "free_at": dict.fromkeys(TYPES, 0)}))
    (tmp_path / "msched.toml").write_text(f'sbatch = "{fake}"\nstate_dir = "{tmp_path}"\n')
    env = {**os.environ, "MSCHED_CONFIG": str(tmp_path / "msched.toml"), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    msub = str(Path(sys.executable).with_name("msub"))
    proc = subprocess.run([msub, "--gres=gpu:1", "--model=resnet50", "--wrap", "true"], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    assert (proc.returncode, proc.stdout, proc.stderr) == (code, out, err)
    assert len(log.read_text().splitlines()) == calls
