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
from hypothesis import given, settings
from hypothesis import strategies as st

from msched.config import Config
from msched.slurm.base import SlurmUnavailable
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
