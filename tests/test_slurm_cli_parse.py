"""The command-line backend's parsers, replayed on real Slurm 22.05 output recorded by
tests/data/slurm/record.py (`squeue --json` and sinfo exactly as CliClient asks for them, the jobcomp file,
and the error messages scontrol/sbatch/squeue print). Expected values are derived from the sbatch
arguments each recorded job was submitted with (cases.json), not copied from the output.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from helpers import assert_only_victim_text_differs
from hypothesis import given, settings
from hypothesis import strategies as st

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
from msched.slurm.cli.parsers import parse_gres_index
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
    parsed = parse_squeue((DATA / "squeue.json").read_bytes(), Config(), NODE_TYPES)
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
    typed = parse_squeue((DATA / "squeue.json").read_bytes(), config, {})
    by_id = {j.job_id: j for j in typed}
    assert by_id[CASES["ids"]["gres-typed"]].gres_gpu_type == "v100ish"


def test_jobcomp_file():
    text = (DATA / "jobcomp.txt").read_text()
    parsed = {j.job_id: j for j in parse_jobcomp(text, Config(), NODE_TYPES)}
    # the hostile job whose name holds a newline splits its own line: its head lacks JobState and is
    # dropped, the tail is no record; every other job is read
    whole = [ln for ln in text.splitlines() if ln.startswith("JobId=") and " JobState=" in ln]
    assert len(parsed) == len(whole)
    assert {i for n, i in CASES["ids"].items() if not n.startswith("hostile-name-")} <= set(parsed)
    assert not any(j.name.startswith("hostile-name-") for j in parsed.values())
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
    """The recordings must keep matching the client's calls (re-record after changing them)."""
    from msched.slurm.cli import NODE_FIELDS
    doc = json.loads((DATA / "squeue.json").read_bytes().decode("utf-8", errors="replace"))
    assert doc["meta"]["Slurm"]["release"].startswith("22.05") and isinstance(doc["jobs"], list)
    assert (DATA / "sinfo.txt").read_text().splitlines()[0].count("\x1f") == len(NODE_FIELDS)


# ------------------------------------------------------------------ hostile users (issue 13, item 1)
def _hostile_value(name: str, option: str) -> str:
    """What the ordinary user passed as --OPTION= for a recorded hostile job (bytes read as sbatch got them)."""
    arg = next(a for a in CASES["hostile"][name] if a.startswith(f"--{option}="))
    return arg.split("=", 1)[1].encode("latin-1").decode("utf-8", errors="replace")


def test_every_job_is_one_record_whatever_its_comment_or_name_holds(jobs):
    """Submitted by an ordinary user on the real cluster: comments holding every control byte, a whole
    fake row of the old `squeue -O` format after a newline, bytes that are not UTF-8, a name with ESC.
    Each is exactly one job with exactly its own text; no other job's fields change."""
    ids = CASES["ids"]
    assert set(jobs) == set(ids.values()) | {j for j in jobs if j not in ids.values() and False}
    assert len(jobs) == len(ids)
    for name in ("hostile-control-bytes", "hostile-fake-row", "hostile-not-utf8"):
        job = jobs[ids[name]]
        assert job.comment == _hostile_value(name, "comment") and job.name == name
        assert job.user == CASES["user"] and job.state == "PENDING" and job.priority == 0 and job.tag is None
    weird = next(n for n in ids if n.startswith("hostile-name-"))
    assert jobs[ids[weird]].name == weird and "\x1b" in weird
    # the fake row named job 1 with a tag: job 1 is the recorded root job, untouched
    assert jobs["1"].name == "gres-untyped" and jobs["1"].comment == "" and jobs["1"].tag is None


def test_forged_and_poisoned_tags_read_as_claims_or_not_at_all(jobs):
    forged = jobs[CASES["ids"]["hostile-forged-tag"]]
    assert forged.tag is not None and forged.tag.iters == 100_000_000     # a claim: bounded by the round (trust)
    poisoned = jobs[CASES["ids"]["hostile-poisoned-tag"]]
    assert poisoned.tag is None


