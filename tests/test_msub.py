"""msub: what it hands to sbatch (no Slurm needed) and what reaches the real local Slurm as an ordinary user."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import textwrap
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from msched.msub.directives import detect_model, known_models
from msched.msub.main import MSUB_OPTIONS, build_submission
from msched.tag import parse_comment, why_of

REPO = Path(__file__).resolve().parent.parent
SBATCH = "/usr/bin/sbatch"
TYPES = ("a100", "titanv", "rtx2080ti", "titanxp")


# ----------------------------------------------------------------------------- a site config for msub
_CREATED: list[Path] = []


def _shared_dir(prefix: str) -> Path:
    """A directory every user can read (pytest's tmp_path is private to root); removed after the module."""
    d = Path(tempfile.mkdtemp(prefix=prefix))
    d.chmod(0o755)
    _CREATED.append(d)
    return d


@pytest.fixture(scope="module", autouse=True)
def _remove_shared_dirs():
    yield
    import shutil
    while _CREATED:
        shutil.rmtree(_CREATED.pop(), ignore_errors=True)


@pytest.fixture(scope="module")
def site(request):
    """MSCHED_CONFIG pointing at a state dir with a fresh published free-time file (all types free now)."""
    d = _shared_dir("msub-site-")
    state = d / "state"
    state.mkdir()
    state.chmod(0o755)
    import time
    (state / "gpu_free_time.json").write_text(json.dumps({"time": time.time(), "free_at": dict.fromkeys(TYPES, 0)}))
    (state / "gpu_free_time.json").chmod(0o644)
    conf = d / "msched.toml"
    conf.write_text(f'sbatch = "{SBATCH}"\nstate_dir = "{state}"\ndatabase_url = "sqlite:///{d}/msched.db"\n')
    conf.chmod(0o644)
    old = os.environ.get("MSCHED_CONFIG")
    os.environ["MSCHED_CONFIG"] = str(conf)
    yield d
    if old is None:
        os.environ.pop("MSCHED_CONFIG", None)
    else:
        os.environ["MSCHED_CONFIG"] = old


def _script(directory: Path, name: str, body: str) -> Path:
    p = directory / name
    p.write_text(textwrap.dedent(body).lstrip())
    p.chmod(0o644)
    return p


def _option(argv: list[str], name: str) -> list[str]:
    return [w.split("=", 1)[1] for w in argv if w.startswith(f"--{name}=")]


def _tag_of(argv: list[str]):
    comments = _option(argv, "comment")
    assert comments, argv
    return parse_comment(comments[-1])


# ----------------------------------------------------------------------------- unit: what msub builds
def test_unmanaged_job_is_passed_through_untouched(site):
    d = _shared_dir("msub-unit-")
    s = _script(d, "plain.sh", "#!/bin/sh\n#SBATCH -J plain\necho hello\n")
    argv = ["-p", "gpu", "--comment", "mine", str(s), "--arch", "resnet50"]
    sub, warnings = build_submission(argv)
    assert sub.argv == [SBATCH, *argv] and sub.stdin_data is None and not sub.managed and not warnings


def test_model_option_removed_and_tag_added_before_script(site):
    d = _shared_dir("msub-unit-")
    s = _script(d, "t.sh", "#!/bin/sh\n#SBATCH --gres=gpu:1\npython train.py\n")
    argv = ["--model", "resnet50", "--iterations=100", "--comment=my note", "-t", "30", str(s), "--model", "x"]
    sub, warnings = build_submission(argv)
    assert not warnings
    words = sub.argv[1:]
    script_at = words.index(str(s))
    # the user's words, in order, untouched; msub's own options gone; its additions before the script
    assert [w for w in words if w not in sub.added] == ["--comment=my note", "-t", "30", str(s), "--model", "x"]
    assert all(words.index(a) < script_at for a in sub.added)
    tag, user_comment = _tag_of(words)
    assert tag.model == "resnet50" and tag.iters == 100 and user_comment == "my note"
    assert tag.ref and tag.group
    constraint = _option(words, "constraint")
    assert constraint and set(constraint[-1].split("|")) <= set(TYPES)
    assert tag.added == constraint[-1]


def test_script_submitted_by_its_path_with_msched_lines_kept(site):
    """Issue 20: the script reaches sbatch by its path, unchanged (#MSCHED lines are comments to the
    shell), so Slurm records it as the job's Command; msched's additions are options before it."""
    d = _shared_dir("msub-unit-")
    body = "#!/bin/sh\n#MSCHED --model=vgg16 --iterations=50 --batch-size=32\n#SBATCH --gres=gpu:2\necho run \"$@\"\n"
    s = _script(d, "train_vgg.sh", body)
    sub, warnings = build_submission([str(s), "a1", "a2"])
    assert not warnings and sub.stdin_data is None
    assert sub.argv[-3:] == [str(s), "a1", "a2"] and s.read_text() == body
    assert not any(w.startswith("--job-name") for w in sub.argv)
    tag, _ = _tag_of(sub.argv)
    assert (tag.model, tag.iters, tag.bs) == ("vgg16", 50, 32)


def test_additions_go_before_a_double_dash(site):
    d = _shared_dir("msub-unit-")
    s = _script(d, "dd.sh", "#!/bin/sh\n#MSCHED --model=resnet18\ntrue\n")
    sub, _ = build_submission(["--gres=gpu:1", "--model=resnet18", "--", str(s)])
    words = sub.argv[1:]
    assert words[0] == "--gres=gpu:1" and words[-2:] == ["--", str(s)] and sub.stdin_data is None
    assert all(w.startswith("--comment=") or w.startswith("--constraint=") for w in words[1:-2])
    sub, _ = build_submission(["--gres=gpu:1", "--", str(s), "x"])
    assert sub.argv[-3:] == ["--", str(s), "x"]


def test_environment_names_the_model_below_msched_lines_and_options(site):
    env = {"MSCHED_MODEL": "resnet18", "MSCHED_ITERATIONS": "700", "MSCHED_BATCH_SIZE": "16"}
    sub, warnings = build_submission(["--gres=gpu:1", "--wrap", "python -m submitit.core._submit /x"], environ=env)
    assert not warnings
    tag = _tag_of(sub.argv)[0]
    assert (tag.model, tag.iters, tag.bs) == ("resnet18", 700, 16)
    d = _shared_dir("msub-unit-")
    s = _script(d, "e.sh", "#!/bin/sh\n#SBATCH --gres=gpu:1\n#MSCHED --model=vgg11\ntrue\n")
    tag = _tag_of(build_submission([str(s)], environ=env)[0].argv)[0]
    assert (tag.model, tag.iters, tag.bs) == ("vgg11", 700, 16)           # the #MSCHED line wins the model
    tag = _tag_of(build_submission(["--iterations=5", "--model=alexnet", str(s)], environ=env)[0].argv)[0]
    assert (tag.model, tag.iters) == ("alexnet", 5)                        # msub's options win over both
    _, warnings = build_submission(["--gres=gpu:1", "--wrap", "true"], environ={**env, "MSCHED_ITERATIONS": "many"})
    assert warnings == ["MSCHED_ITERATIONS must be a positive integer, not 'many'; ignored"]


def test_gpu_options_kept_exactly_and_pinned_types_left_alone(site):
    d = _shared_dir("msub-unit-")
    s = _script(d, "g.sh", "#!/bin/sh\npython main.py -a densenet121\n")
    sub, _ = build_submission(["--gpus=8", str(s)])
    assert "--gpus=8" in sub.argv and sum(w.startswith("--gpus") for w in sub.argv) == 1
    tag, _ = _tag_of(sub.argv)
    assert tag.model == "densenet121" and not tag.pinned
    for pinned_argv, pinned in ((["--gres=gpu:titanv:1"], "titanv"), (["-C", "a100", "--gres=gpu:1"], "a100")):
        sub, _ = build_submission([*pinned_argv, str(s)])
        assert not _option(sub.argv, "constraint")
        tag, _ = _tag_of(sub.argv)
        assert tag.pinned == pinned and tag.added == ""


def test_no_gpu_request_gets_tag_but_no_constraint(site):
    sub, _ = build_submission(["--wrap", "python train.py --arch resnet50"])
    assert not _option(sub.argv, "constraint")
    assert _tag_of(sub.argv)[0].model == "resnet50"


def test_user_constraint_is_anded(site, monkeypatch):
    # no cluster to ask (a dev cluster's nodes carry no `bigmem`, and the feasibility check would then
    # rightly add no type): msub decides from the published free times alone
    monkeypatch.delenv("SLURM_CONF", raising=False)
    sub, _ = build_submission(["--gres=gpu:1", "-C", "bigmem", "--model=resnet50", "--wrap", "true"])
    c = _option(sub.argv, "constraint")[-1]
    assert c.startswith("bigmem&")
    # the fallbacks (Slurm refuses the features): ours dropped, the user's own constraint word kept,
    # then the submission exactly as typed
    no_types, as_typed = sub.fallbacks
    assert not _option(no_types.argv, "constraint") and "bigmem" in no_types.argv
    assert _tag_of(no_types.argv)[0].added == "" and no_types.drops == ("constraint",)
    assert as_typed.argv == [SBATCH, "--gres=gpu:1", "-C", "bigmem", "--wrap", "true"]


def test_why_no_constraint_is_in_the_tag(site):
    tag = _tag_of(build_submission(["--model=resnet50", "--wrap", "true"])[0].argv)[0]
    assert tag.why == "no GPU request"
    tag = _tag_of(build_submission(["--model=resnet50", "--gres=gpu:titanv:1", "--wrap", "true"])[0].argv)[0]
    assert tag.why == "GPU type titanv chosen by the user"
    tag = _tag_of(build_submission(["--model=resnet50", "--gres=gpu:1", "--wrap", "true"])[0].argv)[0]
    assert tag.added and tag.why == ""


def test_why_untagged_is_recorded_for_gpu_jobs(site):
    sub, _ = build_submission(["--gres=gpu:1", "--comment=mine", "--wrap", "python -m submitit.core._submit /x"])
    comment = _option(sub.argv, "comment")[-1]
    assert parse_comment(comment) == (None, "mine") and why_of(comment) == "no model named"
    assert sub.fallbacks[-1].argv == [SBATCH, "--gres=gpu:1", "--comment=mine", "--wrap", "python -m submitit.core._submit /x"]
    sub, _ = build_submission(["--wrap", "hostname"])                     # no GPUs, no model: untouched
    assert sub.argv == [SBATCH, "--wrap", "hostname"] and not sub.fallbacks


def test_comment_that_leaves_no_room_for_the_tag(site):
    mine = "x" * 950
    sub, warnings = build_submission(["--gres=gpu:1", f"--comment={mine}", "--model=resnet50", "--wrap", "true"])
    assert sub.argv == [SBATCH, "--gres=gpu:1", f"--comment={mine}", "--wrap", "true"] and not sub.fallbacks
    assert len(warnings) == 1 and "leaves no room for msched's tag" in warnings[0]
    fits = "y" * 700
    sub, warnings = build_submission(["--gres=gpu:1", f"--comment={fits}", "--model=resnet50", "--wrap", "true"])
    assert not warnings and len(_option(sub.argv, "comment")[-1].encode()) <= 1024
    assert _tag_of(sub.argv)[1] == fits


def test_stdin_script_is_read_and_passed_on(site):
    body = b"#!/bin/sh\n#SBATCH --gres=gpu:1\npython -c 'import torchvision; torchvision.models.mobilenet_v2()'\n"
    sub, _ = build_submission(["--parsable"], stdin_reader=lambda: body)
    assert sub.stdin_data == body and sub.argv[-1].startswith("--")
    assert _tag_of(sub.argv)[0].model == "mobilenet_v2"


def test_detection_ignores_look_alikes():
    known = known_models()
    assert "resnet50" in known and len(known) >= 60
    assert detect_model(["python t.py -a all --model big"], known) is None
    assert detect_model(["# python t.py --arch resnet50"], known) is None         # a comment line
    assert detect_model(["python t.py --arch=ResNet50"], known) == "resnet50"
    assert detect_model(["m = models.vgg11(weights=None)"], known) == "vgg11"
    assert detect_model(["python -m torch.distributed.run train.py --model squeezenet1_1"], known) == "squeezenet1_1"


def test_unknown_model_warns_and_submits_plain(site):
    sub, warnings = build_submission(["--model", "not_a_model", "--gres=gpu:1", "--wrap", "true"])
    assert len(warnings) == 1 and "plain" in warnings[0]
    assert sub.fallbacks[-1].argv == [SBATCH, "--gres=gpu:1", "--wrap", "true"]
    comment = _option(sub.argv, "comment")[-1]
    assert parse_comment(comment)[0] is None and why_of(comment).startswith("unknown model 'not_a_model'")


def test_bad_config_warns_and_submits_plain(tmp_path, monkeypatch):
    conf = tmp_path / "bad.toml"
    conf.write_text(f'sbatch = "{SBATCH}"\nobjective = "fastest-ever"\n')
    monkeypatch.setenv("MSCHED_CONFIG", str(conf))
    sub, warnings = build_submission(["--model=resnet50", "--gres=gpu:1", "--wrap", "true"])
    assert sub.fallbacks[-1].argv == [SBATCH, "--gres=gpu:1", "--wrap", "true"]
    assert parse_comment(_option(sub.argv, "comment")[-1])[0] is None
    assert warnings and "objective" in warnings[0]


def test_sbatch_pointing_at_msub_is_refused(tmp_path, monkeypatch):
    msub = Path(sys.executable).with_name("msub")
    conf = tmp_path / "loop.toml"
    conf.write_text(f'sbatch = "{msub}"\n')
    monkeypatch.setenv("MSCHED_CONFIG", str(conf))
    proc = subprocess.run([str(msub), "--wrap", "true"], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "MSCHED_CONFIG": str(conf)})
    assert proc.returncode == 1 and "points at msub itself" in proc.stderr


