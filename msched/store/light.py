"""The light round's store: the same SQLite file as msched.store.db, through plain sqlite3 (issue 21,
sixth pass). A light round (msched.rounds.reorder) reads the last round's row and the open hold journal
entries and writes one summary row: importing SQLAlchemy for that cost most of its CPU (0.13 s of the
0.23 s `msched.store.db` took to import, BENCHMARKS "Rounds that settle, fifth pass").

The SQLAlchemy store stays the one owner of the schema: it creates the file, stamps the schema version
and adds columns; this view opens only a file it finds current (`open_light_store`: the stamped
SCHEMA_VERSION, WAL mode, and every column the light round writes present, names read from the file
itself), and otherwise the round opens the SQLAlchemy store as before. The row it writes is
msched.store.base.unchanged_round_values, the one the SQLAlchemy writer writes. Transactions as
msched.store.db's: autocommit driver, BEGIN IMMEDIATE for writes, the same busy timeout.
When a round turns out not to be light, `full()` opens the SQLAlchemy store on the same file.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from msched.store.base import BUSY_TIMEOUT_S, SCHEMA_VERSION, StoreError, unchanged_round_values
from msched.util.text import one_line


def sqlite_file(url: str) -> Path | None:
    """The file of a plain `sqlite:///path` URL (as SQLAlchemy reads it: `sqlite:////abs`, `sqlite:///rel`);
    None for anything else (another database, in-memory, URL options), which the light view leaves to
    SQLAlchemy."""
    prefix = "sqlite:///"
    if not url.startswith(prefix) or "?" in url:
        return None
    rest = url[len(prefix):]
    if rest in ("", ":memory:") or rest.startswith("file:"):
        return None
    return Path(rest).expanduser().absolute()


def open_light_store(config) -> LightStore | None:  # noqa: ANN001 - a Config
    """The light view of the site's store, or None when the SQLAlchemy store must open it (not a SQLite
    file, no file yet, not current: see the module docstring)."""
    path = sqlite_file(config.database_url)
    if path is None or not path.is_file():
        return None
    try:
        store = LightStore(path, config)
    except sqlite3.Error:
        return None
    if not store.current():
        store.dispose()
        return None
    return store


class LightStore:
    """The store of a light round (see the module docstring)."""

    light = True

    def __init__(self, path: Path, config) -> None:  # noqa: ANN001
        self.path = path
        self.config = config
        self.display_url = f"sqlite:///{path}"
        self._full = None
        self._json_columns: set[str] = set()
        self.conn = sqlite3.connect(str(path), timeout=BUSY_TIMEOUT_S, isolation_level=None,
                                    check_same_thread=False)
        self.conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
        self.conn.execute("PRAGMA foreign_keys = ON")
        self.conn.execute("PRAGMA synchronous = NORMAL")

    def current(self) -> bool:
        """Whether the file is msched's, at this SCHEMA_VERSION, in WAL mode, with every column this view
        writes (SQLAlchemy's store adds a missing one when it next opens the file)."""
        try:
            if str(self.conn.execute("PRAGMA journal_mode").fetchone()[0]).lower() != "wal":
                return False
            row = self.conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
            if row is None or str(row[0]) != str(SCHEMA_VERSION):
                return False
            columns = {r[1]: str(r[2]).upper() for r in self.conn.execute("PRAGMA table_info(rounds)")}
            holds = {r[1] for r in self.conn.execute("PRAGMA table_info(holds)")}
        except sqlite3.Error:
            return False
        # the JSON columns as SQLAlchemy declared them in the file (its JSON type: json.dumps text)
        self._json_columns = {name for name, kind in columns.items() if kind == "JSON"}
        return set(self._round_columns()) <= set(columns) and {"kind", "closed_at"} <= holds

    @staticmethod
    def _round_columns() -> list[str]:
        return list(unchanged_round_values(0, SimpleNamespace(est_makespan_s=None, time=0.0, busy_gpus={},
                                                              total_gpus={}, state_key=None, stable_until=None),
                                           0.0, 0, 0))

    # ------------------------------------------------------------------ as msched.store.db.Store
    def check_integrity(self) -> None:
        try:
            rows = [str(r[0]) for r in self.conn.execute("PRAGMA quick_check").fetchmany(3)]
        except sqlite3.Error as exc:
            raise StoreError(f"database {self.display_url} fails PRAGMA quick_check: {one_line(exc)}") from None
        if rows != ["ok"]:
            raise StoreError(f"database {self.display_url} fails PRAGMA quick_check: {one_line('; '.join(rows))}")

    def check_writable(self) -> None:
        try:
            with self.write() as cur:
                cur.execute("UPDATE meta SET value = value WHERE key = 'schema_version'")
        except sqlite3.Error as exc:
            raise StoreError(f"database {self.display_url} is not writable: {one_line(exc)}") from None

    @contextmanager
    def write(self) -> Iterator[sqlite3.Cursor]:
        """One write transaction (BEGIN IMMEDIATE), committed on leaving, rolled back on an exception."""
        cur = self.conn.cursor()
        cur.execute("BEGIN IMMEDIATE")
        try:
            yield cur
        except BaseException:
            cur.execute("ROLLBACK")
            raise
        else:
            cur.execute("COMMIT")
        finally:
            cur.close()

    def full(self):  # noqa: ANN201 - msched.store.db.Store
        """The SQLAlchemy store on the same file (opened once): for a round that is not light."""
        if self._full is None:
            from msched.rounds.reorder import open_site_store

            self._full = open_site_store(self.config)
        return self._full

    def dispose(self) -> None:
        self.conn.close()
        if self._full is not None:
            self._full.dispose()

    # ------------------------------------------------------------------ what a light round reads and writes
    def run_id(self, kind: str, name: str) -> int | None:
        row = self.conn.execute("SELECT id FROM runs WHERE kind = ? AND name = ?", (kind, name)).fetchone()
        return None if row is None else int(row[0])

    def last_planned_round(self, run_id: int) -> SimpleNamespace | None:
        """As msched.store.queries.last_planned_round: the run's latest round recorded whole (not a dry
        run, no error), its columns as attributes (JSON columns decoded)."""
        cur = self.conn.execute("SELECT * FROM rounds WHERE run_id = ? AND dry_run = 0 AND error IS NULL "
                                "ORDER BY time DESC, id DESC LIMIT 1", (run_id,))
        row = cur.fetchone()
        if row is None:
            return None
        values = dict(zip((d[0] for d in cur.description), row, strict=True))
        for col in self._json_columns:
            values[col] = json.loads(values[col]) if values.get(col) is not None else None
        return SimpleNamespace(**values)

    def open_hold_kinds(self) -> list[str]:
        """The kinds of the hold journal's open entries (msched.store.holds.HoldJournal.open_entries)."""
        return [str(r[0]) for r in self.conn.execute("SELECT kind FROM holds WHERE closed_at IS NULL ORDER BY id")]

    def record_unchanged_round(self, run_id: int, last: Any, now: float, pending: int, running: int, *,
                               queue_digest: str | None = None, light: bool = False) -> int:
        values = unchanged_round_values(run_id, last, now, pending, running, queue_digest=queue_digest, light=light)
        for col in self._json_columns & set(values):
            values[col] = json.dumps(values[col])
        cols = list(values)
        with self.write() as cur:
            cur.execute(f"INSERT INTO rounds ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})",
                        [values[c] for c in cols])
            return int(cur.lastrowid)

    def prune_due(self, run_id: int, cutoff: float) -> bool:
        """Whether the run has a round older than `cutoff` for msched.store.retention.prune to fold."""
        return self.conn.execute("SELECT 1 FROM rounds WHERE run_id = ? AND time < ? LIMIT 1",
                                 (run_id, cutoff)).fetchone() is not None
