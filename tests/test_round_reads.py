"""The round's reads, cheaper (issue 21, ninth pass): the queue's squeue and the sinfo started before the round
needs them (`CliClient.prefetch`), and the jobcomp file's old lines not read whole.

Offline: with stand-in squeue and sinfo (shell scripts printing recorded bytes and
logging each call), reads after `prefetch` run no command of their own and give what reads without it
give, a started read nobody collected is ended by `close`, and a hung one fails as a hung read does.
On the dev cluster (tests/test_reorder_light_path.py): a round records a digest only when it wrote
nothing, and the round after such a round is light.
"""

from __future__ import annotations

import re
import stat
import time
from pathlib import Path

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from msched.config import Config
from msched.slurm.base import FINISHED_STATES, SlurmUnavailable
from msched.slurm.cli import CliClient
from msched.slurm.cli.tight import NARROW, parse_tight

DATA = Path(__file__).parent / "data" / "slurm"
NARROW_RAW = (DATA / "squeue_tight.bin").read_bytes()
NODE_TYPES = {"n1": "a100", "n2": "titanv", "n3": "rtx2080ti", "n4": "titanxp"}


FAKE = """#!/bin/sh
# stands in for squeue and sinfo: logs the call, sleeps $SLEEP_<command>, prints <dir>/<command>.out
name=$(basename "$0")
echo "$name $*" >> "$(dirname "$0")/calls"
eval "sleep \\${SLEEP_$name:-0}"
cat "$(dirname "$0")/$name.out"
"""


def _whole_records(raw: bytes, widths: tuple[int, ...]) -> bytes:
    """The records of a recorded read that no width cut (a read of them needs no second, wide read)."""
    size = sum(widths) + 1
    keep = {j.job_id for j in parse_tight(raw, Config(), NODE_TYPES, widths)[0]}
    return b"".join(raw[k:k + size] for k in range(0, len(raw), size)
                    if raw[k:k + size][:widths[0]].strip().decode() in keep)


def _client(tmp_path: Path, **env: str) -> CliClient:
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    for name in ("squeue", "sinfo"):
        (bindir / name).write_text(FAKE)
        (bindir / name).chmod(stat.S_IRWXU)
    (bindir / "squeue.out").write_bytes(_whole_records(NARROW_RAW, NARROW))
    (bindir / "sinfo.out").write_text((DATA / "sinfo.txt").read_text())
    return CliClient(Config(), bin_dir=bindir, env=env)


def _calls(tmp_path: Path) -> list[str]:
    f = tmp_path / "bin" / "calls"
    return f.read_text().split("\n")[:-1] if f.exists() else []


def test_reads_after_prefetch_collect_the_started_commands_and_read_the_same(tmp_path):
    plain = _client(tmp_path)
    nodes, jobs = plain.nodes(), plain.jobs()
    assert [c.split()[0] for c in _calls(tmp_path)] == ["sinfo", "squeue"] and len(jobs) > 5
    digest = plain.read_digest("s")
    (tmp_path / "bin" / "calls").unlink()

    client = _client(tmp_path, SLEEP_squeue="2")
    assert client.prefetch()
    # started, not waited for: the squeue that sleeps is still running when prefetch returns
    assert any(s.proc.poll() is None for s in client._prefetched.values())
    time.sleep(0.2)
    assert sorted(c.split()[0] for c in _calls(tmp_path)) == ["sinfo", "squeue"]
    assert client.nodes() == nodes and client.jobs() == jobs
    assert client.read_digest("s") == digest
    assert len(_calls(tmp_path)) == 2                    # collected: no command of their own
    client.close()
    assert client.nodes() == nodes and len(_calls(tmp_path)) == 3     # collected once: then read afresh


def test_a_started_read_nobody_collects_is_ended_and_a_hung_one_fails_as_a_hung_read(tmp_path):
    client = _client(tmp_path, SLEEP_squeue="30")
    client.prefetch()
    started = list(client._prefetched.values())
    client.close()
    assert not client._prefetched and all(s.proc.poll() is not None for s in started)

    client = _client(tmp_path, SLEEP_squeue="30")
    client.timeout_s = 1.0
    client.prefetch()
    client.nodes()
    t0 = time.monotonic()
    with pytest.raises(SlurmUnavailable, match="did not answer"):
        client.jobs()
    assert time.monotonic() - t0 < 10