def test_msub_options_are_exact_names():
    assert set(MSUB_OPTIONS) == {"model", "iterations", "batch-size", "msched-dry-run", "pack", "no-pack"}


def test_dry_run_prints_command_and_fallbacks(site):
    d = _shared_dir("msub-unit-")
    s = _script(d, "dry.sh", "#!/bin/sh\n#MSCHED --model=resnet18\n#SBATCH --gres=gpu:1\ntrue\n")
    proc = subprocess.run([str(Path(sys.executable).with_name("msub")), "--msched-dry-run", str(s)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith(f"sbatch command: {SBATCH} ") and "--comment=msched:v1;" in lines[0]
    assert lines[-1] == f"if sbatch refuses the constraint or comment msched added: {SBATCH} {s}"


# ----------------------------------------------------------------------------- on the real cluster
def _squeue(cluster) -> dict[str, dict]:
    out = cluster.run(["squeue", "--json"], check=True).stdout
    return {str(j["job_id"]): j for j in json.loads(out)["jobs"]}


def _job_id(stdout: str) -> str:
    text = stdout.strip()
    if text.startswith("Submitted batch job "):
        return text.split()[-1]
    return text.split(";")[0]


@pytest.fixture(scope="module")
def workdir(ordinary_user):
    d = _shared_dir("msub-work-")
    os.chown(d, ordinary_user.uid, ordinary_user.gid)
    return d


def _msub(user, args, workdir, site, **kw):
    # an installed msched has compiled bytecode; the user cannot write __pycache__ into this checkout,
    # so give them a private prefix (otherwise every call recompiles msched)
    env = {"MSCHED_CONFIG": str(site / "msched.toml"), "PYTHONPYCACHEPREFIX": str(workdir / ".pycache")}
    return user.run([str(Path(sys.executable).with_name("msub")), *args], env=env, cwd=workdir, **kw)


MODELS_20 = [
    ("resnet18", "msched"), ("resnet50", "arch"), ("resnet152", "a"), ("resnext50_32x4d", "model"),
    ("wide_resnet50_2", "tv"), ("vgg11", "models"), ("vgg16_bn", "cli"), ("densenet121", "msched"),
    ("densenet201", "arch"), ("mobilenet_v2", "a"), ("mobilenet_v3_large", "model"), ("mnasnet1_0", "tv"),
    ("shufflenet_v2_x1_0", "models"), ("squeezenet1_1", "cli"), ("efficientnet_b0", "msched"),
    ("efficientnet_v2_s", "arch"), ("regnet_y_400mf", "a"), ("convnext_tiny", "model"), ("alexnet", "tv"),
    ("googlenet", "models"),
]


def _model_script(model: str, form: str) -> tuple[str, list[str]]:
    head = "#!/bin/sh\n#SBATCH --gres=gpu:1\n#SBATCH -t 5\n"
    cmd = {
        "msched": f"#MSCHED --model={model} --iterations=1000\ntrue\n",
        "arch": f"python train.py --arch {model} --epochs 1\n",
        "a": f"python main.py -a {model} /data\n",
        "model": f"python train.py --model {model}\n",
        "tv": f"python -c 'import torchvision; torchvision.models.{model}()'\n",
        "models": f"python -c 'from torchvision import models; m = models.{model}(weights=None)'\n",
        "cli": "true\n",
    }[form]
    return head + cmd, (["--model", model] if form == "cli" else [])


@pytest.mark.slurm
def test_twenty_models_tagged_and_read_back_by_msched_jobs(slurm_cluster, ordinary_user, workdir, site, janitor):
    refs = {r["name"]: r for r in json.loads((REPO / "msched" / "data" / "reference_models.json").read_text())["references"]}
    ids = {}
    for i, (model, form) in enumerate(MODELS_20):
        body, extra = _model_script(model, form)
        s = _script(workdir, f"job{i}_{model}.sh", body)
        proc = _msub(ordinary_user, ["--hold", "--parsable", *extra, str(s)], workdir, site)
        assert proc.returncode == 0, proc.stderr
        assert "warning" not in proc.stderr, proc.stderr
        ids[janitor.add(_job_id(proc.stdout))] = model
    proc = subprocess.run([str(Path(sys.executable).with_name("msched")), "jobs", "--json"], capture_output=True,
                          text=True, timeout=60, env={**os.environ, **slurm_cluster.env,
                                                      "MSCHED_CONFIG": str(site / "msched.toml")})
    assert proc.returncode == 0, proc.stderr
    rows = {r["job_id"]: r for r in json.loads(proc.stdout)}
    for job_id, model in ids.items():
        row = rows[job_id]
        assert row["model"] == model
        if model in refs:                                  # a reference is its own nearest reference (DESIGN 3)
            assert row["reference"] == model
        assert row["reference"] in refs and row["group"] == refs[row["reference"]]["group"]
        assert row["user"] == ordinary_user.name and row["tagged"]
    assert len({rows[j]["group"] for j in ids}) >= 5         # 20 models across the families


@pytest.mark.slurm
def test_sbatch_directives_survive(slurm_cluster, ordinary_user, workdir, site, janitor):
    s = _script(workdir, "dirs.sh", """
        #!/bin/bash
        #SBATCH --partition=gpu
        #SBATCH --gres=gpu:2
        #SBATCH --time=0:07:00
        #SBATCH --job-name=keepme
        #SBATCH --comment="user words"
        #SBATCH --constraint=titanv|rtx2080ti
        #MSCHED --model=resnet50 --iterations=10
        python train.py
    """)
    proc = _msub(ordinary_user, ["--hold", str(s)], workdir, site)
    assert proc.returncode == 0 and proc.stdout.startswith("Submitted batch job "), proc.stderr
    job = _squeue(slurm_cluster)[janitor.add(_job_id(proc.stdout))]
    # submitted by its path, #MSCHED line and all (issue 20): Slurm shows the script as the Command
    shown = slurm_cluster.run(["scontrol", "show", "job", str(job["job_id"])], check=True).stdout
    assert f"Command={s}" in shown.split()
    assert job["partition"] == "gpu" and job["name"] == "keepme" and job["time_limit"] == 7
    assert job["tres_per_node"] == "gres:gpu:2"
    assert job["features"] == "titanv|rtx2080ti"              # a constraint naming GPU types is the user's pin
    tag, user_comment = parse_comment(job["comment"])
    assert user_comment == "user words" and tag.model == "resnet50" and tag.pinned == "titanv|rtx2080ti"


@pytest.mark.slurm
def test_untyped_request_gets_or_constraint_and_gpus_8_kept(slurm_cluster, ordinary_user, workdir, site, janitor):
    """`--gpus=8 -N 2` on the dev cluster (one 4-GPU node per type): no single type can hold it (the
    feasibility rule), so msub adds no constraint and Slurm takes the job as written; `--gpus=4` gets an
    OR of types within the slack."""
    s = _script(workdir, "g8.sh", "#!/bin/sh\npython train.py --arch vgg16\n")
    proc = _msub(ordinary_user, ["--hold", "--gpus=8", "-N", "2", str(s)], workdir, site)
    assert proc.returncode == 0, proc.stderr
    job = _squeue(slurm_cluster)[janitor.add(_job_id(proc.stdout))]
    assert job["tres_per_job"] == "gres:gpu:8"
    tag, _ = parse_comment(job["comment"])
    assert tag.model == "vgg16" and tag.added == "" and tag.why and job["features"] in ("", "(null)")
    proc = _msub(ordinary_user, ["--hold", "--gpus=4", str(s)], workdir, site)
    assert proc.returncode == 0, proc.stderr
    job = _squeue(slurm_cluster)[janitor.add(_job_id(proc.stdout))]
    assert job["tres_per_job"] == "gres:gpu:4"
    tag, _ = parse_comment(job["comment"])
    assert tag.added and set(tag.added.split("|")) <= set(TYPES)
    assert set(job["features"].strip("[]()").split("|")) == set(tag.added.split("|"))


@pytest.mark.slurm
def test_constraint_the_cluster_rejects_is_dropped(slurm_cluster, ordinary_user, workdir, janitor):
    """A GPU type that no node carries as a feature (titanrtx; msub's cached sinfo answer still lists a
    titanrtx node, as after a reconfiguration within its ten minutes): sbatch says "Invalid feature
    specification", msub warns once and submits the job without msched's constraint, tag kept."""
    import time
    d = _shared_dir("msub-reject-")
    (d / "gpu_free_time.json").write_text(json.dumps({"time": time.time(), "free_at": {"titanrtx": 0}}))
    (d / "msched.toml").write_text(f'sbatch = "{SBATCH}"\nstate_dir = "{d}"\n')
    (d / "cluster_nodes.json").write_text(json.dumps({
        "key": f"{os.environ.get('SLURM_CONF', '')}|{SBATCH}", "time": time.time(),
        "nodes": [["n9", "gpu:titanrtx:4", ["titanrtx"], ["gpu"]]]}))
    for f in d.iterdir():
        f.chmod(0o644)
    s = _script(workdir, "reject.sh", "#!/bin/sh\n#SBATCH --gres=gpu:1\npython train.py --arch resnet50\n")
    env = {"MSCHED_CONFIG": str(d / "msched.toml"), "PYTHONPYCACHEPREFIX": str(workdir / ".pycache"),
           "MSCHED_CACHE_DIR": str(d)}
    proc = ordinary_user.run([str(Path(sys.executable).with_name("msub")), "--hold", str(s)], env=env, cwd=workdir)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("Submitted batch job ")
    assert proc.stderr.count("msub: warning:") == 1 and "Invalid feature specification" in proc.stderr
    assert "submitted without msched's GPU-type constraint" in proc.stderr
    job = _squeue(slurm_cluster)[janitor.add(_job_id(proc.stdout))]
    tag, _ = parse_comment(job["comment"])
    assert tag.model == "resnet50" and tag.added == "" and job["features"] in ("", "(null)")


@pytest.mark.slurm
def test_sbatch_error_passes_through(slurm_cluster, ordinary_user, workdir, site):
    s = _script(workdir, "bad.sh", "#!/bin/sh\n#SBATCH --gres=gpu:1\npython t.py --arch resnet50\n")
    plain = ordinary_user.run(["/usr/bin/sbatch", "-p", "nosuchpartition", str(s)], cwd=workdir)
    mine = _msub(ordinary_user, ["-p", "nosuchpartition", str(s)], workdir, site)
    assert plain.returncode != 0
    assert (mine.returncode, mine.stdout, mine.stderr) == (plain.returncode, plain.stdout, plain.stderr)


@pytest.mark.slurm
@pytest.mark.slow
def test_failing_user_model_runs_as_plain_job(slurm_cluster, ordinary_user, workdir, site, janitor):
    model = _script(workdir, "mymodel.py", "def build():\n    raise RuntimeError('broken on purpose')\n")
    os.chown(model, ordinary_user.uid, ordinary_user.gid)     # the user's own file: profiled, and it fails
    s = _script(workdir, "user.sh", "#!/bin/sh\n#MSCHED --model=mymodel.py:build\n#SBATCH --gres=gpu:1\necho ran\n")
    proc = _msub(ordinary_user, ["--parsable", "-o", str(workdir / "user.out"), str(s)], workdir, site)
    assert proc.returncode == 0, proc.stderr
    warn = [ln for ln in proc.stderr.splitlines() if ln.startswith("msub: warning:")]
    assert len(warn) == 1 and "plain" in warn[0] and "broken on purpose" in warn[0]
    job_id = janitor.add(_job_id(proc.stdout))
    from helpers import wait_for
    wait_for(lambda: (workdir / "user.out").exists() and "ran" in (workdir / "user.out").read_text(),
             timeout=30, message="the plain job to run")
    job = _squeue(slurm_cluster).get(job_id)
    assert job is None or parse_comment(job["comment"])[0] is None


@pytest.mark.slurm
@pytest.mark.slow
def test_fifty_concurrent_msub_calls(slurm_cluster, ordinary_user, workdir, site, janitor):
    s = _script(workdir, "c.sh", "#!/bin/sh\n#SBATCH --gres=gpu:1\npython t.py --arch resnet34\n")

    def one(i):
        return _msub(ordinary_user, ["--hold", "--parsable", "-J", f"conc{i}", str(s)], workdir, site, timeout=300)

    with ThreadPoolExecutor(max_workers=50) as pool:
        results = list(pool.map(one, range(50)))
    bad = [r.stderr for r in results if r.returncode != 0]
    assert not bad, bad[:3]
    ids = [janitor.add(_job_id(r.stdout)) for r in results]
    assert len(set(ids)) == 50
    queue = _squeue(slurm_cluster)
    tags = [parse_comment(queue[i]["comment"])[0] for i in ids]
    assert all(t is not None and t.model == "resnet34" for t in tags)


@pytest.mark.slurm
def test_wrap_stdin_array_parsable(slurm_cluster, ordinary_user, workdir, site, janitor):
    wrap = _msub(ordinary_user, ["--hold", "--gres=gpu:1", "--wrap", "python t.py --arch resnet18"], workdir, site)
    assert wrap.returncode == 0 and wrap.stdout.startswith("Submitted batch job "), wrap.stderr
    stdin = _msub(ordinary_user, ["--hold", "--parsable"], workdir, site,
                  input="#!/bin/sh\n#SBATCH --gres=gpu:1\n#MSCHED --model=densenet121\ntrue\n")
    assert stdin.returncode == 0 and stdin.stdout.strip().isdigit(), stdin.stderr
    arr = _msub(ordinary_user, ["--hold", "--parsable", "--array=0-2", "--gres=gpu:1", "--model=vgg11",
                                "--wrap", "true"], workdir, site)
    assert arr.returncode == 0, arr.stderr
    ids = [janitor.add(_job_id(p.stdout)) for p in (wrap, stdin, arr)]
    queue = _squeue(slurm_cluster)
    assert parse_comment(queue[ids[0]]["comment"])[0].model == "resnet18"
    assert parse_comment(queue[ids[1]]["comment"])[0].model == "densenet121"
    assert queue[ids[1]]["name"] == "sbatch"                  # a stdin script keeps sbatch's own default name
    arr_tasks = [j for j in queue.values() if str(j.get("array_job_id")) == ids[2]]
    assert arr_tasks and all(parse_comment(j["comment"])[0].model == "vgg11" for j in arr_tasks)


@pytest.mark.slurm
def test_installed_as_sbatch_on_path(slurm_cluster, ordinary_user, workdir, site, janitor):
    """A site that installs msub as `sbatch` ahead of the real one: scripts calling `sbatch` get msched."""
    bindir = _shared_dir("msub-as-sbatch-")
    (bindir / "sbatch").symlink_to(Path(sys.executable).with_name("msub"))
    env = {"MSCHED_CONFIG": str(site / "msched.toml"), "PYTHONPYCACHEPREFIX": str(workdir / ".pycache"),
           "PATH": f"{bindir}:{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin"}
    proc = ordinary_user.run(["sbatch", "--hold", "--parsable", "--gres=gpu:1", "--wrap", "python t.py -a resnet101"],
                             env=env, cwd=workdir)
    assert proc.returncode == 0 and proc.stdout.strip().isdigit(), proc.stderr
    job = _squeue(slurm_cluster)[janitor.add(proc.stdout.strip())]
    assert parse_comment(job["comment"])[0].model == "resnet101"
    # a config whose sbatch is that very wrapper is refused instead of looping
    loop = site / "loop.toml"
    loop.write_text(f'sbatch = "{bindir / "sbatch"}"\n')
    loop.chmod(0o644)
    proc = ordinary_user.run(["sbatch", "--wrap", "true"], env={**env, "MSCHED_CONFIG": str(loop)}, cwd=workdir)
    assert proc.returncode == 1 and "points at msub itself" in proc.stderr


def _site_with_free_time(tmp_path, monkeypatch, published: float, free_at: dict[str, float]) -> None:
    (tmp_path / "gpu_free_time.json").write_text(json.dumps({"time": published, "free_at": free_at}))
    conf = tmp_path / "msched.toml"
    conf.write_text(f'sbatch = "{SBATCH}"\nstate_dir = "{tmp_path}"\n')
    monkeypatch.setenv("MSCHED_CONFIG", str(conf))


def test_published_free_time_steers_the_choice(tmp_path, monkeypatch):
    import time
    now = time.time()
    argv = ["--model=vgg16", "--iterations=2000", "--gres=gpu:1", "--wrap", "true"]
    _site_with_free_time(tmp_path, monkeypatch, now, dict.fromkeys(TYPES, now))
    idle = _tag_of(build_submission(argv)[0].argv)[0].added.split("|")
    assert "a100" in idle                                   # VGG is fastest on a100 when everything is free
    busy = {**dict.fromkeys(TYPES, now), "a100": now + 10 * 86400}
    _site_with_free_time(tmp_path, monkeypatch, now, busy)
    assert "a100" not in _tag_of(build_submission(argv)[0].argv)[0].added.split("|")
    # a stale file (the reorderer stopped) means every type is free now: back to the idle choice
    _site_with_free_time(tmp_path, monkeypatch, now - 7200, busy)
    assert _tag_of(build_submission(argv)[0].argv)[0].added.split("|") == idle


def test_only_the_clusters_types_are_named(tmp_path, monkeypatch):
    import time
    now = time.time()
    _site_with_free_time(tmp_path, monkeypatch, now, {"titanxp": now, "rtx2080ti": now})
    sub, _ = build_submission(["--model=resnet50", "--gres=gpu:1", "--wrap", "true"])
    assert set(_tag_of(sub.argv)[0].added.split("|")) <= {"titanxp", "rtx2080ti"}


@pytest.mark.slurm
def test_owner_reads_why_in_msched_jobs(slurm_cluster, ordinary_user, workdir, site, janitor):
    """Issue 20: a client that hides sbatch's stderr on success loses msub's warnings, so the reason
    is kept in the job: `msched jobs`, run by the job's owner, shows why one job went untagged and why
    another got no constraint; the environment names the model of a third (MSCHED_MODEL)."""
    unknown = _msub(ordinary_user, ["--hold", "--parsable", "--gres=gpu:1", "--model=my_transformer", "--wrap",
                                    "true"], workdir, site)
    late = _msub(ordinary_user, ["--hold", "--parsable", "--gres=gpu:titanv:1", "--model=resnet50",
                                 "--wrap", "true"], workdir, site)
    env_named = ordinary_user.run(
        [str(Path(sys.executable).with_name("msub")), "--hold", "--parsable", "--gres=gpu:1", "--wrap",
         "python -u -m submitit.core._submit /tmp/x"],
        env={"MSCHED_CONFIG": str(site / "msched.toml"), "PYTHONPYCACHEPREFIX": str(workdir / ".pycache"),
             "MSCHED_MODEL": "densenet121"}, cwd=workdir)
    for p in (unknown, late, env_named):
        assert p.returncode == 0, p.stderr
    ids = [janitor.add(_job_id(p.stdout)) for p in (unknown, late, env_named)]
    proc = ordinary_user.run([str(Path(sys.executable).with_name("msched")), "jobs", "--json"],
                             env={"MSCHED_CONFIG": str(site / "msched.toml")}, cwd=workdir)
    assert proc.returncode == 0, proc.stderr
    rows = {r["job_id"]: r for r in json.loads(proc.stdout)}
    assert not rows[ids[0]]["tagged"] and rows[ids[0]]["why"].startswith("unknown model 'my_transformer'")
    assert rows[ids[1]]["tagged"] and rows[ids[1]]["added"] == ""
    assert rows[ids[1]]["why"] == "GPU type titanv chosen by the user"
    assert rows[ids[2]]["model"] == "densenet121" and rows[ids[2]]["added"] and rows[ids[2]]["why"] == ""
