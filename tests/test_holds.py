"""The hold journal's API (msched.store.holds) on a real SQLite file: what the planner's begin-time
holds and `--release` rely on. The replay against Slurm is tested on the dev cluster
(tests/test_hardening_slurm.py: a kill at every step of --release)."""

from __future__ import annotations

import pytest

from msched.store.db import Store
from msched.store.holds import HoldJournal


def test_entries_are_committed_before_the_call_and_closed_after(tmp_path):
    url = f"sqlite:///{tmp_path}/msched.db"
    journal = HoldJournal(Store(url))
    a = journal.record_hold("11", "hold", reason="reorder --release")
    b, c = journal.record_holds([("12", "begin_time", "1900000000", "kept for a100"), ("13", "hold", "", "x")])
    # another process (the next round) sees them at once: they are on disk
    other = HoldJournal(Store(url, create=False))
    assert [(e.job_id, e.kind, e.value) for e in other.open_entries()] == [
        ("11", "hold", ""), ("12", "begin_time", "1900000000"), ("13", "hold", "")]
    assert [e.job_id for e in other.open_entries("begin_time")] == ["12"]
    journal.close([a, c], "released")
    assert [e.id for e in other.open_entries()] == [b]
    journal.close([a], "again")                      # closing twice keeps the first outcome
    with Store(url).read() as s:
        from msched.store.schema import Hold
        assert s.get(Hold, a).outcome == "released" and s.get(Hold, a).closed_at is not None
    with pytest.raises(ValueError, match="choose one of hold, begin_time"):
        journal.record_hold("14", "priority")