def _slurm_json_string(raw: bytes) -> bytes:
    """A string as squeue --json (22.05.8) prints it, as recorded: control bytes escaped (\\n, \\u001b...),
    `"`, `\\` and `/` escaped, every other byte (DEL, bytes >= 0x80, valid UTF-8 or not) copied raw."""
    short = {8: b"\\b", 9: b"\\t", 10: b"\\n", 12: b"\\f", 13: b"\\r", 34: b'\\"', 92: b"\\\\", 47: b"\\/"}
    return b"".join(short.get(c) or (b"\\u%04x" % c if c < 0x20 else bytes([c])) for c in raw)


def test_the_escaping_model_matches_the_recording():
    recorded = (DATA / "squeue.json").read_bytes()
    for name in ("hostile-control-bytes", "hostile-fake-row", "hostile-not-utf8"):
        raw = next(a for a in CASES["hostile"][name] if a.startswith("--comment=")).split("=", 1)[1].encode("latin-1")
        assert b'"comment": "' + _slurm_json_string(raw) + b'"' in recorded


RECORDED = (DATA / "squeue.json").read_bytes()
VICTIM = b'"comment": "' + _slurm_json_string(b"msched:v1;model=vgg16;ref=vgg16;iters=100000000") + b'"'


@settings(max_examples=300, deadline=None)
@given(comment=st.binary(max_size=400), name=st.binary(max_size=100))
def test_fuzz_no_comment_or_name_forges_structure(comment, name):
    """Hypothesis over the recorded document: one job's comment and name replaced by any bytes, escaped as
    Slurm escapes them. The parse has the same jobs with the same ids, states and priorities, and that
    job holds exactly the bytes given (decoded with U+FFFD for what is not UTF-8, less trailing spaces)."""
    base = {j.job_id: j for j in parse_squeue(RECORDED, Config(), NODE_TYPES)}
    victim_id = CASES["ids"]["hostile-forged-tag"]
    doc = RECORDED.replace(VICTIM, b'"comment": "' + _slurm_json_string(comment) + b'"', 1)
    doc = doc.replace(b'"name": "hostile-forged-tag"', b'"name": "' + _slurm_json_string(name) + b'"', 1)
    got = {j.job_id: j for j in parse_squeue(doc, Config(), NODE_TYPES)}
    assert set(got) == set(base)
    assert_only_victim_text_differs(got, base, victim_id, comment, name)


def test_an_unreachable_controller_is_an_error_not_an_empty_queue():
    """Recorded: squeue --json against a controller that does not answer exits 0 with no jobs."""
    with pytest.raises(SlurmUnavailable, match="Failed while looking for jobs"):
        parse_squeue((DATA / "squeue_down.json").read_bytes(), Config(), NODE_TYPES)


def test_sacct_with_no_job_in_the_window_is_an_empty_list():
    """22.05's sacct --json reports an empty window as an error record (seen on the accounting dev
    cluster): "Nothing found" is no job, not an unreachable controller."""
    from msched.slurm.cli import parse_sacct
    doc = {"meta": {}, "jobs": [], "errors": [{"description": "Nothing found", "error_number": -1,
                                               "error": "Nothing found with query", "source": "slurmdb_jobs_get"}]}
    assert parse_sacct(json.dumps(doc).encode(), Config(), NODE_TYPES) == []