SLOW_SQUEUE = """#!{python}
# stands in for squeue: prints <dir>/squeue.out in pieces of $STEP bytes (records cut anywhere), $PAUSE s apart,
# then $ERROR on stderr and exits $RC
import os, sys, time
here = os.path.dirname(os.path.abspath(sys.argv[0]))
data = open(os.path.join(here, "squeue.out"), "rb").read()
step = int(os.environ["STEP"])
for k in range(0, len(data), step):
    sys.stdout.buffer.write(data[k:k + step])
    sys.stdout.buffer.flush()
    time.sleep(float(os.environ["PAUSE"]))
sys.stderr.write(os.environ.get("ERROR", ""))
sys.exit(int(os.environ.get("RC", "0")))
"""


def test_the_queue_is_parsed_while_squeue_writes_it_and_its_exit_is_checked_after(tmp_path, monkeypatch):
    """`CliClient` parses the tight read's records as squeue writes them (`_Following`): with a squeue that
    writes in pieces of 7,000 bytes (records cut anywhere) 30 ms apart, the parse has read records before
    squeue ended, and reads the jobs and digest of the same output written at once; while it waited for
    more it parsed the tags of the jobs read so far (`_TagsAhead`). What squeue's exit
    says is checked after the parse: an unreachable controller is SlurmUnavailable, an error printed with
    exit status 0 sends the round to --json, and so does a last record cut short."""
    import sys

    from msched.slurm.cli import client as client_module
    from msched.tag import parse_tag

    plain = _client(tmp_path)
    plain.nodes()
    jobs, digest = plain.jobs(), plain.read_digest("s")
    (tmp_path / "bin" / "squeue").write_text(SLOW_SQUEUE.format(python=sys.executable))
    monkeypatch.setattr(client_module, "FOLLOW_BYTES", 4096)
    running_reads: list[bool] = []
    readinto = client_module._Following.readinto

    def spy(self, buf):  # noqa: ANN001, ANN202
        n = readinto(self, buf)
        running_reads.append(n > 0 and self.started.proc.poll() is None)
        return n

    monkeypatch.setattr(client_module._Following, "readinto", spy)
    tags_parsed: list[int] = []
    ahead = client_module._TagsAhead.__call__

    def tags_spy(self):  # noqa: ANN001, ANN202
        busy = ahead(self)
        tags_parsed.append(self.done)
        return busy

    monkeypatch.setattr(client_module._TagsAhead, "__call__", tags_spy)
    parse_tag.cache_clear()
    slow = CliClient(Config(), bin_dir=tmp_path / "bin", env={"STEP": "7000", "PAUSE": "0.03"})
    slow.nodes()
    assert slow.jobs() == jobs and slow.last_read == "tight" and slow.read_digest("s") == digest
    assert sum(running_reads) >= 2          # records parsed while squeue still wrote
    # and, while it waited for more, the tags of the jobs read so far (cached for the round's own asks)
    assert max(tags_parsed) >= len(jobs) // 2 and parse_tag.cache_info().currsize >= max(tags_parsed) // 4
    misses = parse_tag.cache_info().misses
    assert [j.tag for j in slow.jobs()[:max(tags_parsed)]] == [j.tag for j in jobs[:max(tags_parsed)]]
    assert parse_tag.cache_info().misses == misses     # asked again: every one of them a cached parse

    down = CliClient(Config(), bin_dir=tmp_path / "bin", env={
        "STEP": "7000", "PAUSE": "0", "RC": "1", "ERROR": "squeue: error: Unable to contact slurm controller"})
    with pytest.raises(SlurmUnavailable, match="Unable to contact"):
        down.jobs()
    printed_error = CliClient(Config(), bin_dir=tmp_path / "bin",
                              env={"STEP": "7000", "PAUSE": "0", "ERROR": "squeue: error: Invalid field"})
    assert printed_error._tight_read(["-t", "all"], NARROW) is None
    (tmp_path / "bin" / "squeue.out").write_bytes((tmp_path / "bin" / "squeue.out").read_bytes()[:-1])
    cut_short = CliClient(Config(), bin_dir=tmp_path / "bin", env={"STEP": "7000", "PAUSE": "0"})
    assert cut_short._tight_read(["-t", "all"], NARROW) is None


