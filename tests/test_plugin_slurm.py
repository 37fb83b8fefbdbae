"""msched's Slurm plugins on the real dev cluster, as an ordinary user (Done-when of the plugin issue).

`sbatch`, `srun` and `salloc` typed as usual get the validated tag in AdminComment (which users cannot
set) and the GPU types in Features; a forged or malformed tag, typed in --comment or written later with
`scontrol update comment=`, never reaches AdminComment; sbatch's output and exit codes are the same
with the plugin as without it; a classifier that hangs or crashes lets the job in untagged with one
line. "Without the plugin" is the same cluster read through a copy of slurm.conf that names no
CliFilterPlugins, as any user can make: the controller's check is what holds either way.
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import pytest
from helpers import JobJanitor
from plugin_cluster import job_id_of, show_job
from plugin_cluster import plugin_cluster as plugin_cluster  # the fixture, re-exported for pytest

from msched.tag import PREFIX, parse_tag

pytestmark = pytest.mark.slurm
TYPES = {"a100", "titanv", "rtx2080ti", "titanxp"}


@pytest.fixture
def jobs(plugin_cluster):
    j = JobJanitor(plugin_cluster.env)
    yield j
    j.cancel_all()


@pytest.fixture(scope="module")
def user(ordinary_user):
    return ordinary_user


def run(user, cluster, argv, env=None, **kw):
    return user.run(argv, {"SLURM_CONF": str(cluster.conf), **(env or {})}, **kw)


@pytest.fixture(scope="module")
def bypass_conf(plugin_cluster, user) -> Path:
    """The user's own copy of slurm.conf without the client-side filter."""
    text = plugin_cluster.conf.read_text()
    path = user.home / "no-filter" / "slurm.conf"
    run(user, plugin_cluster, ["mkdir", "-p", str(path.parent)], check=True)
    kept = "".join(line for line in text.splitlines(keepends=True) if not line.startswith("CliFilterPlugins="))
    run(user, plugin_cluster, ["tee", str(path)], input=kept, check=True)
    return path


def assert_stamped(fields: dict[str, str], model: str) -> None:
    stamp = fields.get("AdminComment", "")
    tag, _, why = parse_tag(stamp)
    assert tag is not None and not why, fields
    assert tag.model == model
    assert fields["Comment"].startswith(stamp)                 # the tag the filter wrote, rebuilt identically
    assert tag.added and set(tag.added.split("|")) <= TYPES
    assert fields["Features"] == tag.added or fields["Features"] == f"({tag.added})", fields


def test_plain_sbatch_of_a_resnet50_job_is_stamped_with_its_types(plugin_cluster, user, jobs):
    script = user.home / "resnet50.sh"
    run(user, plugin_cluster, ["tee", str(script)],
        input="#!/bin/sh\n#SBATCH --gres=gpu:1 -t 10 --comment='my run'\npython train.py --arch resnet50\n",
        check=True)
    proc = run(user, plugin_cluster, ["sbatch", "--hold", str(script)])
    assert proc.returncode == 0, proc.stderr
    assert re.fullmatch(r"Submitted batch job \d+\n", proc.stdout) and proc.stderr == ""
    fields = show_job(plugin_cluster, jobs.add(job_id_of(proc.stdout)))
    assert_stamped(fields, "resnet50")
    assert fields["Comment"].endswith(" my run")


@pytest.mark.parametrize("client", ["srun", "salloc"])
def test_srun_and_salloc_are_stamped_too(plugin_cluster, user, client):
    show = ["bash", "-c", 'scontrol show job "$SLURM_JOB_ID"']
    proc = run(user, plugin_cluster, [client, "--gres=gpu:1", "-t", "5", *show], {"MSCHED_MODEL": "resnet50"},
               timeout=120)
    assert proc.returncode == 0, proc.stderr
    fields = {"AdminComment": ""}
    for line in proc.stdout.splitlines():
        line = line.strip()
        for key in ("AdminComment", "Comment", "Features"):
            if line.startswith(key + "="):
                fields[key] = line[len(key) + 1:].split(" DelayBoot")[0].rstrip()
    assert_stamped(fields, "resnet50")


