"""The tight queue read (msched.slurm.cli.tight, issue 21 sixth pass): `squeue -O` at fixed widths, parsed
by byte offsets, reads the same jobs as `squeue --json`.

- Recorded on 22.05.8 (tests/data/slurm/record_tight.py): record.py's jobs (every TRES form, arrays,
  running, finished, the ordinary user's hostile comments and names) and jobs at Slurm's longest name
  and comment, a multibyte character cut by a width, trailing spaces, a literal `(null)`: the first read
  plus the second (wide) read of the jobs it cut give exactly `parse_squeue`'s jobs.
- Offline, over the recording: any bytes in one job's comment, printed as squeue prints them (at most
  the width, padded with spaces), never move another job or field; output that is not whole records,
  an unknown reason, a running shard job are refused.
- On the dev cluster: hypothesis submits jobs with adversarial names and comments as the ordinary user
  and compares CliClient's two reads; a whole round (jobs, plan, writes) is the same with the tight
  read on and off.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from helpers import assert_only_victim_text_differs
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from msched.config import Config
from msched.slurm.cli.client import _digest_lines
from msched.slurm.cli.parsers import DIGEST_JOB_FIELDS, parse_squeue, user_text
from msched.slurm.cli.tight import NARROW, RECORD_BYTES, TIGHT_FIELDS, WIDE, parse_tight

DATA = Path(__file__).parent / "data" / "slurm"
CASES = json.loads((DATA / "tight_cases.json").read_text())
NODE_TYPES = {"n1": "a100", "n2": "titanv", "n3": "rtx2080ti", "n4": "titanxp"}
NARROW_RAW = (DATA / "squeue_tight.bin").read_bytes()
WIDE_RAW = (DATA / "squeue_tight_wide.bin").read_bytes()


def _by_id(jobs):  # noqa: ANN001, ANN202
    return sorted(jobs, key=lambda j: int(j.job_id))


def test_recorded_tight_reads_give_the_digest_squeues_lines():
    """The digest of a round's own read (CliClient.read_digest): each job's line made from the tight
    read's records is the line the light round's digest squeue (`-S i -O <DIGEST_JOB_FIELDS>`, recorded
    at the same moment) prints for it, byte for byte: hostile names and comments, Slurm's longest (from
    the wide read), a UTF-8 character cut by the narrow width, a dependency. The two jobs whose text
    ends in spaces (the tight read's padding hides them) are the only ones that differ; the digest drops
    the spaces before each separator on both sides (client._digest_lines), so the digests are equal
    (else one job named `x ` cost every round that planned one more full round)."""
    lines: list[tuple[int, bytes]] = []
    first = parse_tight(NARROW_RAW, Config(), NODE_TYPES, NARROW, None, lines)
    second = parse_tight(WIDE_RAW, Config(), NODE_TYPES, WIDE, None, lines)
    assert first is not None and second is not None
    assert len(lines) == len(first[0]) + len(second[0])
    mine = dict(sorted(lines))
    theirs = (DATA / "squeue_digest.bin").read_bytes()
    ids = CASES["ids"]
    assert b"".join(mine.values()) != theirs
    assert _digest_lines(b"".join(mine.values())) == _digest_lines(theirs)
    # the two values that end in spaces, as submitted (record_tight.py), put back: then byte for byte
    for name, value in (("comment-trailing-spaces", b"msched:v1;model=resnet50 note"),
                        ("admin-comment", b"msched:v1;model=vgg16 stamped")):
        job = int(ids[name])
        pad = b"   " if name == "comment-trailing-spaces" else b"  "
        assert mine[job].count(b"\x1f" + value + b"\x1f") == 1
        mine[job] = mine[job].replace(b"\x1f" + value + b"\x1f", b"\x1f" + value + pad + b"\x1f")
    assert b"".join(mine.values()) == theirs
    assert b"\x1fafterok:" + ids["no-limit"].encode() + b"(unfulfilled)\x1f\n" in mine[int(ids["dependency"])]


def test_recorded_widths_are_the_ones_the_client_asks_for():
    assert (tuple(CASES["narrow"]), tuple(CASES["wide"])) == (NARROW, WIDE)
    assert len(NARROW_RAW) % RECORD_BYTES == 0


def test_recorded_tight_reads_give_the_json_reads_jobs():
    first = parse_tight(NARROW_RAW, Config(), NODE_TYPES)
    assert first is not None
    jobs, cut = first
    ids = CASES["ids"]
    # what does not fit the first read's widths, by what was submitted: Slurm's longest name and comment,
    # a name whose last character straddles the width, a long constraint
    assert sorted(cut) == sorted(ids[n] for n in ("name-1024", "name-utf8-cut", "comment-1024", "features-long"))
    second = parse_tight(WIDE_RAW, Config(), NODE_TYPES, WIDE)
    assert second is not None and second[1] == []
    tight = _by_id(jobs + second[0])
    expected = _by_id(parse_squeue((DATA / "squeue_tight.json").read_bytes(), Config(), NODE_TYPES))
    assert tight == expected
    by = {j.job_id: j for j in tight}
    assert by[ids["name-1024"]].name == "n" * 1024
    assert by[ids["comment-1024"]].comment == "msched:v1;model=resnet50 " + "c" * 998
    assert by[ids["comment-newlines-utf8"]].comment == "a\nb|\u00e9\u20ac\U0001f600 \x1f\n"
    assert by[ids["comment-trailing-spaces"]].comment == "msched:v1;model=resnet50 note"
    assert by[ids["comment-null"]].comment == ""
    assert by[ids["nice-negative"]].nice == -7
    assert by[ids["no-limit"]].time_limit_s is None
    assert by[ids["admin-comment"]].admin_comment == "msched:v1;model=vgg16 stamped"
    assert {j.state for j in tight} >= {"PENDING", "RUNNING", "COMPLETED", "CANCELLED"}


def test_a_read_parses_each_record_as_it_would_alone():
    """parse_tight works out each distinct value of the fields that repeat once per read (its `_Seen`):
    the recorded reads parsed whole give the jobs, digest lines and ended ids of each record parsed on its
    own (a read of one record shares nothing), and every digest line is `digest_line` of its record."""
    from msched.slurm.cli.tight import _record, digest_line

    for raw, widths in ((NARROW_RAW, NARROW), (WIDE_RAW, WIDE)):
        size = sum(widths) + 1
        for ended_before in (None, 4e9):
            lines: list[tuple[int, bytes]] = []
            ended = None if ended_before is None else (ended_before, [])
            whole = parse_tight(raw, Config(), NODE_TYPES, widths, None, lines, ended)
            alone_jobs, alone_cut, alone_lines, alone_ended = [], [], [], []
            for at in range(0, len(raw), size):
                one_ended = None if ended_before is None else (ended_before, alone_ended)
                jobs, cut = parse_tight(raw[at:at + size], Config(), NODE_TYPES, widths, None, alone_lines, one_ended)
                alone_jobs += jobs
                alone_cut += cut
            assert whole == (alone_jobs, alone_cut) and whole[0]
            assert lines == alone_lines and len(lines) == len(whole[0]) + (len(ended[1]) if ended else 0)
            assert ended is None or ended[1] == alone_ended
            assert ended is None or widths == WIDE or ended[1]      # the recording's finished jobs
            by_id = {int(v[0]): v for v in _record(widths).iter_unpack(raw)}
            assert all(line == digest_line(by_id[number]) for number, line in lines)


def _offsets(field: str, widths=NARROW) -> tuple[int, int]:  # noqa: ANN001
    names = [f for f, _, _ in TIGHT_FIELDS]
    at = sum(widths[: names.index(field)])
    return at, at + widths[names.index(field)]


def _printed(value: bytes, width: int) -> bytes:
    """What squeue 22.05 prints for a left-justified field (`printf("%.Ws")`, then spaces to W)."""
    return value[:width].ljust(width, b" ")


def _record_of(raw: bytes, job_id: str) -> int:
    for start in range(0, len(raw), RECORD_BYTES):
        if raw[start:start + 12].strip() == job_id.encode():
            return start
    raise AssertionError(f"job {job_id} not in the recording")


@settings(max_examples=300, deadline=None)
@given(comment=st.binary(max_size=700).filter(lambda b: b"\0" not in b),
       name=st.binary(max_size=120).filter(lambda b: b"\0" not in b))
def test_fuzz_no_comment_or_name_moves_a_field_or_a_job(comment, name):
    """One job's comment and name replaced by any bytes (no NUL: a C string cannot hold one) as squeue
    prints them: every other job reads as before; that one holds exactly those bytes, or is left for the
    wide read when they fill the width; nothing is refused."""
    base = {j.job_id: j for j in parse_tight(NARROW_RAW, Config(), NODE_TYPES)[0]}
    victim = CASES["ids"]["hostile-forged-tag"]
    at = _record_of(NARROW_RAW, victim)
    raw = bytearray(NARROW_RAW)
    for field, value in (("Comment", comment), ("Name", name)):
        lo, hi = _offsets(field)
        raw[at + lo:at + hi] = _printed(value, hi - lo)
    out = parse_tight(bytes(raw), Config(), NODE_TYPES)
    assert out is not None
    jobs, cut = out
    got = {j.job_id: j for j in jobs}
    full = len(comment) >= _offsets("Comment")[1] - _offsets("Comment")[0] or \
        len(name) >= _offsets("Name")[1] - _offsets("Name")[0]
    assert (victim in cut) == full and (victim in got) != full
    assert set(got) | set(cut) == set(base) | set(CASES["cut"])
    assert_only_victim_text_differs(got, base, victim, comment, name)


def test_output_that_is_not_whole_records_is_refused():
    assert parse_tight(NARROW_RAW[:-1], Config(), NODE_TYPES) is None
    assert parse_tight(NARROW_RAW + b"x" * RECORD_BYTES, Config(), NODE_TYPES) is None
    assert parse_tight(b"", Config(), NODE_TYPES) == ([], [])


def test_an_unknown_reason_a_bad_number_and_a_running_shard_job_are_refused():
    victim = CASES["ids"]["gres-typed"]
    at = _record_of(NARROW_RAW, victim)

    def with_field(field: str, value: bytes) -> bytes:
        raw = bytearray(NARROW_RAW)
        lo, hi = _offsets(field)
        raw[at + lo:at + hi] = _printed(value, hi - lo)
        return bytes(raw)

    why: list[str] = []
    assert parse_tight(with_field("Reason", b"ReqNodeNotAvail, n4"), Config(), NODE_TYPES, NARROW, why) is None
    assert why == [f"job {victim}: its reason 'ReqNodeNotAvail, n4' is not one of Slurm's reason names "
                   "(--json names it)"]
    assert parse_tight(with_field("PriorityLong", b"12x"), Config(), NODE_TYPES) is None
    assert parse_tight(with_field("TimeLimit", b"1:xx:00"), Config(), NODE_TYPES) is None
    running = CASES["ids"]["running-a100"]
    at = _record_of(NARROW_RAW, running)
    assert parse_tight(with_field("tres-per-node", b"gres:shard:2"), Config(), NODE_TYPES) is None
    assert parse_tight(with_field("Reason", b"Resources"), Config(), NODE_TYPES) is not None


# ------------------------------------------------------------------------------------------ dev cluster
TEXT = st.text(st.sampled_from("ab |\x1f\n\t\\\"%s\u00e9\u20ac\U0001f600("), max_size=40) | \
    st.text(max_size=30).filter(lambda s: "\0" not in s) | \
    st.integers(90, 1024).map(lambda n: ("x\u00e9" * n)[:n])


@pytest.mark.slurm
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(comment=TEXT, name=TEXT)
def test_dev_cluster_adversarial_text_reads_the_same_both_ways(slurm_cluster, ordinary_user, janitor,
                                                                 comment, name):
    """Jobs the ordinary user submits with adversarial comments and names (separators, newlines, `%s`,
    UTF-8, lengths up to Slurm's 1,024): CliClient's tight read gives the --json read's job list."""
    from msched.slurm.cli.client import CliClient

    if len(comment.encode()) > 1024 or len(name.encode()) > 1024:
        return                                  # Slurm refuses these at submission
    proc = ordinary_user.run(["sbatch", "--parsable", "--hold", "--output=/dev/null", f"--job-name={name}",
                              f"--comment={comment}", "--gres=gpu:1", "--wrap=true"],
                             env={"SLURM_CONF": str(slurm_cluster.conf)}, cwd="/tmp")
    if proc.returncode != 0:
        return                                  # e.g. a name sbatch itself refuses
    job_id = janitor.add(proc.stdout.strip().split(";")[0])
    tight_client, json_client = CliClient(Config(tight_queue=True)), CliClient(Config(tight_queue=False))
    for _ in range(3):                          # a job of another test may change between the two reads
        tight, plain = tight_client.jobs(("ALL",)), json_client.jobs(("ALL",))
        if tight == plain:
            break
    assert tight_client.last_read == "tight" and json_client.last_read == "json"
    assert tight == plain
    mine = next(j for j in tight if j.job_id == job_id)
    assert mine.comment == user_text(comment) and mine.name == user_text(name)
    slurm_cluster.run(["scancel", job_id])


@pytest.mark.slurm
def test_a_round_plans_and_writes_the_same_with_the_tight_read_on_and_off(slurm_cluster, janitor, ordinary_user,
                                                                          tmp_path):
    """The light-path test's queue (16 GPUs busy, managed jobs of the ordinary user, plain jobs): a dry
    run with the tight read on and off at the same clock reads the same jobs and makes the same plan and
    the same updates; the real round with it on then writes exactly those updates."""
    import time

    from msched.rounds.reorder import Reorderer, open_site_store
    from msched.slurm.cli.client import CliClient

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from test_reorder import _fill_gpus, _submit, _wait_idle, site_config  # noqa: PLC0415
    from test_reorder_light_path import _user_submit  # noqa: PLC0415

    _wait_idle(slurm_cluster)
    _fill_gpus(slurm_cluster, janitor)
    for i, (m, it) in enumerate([("vgg16", 40000), ("densenet169", 40000), ("vgg16", 20000),
                                 ("densenet169", 30000), ("vgg16", 30000)]):
        janitor.add(_user_submit(ordinary_user, slurm_cluster, name=f"{m}-{i}\n|x", model=m, iters=it))
    janitor.add(_submit(slurm_cluster, name="plain-0", gpus=4, seconds=2))
    site = site_config(tmp_path, "tight")
    on, off = site._replace(tight_queue=True), site._replace(tight_queue=False)
    store = open_site_store(site)
    try:
        now = time.time()
        clients = {"on": CliClient(on), "off": CliClient(off)}
        for _ in range(5):          # Slurm rewrites a new job's reason (None -> Priority) between two reads
            dry = {k: Reorderer(cfg, clients[k], store).round(dry_run=True, now=now)
                   for k, cfg in (("on", on), ("off", off))}
            a, b = dry["on"].result, dry["off"].result
            if a.jobs == b.jobs:
                break
            time.sleep(1)
        assert clients["on"].last_read == "tight" and clients["off"].last_read == "json"
        assert a.jobs == b.jobs
        assert a.plan == b.plan
        assert a.updates == b.updates and a.updates
        written = []
        real_client = CliClient(on)
        real_update = real_client.update_jobs

        def spy(updates):  # noqa: ANN001, ANN202
            written.extend(updates)
            return real_update(updates)

        real_client.update_jobs = spy
        real = Reorderer(on, real_client, store).round(now=now)
        assert real.result.updates == a.updates
        assert written
    finally:
        store.dispose()


def test_commands_run_with_one_time_zone_unless_the_caller_set_one(monkeypatch):
    """Every Slurm command runs with TZ naming glibc's default zone file when none is set (squeue's
    mktime then reads it once instead of once per time it prints); a TZ the caller set is kept."""
    from msched.slurm.cli.client import LOCAL_ZONE, CliClient

    monkeypatch.delenv("TZ", raising=False)
    env = CliClient(Config())._env()
    assert env["TZ"] == LOCAL_ZONE == ":/etc/localtime"
    assert env["SLURM_TIME_FORMAT"] == "%s"
    monkeypatch.setenv("TZ", "Europe/Zurich")
    assert CliClient(Config())._env()["TZ"] == "Europe/Zurich"
    assert "SLURM_TIME_FORMAT" not in CliClient(Config())._json_env()


@pytest.mark.slurm
def test_dev_cluster_squeue_prints_the_same_bytes_with_the_clients_time_zone(slurm_cluster, janitor,
                                                                            monkeypatch):
    """The tight read's squeue, the digest's squeue and sinfo print the same bytes with the client's TZ
    as with TZ unset (every time they print is epoch seconds): the zone saves squeue's CPU, nothing else."""
    import subprocess

    from msched.slurm.cli.client import CliClient
    from msched.slurm.cli.parsers import NODE_FIELDS
    from msched.slurm.cli.tight import tight_format

    sub = slurm_cluster.run(["sbatch", "--parsable", "--hold", "-o", "/dev/null", "--gres=gpu:1",
                             "--begin=now+3600", "--wrap", "true"])
    janitor.add(sub.stdout.strip())
    monkeypatch.delenv("TZ", raising=False)
    client = CliClient(Config())
    with_zone = client._env()
    without = {k: v for k, v in with_zone.items() if k != "TZ"}
    for argv in (["squeue", "-h", "-t", "all", "-O", tight_format()],
                 ["squeue", "-h", "-t", "all", "-S", "i", "-O", client._format(DIGEST_JOB_FIELDS)],
                 ["sinfo", "-h", "-N", "-O", client._format(NODE_FIELDS)]):
        for _ in range(3):          # a job of another test may change between the two reads
            a = subprocess.run(argv, capture_output=True, env=with_zone, check=True).stdout
            b = subprocess.run(argv, capture_output=True, env=without, check=True).stdout
            if a == b:
                break
        assert a == b and a, argv
