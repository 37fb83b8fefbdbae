"""The round's integrity check takes a file left as the last round left it on trust (issue 21, twelfth pass).

`LightStore.check_integrity` runs `PRAGMA quick_check` (it reads the whole file: ~10 ms at 5 MB, growing
with the store) unless the mark the last round left beside the file (`CHECKED_MARK`: the file's and a
non-empty WAL's inode, size, modification and change times, taken after the round's connection closed)
matches the file now, and fewer than CHECK_EVERY rounds in a row took it on trust. Here on real SQLite
files, rounds as cron runs them (a store opened, a round of the simulated dev cluster, the store disposed):
the first round checks, the next ones do not, a damaged file is refused by the next round whatever its
mark says within CHECK_EVERY rounds, another writer or a failed round makes the next round check."""

from __future__ import annotations

import os
import sqlite3
import sys
from pathlib import Path

import pytest

from msched.config import Config
from msched.store import light as light_mod
from msched.store.base import StoreError
from msched.store.db import Store
from msched.store.light import CHECKED_MARK, MARK_VERSION, open_light_store

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
sys.path.insert(0, str(Path(__file__).resolve().parent))


class _Site:
    """The simulated dev cluster (200 pending) and a SQLite store; `round()` as `msched reorder` runs one."""

    def __init__(self, tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
        import bench_reorder as br

        from msched.rounds.core import slurm_state_key
        from msched.slurm.base import ACTIVE_STATES, FINISHED_STATES

        self.client, self.blockers, _perf = br.busy_sim(200, seed=5)
        every = ACTIVE_STATES + FINISHED_STATES
        self.digest = lambda setup="": slurm_state_key(self.client.jobs(every), self.client.nodes(), setup)
        self.client.queue_digest = self.digest
        self.config = Config(state_dir=str(tmp_path / "state"), performance=str(br.PERF), cluster_name="check",
                             backend="cli")
        Store(self.config.database_url).dispose()
        self.path = Path(self.config.database_url.removeprefix("sqlite:///"))
        self.mark = self.path.with_name(self.path.name + CHECKED_MARK)
        self.checks = 0
        quick = light_mod.LightStore._quick_check

        def counted(store) -> None:  # noqa: ANN001
            self.checks += 1
            quick(store)

        monkeypatch.setattr(light_mod.LightStore, "_quick_check", counted)

    def round(self, *, fail: bool = False) -> bool:
        """One round; True when it ran quick_check. `fail`: the round raises after the check."""
        from msched.rounds.reorder import Reorderer

        before = self.checks
        store = open_light_store(self.config)
        assert store is not None
        try:
            r = Reorderer(self.config, self.client, store, run_kind="sim", run_name="check", publish=False)
            if fail:                        # Slurm's reads fail after the check, whatever the round is
                def broken(*_args, **_kwargs):  # noqa: ANN002, ANN003, ANN202
                    raise RuntimeError("a read that fails")
                self.client.queue_digest = self.client.jobs = broken
            r.round()
        finally:
            store.dispose()
            if fail:
                del self.client.jobs
                self.client.queue_digest = self.digest
            self.client.advance(60.0)
        return self.checks > before


def _corrupt(path: Path) -> None:
    """Overwrite the root page of the jobs table (not the schema's pages: the file still opens) with
    bytes that are not a b-tree page."""
    conn = sqlite3.connect(path)
    page = conn.execute("PRAGMA page_size").fetchone()[0]
    root = conn.execute("SELECT rootpage FROM sqlite_master WHERE name = 'jobs'").fetchone()[0]
    conn.close()
    with open(path, "r+b") as fh:
        fh.seek((root - 1) * page)
        fh.write(bytes(range(256)) * (page // 256))


def test_rounds_take_the_file_on_trust_while_it_is_as_the_last_round_left_it(tmp_path, monkeypatch):
    monkeypatch.setattr(light_mod, "CHECK_EVERY", 4)
    site = _Site(tmp_path, monkeypatch)
    ran = [site.round() for _ in range(9)]
    assert ran == [True, False, False, False, True, False, False, False, True]     # every 4th round
    assert site.mark.read_text().split()[0] == MARK_VERSION


def test_a_damaged_file_is_refused_by_the_next_round(tmp_path, monkeypatch):
    site = _Site(tmp_path, monkeypatch)
    for _ in range(3):
        site.round()
    assert site.path.stat().st_size > 16384 and site.mark.exists()
    _corrupt(site.path)                     # its times change: the mark no longer matches
    store = light_mod.LightStore(site.path, site.config)
    try:
        with pytest.raises(StoreError, match="quick_check"):
            store.check_integrity()
    finally:
        store.conn.close()


def test_damage_that_leaves_the_files_times_is_caught_within_check_every_rounds(tmp_path, monkeypatch):
    """A disk that changes bytes and no metadata: forged here by writing the mark again for the damaged
    file. The rounds take it on trust at most CHECK_EVERY - 1 times, then the check refuses it."""
    monkeypatch.setattr(light_mod, "CHECK_EVERY", 3)
    site = _Site(tmp_path, monkeypatch)
    for _ in range(2):
        site.round()
    _corrupt(site.path)
    store = light_mod.LightStore(site.path, site.config)
    fingerprint = store._fingerprint()
    store.conn.close()
    site.mark.write_text(f"{MARK_VERSION} {fingerprint} 0\n")
    trusted = 0
    with pytest.raises(StoreError, match="quick_check"):
        for _ in range(3):
            store = light_mod.LightStore(site.path, site.config)
            try:
                store.check_integrity()
                trusted += 1
                store.vouch()               # the round went on without touching the damaged table
            finally:
                store.dispose()
    assert trusted == 2


def test_another_writer_or_a_failed_round_makes_the_next_round_check(tmp_path, monkeypatch):
    site = _Site(tmp_path, monkeypatch)
    assert site.round() and not site.round()
    other = sqlite3.connect(site.path)                  # another process writing the file
    other.execute("CREATE TABLE scratch (x INTEGER)")
    other.commit()
    other.close()
    assert site.round() and not site.round()
    with pytest.raises(RuntimeError, match="a read that fails"):
        site.round(fail=True)
    assert not site.mark.exists()                       # no round vouched for what it left
    assert site.round() and not site.round()


def test_a_mark_that_does_not_parse_or_counts_too_far_is_no_trust(tmp_path, monkeypatch):
    site = _Site(tmp_path, monkeypatch)
    site.round()
    version, fingerprint, _count = site.mark.read_text().split()
    for text in ("", "garbage", f"{version} {fingerprint}", f"{version} {fingerprint} x",
                 f"{version} {fingerprint} -1", f"{version} {fingerprint} {light_mod.CHECK_EVERY}",
                 f"other-version {fingerprint} 0", f"{version} 1:2:3:4 0", "\xff\xfe"):
        site.mark.write_bytes(text.encode("latin-1"))
        os.utime(site.mark)
        assert site.round(), text


# ------------------------------------------------------------------ the record's rows from the incumbent's read
def test_the_records_rows_come_from_the_incumbents_read_and_equal_a_read_of_the_file(tmp_path, monkeypatch):
    """`LightStore.incumbent` keeps the pending jobs' rows; the round's record compares its plan with them
    (`_decision_rows`) instead of reading them again. Over a burst, rounds with nothing changed, an event and
    an arrival, every round's rows equal `_existing`'s read of the file at that moment, and the incumbent is
    the one the plain query gives, in its order."""
    site = _Site(tmp_path, monkeypatch)
    compared = []
    reuse, read = light_mod.LightStore._decision_rows, light_mod.LightStore._existing
    incumbent = light_mod.LightStore.incumbent

    def checked(store, cur, run_id, job_ids):  # noqa: ANN001, ANN202
        from_kept = store._pending is not None
        got = reuse(store, cur, run_id, job_ids)
        want = read(store, cur, run_id, job_ids, light_mod._DECISION_COLUMNS)
        assert got == want
        compared.append((from_kept, len(got)))
        return got

    def same_incumbent(store, run_id):  # noqa: ANN001, ANN202
        got = incumbent(store, run_id)
        plain = store.conn.execute("SELECT job_id, planned_type, planned_priority FROM jobs WHERE run_id = ? AND "
                                   "state = 'PENDING' AND planned_priority IS NOT NULL", (run_id,)).fetchall()
        want = light_mod.rows.incumbent_of(plain)
        assert got == want and list(got.priority) == list(want.priority)
        return got

    monkeypatch.setattr(light_mod.LightStore, "_decision_rows", checked)
    monkeypatch.setattr(light_mod.LightStore, "incumbent", same_incumbent)
    for step in range(6):
        if step == 3:
            for job_id in site.blockers[:4]:
                site.client.cancel(job_id)
        site.round()
    assert any(kept and n > 100 for kept, n in compared), compared      # the rows came from the kept read


def test_rows_another_connection_wrote_since_the_incumbents_read_are_read_again(tmp_path, monkeypatch):
    site = _Site(tmp_path, monkeypatch)
    site.round()
    store = open_light_store(site.config)
    try:
        rid = store.run_id("sim", "check")
        store.incumbent(rid)
        jid, row_id = store.conn.execute("SELECT job_id, id FROM jobs WHERE state = 'PENDING' AND "
                                         "planned_priority IS NOT NULL LIMIT 1").fetchone()
        other = sqlite3.connect(site.path)
        other.execute("UPDATE jobs SET planned_priority = 7, writes = 99 WHERE id = ?", (row_id,))
        other.commit()
        other.close()
        with store.write() as cur:
            got = store._decision_rows(cur, rid, [jid])
        assert (got[jid].planned_priority, got[jid].writes) == (7, 99)
        store.incumbent(rid)
        with store.write() as cur:              # this connection's own write of a jobs row
            store._update_jobs(cur, [{"id": row_id, "planned_priority": 8}])
            got = store._decision_rows(cur, rid, [jid])
        assert got[jid].planned_priority == 8
    finally:
        store.dispose()