@pytest.mark.parametrize("through", ["filter", "bypass"])
def test_a_forged_tag_in_the_comment_never_reaches_admin_comment(plugin_cluster, user, jobs, bypass_conf, through):
    env = {} if through == "filter" else {"SLURM_CONF": str(bypass_conf)}
    malformed = PREFIX + "model=resnet50;bs=" + "9" * 26
    claims = PREFIX + "model=resnet50;ref=vgg16;group=vgg;sim=0.99;flops=7;added=a100"
    ids = {}
    for name, comment in (("malformed", malformed), ("claims", claims), ("unknown", PREFIX + "model=evil_net")):
        proc = run(user, plugin_cluster, ["sbatch", "--hold", "--gres=gpu:1", f"--comment={comment}",
                                          "--wrap", "hostname"], env)
        assert proc.returncode == 0, proc.stderr
        ids[name] = jobs.add(job_id_of(proc.stdout))
    for name in ("malformed", "unknown"):
        fields = show_job(plugin_cluster, ids[name])
        assert fields["AdminComment"] == "", (name, fields)
        assert fields["Features"] == "(null)"
    # a well-formed claim about a torchvision model: the controller rebuilds it from its own table
    fields = show_job(plugin_cluster, ids["claims"])
    assert "vgg" not in fields["AdminComment"] and "0.99" not in fields["AdminComment"]
    if through == "bypass":
        assert fields["AdminComment"].startswith(PREFIX + "model=resnet50;ref=resnet50;")


def test_scontrol_update_comment_never_reaches_admin_comment(plugin_cluster, user, jobs):
    managed = jobs.add(job_id_of(run(user, plugin_cluster, [
        "sbatch", "--hold", "--gres=gpu:1", "--wrap", "python train.py --arch resnet50"], check=True).stdout))
    plain = jobs.add(job_id_of(run(user, plugin_cluster, [
        "sbatch", "--hold", "--gres=gpu:1", "--wrap", "hostname"], check=True).stdout))
    before = show_job(plugin_cluster, managed)
    forged = PREFIX + "model=vgg16;added=titanxp"
    for field in (f"comment={forged}", "features=titanxp"):
        proc = run(user, plugin_cluster, ["scontrol", "update", f"jobid={managed}", field])
        assert proc.returncode != 0 and "denied" in proc.stderr.lower(), proc
    after = show_job(plugin_cluster, managed)
    assert after == before                                     # refused: nothing changed
    proc = run(user, plugin_cluster, ["scontrol", "update", f"jobid={plain}", f"comment={forged}"])
    assert proc.returncode == 0, proc.stderr                   # a plain job's comment is the user's
    fields = show_job(plugin_cluster, plain)
    assert fields["Comment"] == forged and fields["AdminComment"] == ""
    # the reorderer (root) may still retype a stamped job
    plugin_cluster.run(["scontrol", "update", f"jobid={managed}", "features=titanv"], check=True)
    assert show_job(plugin_cluster, managed)["Features"] == "titanv"


PARITY = [
    ["--parsable", "--hold", "--wrap", "hostname"],
    ["--hold", "--wrap", "hostname"],
    ["--parsable", "--hold", "--gres=gpu:1", "--wrap", "python train.py --arch resnet50"],
    ["--hold", "--gres=gpu:1", "-C", "a100|titanv", "--wrap", "python train.py --arch densenet121"],
    ["--hold", "--gres=gpu:titanv:1", "--wrap", "python train.py --arch vgg16"],
    ["--hold", "--array=0-2", "--parsable", "--gres=gpu:1", "--wrap", "python train.py --arch resnet50"],
    ["--hold", "--gres=gpu:1", "-C", "nosuchfeature", "--wrap", "python train.py --arch resnet50"],
    ["--hold", "-p", "nosuchpartition", "--wrap", "hostname"],
    ["--hold", "--bogus-option", "--wrap", "hostname"],
    ["--hold", "--gres=gpu:99", "--wrap", "python train.py --arch resnet50"],
    ["--hold", "-t", "notatime", "--wrap", "hostname"],
    ["--hold", "--comment", "x" * 1100, "--wrap", "python train.py --arch resnet50"],
    ["--version"],
]


