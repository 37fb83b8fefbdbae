"""The tag grammar and its bounds (msched.tag.TAG_FIELDS): a tag is whatever the job's owner wrote in
their comment, so every field is checked when read; a bad tag makes the job a plain job for the round
with one reason, and nothing a job carries raises or reaches the database out of range."""

from __future__ import annotations

import logging
import math
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from msched.slurm.base import JobRequest
from msched.tag import PREFIX, TAG_FIELDS, TAG_MAX_LEN, JobTag, parse_comment, parse_tag, validate, with_tag

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_reorder import PERF_CSV, tag_for  # noqa: E402

GOOD = "msched:v1;model=vgg16;ref=vgg16;group=vgg;sim=0.9;flops=1;iters=36000;bs=12;added=a100|titanv"


@pytest.mark.parametrize("head, reason", [
    ("model=vgg16;bs=99999999999999999999999999", "bs is not a whole number"),  # issue 13, item 2
    ("model=vgg16;iters=0", "iters=0 outside"),
    ("model=vgg16;iters=1000000000001", "outside"),
    ("model=vgg16;iters=-5", "iters is not a whole number"),
    ("model=vgg16;iters=1_000", "iters is not a whole number"),      # Python's int() would take it
    ("model=vgg16;iters=\u0663", "iters is not a whole number"),       # so would it an Arabic digit
    ("model=vgg16;sim=nan", "sim is not a number"),
    ("model=vgg16;flops=1e400", "flops is not finite"),
    ("model=vgg16;flops=0", "flops=0 outside"),
    ("model=vgg16;sim=2", "sim=2 outside"),
    ("model=vgg%1b[31m16", "model holds a character"),                 # ESC, percent-encoded
    ("model=vgg\x1b[31m16", "model holds a character"),                # ESC, raw
    ("model=vgg16;added=a100%0Afake", "added holds a character"),
    ("model=vgg16;added=a100&ib", "added holds a character"),         # only GPU types joined by |
    ("model=vgg16;ref=" + "r" * 129, "ref longer than 128"),
    ("model=vgg16;model=resnet50", "model given twice"),
    ("model=vgg16;junk", "malformed item"),
    ("model=%ZZ", "malformed %-escape"),
    ("model=%ff", "malformed %-escape"),                               # not UTF-8
    ("model=vgg16;newkey=a%07b", "unknown field newkey"),
    ("ref=vgg16", "no model"),
    ("model=", "no model"),
])
def test_bad_tags_are_refused_with_one_reason(head, reason):
    tag, user, why = parse_tag(f"{PREFIX}{head} my own words")
    assert tag is None and reason in why
    assert user == "my own words"
    assert parse_comment(f"{PREFIX}{head}") == (None, "")


def test_good_tag_and_unknown_fields_of_a_newer_msub():
    tag, user, why = parse_tag(GOOD + ";future=x1 mine")
    assert why == "" and user == "mine"
    assert tag == JobTag(model="vgg16", ref="vgg16", group="vgg", sim=0.9, flops=1.0, iters=36000, bs=12,
                         added="a100|titanv")
    assert parse_tag("plain words")[::2] == (None, "")           # no tag, no complaint
    assert parse_tag(PREFIX + "model=" + "m" * (TAG_MAX_LEN))[2] == f"tag longer than {TAG_MAX_LEN} characters"


def test_a_users_model_path_may_hold_spaces_and_letters_but_no_control_or_format_character():
    ok = JobTag(model="/home/josé/my net.py:build", ref="resnet50")
    assert parse_comment(with_tag(ok, None))[0] == ok
    for bad in ("a\u202eb", "a\x9bb", "a\u2028b", "a\x00b"):        # bidi override, C1 CSI, line sep, NUL
        assert validate(JobTag(model=bad)) == "model holds a character outside its set"