# ------------------------------------------------------------------ the jobcomp file's old lines
JOBCOMP = [ln for ln in (DATA / "jobcomp.txt").read_text().splitlines()
           if ln.startswith("JobId=") and re.search(r" EndTime=\d", ln)]
_TEXT = st.lists(st.sampled_from(list("ab =\n_-:T019") + [" EndTime=", " JobId=", "JobId=", " JobState=",
                                                              "EndTime=", "2026-12-03T10:43:2", "9 ", "x="]),
                 max_size=12).map("".join)


def _kept(text: str, since: float, skip: bool) -> list:
    """The jobs of `text` ending at or after `since`, read with `since` given to the parse or not."""
    from msched.slurm.cli.accounting import parse_jobcomp

    return sorted(repr(j) for j in parse_jobcomp(text, Config(), NODE_TYPES, since=since if skip else None)
                   if (j.end_time or 0.0) >= since)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, len(JOBCOMP) - 1), _TEXT, st.integers(0, 3), st.integers(-3, 3)),
                min_size=1, max_size=30), st.integers(0, 60))
def test_jobcomp_lines_read_only_when_they_can_end_after_since_give_the_same_jobs(picks, since_s):
    """`parse_jobcomp(since=)` skips the regex for plain lines of jobs that ended before `since` and
    counts their ids for the one-record-per-id rule: the jobs ending at or after `since` (all a round
    keeps) are exactly those of reading every line whole, for recorded lines with a user's text
    (separators, forged `JobId=`/`EndTime=`/`JobState=` fields, newlines) put in the name, ids shared
    between lines, and end times moved around `since`."""
    from msched.slurm.cli.accounting import _local_time

    lines = []
    for k, name, id_shift, minutes in picks:
        line = JOBCOMP[k]
        line = re.sub(r"^JobId=(\d+)", lambda m, shift=id_shift: f"JobId={int(m.group(1)) + shift}", line)
        end = re.search(r" EndTime=(\S+)", line).group(1)
        moved = _local_time(end) + 60 * minutes
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(moved))
        line = line.replace(f" EndTime={end}", f" EndTime={stamp}")
        lines.append(re.sub(r" Name=\S*", lambda _m, text=name: f" Name={text}", line, count=1))
    text = "\n".join(lines)
    base = min(_local_time(re.search(r" EndTime=(\S+)", ln).group(1)) for ln in JOBCOMP)
    since = base + 60 * since_s - 120
    assert _kept(text, since, True) == _kept(text, since, False)


def test_a_name_that_leaves_a_blank_job_state_is_no_record_and_fails_no_round():
    """Found by the test above: a job named `x JobState=` and a newline left a line ending in a blank
    `JobState=`, and reading it raised IndexError, so every round that read that stretch of the file
    failed (a user could stop msched for an hour). Such a line is no record; the job's own line is."""
    from msched.slurm.cli.accounting import parse_jobcomp

    head, tail = JOBCOMP[0].split(" Name=", 1)
    forged = f"{head} Name=x JobState=\nrest {tail}"
    jobs = parse_jobcomp(forged, Config(), NODE_TYPES)
    assert jobs == []
    assert parse_jobcomp(forged + "\n" + JOBCOMP[1], Config(), NODE_TYPES)[-1].job_id == JOBCOMP[1].split()[0][6:]


# ------------------------------------------------------------------ the jobcomp tail, a line at a time
_BYTES = st.lists(st.sampled_from([b"a", b" ", b"=", b"\n", b"\r", b"\r\n", b"\xc3", b"\xa9", b"\xc2\x85",
                                   b"\xe2\x80\xa8", b"\x1c", b" JobId=7", b" EndTime=", b"\n\n"]),
                  max_size=10).map(b"".join)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, len(JOBCOMP) - 1), _BYTES, st.integers(-150, 3)), min_size=1,
                max_size=40), st.integers(-120, 0), st.sampled_from([64, 257, 4096]), st.booleans())