def _normalised(text: str) -> str:
    return re.sub(r"\b\d{1,7}\b", "N", text)


@pytest.mark.parametrize("argv", PARITY, ids=lambda a: " ".join(w[:20] for w in a)[:60])
def test_sbatch_output_and_exit_code_are_the_same_with_the_plugin(plugin_cluster, user, jobs, bypass_conf, argv):
    with_plugin = run(user, plugin_cluster, ["sbatch", *argv])
    without = run(user, plugin_cluster, ["sbatch", *argv], {"SLURM_CONF": str(bypass_conf)})
    for proc in (with_plugin, without):
        if proc.returncode == 0 and "--version" not in argv:
            jobs.add(job_id_of(proc.stdout))
    assert with_plugin.returncode == without.returncode
    assert _normalised(with_plugin.stdout) == _normalised(without.stdout)
    assert _normalised(with_plugin.stderr) == _normalised(without.stderr)


@pytest.mark.parametrize(("behaviour", "why"), [
    ("import time\ntime.sleep(60)\n", "took longer than"),
    ("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n", ""),
])
def test_a_classifier_that_hangs_or_crashes_lets_the_job_in_untagged_with_one_line(
        plugin_cluster, user, jobs, behaviour, why):
    model = user.home / f"badnet_{os.getpid()}_{len(behaviour)}.py"     # its own name: the account is shared
    run(user, plugin_cluster, ["tee", str(model)], input=behaviour + "def build():\n    return None\n", check=True)
    t0 = time.monotonic()
    proc = run(user, plugin_cluster, ["sbatch", "--hold", "--gres=gpu:1", "--comment=mine", "--wrap", "hostname"],
               {"MSCHED_MODEL": f"{model}:build"})
    elapsed = time.monotonic() - t0
    assert proc.returncode == 0
    assert re.fullmatch(r"Submitted batch job \d+\n", proc.stdout)
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("msched: warning: ") and why in lines[0], lines
    fields = show_job(plugin_cluster, jobs.add(job_id_of(proc.stdout)))
    assert fields["AdminComment"] == "" and fields["Features"] == "(null)"
    assert fields["Comment"].startswith("msched:v1;why=") and fields["Comment"].endswith(" mine")   # why, for its owner
    assert parse_tag(fields["Comment"])[0] is None
    assert elapsed < 10, elapsed
    # nothing of the submission outlives it (the profiler runs the model file in a session of its own)
    left = run(user, plugin_cluster, ["pgrep", "-u", user.name, "-f", str(model)])
    assert left.stdout == "", left.stdout


def test_the_reorderers_queue_read_takes_the_stamp_over_the_comments_claim(plugin_cluster, user, jobs, bypass_conf):
    from msched.config import Config
    from msched.slurm.cli import CliClient

    stamped = jobs.add(job_id_of(run(user, plugin_cluster, [
        "sbatch", "--hold", "--gres=gpu:1", "--wrap", "python train.py --arch resnet50"], check=True).stdout))
    # a claim that passes the reorderer's bounds but not the controller's (no such model): comment only
    claim = jobs.add(job_id_of(run(user, plugin_cluster, [
        "sbatch", "--hold", "--gres=gpu:1", f"--comment={PREFIX}model=evil_net;sim=0.5", "--wrap", "hostname"],
        {"SLURM_CONF": str(bypass_conf)}, check=True).stdout))
    queue = {j.job_id: j for j in CliClient(Config(), env={"SLURM_CONF": str(plugin_cluster.conf)}).jobs()}
    assert queue[stamped].tag_verified and queue[stamped].tag == parse_tag(queue[stamped].admin_comment)[0]
    assert queue[stamped].tag.model == "resnet50"
    assert not queue[claim].tag_verified and queue[claim].admin_comment == ""
    assert queue[claim].tag is not None and queue[claim].tag.model == "evil_net"    # an unverified claim


