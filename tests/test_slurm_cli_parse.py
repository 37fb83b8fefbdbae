"""The command-line backend's parsers, replayed on real Slurm 22.05 output recorded by
tests/data/slurm/record.py (squeue/sinfo in the exact format CliClient asks for, the jobcomp file,
and the error messages scontrol/sbatch/squeue print). Expected values are derived from the sbatch
arguments each recorded job was submitted with (cases.json), not copied from the output.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from msched.config import Config
from msched.slurm.base import JobNotPending, SlurmError, SlurmUnavailable
from msched.slurm.cli import (
    classify_error,
    expand_hostlist,
    format_time_limit,
    normalise_node_state,
    parse_gpu_tres,
    parse_jobcomp,
    parse_sinfo,
    parse_squeue,
    parse_time_limit,
)
from msched.tag import parse_comment

DATA = Path(__file__).parent / "data" / "slurm"
CASES = json.loads((DATA / "cases.json").read_text())
NODE_TYPES = CASES["node_types"]


def _expected_gpus(args: list[str]) -> tuple[int, str | None]:
    """GPUs a job asked for, from its sbatch arguments: (total, typed GPU or None)."""
    opts: dict[str, str] = {}
    it = iter(args)
    for a in it:
        if a in ("-N", "-n"):
            opts[a] = next(it)
        elif a.startswith("--") and "=" in a:
            k, v = a[2:].split("=", 1)
            opts[k] = v
    nodes = int(opts.get("-N", 1))
    tasks = int(opts.get("-n", opts.get("ntasks", 1)))
    for key, mult in (("gres", nodes), ("gpus", 1), ("gpus-per-node", nodes), ("gpus-per-task", tasks)):
        if key in opts:
            parts = opts[key].split(":")
            if key == "gres":
                parts = parts[1:]          # drop "gpu"
            count = int(parts[-1])
            return count * mult, (parts[0] if len(parts) == 2 else None)
    return 0, None


@pytest.fixture(scope="module")
def jobs():
    parsed = parse_squeue((DATA / "squeue.txt").read_text(), Config(), NODE_TYPES)
    return {j.job_id: j for j in parsed}


@pytest.mark.parametrize("name", sorted(CASES["cases"]))
def test_gpu_counts_and_types_from_every_tres_field(jobs, name):
    job = jobs[CASES["ids"][name]]
    count, typed = _expected_gpus(CASES["cases"][name])
    assert job.name == name
    assert job.num_gpus == count
    assert job.gres_gpu_type == typed


def test_states_nodes_and_gpu_type_of_running_jobs(jobs):
    ids = CASES["ids"]
    run = jobs[ids["running-a100"]]
    assert run.state == "RUNNING" and run.nodes == "n1" and run.gpu_type == "a100"
    assert run.start_time is not None and run.end_time is None
    two = jobs[ids["running-2nodes"]]
    assert two.num_nodes == 2 and expand_hostlist(two.nodes) == ["n3", "n4"]
    assert two.gpu_type in ("rtx2080ti", "titanxp")
    user = jobs[ids["user-job"]]
    assert user.user == CASES["user"] and user.state == "RUNNING"
    done = jobs[ids["completed"]]
    assert done.state == "COMPLETED" and done.end_time >= done.start_time >= done.submit_time > 0
    assert done.gpu_type == "titanv"
    assert jobs[ids["cancelled"]].state == "CANCELLED"


def test_pending_held_jobs(jobs):
    held = jobs[CASES["ids"]["gres-untyped"]]
    assert held.state == "PENDING" and held.priority == 0 and held.reason == "JobHeldUser"
    assert held.start_time is None and held.nodes == "" and held.gpu_type is None
    assert held.features == "" and held.comment == ""


def test_comment_with_tag_and_separator_like_characters(jobs):
    job = jobs[CASES["ids"]["or-constraint"]]
    assert job.comment == CASES["tag"]
    tag, user = parse_comment(job.comment)
    assert tag.model == "resnet50" and tag.added == "a100|titanv" and user == "user note with spaces"
    assert job.features == "a100|titanv"
    weird = jobs[CASES["ids"]["weird name | with pipes"]]
    assert weird.name == "weird name | with pipes"


def test_time_limits(jobs):
    assert jobs[CASES["ids"]["no-gpu"]].time_limit_s == 86400 + 2 * 3600 + 4 * 60   # asked 1-02:03:04
    assert jobs[CASES["ids"]["running-a100"]].time_limit_s == 5 * 60
    assert jobs[CASES["ids"]["gres-typed"]].time_limit_s == 3600                     # partition DefaultTime


def test_array_job_is_one_pending_record(jobs):
    job = jobs[CASES["ids"]["array"]]
    assert job.state == "PENDING" and job.num_gpus == 1


def test_sinfo_nodes():
    nodes = {n.name: n for n in parse_sinfo((DATA / "sinfo.txt").read_text(), Config())}
    assert {n: nodes[n].gpu_type for n in nodes} == NODE_TYPES
    assert all(n.gpus == 4 and n.partitions == ("gpu",) for n in nodes.values())
    assert all(nodes[n].features == (t,) for n, t in NODE_TYPES.items())
    # running-a100 (2 GPUs) and user-job (1) share n1; running-2nodes holds 1 GPU on n3 and n4
    assert nodes["n1"].gpus_alloc == 3 and nodes["n1"].gpus_free == 1 and nodes["n1"].state == "MIXED"
    assert nodes["n2"].gpus_alloc == 0 and nodes["n2"].state == "IDLE"
    assert nodes["n4"].state == "ALLOCATED+DRAIN" and not nodes["n4"].usable and nodes["n4"].gpus_free == 0


def test_gpu_aliases_apply_to_nodes_and_jobs(jobs):
    config = Config(gpu_aliases={"titanv": "v100ish", "A100": "a100-40g"})
    nodes = {n.name: n for n in parse_sinfo((DATA / "sinfo.txt").read_text(), config)}
    assert nodes["n2"].gpu_type == "v100ish" and nodes["n1"].gpu_type == "a100-40g"
    typed = parse_squeue((DATA / "squeue.txt").read_text(), config, {})
    by_id = {j.job_id: j for j in typed}
    assert by_id[CASES["ids"]["gres-typed"]].gres_gpu_type == "v100ish"


def test_jobcomp_file():
    text = (DATA / "jobcomp.txt").read_text()
    parsed = {j.job_id: j for j in parse_jobcomp(text, Config(), NODE_TYPES)}
    assert len(parsed) == len([ln for ln in text.splitlines() if ln.startswith("JobId=")])
    done = parsed[CASES["ids"]["completed"]]
    assert done.state == "COMPLETED" and done.nodes == "n2" and done.gpu_type == "titanv"
    assert done.time_limit_s == 300 and done.end_time >= done.start_time
    assert parsed[CASES["ids"]["user-job"]].user == CASES["user"]
    assert parsed[CASES["ids"]["weird name | with pipes"]].name == "weird name | with pipes"
    assert parsed[CASES["ids"]["cancelled"]].state == "CANCELLED"


ERRORS = json.loads((DATA / "errors.json").read_text())


@pytest.mark.parametrize("key,update,expected", [
    ("features_running", True, JobNotPending),
    ("priority_finished", True, JobNotPending),
    ("priority_invalid", True, JobNotPending),
    ("priority_held", True, JobNotPending),
    ("hold_finished", True, JobNotPending),
    ("sbatch_bad_feature", False, SlurmError),
    ("sbatch_bad_partition", False, SlurmError),
    ("squeue_down", False, SlurmUnavailable),
    ("update_down", True, SlurmUnavailable),
    ("sbatch_down", False, SlurmUnavailable),
])
def test_error_messages_classified(key, update, expected):
    rec = ERRORS[key]
    assert rec["rc"] != 0
    got = classify_error(rec["stderr"], JobNotPending if update else SlurmError)
    assert got is expected


def test_small_parsers():
    assert parse_gpu_tres("gres:gpu:a100:2") == (2, "a100")
    assert parse_gpu_tres("gpu:a100:4(S:0-1),shard:8") == (4, "a100")
    assert parse_gpu_tres("gres:gpu:2,gres:shard:1") == (2, None)
    assert parse_gpu_tres("N/A") == (0, None)
    assert parse_time_limit("UNLIMITED") is None
    assert parse_time_limit("2-00") == 2 * 86400
    assert parse_time_limit("45") == 45 * 60
    assert parse_time_limit("05:30") == 5 * 60 + 30
    assert parse_time_limit(format_time_limit(93784)) == 93784
    assert expand_hostlist("gpu[01-03,07],cpu1,n[1-2]x") == ["gpu01", "gpu02", "gpu03", "gpu07", "cpu1", "n1x", "n2x"]
    assert normalise_node_state("down*") == "DOWN+NOT_RESPONDING"
    assert normalise_node_state("idle~") == "IDLE+POWERED_DOWN"


def test_recorded_format_is_the_one_the_client_asks_for():
    """The recordings must keep matching the client's field list (re-record after changing it)."""
    from msched.slurm.cli import JOB_FIELDS, NODE_FIELDS
    first = (DATA / "squeue.txt").read_text().splitlines()[0]
    assert first.count("\x1f") == len(JOB_FIELDS)
    assert re.match(r"^\d+\x1f", first)
    assert (DATA / "sinfo.txt").read_text().splitlines()[0].count("\x1f") == len(NODE_FIELDS)