def test_the_jobcomp_tail_read_a_line_at_a_time_gives_the_lines_and_jobs_of_the_whole_text(
        tmp_path_factory, picks, since_min, chunk, with_since):
    """`jobcomp_tail_lines` (what a round reads now: forward a chunk at a time, never the whole text)
    gives the lines of `read_jobcomp_tail(...).splitlines()` (the text a round held before) but its blank
    ones, and so the same jobs, for recorded lines with a user's bytes in the name (newlines, carriage
    returns, invalid UTF-8, U+0085 and U+2028, which `splitlines` also breaks at), end times from 2.5
    hours before `since` to after it (the backward scan stops inside the file), any chunk size."""
    from msched.slurm.cli.accounting import _local_time, jobcomp_tail_lines, parse_jobcomp, read_jobcomp_tail

    base = max(_local_time(re.search(r" EndTime=(\S+)", ln).group(1)) for ln in JOBCOMP)
    lines = []
    for k, name, minutes in sorted(picks, key=lambda p: p[2]):     # the file is in completion order
        line = JOBCOMP[k]
        end = re.search(r" EndTime=(\S+)", line).group(1)
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(base + 60 * minutes))
        head, _, rest = line.replace(f" EndTime={end}", f" EndTime={stamp}").partition(" Name=")
        lines.append(head.encode() + b" Name=" + name + b" " + rest.partition(" ")[2].encode())
    path = tmp_path_factory.mktemp("jobcomp") / "jobcomp.txt"
    path.write_bytes(b"\n".join(lines) + b"\n")
    since = base + 60 * since_min if with_since else None
    whole = read_jobcomp_tail(path, since, chunk=chunk, margin_s=1800.0)
    streamed = list(jobcomp_tail_lines(path, since, chunk=chunk, margin_s=1800.0))
    assert streamed == [ln for ln in whole.splitlines() if ln]
    assert repr(parse_jobcomp(iter(streamed), Config(), NODE_TYPES, since=since)) == \
        repr(parse_jobcomp(whole, Config(), NODE_TYPES, since=since))


# ------------------------------------------------------------------ the tight read, a chunk at a time
_RECORDS = [NARROW_RAW[k:k + sum(NARROW) + 1] for k in range(0, len(NARROW_RAW), sum(NARROW) + 1)]
_COMMENT_AT = sum(NARROW[:21])          # TIGHT_FIELDS: Comment is the 22nd field


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, len(_RECORDS) - 1), st.binary(max_size=520).filter(lambda b: b"\0" not in b),
                          st.sampled_from(["", "reason", "newline", "number"])), max_size=25),
       st.integers(1, 4), st.booleans(), st.integers(1, 6000))