def test_table_bounds_are_the_limits_of_what_is_accepted():
    """For every numeric field: its bounds are accepted, just beyond them is not (from the table)."""
    for f in TAG_FIELDS:
        if f.kind == "str":
            assert f.max_len > 0 and f.charset and not any(ord(c) < 0x20 or ord(c) == 0x7F for c in f.charset)
            assert validate(JobTag(model="m", **({f.name: "a" * f.max_len} if f.name != "model" else {}))) == ""
            continue
        fmt = (lambda v: str(int(v))) if f.kind == "int" else repr
        for v in (f.lo, f.hi):
            assert parse_tag(f"{PREFIX}model=m;{f.name}={fmt(v)}")[2] == "", (f.name, v)
        step = 1 if f.kind == "int" else abs(f.hi) * 1e-6
        for v in (f.lo - step, f.hi + step):
            assert "outside" in parse_tag(f"{PREFIX}model=m;{f.name}={fmt(v)}")[2], (f.name, v)
    assert len(TAG_FIELDS) == len(JobTag._fields) and {f.name for f in TAG_FIELDS} == set(JobTag._fields)


@settings(max_examples=400, deadline=None)
@given(st.text(alphabet=st.characters(max_codepoint=0x300), max_size=300))
def test_any_comment_parses_without_raising_and_an_accepted_tag_is_in_bounds(tail):
    for comment in (PREFIX + tail, GOOD + tail, PREFIX + "model=m;" + tail):
        tag, user, why = parse_tag(comment)
        assert not (tag is not None and why)
        if tag is None:
            continue
        assert validate(tag) == ""
        for f in TAG_FIELDS:
            v = getattr(tag, f.name)
            if f.kind != "str" and v is not None and v != JobTag._field_defaults.get(f.name):
                assert f.lo <= v <= f.hi and math.isfinite(v)
            if f.kind == "str":
                assert all(c.isprintable() for c in v)


@settings(max_examples=200, deadline=None)
@given(st.builds(JobTag, model=st.text(min_size=1, max_size=40), ref=st.from_regex(r"[a-z0-9_]{0,20}", fullmatch=True),
                 sim=st.floats(-1, 1), flops=st.floats(1e-6, 1e6), iters=st.none() | st.integers(1, 10**12),
                 bs=st.none() | st.integers(1, 1 << 20), added=st.sampled_from(["", "a100", "a100|titanv"])))
def test_valid_tags_round_trip_and_validate_agrees_with_parse(tag):
    back = parse_comment(with_tag(tag, "x"))[0]
    if validate(tag):
        assert back is None
    else:
        assert back is not None and back.model == tag.model and back.iters == tag.iters and back.bs == tag.bs


def test_a_poisoned_tag_never_fails_a_round(tmp_path, caplog):
    """Issue 13 item 2 on the round the real reorderer runs (here against slurm_sim's client): a job whose
    tag holds a 26-digit batch size is a plain job for the round, one warning names it, the database
    gets nothing out of range, and the honest job is still planned and ingested."""
    from msched.config import load_config
    from msched.estimate.perf_table import PerfTable
    from msched.rounds.reorder import Reorderer, open_site_store
    from msched.store.schema import Job
    from slurm_sim.client import SimClient

    (tmp_path / "perf.csv").write_text(PERF_CSV)
    (tmp_path / "msched.toml").write_text(f'state_dir = "{tmp_path}/state"\nperformance = "{tmp_path}/perf.csv"\n'
                                          f'database_url = "sqlite:///{tmp_path}/state/msched.db"\n')
    site = load_config(tmp_path / "msched.toml")
    client = SimClient.from_spec("a100:4x1,titanv:4x1", truth=PerfTable.load(site.performance))
    honest = client.submit(JobRequest(name="ok", num_gpus=1, time_limit_s=3600, hold=False,
                                      comment=with_tag(tag_for("vgg16", 1000), None),
                                      extra={"model": "vgg16", "iterations": 1000, "batch_size": 12}))
    poisoned = with_tag(tag_for("vgg16", 1000), None) + ";bs=99999999999999999999999999"
    bad = client.submit(JobRequest(name="bad", num_gpus=1, time_limit_s=3600, comment=poisoned.replace(";bs=12", ""),
                                   extra={"model": "vgg16", "iterations": 1000, "batch_size": 12}))
    for i in range(8):       # keep the GPUs busy so both stay pending
        client.submit(JobRequest(name=f"block{i}", num_gpus=1, time_limit_s=7200,
                                 extra={"model": "vgg16", "iterations": 10**6, "batch_size": 12}))
    store = open_site_store(site)
    with caplog.at_level(logging.WARNING, logger="msched.rounds.core"):
        for _ in range(2):
            out = Reorderer(site, client, store, publish=False).round()
    warnings = [r.getMessage() for r in caplog.records if f"job {bad}:" in r.getMessage()]
    assert warnings == [f"job {bad}: tag refused (bs is not a whole number of at most 13 digits): "
                        "treated as untagged"] * 2
    from sqlalchemy import select
    with store.read() as s:
        ingested = {j.job_id for j in s.scalars(select(Job))}
    assert honest in ingested and bad not in ingested
    assert {p.job_id: p.managed for p in out.result.snapshot.pending}.get(bad) in (False, None)