def test_jobcomp_tail_reads_only_recent_lines(tmp_path):
    """A long completion file is read backwards only as far as `since` needs (plus a margin)."""
    from msched.slurm.cli import read_jobcomp_tail
    recorded = [ln for ln in (DATA / "jobcomp.txt").read_text().splitlines() if ln.startswith("JobId=")]
    old = re.sub(r"(Start|End|Submit|Eligible)Time=\d{4}-", r"\1Time=2001-", recorded[0])
    path = tmp_path / "jobcomp.txt"
    path.write_text("\n".join([old] * 5000 + recorded) + "\n")
    jobs = parse_jobcomp((DATA / "jobcomp.txt").read_text(), Config(), NODE_TYPES)
    since = min(j.end_time for j in jobs)
    tail = read_jobcomp_tail(path, since, chunk=4096)
    assert len(tail) < 20000                      # stopped long before the 5000 old lines
    tail_ids = {j.job_id for j in parse_jobcomp(tail, Config(), NODE_TYPES) if j.end_time >= since}
    assert tail_ids == {j.job_id for j in jobs}
    assert read_jobcomp_tail(path, None) == path.read_text()


def test_jobcomp_tail_reads_one_timestamp_per_chunk(tmp_path, monkeypatch):
    """Recent lines (all within the margin, as on a busy cluster) are all returned, and the backward
    reader looks at one timestamp per chunk rather than re-reading every line of every chunk."""
    from msched.slurm.cli import accounting
    recorded = [ln for ln in (DATA / "jobcomp.txt").read_text().splitlines() if ln.startswith("JobId=")]
    path = tmp_path / "jobcomp.txt"
    path.write_text("\n".join(recorded * 200) + "\n")
    since = min(j.end_time for j in parse_jobcomp("\n".join(recorded), Config(), NODE_TYPES))
    calls = []
    real = accounting._local_time
    monkeypatch.setattr(accounting, "_local_time", lambda text: calls.append(text) or real(text))
    tail = accounting.read_jobcomp_tail(path, since, chunk=4096)
    assert tail == path.read_text()
    assert len(calls) <= path.stat().st_size // 4096 + 1