def test_the_tight_read_parsed_from_its_file_a_chunk_at_a_time_reads_as_the_whole_bytes(picks, per_chunk, ragged,
                                                                                        step):
    """`parse_tight` on the open file squeue wrote (what a round reads now: CHUNK_BYTES at a time, never
    the whole output), and on squeue's output as it comes (a reader that hands over `step` bytes at a
    time, records cut anywhere, as `_Following` does while squeue writes) gives what it gives on the whole
    bytes: the same jobs, the same ids left for the wide read, the same digest lines, or None for both (a
    refused read, whichever chunk refuses it), for recorded records in any order and number, each with
    any comment (one that fills its width too) or broken (an unknown reason, a record not ending in its
    newline, a bad number), chunks of 1-4 records."""
    import io

    from msched.slurm.cli import tight

    size = sum(NARROW) + 1
    raw = bytearray()
    for k, comment, broken in picks:
        rec = bytearray(_RECORDS[k])
        rec[_COMMENT_AT:_COMMENT_AT + NARROW[21]] = comment[:NARROW[21]].ljust(NARROW[21], b" ")
        if broken == "reason":
            at = sum(NARROW[:18])
            rec[at:at + NARROW[18]] = b"No such reason".ljust(NARROW[18])
        elif broken == "newline":
            rec[-1:] = b" "
        elif broken == "number":
            rec[0:3] = b"x12"
        raw += rec
    raw = bytes(raw) + (b"x" if ragged and picks else b"")
    whole_lines: list = []
    whole = parse_tight(raw, Config(), NODE_TYPES, NARROW, [], whole_lines)
    saved = tight.CHUNK_BYTES
    tight.CHUNK_BYTES = per_chunk * size
    try:
        file_lines: list = []
        why: list[str] = []
        fh = io.BytesIO(b"head" + raw)
        fh.seek(4)                      # from the file's position on
        from_file = parse_tight(fh, Config(), NODE_TYPES, NARROW, why, file_lines)
        trickle_lines: list = []
        trickle_why: list[str] = []
        trickled = parse_tight(_Trickle(raw, step), Config(), NODE_TYPES, NARROW, trickle_why, trickle_lines)
    finally:
        tight.CHUNK_BYTES = saved
    assert (whole is None) == (from_file is None) == (trickled is None)
    assert (from_file is not None or why) and (trickled is not None or trickle_why)
    if whole is not None:
        assert repr(whole) == repr(from_file) == repr(trickled) and whole_lines == file_lines == trickle_lines


class _Trickle:
    """Bytes read back at most `step` at a time (a command's output while it still writes it)."""

    def __init__(self, data: bytes, step: int):
        self.data, self.step, self.at = data, step, 0

    def readinto(self, buf) -> int:  # noqa: ANN001
        n = min(len(buf), self.step, len(self.data) - self.at)
        buf[:n] = self.data[self.at:self.at + n]
        self.at += n
        return n


# ------------------------------------------------------------------ jobs that ended before the window, by id only
_STATES = [b"PENDING", b"RUNNING", b"COMPLETED", b"CANCELLED", b"FAILED", b"TIMEOUT", b"COMPLETING"]


def _field_at(index: int) -> tuple[int, int]:
    return sum(NARROW[:index]), sum(NARROW[:index + 1])


def _with_ends(picks: list) -> bytes:
    """Recorded records, each with another state and end time (an epoch, squeue's %s, or blank) and its
    own job id (Slurm's ids are unique)."""
    raw = bytearray()
    for n, (k, state, end) in enumerate(picks):
        rec = bytearray(_RECORDS[k])
        for index, value in ((0, str(1000 + n).encode()), (1, state), (8, b"" if end is None else str(end).encode())):
            lo, hi = _field_at(index)
            rec[lo:hi] = value.ljust(hi - lo)
        raw += rec
    return bytes(raw)


_ENDS = st.lists(st.tuples(st.integers(0, len(_RECORDS) - 1), st.sampled_from(_STATES),
                           st.none() | st.integers(1_700_000_000, 1_700_000_100)), max_size=25)


@settings(max_examples=150, deadline=None)
@given(_ENDS, st.integers(1_699_999_990, 1_700_000_110))
def test_jobs_that_ended_before_the_window_are_left_out_by_id_and_nothing_else_changes(picks, before):
    """`parse_tight(ended=(before, ids))` leaves out exactly the jobs of a finished state whose end time
    is before `before` (their ids in order), reads every other job as the whole parse does, and makes the
    same digest lines for all."""
    raw = _with_ends(picks)
    lines: list = []
    whole = parse_tight(raw, Config(), NODE_TYPES, NARROW, [], lines)
    ids: list[str] = []
    kept_lines: list = []
    left = parse_tight(raw, Config(), NODE_TYPES, NARROW, [], kept_lines, (before, ids))
    assert (whole is None) == (left is None)
    if whole is None:
        return
    old = [j for j in whole[0] if j.state in FINISHED_STATES and j.end_time is not None and j.end_time < before]
    assert repr(left) == repr(([j for j in whole[0] if j not in old], whole[1]))
    assert ids == [j.job_id for j in old] and kept_lines == lines