def test_a_stamped_tag_in_admin_comment_wins_over_the_comment():
    """job_submit.lua stamps the validated tag into admin_comment, which users cannot set; a later
    `scontrol update comment=` by the user does not change what the reorderer reads."""
    from msched.slurm.base import SlurmJob
    stamped = with_tag(JobTag(model="resnet50", ref="resnet50", iters=100), None)
    forged = with_tag(JobTag(model="vgg16", ref="vgg16", iters=10**9), None)
    job = SlurmJob(job_id="1", state="PENDING", comment=forged, admin_comment=stamped)
    assert job.tag.model == "resnet50" and job.tag.iters == 100
    assert SlurmJob(job_id="2", state="PENDING", comment=forged).tag.iters == 10**9      # a claim, bounded later
    assert SlurmJob(job_id="3", state="PENDING", comment=forged, admin_comment="site note").tag.model == "vgg16"


def test_a_tag_reads_the_same_whatever_was_read_before_it():
    """parse_tag keeps each item's reading apart from the whole tag's (`_read_item`): a comment read after
    others that share its items gives what it gives read first, and a refused item that is also given
    twice is refused for the repeat, as the grammar's order says (sixteenth pass)."""
    from msched.tag import _read_item

    heads = ["model=vgg16;model=%ZZ", "model=vgg16;iters=0;iters=0", "model=%ZZ;model=vgg16",
             "model=vgg16;iters=36000;iters=0", "model=vgg16;iters=0", "model=vgg16;junk;junk",
             "model=vgg16;newkey=x;newkey=y", "model=vgg16;newkey=a%07b", "ref=vgg16;why=none",
             GOOD[len(PREFIX):], GOOD[len(PREFIX):] + ";bs=12", GOOD[len(PREFIX):].replace("iters=36000", "iters=7")]
    comments = [f"{PREFIX}{h} mine" for h in heads]

    def cold(comment: str) -> tuple:
        parse_tag.cache_clear()
        _read_item.cache_clear()
        return parse_tag(comment)

    alone = [cold(c) for c in comments]
    assert [a[2] for a in alone[:9]] == ["model given twice", "iters=0 outside [1, 1e+12]",
                                         "model has a malformed %-escape", "iters given twice",
                                         "iters=0 outside [1, 1e+12]", "a malformed item (not key=value)",
                                         "newkey given twice", "unknown field newkey holds a control byte or is too long",
                                         ""]
    assert alone[9][0].iters == 36000 and alone[10][2] == "bs given twice" and alone[11][0].iters == 7
    for order in (comments, comments[::-1]):
        parse_tag.cache_clear()
        assert [parse_tag(c) for c in order] == (alone if order is comments else alone[::-1])
