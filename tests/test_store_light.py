"""The light round's store (msched.store.light, issue 21 sixth pass): the SQLAlchemy store's file read
and written through plain sqlite3. Against the SQLAlchemy store on the same real SQLite file: the row a
light round writes is the row the SQLAlchemy writer writes, the last round and the open hold entries
read the same, the view refuses a file it cannot vouch for, and the cron entry imports neither
SQLAlchemy nor click before it knows the round is light."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sqlalchemy import select

from msched.cli import plain_reorder_options
from msched.config import Config
from msched.store.db import Store
from msched.store.holds import HoldJournal
from msched.store.light import LightStore, open_light_store, sqlite_file
from msched.store.queries import last_planned_round
from msched.store.retention import prune
from msched.store.schema import Round
from msched.store.writes import record_unchanged_round

T0 = 1_790_000_000.0


def _site(tmp_path):  # noqa: ANN001, ANN202
    db = tmp_path / "state" / "msched.db"
    return Config(state_dir=str(tmp_path / "state"), database_url=f"sqlite:///{db}")


def _planned_store(tmp_path):  # noqa: ANN001, ANN202
    """A SQLAlchemy store with one run and a planned round, as a reorder round leaves it."""
    cfg = _site(tmp_path)
    store = Store(cfg.database_url)
    rid = store.run_id("slurm", "light", gpus={"a100": 4})
    with store.write() as s:
        s.add(Round(run_id=rid, time=T0, pending=900, running=16, changes=0, skipped=0, plan_seconds=0.4,
                    est_makespan_s=3600.0, busy_gpus={"a100": 4, "titanv": 3}, total_gpus={"a100": 4, "titanv": 4},
                    dry_run=0, moved=0, held_back=0, gain_makespan_s=0.0, gain_mean_end_s=0.0, decision_rows=0,
                    state_key="k" * 32, stable_until=T0 + 900, unchanged=0, queue_digest="d" * 32, light=0))
    return cfg, store, rid


def _rows(path) -> list[dict]:  # noqa: ANN001
    conn = sqlite3.connect(str(path))
    cur = conn.execute("SELECT * FROM rounds ORDER BY id")
    names = [d[0] for d in cur.description]
    rows = [dict(zip(names, r, strict=True)) for r in cur.fetchall()]
    conn.close()
    return rows


def test_the_light_view_writes_the_row_the_sqlalchemy_store_writes(tmp_path):
    cfg, store, rid = _planned_store(tmp_path)
    with store.read() as s:
        last = last_planned_round(s, rid)
        s.expunge(last)
    with store.write() as s:
        record_unchanged_round(s, rid, last, T0 + 60, 900, 16, queue_digest="d" * 32, light=True)
    light = open_light_store(cfg)
    assert isinstance(light, LightStore)
    light_last = light.last_planned_round(rid)
    light.record_unchanged_round(rid, light_last, T0 + 60, 900, 16, queue_digest="d" * 32, light=True)
    light.dispose()
    *_, by_sqlalchemy, by_sqlite3 = _rows(sqlite_file(cfg.database_url))
    assert by_sqlalchemy.pop("id") + 1 == by_sqlite3.pop("id")
    assert by_sqlite3 == by_sqlalchemy                          # every column, JSON text included
    assert json.loads(by_sqlite3["busy_gpus"]) == {"a100": 4, "titanv": 3}
    assert by_sqlite3["light"] == 1 and by_sqlite3["est_makespan_s"] == 3540.0
    store.dispose()


def test_the_light_view_reads_what_the_sqlalchemy_store_reads(tmp_path):
    cfg, store, rid = _planned_store(tmp_path)
    journal = HoldJournal(store)
    first = journal.record_hold("101", "hold", "", "test")
    journal.record_hold("102", "begin_time", str(int(T0 + 600)), "test")
    journal.close([first], "released")
    light = open_light_store(cfg)
    with store.read() as s:
        last = last_planned_round(s, rid)
        columns = [c.name for c in Round.__table__.columns]
        assert {c: getattr(light.last_planned_round(rid), c) for c in columns} == {c: getattr(last, c) for c in columns}
    assert light.open_hold_kinds() == [e.kind for e in journal.open_entries()] == ["begin_time"]
    assert light.run_id("slurm", "light") == rid and light.run_id("slurm", "other") is None
    light.check_integrity()
    light.check_writable()
    # pruning: due exactly when retention.prune would fold something
    for now, retention in ((T0 + 60, 14 * 86400.0), (T0 + 40 * 86400, 14 * 86400.0)):
        due = light.prune_due(rid, (now - retention) // 86400 * 86400)
        with store.write() as s:
            assert due == (prune(s, rid, now, retention) > 0)
    light.dispose()
    store.dispose()


def test_the_light_view_opens_only_a_file_it_can_vouch_for(tmp_path):
    assert open_light_store(_site(tmp_path)) is None                     # no file yet
    assert sqlite_file("sqlite://") is None and sqlite_file("sqlite:///:memory:") is None
    assert sqlite_file("postgresql://u@h/db") is None and sqlite_file("sqlite:///x.db?mode=ro") is None
    cfg, store, _rid = _planned_store(tmp_path)
    store.dispose()
    path = sqlite_file(cfg.database_url)
    light = open_light_store(cfg)
    assert light is not None
    light.dispose()
    conn = sqlite3.connect(str(path), isolation_level=None)
    conn.execute("ALTER TABLE rounds DROP COLUMN light")               # an older store: SQLAlchemy adds it
    assert open_light_store(cfg) is None
    Store(cfg.database_url).dispose()
    light = open_light_store(cfg)
    assert light is not None
    light.dispose()
    conn.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
    assert open_light_store(cfg) is None
    conn.execute("UPDATE meta SET value = '1' WHERE key = 'schema_version'")
    conn.execute("PRAGMA journal_mode = DELETE")
    assert open_light_store(cfg) is None
    conn.close()


def test_a_round_that_is_not_light_opens_the_sqlalchemy_store_on_the_same_file(tmp_path):
    from msched.rounds.reorder import Reorderer
    from slurm_sim.client import SimClient

    cfg, store, _rid = _planned_store(tmp_path)
    store.dispose()
    light = open_light_store(cfg)
    reorderer = Reorderer(cfg, SimClient.__new__(SimClient), light)
    reorderer._full_store()
    assert isinstance(reorderer.store, Store) and reorderer.store is light.full()
    with reorderer.store.read() as s:
        assert s.scalar(select(Round.id).order_by(Round.id.desc())) is not None
    light.dispose()


@pytest.mark.parametrize("args,expected", [
    ([], {}),
    (["--config", "/etc/x.toml", "-v"], {"config_file": "/etc/x.toml", "verbose": True}),
    (["--backend=cli", "--objective", "jct"], {"backend": "cli", "objective": "jct"}),
    (["--dry-run"], None), (["--every", "60"], None), (["--release"], None), (["--help"], None),
    (["--backend", "nope"], None), (["--config"], None), (["--config", "a", "--config", "b"], None),
    (["--config", "/tmp"], None), (["extra"], None),
])
def test_the_cron_forms_run_without_click_and_the_rest_go_through_it(args, expected):
    assert plain_reorder_options(args) == expected


def test_the_cron_entry_imports_neither_sqlalchemy_nor_click_before_a_round():
    """What `msched reorder` loads up to its light round (the round itself: tests/test_reorder_light_path.py)."""
    code = ("import sys, json\n"
            "import msched.cli, msched.commands.reorder_run, msched.rounds.reorder, msched.store.light\n"
            "import msched.slurm.cli.client\n"
            "print(json.dumps(sorted(sys.modules)))\n")
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    loaded = json.loads(proc.stdout)
    assert "msched.store.light" in loaded and time.monotonic() - started < 60
    assert not [m for m in loaded if m.split(".")[0] in ("sqlalchemy", "click")]


# ------------------------------------------------------------------ the full round on plain sqlite3 (eighth pass)
def test_the_plain_views_columns_are_the_schemas():
    from msched.store.rows import COLUMNS
    from msched.store.schema import Base

    tables = {t.name: [c.name for c in t.columns if c.name != "id"] for t in Base.metadata.sorted_tables}
    for name, columns in COLUMNS.items():
        if name == "holds":                      # read only: the open entries' kinds
            assert set(columns) <= set(tables[name])
        else:
            assert sorted(columns) == sorted(tables[name]), name


def _table_rows(path) -> dict[str, list[dict]]:  # noqa: ANN001
    """Every row of every table but meta, by table (ids included); the columns that hold a wall-clock time
    (runs.created_at, the planner's own CPU time in rounds and round_days) are dropped."""
    conn = sqlite3.connect(str(path))
    out = {}
    for (table,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND name != 'meta'"):
        cur = conn.execute(f'SELECT * FROM "{table}" ORDER BY id' if table != "reference_models"
                           else f'SELECT * FROM "{table}" ORDER BY name')
        names = [d[0] for d in cur.description]
        out[table] = [{k: v for k, v in zip(names, r, strict=True) if k not in ("created_at", "plan_seconds",
                                                                               "max_plan_seconds")}
                      for r in cur.fetchall()]
    conn.close()
    return out


def _rounds_on(tmp_path, plain: bool):  # noqa: ANN202
    """The same simulated rounds (the dev cluster's shape, 200 pending: a burst, rounds with nothing
    changed, 4 running jobs ending, completions as blockers end, an arrival) recorded through the plain
    view (`plain`) or the SQLAlchemy store, then pruned in batches of 2 as if 30 days later; returns
    every table's rows. The arrival asks for a whole 4-GPU node, so that it waits and the rounds kept
    after pruning plan it (a 1-GPU arrival started at once, and whether those rounds recorded a decision
    was up to the planner: none since the batch is planned short first, jct14)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
    import bench_reorder as br

    from msched.rounds.core import slurm_state_key
    from msched.rounds.reorder import Reorderer
    from msched.slurm.base import ACTIVE_STATES, FINISHED_STATES
    from msched.store.light import LightStore

    c, blockers, _perf = br.busy_sim(200, seed=3)
    every = ACTIVE_STATES + FINISHED_STATES
    c.queue_digest = lambda setup="": slurm_state_key(c.jobs(every), c.nodes(), setup)
    cfg = Config(state_dir=str(tmp_path / "state"), performance=str(br.PERF), cluster_name="same", backend="cli")
    Store(cfg.database_url).dispose()            # the SQLAlchemy store creates the file (as the first round does)
    store = open_light_store(cfg) if plain else Store(cfg.database_url)
    assert isinstance(store, LightStore) == plain
    try:
        reorderer = Reorderer(cfg, c, store, run_kind="sim", run_name="same", publish=False)
        kinds = []
        for step in range(9):
            if step == 3:
                for job_id in blockers[:4]:
                    c.cancel(job_id)
            if step == 5:
                c.advance(5000.0)                    # the other blockers end, pending jobs start
            if step == 7:
                c.submit(br.JobRequest(name="late", num_gpus=4, time_limit_s=3600, comment=next(
                    j.comment for j in c.jobs() if j.tag is not None), extra={"runtime_s": 600.0}))
            c.advance(60.0)
            out = reorderer.round()
            kinds.append("light" if out.light else "unchanged" if out.unchanged else "planned")
        assert isinstance(reorderer.store, LightStore) == plain      # the plain view did it all
        rid = reorderer.run_id([])
        later = c.now() + 30 * 86400.0
        for _ in range(3):
            if plain:
                store.prune(rid, later, 14 * 86400.0, batch=2)
            else:
                with store.write() as s:
                    prune(s, rid, later, 14 * 86400.0, batch=2)
        return kinds, _table_rows(sqlite_file(cfg.database_url))
    finally:
        store.dispose()


def test_a_round_recorded_either_way_leaves_the_same_rows(tmp_path):
    import shutil

    kinds, by_sqlalchemy = _rounds_on(tmp_path, plain=False)
    shutil.rmtree(tmp_path / "state")     # the same paths: the configuration is part of the rounds' keys
    plain_kinds, by_sqlite3 = _rounds_on(tmp_path, plain=True)
    assert plain_kinds == kinds
    assert {"planned", "light"} <= set(kinds), kinds          # both kinds of round were recorded
    assert by_sqlalchemy["round_days"] and len(by_sqlalchemy["rounds"]) == 3     # 6 pruned, in 3 batches
    assert by_sqlalchemy["decisions"] and by_sqlalchemy["reference_models"] is not None
    assert any(j["end_time"] is not None for j in by_sqlalchemy["jobs"])        # completions recorded
    for table in by_sqlalchemy:
        assert by_sqlite3[table] == by_sqlalchemy[table], table