def test_a_document_that_is_not_json_is_one_clean_error():
    from msched.slurm.cli.parsers import SqueueFormatError
    for bad in (RECORDED[: len(RECORDED) // 2], b"", b'{"jobs": 3}', b"\xff\x00garbage"):
        with pytest.raises(SqueueFormatError) as info:
            parse_squeue(bad, Config(), NODE_TYPES)
        assert "\n" not in str(info.value) and "\x00" not in str(info.value)


def test_jobcomp_tail_reads_only_recent_lines(tmp_path):
    """A long completion file is read backwards only as far as `since` needs (plus a margin)."""
    from msched.slurm.cli import read_jobcomp_tail
    recorded = [ln for ln in (DATA / "jobcomp.txt").read_text().splitlines() if ln.startswith("JobId=")]
    old = re.sub(r"(Start|End|Submit|Eligible)Time=\d{4}-", r"\1Time=2001-", recorded[0])
    old = re.sub(r"^JobId=\d+", "JobId=900000", old)       # another (long finished) job
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
    """sacct --json (slurmdbd) keeps every finished job: GPU totals and the pinned type from the request's
    TRES, the type it ran on from the allocation's, the tag (AccountingStoreFlags=job_comment). The
    hostile comment whose fake row forged job 1 in the text format is one job's comment here."""
    from msched.slurm.cli import parse_sacct
    parsed = {j.job_id: j for j in parse_sacct((DATA / "sacct.json").read_bytes(), Config(), NODE_TYPES)}
    ids = CASES["ids"]
    assert parsed["1"].name == "gres-untyped" and parsed["1"].comment == ""
    assert parsed[ids["hostile-fake-row"]].comment == _hostile_value("hostile-fake-row", "comment")
    # slurmdbd (MariaDB) stores the bytes that are not UTF-8 as "?": the rest of the comment is intact
    assert parsed[ids["hostile-not-utf8"]].comment == _hostile_value("hostile-not-utf8", "comment").replace("\ufffd", "?")
    for name, args in CASES["cases"].items():
        job = parsed[ids[name]]
        count, typed = _expected_gpus(args)
        assert (job.name, job.num_gpus, job.gres_gpu_type) == (name, count, typed), name
        assert job.state in ("COMPLETED", "CANCELLED")
    done = parsed[ids["completed"]]
    assert done.state == "COMPLETED" and done.gpu_type == "titanv" and done.nodes == "n2"
    assert done.comment == CASES["tag"] and done.tag.model == "resnet50"
    assert done.end_time >= done.start_time >= done.submit_time > 0 and done.time_limit_s == 300
    never_ran = parsed[ids["gres-typed"]]
    assert never_ran.state == "CANCELLED" and never_ran.start_time is None and never_ran.nodes == ""
    assert never_ran.gpu_type is None and never_ran.reason == "JobHeldUser"
    # sacct --json names the user through the association; the dev cluster's slurmdbd has one for root only
    assert parsed[ids["completed"]].user == "root" and parsed[ids["user-job"]].user in (CASES["user"], "")
    assert parsed[ids["user-job"]].gpu_type == "a100"
    assert parsed[ids["no-gpu"]].time_limit_s == 86400 + 2 * 3600 + 4 * 60
    assert parsed[ids["or-constraint"]].features == "a100|titanv"


def test_job_records_cut_as_decoded_parse_exactly_as_whole_ones():
    """parse_squeue cuts each job record to SQUEUE_FIELDS while decoding (memory at 10,000 jobs): every
    field job_from_json reads must be among them, so the recorded queue parses the same either way."""
    from msched.slurm.cli.parsers import job_from_json

    raw = (DATA / "squeue.json").read_bytes()
    whole = json.loads(raw.decode("utf-8", errors="replace"))["jobs"]
    assert [job_from_json(d, Config(), NODE_TYPES) for d in whole] == parse_squeue(raw, Config(), NODE_TYPES)
    import inspect
    read = set(re.findall(r'd\.get\("([a-z_]+)"\)', inspect.getsource(job_from_json)))
    assert {"job_id", "eligible_time", "comment"} <= read
    from msched.slurm.cli.parsers import SQUEUE_FIELDS
    assert read <= SQUEUE_FIELDS


def _chunks(raw: bytes, cuts: list[int]) -> list[bytes]:
    edges = sorted({0, len(raw), *(c % (len(raw) + 1) for c in cuts)})
    return [raw[a:b] for a, b in zip(edges, edges[1:], strict=False)]


@settings(max_examples=200, deadline=None)
@given(cuts=st.lists(st.integers(min_value=0, max_value=10**7), max_size=40))
def test_squeue_read_in_any_chunks_parses_as_read_whole(cuts):
    """The client parses squeue's output as it arrives from the pipe: cut anywhere (inside a string, a
    number, a multi-byte character or one of the recorded job's bytes that are not UTF-8), the chunks parse
    to the same jobs as the whole document, and the controller-down and malformed documents to the same
    errors."""
    whole = parse_squeue(RECORDED, Config(), NODE_TYPES)
    assert parse_squeue(iter(_chunks(RECORDED, cuts)), Config(), NODE_TYPES) == whole
    down = (DATA / "squeue_down.json").read_bytes()
    with pytest.raises(SlurmUnavailable, match="Failed while looking for jobs"):
        parse_squeue(iter(_chunks(down, cuts)), Config(), NODE_TYPES)
    from msched.slurm.cli.parsers import SqueueFormatError
    for bad in (RECORDED[: len(RECORDED) // 2], RECORDED + b"]", b'{"jobs": [1, 2'):
        with pytest.raises(SqueueFormatError):
            parse_squeue(iter(_chunks(bad, cuts)), Config(), NODE_TYPES)


FAKE_SQUEUE = """#!/bin/sh
# prints a recorded squeue --json in small writes, as a pipe delivers a large document
case "$MODE" in
  ok) exec dd if="$DOC" bs=4096 status=none ;;
  fail) echo "squeue: error: Unable to contact slurm controller (connect failure)" >&2; exit 1 ;;
  hang) head -c 10000 "$DOC"; exec sleep 30 ;;
esac
"""


def test_the_client_streams_squeue_and_passes_its_errors_through(tmp_path):
    """CliClient reads `squeue --json` from the pipe as it comes (a fake squeue printing the recorded
    document 4 KB at a time): the same jobs as parsing it whole; a failing squeue is the classified
    one-line error, not an empty queue; one that stops answering is killed at the timeout."""
    import stat
    import time

    from msched.slurm.cli import CliClient

    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "squeue").write_text(FAKE_SQUEUE)
    (bindir / "squeue").chmod(stat.S_IRWXU)
    doc = DATA / "squeue.json"

    def client(mode: str, timeout_s: float = 30.0) -> CliClient:
        c = CliClient(Config(), bin_dir=str(bindir), env={"MODE": mode, "DOC": str(doc)}, timeout_s=timeout_s)
        c._node_types = dict(NODE_TYPES)
        return c

    assert client("ok")._queue() == parse_squeue(RECORDED, Config(), NODE_TYPES)
    with pytest.raises(SlurmUnavailable, match="^squeue: squeue: error: Unable to contact"):
        client("fail")._queue()
    t0 = time.monotonic()
    with pytest.raises(SlurmUnavailable, match="did not answer within 1s"):
        client("hang", timeout_s=1.0)._queue()
    assert time.monotonic() - t0 < 10


def test_which_gpu_a_shard_job_holds_is_read_from_squeue():
    """Recorded on the dev cluster (tests/data/slurm/record_shards.py: n4's 4 GPUs carry 2 shards each):
    squeue --json's gres_detail names the GPU each running shard job holds, the same index `scontrol show
    job -d` prints; a job whose name and comment spell a GRES allocation is read by its allocation, and a
    pending job holds none."""
    parsed = {j.name: j for j in parse_squeue((DATA / "squeue_shards.json").read_bytes(), Config(), NODE_TYPES)}
    shown = (DATA / "scontrol_shards.txt").read_text()
    for block in shown.split("JobId=")[1:]:
        name = re.search(r"JobName=(.*)", block).group(1)
        m = re.search(r"\n\s+Nodes=n4 .*GRES=\S+\(IDX:(\d+)\)", block)   # the allocation line, not the name's
        # read for shard jobs only: the one use of it (msched.rounds.packing), and what the tight read
        # (msched.slurm.cli.tight) gives too; a whole-GPU job's is () either way
        expected = (int(m.group(1)),) if m and parsed[name].shards else ()
        assert parsed[name].gpu_index == expected
    assert any(parsed[n].gpu_index for n in parsed if parsed[n].shards)
    forged = next(j for n, j in parsed.items() if n.startswith("GRES="))
    assert forged.gpu_index == parsed["shard-2"].gpu_index != (3,)   # it joined shard-2's GPU, not the GPU it names
    assert parsed["shard-1"].gpu_index != parsed["shard-2"].gpu_index     # alone on two GPUs after shard-0 left
    assert parsed["whole-gpu"].gpu_index == () and parsed["whole-gpu"].num_gpus > 0
    assert parsed["pending-shard"].gpu_index == () and parsed["pending-shard"].state == "PENDING"


@pytest.mark.parametrize("detail,expected", [
    (["shard:1(IDX:0)"], (0,)),
    (["gpu:titanxp:2(IDX:0-1)", "gpu:titanxp:2(IDX:2-3)"], (0, 1)),         # the first node's
    (["gpu:a100:3(IDX:0,2-3)"], (0, 2, 3)),
    (["gpu:1(IDX:N/A)"], ()), (["shard:1(IDX:5-2)"], ()), (["shard:1(IDX:4096)"], ()),
    (["shard:1(IDX:0) shard:1(IDX:1)"], ()), (["x" * 600], ()), ([], ()), ("shard:1(IDX:0)", ()), ([7], ()), (None, ()),
])
def test_gres_detail_is_read_bounded_or_not_at_all(detail, expected):
    assert parse_gres_index(detail) == expected


# ------------------------------------------------------------------------------------------ shards
SHARD_CASES = json.loads((DATA / "shards_cases.json").read_text())


def test_shard_nodes_are_read_from_sinfo_as_configured():
    """Recorded on the dev cluster (tests/data/slurm/record_shard_nodes.py): n4's 4 GPUs carry 2 shards
    each, n3's 4 carry 4, as gres.conf says (shards_cases.json); sinfo prints them typed
    (`shard:titanxp:8`) although gres.conf names no type, and its GresUsed says 2 shards where the
    running jobs hold 3 on n4 and 6 on n3: the count comes from Gres, never from GresUsed."""
    from msched.slurm.cli.parsers import parse_shards

    text = (DATA / "sinfo_shards.txt").read_text()
    assert "shard:titanxp:8" in text and "shard:rtx2080ti:2(IDX:0-1)" in text      # typed; GresUsed undercounts
    nodes = {n.name: n for n in parse_sinfo(text, Config())}
    for name, want in SHARD_CASES["nodes"].items():
        assert nodes[name].gpus == want["gpus"]
        assert nodes[name].shards == want["gpus"] * want["shards_per_gpu"]
        assert nodes[name].shards_per_gpu == want["shards_per_gpu"]
    held = {n: sum(j["shards"] for j in SHARD_CASES["jobs"].values() if j["node"] == n) for n in ("n3", "n4")}
    assert held == {"n3": 6, "n4": 3}
    for block in (DATA / "scontrol_nodes_shards.txt").read_text().split("NodeName=")[1:]:
        name = block.split()[0]
        used = parse_shards(re.search(r"GresUsed=(\S+)", block).group(1).split("(")[0].replace("(IDX", ""))
        configured = parse_shards(re.search(r"\bGres=(\S+)", block).group(1))
        assert configured == nodes[name].shards and used < held[name]      # what GresUsed would have said
    assert nodes["n4"].gpus_alloc == 0 and nodes["n4"].gpu_type == "titanxp"   # a shard GPU is no `gpu` allocation


def test_shard_jobs_count_their_shards_and_a_two_shard_job_takes_an_empty_gpu():
    """squeue --json of the same jobs: each job's shards as it asked (shards_cases.json), and which GPU
    it holds. The 2-shard job on n4 took GPU 1, an empty one, not GPU 0's open shard beside the 1-shard
    job; n3's three 1-shard jobs share GPU 0 and the 3-shard job holds GPU 1."""
    doc = json.dumps({"meta": {}, "errors": [], "jobs": SHARD_CASES["squeue"]})
    parsed = {j.name: j for j in parse_squeue(doc, Config(), {"n3": "rtx2080ti", "n4": "titanxp"})}
    assert set(parsed) == set(SHARD_CASES["jobs"])
    for name, want in SHARD_CASES["jobs"].items():
        assert parsed[name].shards == want["shards"] and parsed[name].num_gpus == 0
    assert parsed["n4-one"].gpu_index == (0,) and parsed["n4-two"].gpu_index == (1,)
    assert {parsed[n].gpu_index for n in ("n3-one-a", "n3-one-b", "n3-one-c")} == {(0,)}
    assert parsed["n3-three"].gpu_index == (1,) and parsed["held-two"].gpu_index == ()


@pytest.mark.parametrize(("text", "expected"), [
    ("gpu:titanxp:4,shard:titanxp:8", 8), ("gpu:titanxp:4,shard:8", 8), ("gres:shard:2", 2), ("gres/shard:3", 3),
    ("shard:rtx2080ti:16(S:0-1)", 16), ("gpu:a100:4", 0), ("", 0), ("(null)", 0), ("N/A", 0),
    ("gres:gpu:1,gres:shard:1", 1), ("gpu:shard:4", 0), ("myshard:4", 0), ("shard:x:y:4", 0),
    ("shard:" + "9" * 12, 0),
])
def test_parse_shards(text, expected):
    from msched.slurm.cli.parsers import parse_shards

    assert parse_shards(text) == expected


def test_a_gpu_with_a_two_shard_job_has_no_open_shard():
    """ShardGpu.held counts each job's shards: a 2-shard job alone on a 2-shard GPU leaves none open
    (counting jobs would say one open, and the round would wait for a partner that cannot come)."""
    from msched.policy.snapshot import ShardGpu
    from msched.rounds.packing import _by_gpu
    from msched.slurm.base import SlurmJob

    assert ShardGpu("n4", "titanxp", ("9",), 0.0, 2, (), 2).open_shards == 0
    assert ShardGpu("n4", "titanxp", ("7",), 0.0, 2, (), 1).open_shards == 1
    assert ShardGpu("n3", "rtx2080ti", ("1", "2", "3"), 0.0, 4).open_shards == 1        # held unknown: one each
    # without GPU indices, start order, each job on the first GPU with room: the 2-shard job after a
    # 1-shard one on a 2-shard node starts a GPU of its own (as the recorded n4-two did), and the next
    # 1-shard job takes the open shard beside the first
    one, two, three = (SlurmJob(str(k), "RUNNING", start_time=float(k), shards=s) for k, s in ((1, 1), (2, 2), (3, 1)))
    assert [[j.job_id for j in g] for g in _by_gpu([three, two, one], 2)] == [["1", "3"], ["2"]]
    assert [[j.job_id for j in g] for g in _by_gpu([one, three, two], 4)] == [["1", "2", "3"]]


def test_a_job_made_from_its_fields_is_the_constructors_job():
    """`job_of` (the tight read's way to make each SlurmJob without the frozen dataclass's __init__) makes
    the job the constructor makes: equal, hashed and shown alike, still frozen; a dict that misses a
    field or names another is refused, as the constructor refuses a name it does not know."""
    import dataclasses

    from msched.slurm.base import SlurmJob, job_of

    values = {"job_id": "42", "state": "PENDING", "name": "train x", "user": "alice", "partition": "gpu",
              "priority": 7, "submit_time": 1.5e9, "start_time": None, "end_time": None, "time_limit_s": 3600.0,
              "num_nodes": 1, "num_gpus": 4, "gpus_per_node": 4, "gres_gpu_type": "a100", "features": "v100|a100",
              "comment": "note", "nodes": "", "gpu_type": None, "reason": "Priority", "admin_comment": "",
              "nice": -3, "begin_time": 1.5e9 + 60, "gpu_index": (), "shards": 0, "exc_nodes": "n7"}
    made, built = job_of(dict(values)), SlurmJob(**values)
    assert made == built and hash(made) == hash(built) and repr(made) == repr(built)
    assert dataclasses.astuple(made) == tuple(values.values()) and made.tag is None and made.is_pending
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.priority = 1
    assert dataclasses.replace(made, priority=1) == SlurmJob(**{**values, "priority": 1})
    for broken in ({k: v for k, v in values.items() if k != "exc_nodes"}, {**values, "colour": "red"}):
        with pytest.raises(TypeError):
            job_of(broken)
