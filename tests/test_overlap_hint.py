"""`activity_hint` (issue 21, twelfth pass): the light check skips its digest and the round reads the queue
at once when Slurm's job counters moved since the last light check (`SlurmClient.activity`, sdiag).
Here without a cluster: sdiag is a script in a bin directory printing what 22.05.8's sdiag printed on the
dev cluster (its head recorded in this file), and the reorderer's choice is checked against a client whose
counters the test sets. On the real cluster: tests/test_reorder_light_path.py."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from msched.config import Config, ConfigError
from msched.rounds.reorder import ACTIVITY_FILE, Reorderer
from msched.slurm.cli import CliClient

# the head of `sdiag` on the dev cluster (Slurm 22.05.8), 10,000 jobs submitted
SDIAG = """*******************************************************
sdiag output at Sat Dec 05 10:58:05 2026 (1796468285)
Data since      Sat Dec 05 10:52:10 2026 (1796467930)
*******************************************************
Server thread count:  4
Agent queue size:     0
Agent count:          4
Agent thread count:   12
DBD Agent queue size: 0

Jobs submitted: 10017
Jobs started:   145
Jobs completed: 0
Jobs canceled:  2684
Jobs failed:    0

Job states ts:  Sat Dec 05 10:57:40 2026 (1796468260)
Jobs pending:   9974
Jobs running:   10

Main schedule statistics (microseconds):
\tLast cycle:   18111
"""


def _sdiag_client(tmp_path: Path, text: str, rc: int = 0, err: str = "") -> CliClient:
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    (bindir / "sdiag.out").write_text(text)
    script = bindir / "sdiag"
    script.write_text(f"#!/bin/sh\ncat \"$(dirname \"$0\")/sdiag.out\"\n{f'echo {err!r} >&2' if err else ''}\n"
                      f"exit {rc}\n")
    script.chmod(stat.S_IRWXU)
    return CliClient(Config(), bin_dir=bindir)


def test_activity_is_the_job_counters_and_their_start_and_nothing_that_moves_by_itself(tmp_path):
    client = _sdiag_client(tmp_path, SDIAG)
    got = client.activity()
    assert got.splitlines() == ["Data since      Sat Dec 05 10:52:10 2026 (1796467930)", "Jobs submitted: 10017",
                                "Jobs started:   145", "Jobs completed: 0", "Jobs canceled:  2684",
                                "Jobs failed:    0"]
    # the time of the output, the pending/running gauges and the schedule statistics change by themselves
    moved = SDIAG.replace("10:58:05", "10:59:00").replace("9974", "9970").replace("18111", "20000")
    assert _sdiag_client(tmp_path, moved).activity() == got
    assert _sdiag_client(tmp_path, SDIAG.replace("Jobs canceled:  2684", "Jobs canceled:  2688")).activity() != got
    assert _sdiag_client(tmp_path, SDIAG.replace("10:52:10", "00:00:00")).activity() != got   # stats reset


@pytest.mark.parametrize(("text", "rc", "err"), [
    (SDIAG, 1, "sdiag: error: slurm_get_statistics: Unable to contact slurm controller"),
    (SDIAG, 0, "sdiag: error: something"),
    (SDIAG.replace("Jobs failed:    0\n", ""), 0, ""),            # a counter missing
    ("", 0, ""),
])
def test_activity_is_none_when_sdiag_fails_or_lacks_a_counter(tmp_path, text, rc, err):
    assert _sdiag_client(tmp_path, text, rc, err).activity() is None


def test_activity_is_none_without_sdiag(tmp_path):
    (tmp_path / "empty").mkdir()
    assert CliClient(Config(), bin_dir=tmp_path / "empty").activity() is None


_STORE = object()           # a round's store (not read by the hint)


class _Counters:
    """The part of a client `_counters_moved` asks: its job counters, as the test sets them."""

    digest_of_read = True

    def __init__(self) -> None:
        self.value: str | None = "Jobs submitted: 1"
        self.asked = 0

    def activity(self) -> str | None:
        self.asked += 1
        return self.value


def test_the_counters_moved_when_they_differ_from_the_last_light_checks(tmp_path):
    config = Config(state_dir=str(tmp_path / "state"))._checked()
    Path(config.state_dir).mkdir()                  # a round's store is in it
    assert config.activity_hint
    counters = _Counters()
    r = Reorderer(config, counters, _STORE, publish=False)
    kept = Path(config.state_dir) / ACTIVITY_FILE
    assert r._counters_moved() and kept.read_text() == "Jobs submitted: 1"   # none kept yet: they moved
    assert not r._counters_moved() and not r._counters_moved()
    counters.value = "Jobs submitted: 2"
    assert r._counters_moved() and kept.read_text() == "Jobs submitted: 2"
    assert not r._counters_moved()
    counters.value = None                                               # sdiag failed: the light check runs
    assert not r._counters_moved() and kept.read_text() == "Jobs submitted: 2"
    kept.write_text("garbage \x00 from elsewhere")                    # only compared, never parsed
    counters.value = "Jobs submitted: 2"
    assert r._counters_moved() and kept.read_text() == "Jobs submitted: 2"


def test_off_or_without_a_digest_of_the_read_the_counters_are_not_asked(tmp_path):
    counters = _Counters()
    config = Config(state_dir=str(tmp_path), activity_hint=False)._checked()
    assert not Reorderer(config, counters, _STORE, publish=False)._counters_moved()
    counters.digest_of_read = False         # squeue --json: the round would read a digest anyway
    config = Config(state_dir=str(tmp_path))._checked()
    assert not Reorderer(config, counters, _STORE, publish=False)._counters_moved()
    assert counters.asked == 0 and not (tmp_path / ACTIVITY_FILE).exists()


def test_an_unwritable_state_directory_only_costs_the_hint(tmp_path):
    counters = _Counters()
    config = Config(state_dir=str(tmp_path / "missing" / "state"))._checked()   # not made by the check
    r = Reorderer(config, counters, _STORE, publish=False)
    assert r._counters_moved() and r._counters_moved()      # cannot keep them: every check reads the queue


@pytest.mark.parametrize("bad", ["yes", "on", 1, None, "auto"])
def test_activity_hint_takes_true_or_false(bad):
    with pytest.raises(ConfigError, match="activity_hint"):
        Config(activity_hint=bad)._checked()
