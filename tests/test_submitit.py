"""submitit (1.5) as a client of msched, as a researcher uses it, run as an ordinary user.

submitit writes its own batch script (`python -u -m submitit.core._submit ...`, the model pickled)
and calls the `sbatch` on PATH. msched reaches it two ways:
- the Slurm plugin (cli_filter.lua + job_submit.lua): submitit calls the real sbatch;
- the msub-as-sbatch shim: a directory first on PATH whose `sbatch` is msub.
A function job, a `map_array` and a `CommandFunction` job run to their right results either way; they
are tagged when the model is named (a `#MSCHED --model=...` line through `slurm_setup`, or
MSCHED_MODEL in the environment) and untagged otherwise.
"""

from __future__ import annotations

import json
import uuid

import pytest
from helpers import VENV_BIN
from plugin_cluster import plugin_cluster as plugin_cluster  # the fixture, re-exported for pytest
from plugin_cluster import show_job

from msched.tag import parse_tag, why_of

pytest.importorskip("submitit")
pytestmark = pytest.mark.slurm

CLIENT = r'''
import json, os, sys
import submitit

def square(x):
    return x * x

folder, mode = sys.argv[1], sys.argv[2]
executor = submitit.AutoExecutor(folder=os.path.join(folder, mode), cluster="slurm")
params = dict(timeout_min=10, gpus_per_node=1, slurm_partition="gpu", name=f"submitit-{mode}")
if mode == "setup":
    params["slurm_setup"] = ["#MSCHED --model=resnet50"]
executor.update_parameters(**params)
job = executor.submit(square, 4)
array = executor.map_array(square, [1, 2, 3])
command = executor.submit(submitit.helpers.CommandFunction(["echo", "hello"]))
results = [job.result(), [j.result() for j in array], command.result().strip()]
print(json.dumps({"ids": [job.job_id, *[j.job_id for j in array], command.job_id], "results": results}))
'''
MODES = {"setup": {}, "env": {"MSCHED_MODEL": "resnet50"}, "unnamed": {}}


def _run_client(user, cluster, tmp_name: str, extra_env: dict[str, str], path_prefix: str = "",
                modes: tuple[str, ...] = tuple(MODES)) -> dict:
    """Every mode's jobs from one client process per mode, as the user; returns {mode: answer}.

    The folder is new for every call: submitit takes a job as done when `<id>_0_result.pkl` exists, and
    job ids restart with each dev cluster, so a folder left by an earlier cluster (another checkout's,
    the same user's home) would hand this run an old job's result."""
    folder = user.home / f"{tmp_name}-{uuid.uuid4().hex[:12]}"
    user.run(["mkdir", "-p", str(folder)], check=True)
    client = folder / "client.py"
    user.run(["tee", str(client)], input=CLIENT, check=True)
    out = {}
    for mode in modes:
        env = MODES[mode]
        full = {"SLURM_CONF": str(cluster.conf), **extra_env, **env}
        if path_prefix:
            full["PATH"] = f"{path_prefix}:{VENV_BIN}:/usr/local/bin:/usr/bin:/bin"
        proc = user.run([str(VENV_BIN / "python"), str(client), str(folder), mode], full, timeout=300)
        assert proc.returncode == 0, proc.stderr[-2000:]
        out[mode] = json.loads(proc.stdout.strip().splitlines()[-1])
    user.run(["rm", "-rf", str(folder)], check=True)
    return out


def _check_results(answers: dict) -> None:
    for mode, answer in answers.items():
        assert answer["results"] == [16, [1, 4, 9], "hello"], mode


def test_submitit_through_the_plugin(plugin_cluster, ordinary_user):
    answers = _run_client(ordinary_user, plugin_cluster, "submitit-plugin", {})
    _check_results(answers)
    for mode, answer in answers.items():
        for job_id in answer["ids"]:
            fields = show_job(plugin_cluster, job_id)
            tag, _, why = parse_tag(fields["AdminComment"])
            if mode == "unnamed":     # untagged, and why is on record for its owner (`msched jobs`)
                assert fields["AdminComment"] == "" and tag is None, (mode, job_id, fields)
                assert why_of(fields["Comment"]) == "no model named", (mode, job_id, fields)
            else:
                assert tag is not None and tag.model == "resnet50" and not why, (mode, job_id, fields)
                assert tag.added and fields["Features"].strip("()") == tag.added


@pytest.fixture(scope="module")
def shim(ordinary_user):
    shim = ordinary_user.home / "msub-shim"
    ordinary_user.run(["mkdir", "-p", str(shim)], check=True)
    ordinary_user.run(["ln", "-sfn", str(VENV_BIN / "msub"), str(shim / "sbatch")], check=True)
    return shim


def _check_shim(cluster, answers: dict) -> None:
    _check_results(answers)
    for mode, answer in answers.items():
        for job_id in answer["ids"]:
            fields = show_job(cluster, job_id)
            tag, _, _ = parse_tag(fields["Comment"])
            if mode == "unnamed":       # untagged, with msub's reason kept where `msched jobs` reads it
                assert tag is None and why_of(fields["Comment"]) == "no model named", (mode, job_id, fields)
            else:
                assert tag is not None and tag.model == "resnet50", (mode, job_id, fields)


def test_submitit_through_msub_installed_as_sbatch(slurm_cluster, ordinary_user, shim):
    answers = _run_client(ordinary_user, slurm_cluster, "submitit-shim", {}, path_prefix=str(shim),
                          modes=("setup", "unnamed"))
    _check_shim(slurm_cluster, answers)


def test_submitit_through_msub_names_the_model_from_the_environment(slurm_cluster, ordinary_user, shim):
    answers = _run_client(ordinary_user, slurm_cluster, "submitit-shim", {}, path_prefix=str(shim), modes=("env",))
    _check_shim(slurm_cluster, answers)