def test_msub_on_a_plugin_cluster_is_decided_once_and_stamped(plugin_cluster, user, jobs):
    from helpers import VENV_BIN

    proc = run(user, plugin_cluster, [str(VENV_BIN / "msub"), "--hold", "--gres=gpu:1", "--wrap",
                                      "python train.py --arch resnet50"])
    assert proc.returncode == 0, proc.stderr
    fields = show_job(plugin_cluster, jobs.add(job_id_of(proc.stdout)))
    assert_stamped(fields, "resnet50")
    assert not parse_tag(fields["AdminComment"])[0].pinned     # msub's constraint is not read as a pin


def _components(cluster, job_id: str) -> list[dict[str, str]]:
    """AdminComment, Comment and Features of each component of a heterogeneous job."""
    out = cluster.run(["scontrol", "show", "job", str(job_id)], check=True).stdout
    records = []
    for block in re.split(r"\n(?=JobId=)", out.strip()):
        fields = {"AdminComment": "", "Comment": ""}
        for line in block.splitlines():
            line = line.strip()
            for key in ("AdminComment", "Comment", "Features"):
                if line.startswith(key + "="):
                    fields[key] = line[len(key) + 1:].split(" DelayBoot")[0].rstrip()
        records.append(fields)
    return records


@pytest.mark.parametrize("form", ["script", "command line", "forged tag"])
def test_heterogeneous_jobs_go_in_untagged_with_the_reason(plugin_cluster, user, jobs, bypass_conf, form):
    from msched.plugin.generate import HETJOB_WHY
    from msched.tag import untagged_record

    script = user.home / "het.sh"
    run(user, plugin_cluster, ["tee", str(script)], input=(
        "#!/bin/sh\n#SBATCH --gres=gpu:1 -t 5 --comment=first\n#SBATCH hetjob\n#SBATCH --gres=gpu:1 -t 5\n"
        "python train.py --arch resnet50\n"), check=True)
    env = {"MSCHED_MODEL": "resnet50"}
    if form == "script":
        argv = ["sbatch", "--hold", str(script)]
    elif form == "command line":
        argv = ["sbatch", "--hold", "--gres=gpu:1", "-t", "5", "--comment=first", ":", "--gres=gpu:1", "-t", "5",
                "--wrap", "python train.py --arch resnet50"]
    else:      # a well-formed tag typed into each component, through a slurm.conf without the filter
        tag = PREFIX + "model=resnet50;added=a100"
        argv = ["sbatch", "--hold", "--gres=gpu:1", "-t", "5", f"--comment={tag} first", ":", "--gres=gpu:1",
                "-t", "5", f"--comment={tag}", "--wrap", "hostname"]
        env = {"SLURM_CONF": str(bypass_conf)}
    proc = run(user, plugin_cluster, argv, env)
    assert proc.returncode == 0, proc.stderr
    assert re.fullmatch(r"Submitted batch job \d+\n", proc.stdout) and proc.stderr == ""
    components = _components(plugin_cluster, jobs.add(job_id_of(proc.stdout)))
    assert len(components) == 2
    for i, fields in enumerate(components):
        assert fields["AdminComment"] == "", fields             # never stamped: the reorderer leaves it alone
        assert fields["Features"] == "(null)", fields
        if form != "forged tag":
            record = untagged_record(HETJOB_WHY)
            assert fields["Comment"] in (record, f"{record} first"), fields   # sbatch may carry the comment over
            assert i > 0 or fields["Comment"] == f"{record} first"