def test_sacct_history():
    """sacct (slurmdbd) keeps every finished job: GPU totals and the pinned type from the request's
    TRES, the type it ran on from the allocation's, the tag (AccountingStoreFlags=job_comment)."""
    from msched.slurm.cli import parse_sacct
    parsed = {j.job_id: j for j in parse_sacct((DATA / "sacct.txt").read_text(), Config(), NODE_TYPES)}
    ids = CASES["ids"]
    for name, args in CASES["cases"].items():
        job = parsed[ids[name]]
        count, typed = _expected_gpus(args)
        assert (job.name, job.num_gpus, job.gres_gpu_type) == (name, count, typed), name
        assert job.state in ("COMPLETED", "CANCELLED")
    done = parsed[ids["completed"]]
    assert done.state == "COMPLETED" and done.gpu_type == "titanv" and done.nodes == "n2"
    assert done.comment == CASES["tag"] and done.tag.model == "resnet50"
    assert done.end_time >= done.start_time >= done.submit_time > 0 and done.time_limit_s == 300
    never_ran = parsed[ids["gres-untyped"]]
    assert never_ran.state == "CANCELLED" and never_ran.start_time is None and never_ran.nodes == ""
    assert never_ran.gpu_type is None and never_ran.reason == "JobHeldUser"
    assert parsed[ids["user-job"]].user == CASES["user"] and parsed[ids["user-job"]].gpu_type == "a100"
    assert parsed[ids["no-gpu"]].time_limit_s == 86400 + 2 * 3600 + 4 * 60
    assert parsed[ids["or-constraint"]].features == "a100|titanv"