@settings(max_examples=40, deadline=None)
@given(_ENDS, st.integers(1_699_999_990, 1_700_000_110), st.integers(-20, 20))
def test_a_round_that_reads_finished_jobs_by_id_finds_the_same_completions(tmp_path_factory, picks, before, later):
    """The client's round path: `jobs()` with `finished_before` set, then `finished_jobs(since)` from the
    same read, answers as a client that parsed every job, for `since` at, after or (a fresh read then)
    before `finished_before`; `jobs()` gives the same active jobs."""
    raw = _with_ends(picks)
    whole = parse_tight(raw, Config(), NODE_TYPES)
    assume(whole is not None and not whole[1])      # the stand-in squeue prints no --json, no wide read
    tmp = tmp_path_factory.mktemp("ended")
    answers = []
    for left_out in (False, True):
        client = _client(tmp)
        (tmp / "bin" / "squeue.out").write_bytes(raw)
        client._slurm_config = {}          # no sacct, no jobcomp file: squeue's memory alone
        client.finished_before = before if left_out else None
        active = client.jobs()
        answers.append((repr(active), repr(client.finished_jobs(since=before + later))))
    assert answers[0] == answers[1]


# ------------------------------------------------------------------ the jobcomp tail read ahead (eleventh pass)
def _jobcomp_client(tmp_path: Path, lines: list[str]) -> CliClient:
    client = _client(tmp_path)
    path = tmp_path / "jobcomp.txt"
    path.write_text("".join(f"{ln}\n" for ln in lines))
    client._slurm_config = {"JobCompType": "jobcomp/filetxt", "JobCompLoc": str(path)}   # as scontrol shows it
    return client


def test_finished_jobs_with_the_jobcomp_tail_read_ahead_answer_as_without(tmp_path):
    """A round reads the jobcomp tail ahead (`prefetch_finished`) while the queue's squeue runs: its
    `finished_jobs(since)` answers as a client that reads the tail after the queue, for every `since`
    (the file's end times, before all, after all, None), with lines for jobs squeue shows (pending or
    running: not finished; finished: squeue's record). The tail read ahead is used once, and only for
    the same `since`: a line written after it is not in that answer (the next round's window, which
    overlaps this round by COMPLETION_OVERLAP_S, finds it), a different `since` reads the file again."""
    from msched.slurm.cli.accounting import _local_time

    queued = _client(tmp_path).jobs(("ALL",))
    some = [next(j for j in queued if j.is_pending), next(j for j in queued if j.state in FINISHED_STATES)]
    lines = JOBCOMP + [re.sub(r"^JobId=\d+", f"JobId={j.job_id}", JOBCOMP[k]) for k, j in enumerate(some)]
    ends = sorted({_local_time(m.group(1)) for ln in lines if (m := re.search(r" EndTime=(\S+)", ln))})
    answers = []
    for since in (None, ends[0] - 1, *ends, ends[-1] + 1):
        plain = _jobcomp_client(tmp_path, lines)
        plain.nodes()
        plain.jobs()
        want = plain.finished_jobs(since)
        answers.append(want)
        ahead = _jobcomp_client(tmp_path, lines)
        ahead.nodes()
        ahead.prefetch_finished(since)
        ahead.jobs()
        (tmp_path / "jobcomp.txt").write_text(lines[0] + "\n")      # written after the read ahead
        assert ahead.finished_jobs(since) == want
        assert ahead._jobcomp_ahead is None                          # used once
        other = _jobcomp_client(tmp_path, lines)
        other.nodes()
        other.prefetch_finished(since)
        other.jobs()
        later = ends[-1] + 1 if since is None else None
        fresh = _jobcomp_client(tmp_path, lines)
        fresh.nodes()
        fresh.jobs()
        assert other.finished_jobs(later) == fresh.finished_jobs(later)     # another since: read again
    assert len({len(a) for a in answers}) > 2           # the window changes the answer
    everything = {j.job_id: j for j in answers[0]}
    assert everything[some[1].job_id] == some[1]            # squeue's record, not the file's line
    assert some[0].job_id not in everything                 # pending in squeue: not finished
