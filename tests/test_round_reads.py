"""The round's reads, cheaper (issue 21, ninth pass): the digest's lines made only when a round records its
digest, and the queue's squeue and the sinfo started before the round needs them (`CliClient.prefetch`).

Offline: over the recorded tight reads (tests/data/slurm, 22.05.8), `digest_lines` gives exactly the lines
the parse gives while it reads; with stand-in squeue and sinfo (shell scripts printing recorded bytes and
logging each call), reads after `prefetch` run no command of their own and give what reads without it
give, a started read nobody collected is ended by `close`, and a hung one fails as a hung read does.
On the dev cluster (tests/test_reorder_light_path.py): a round records a digest only when it wrote
nothing, and the round after such a round is light.
"""

from __future__ import annotations

import stat
import time
from pathlib import Path

import pytest

from msched.config import Config
from msched.slurm.base import SlurmUnavailable
from msched.slurm.cli import CliClient
from msched.slurm.cli.tight import NARROW, WIDE, digest_lines, parse_tight

DATA = Path(__file__).parent / "data" / "slurm"
NARROW_RAW = (DATA / "squeue_tight.bin").read_bytes()
WIDE_RAW = (DATA / "squeue_tight_wide.bin").read_bytes()
NODE_TYPES = {"n1": "a100", "n2": "titanv", "n3": "rtx2080ti", "n4": "titanxp"}


def test_digest_lines_made_afterwards_are_the_lines_the_parse_gives():
    """Both recorded reads (the narrow one, with jobs cut at its widths, and the wide re-read of those):
    the lines made from the bytes after the parse are the parse's own, job for job, and leave out the
    cut jobs exactly as the parse does."""
    for raw, widths in ((NARROW_RAW, NARROW), (WIDE_RAW, WIDE)):
        lines: list[tuple[int, bytes]] = []
        jobs, cut = parse_tight(raw, Config(), NODE_TYPES, widths, None, lines)
        assert digest_lines(raw, widths) == lines
        assert len(lines) == len(jobs) == len(raw) // (sum(widths) + 1) - len(cut)
    assert parse_tight(NARROW_RAW, Config(), NODE_TYPES)[1]        # the recording does cut some jobs


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
    keep = {str(jid) for jid, _ in digest_lines(raw, widths)}
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

    client = _client(tmp_path, SLEEP_squeue="0.5")
    t0 = time.monotonic()
    assert client.prefetch()
    assert time.monotonic() - t0 < 0.4                   # started, not waited for
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

