"""The round's store: the same SQLite file as msched.store.db, through plain sqlite3 (issue 21, sixth
and eighth passes). A round reads the last round's row, the incumbent and the open hold journal entries,
and writes the jobs it ingests, its round row, the decisions that changed and the completions; importing
SQLAlchemy for that, and building its schema objects, cost 0.25 s of CPU per round (BENCHMARKS "Rounds
that settle, seventh pass"), more than all the SQL.

The SQLAlchemy store stays the one owner of the schema: it creates the file, stamps the schema version
and adds columns; this view opens only a file it finds current (`open_light_store`: the stamped
SCHEMA_VERSION, WAL mode, and every column this view writes present, names and JSON columns read from
the file itself), and otherwise the round opens the SQLAlchemy store as before. The rows it writes are
built by msched.store.rows and msched.store.base.unchanged_round_values, as the SQLAlchemy writers
(msched.store.writes, msched.store.retention) build theirs: both leave the same rows. Transactions as
msched.store.db's: autocommit driver, BEGIN IMMEDIATE for writes, the same busy timeout.
The hold journal (msched.store.holds) stays SQLAlchemy's: a round that must replay or record holds
opens the SQLAlchemy store on the same file (`full()`).
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from collections import namedtuple
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from msched.store import rows
from msched.store.base import BUSY_TIMEOUT_S, SCHEMA_VERSION, StoreError, day_of, unchanged_round_values
from msched.util.files import write_atomically
from msched.util.text import one_line

# the jobs columns `incumbent` reads, in this order, and those the round's record compares (`_decision_rows`)
_PENDING_COLUMNS = ("job_id", "id", "planned_type", "est_runtime", "planned_priority", "writes")
_DECISION_COLUMNS = ("planned_type", "est_runtime", "planned_priority", "writes")
# `check_integrity`: the mark beside the database file, and at most this many rounds in a row take a file
# left as the last round left it on trust before one runs quick_check again (an hour at one a minute)
CHECKED_MARK = ".checked"
MARK_VERSION = "msched-checked-1"
CHECK_EVERY = 60


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
        self._checked: int | None = None    # rounds in a row the file was taken on trust (0: checked now)
        self._pending: tuple[int, int, dict[str, tuple]] | None = None    # `incumbent`'s rows (run, data_version)
        self._vouched = False
        self._json: dict[str, set[str]] = {}       # table -> its JSON columns, as the file declares them
        self._row_types: dict[tuple[str, ...], type] = {}
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
            tables = {t: {r[1]: str(r[2]).upper() for r in self.conn.execute(f'PRAGMA table_info("{t}")')}
                      for t in rows.COLUMNS}
        except sqlite3.Error:
            return False
        # the JSON columns as SQLAlchemy declared them in the file (its JSON type: json.dumps text)
        self._json = {t: {name for name, kind in cols.items() if kind == "JSON"} for t, cols in tables.items()}
        return all(set(want) <= set(tables[t]) for t, want in rows.COLUMNS.items()) \
            and set(self._round_columns()) <= set(tables["rounds"])

    @staticmethod
    def _round_columns() -> list[str]:
        return list(unchanged_round_values(0, SimpleNamespace(est_makespan_s=None, time=0.0, busy_gpus={},
                                                              total_gpus={}, state_key=None, stable_until=None),
                                           0.0, 0, 0))

    # ------------------------------------------------------------------ as msched.store.db.Store
    def check_integrity(self) -> None:
        """`PRAGMA quick_check` (msched.store.db.Store.check_integrity), unless the file is as the last
        round left it: CHECKED_MARK beside it holds that round's fingerprint of the file (inode, size,
        modification and change times of the database and a non-empty WAL, taken after its connection
        closed) and how many rounds in a row took it on trust; equal now, and fewer than CHECK_EVERY,
        this round does too (twelfth pass: quick_check reads the whole file, ~10 ms at 5 MB and growing
        with the store, every round). Anything else touching the file (another writer, a reader's
        checkpoint, a copy, a damaged write that changed it) changes the fingerprint; a change that
        leaves all four as they were (the disk itself) is caught within CHECK_EVERY rounds."""
        trusted = self._trusted_rounds()
        if trusted is not None and trusted + 1 < CHECK_EVERY:
            self._checked = trusted + 1
            return
        self._quick_check()
        self._checked = 0

    def _quick_check(self) -> None:
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

    def vouch(self) -> None:
        """The round that checked the file (or took it on trust) ended without an error: `dispose` leaves
        the mark by which the next round may take the file on trust (`check_integrity`)."""
        self._vouched = self._checked is not None

    def dispose(self) -> None:
        self.conn.close()
        if self._full is not None:
            self._full.dispose()
        mark = self._mark_path()
        try:
            if self._vouched:           # after the close: its checkpoint is part of what the round left
                write_atomically(mark, f"{MARK_VERSION} {self._fingerprint()} {self._checked}\n")
            elif self._checked is not None:
                mark.unlink(missing_ok=True)        # a round that failed after the check: check next time
        except OSError:
            pass                        # no mark: the next round runs quick_check

    def _mark_path(self) -> Path:
        return self.path.with_name(self.path.name + CHECKED_MARK)

    def _fingerprint(self) -> str:
        """The database file's and its WAL's (when not empty) inode, size, modification and change times."""
        parts = []
        for f in (self.path, self.path.with_name(self.path.name + "-wal")):
            try:
                st = os.stat(f)
            except FileNotFoundError:
                continue
            if f != self.path and not st.st_size:
                continue                # opening the file makes an empty WAL, closing it removes it
            parts.append(f"{st.st_ino}:{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}")
        return "/".join(parts)

    def _trusted_rounds(self) -> int | None:
        """How many rounds in a row took the file on trust when it is as the last round left it; else None."""
        try:
            version, fingerprint, count = self._mark_path().read_text(encoding="ascii").split()
            rounds = int(count)
        except (OSError, ValueError, UnicodeDecodeError):
            return None
        if version != MARK_VERSION or fingerprint != self._fingerprint() or not 0 <= rounds < CHECK_EVERY:
            return None
        return rounds

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
        for col in self._json["rounds"]:
            values[col] = json.loads(values[col]) if values.get(col) is not None else None
        return SimpleNamespace(**values)

    def open_hold_kinds(self) -> list[str]:
        """The kinds of the hold journal's open entries (msched.store.holds.HoldJournal.open_entries)."""
        return [str(r[0]) for r in self.conn.execute("SELECT kind FROM holds WHERE closed_at IS NULL ORDER BY id")]

    def record_unchanged_round(self, run_id: int, last: Any, now: float, pending: int, running: int, *,
                               queue_digest: str | None = None, light: bool = False) -> int:
        values = unchanged_round_values(run_id, last, now, pending, running, queue_digest=queue_digest, light=light)
        with self.write() as cur:
            return self._insert(cur, "rounds", [values])

    def prune_due(self, run_id: int, cutoff: float) -> bool:
        """Whether the run has a round older than `cutoff` for msched.store.retention.prune to fold."""
        return self.conn.execute("SELECT 1 FROM rounds WHERE run_id = ? AND time < ? LIMIT 1",
                                 (run_id, cutoff)).fetchone() is not None

    # ------------------------------------------------------------------ what a full round reads and writes
    # (as msched.store.db.Store.run_id, msched.store.writes, msched.store.queries and msched.store.retention)
    def ensure_run(self, kind: str, name: str, policy: str = "msched", gpus: dict[str, int] | None = None) -> int:
        """As Store.run_id: the run's id, created on first use; `gpus` fills an empty GPU inventory."""
        with self.write() as cur:
            row = cur.execute("SELECT id, gpus FROM runs WHERE kind = ? AND name = ?", (kind, name)).fetchone()
            if row is None:
                return self._insert(cur, "runs", [{"kind": kind, "name": name, "policy": policy,
                                                   "created_at": time.time(), "gpus": dict(gpus or {})}])
            if gpus and self._decode("runs", "gpus", row[1]) != dict(gpus):
                cur.execute("UPDATE runs SET gpus = ? WHERE id = ?", (self._encode("runs", "gpus", dict(gpus)), row[0]))
            return int(row[0])

    def last_round_time(self, run_id: int) -> float | None:
        row = self.conn.execute("SELECT max(time) FROM rounds WHERE run_id = ?", (run_id,)).fetchone()
        return None if row is None or row[0] is None else float(row[0])

    def incumbent(self, run_id: int):  # noqa: ANN201 - msched.rounds.settle.Incumbent
        """As msched.store.writes.load_incumbent. The same read keeps the pending jobs' rows as the round's
        record compares its plan with them (`_decision_rows`: twelfth pass, no second read of ~10,000
        rows at 10,000 pending), with SQLite's data_version to tell whether another connection wrote since."""
        version = self._data_version()
        found = self.conn.execute(f"SELECT {', '.join(_PENDING_COLUMNS)} FROM jobs WHERE run_id = ? "
                                  "AND state = 'PENDING'", (run_id,)).fetchall()
        self._pending = (run_id, version, {r[0]: r for r in found})
        return rows.incumbent_of((r[0], r[2], r[4]) for r in found if r[4] is not None)

    def _data_version(self) -> int:
        return int(self.conn.execute("PRAGMA data_version").fetchone()[0])

    def _decision_rows(self, cur: sqlite3.Cursor, run_id: int, job_ids: Sequence[str]) -> dict[str, Any]:
        """`_existing(cur, run_id, job_ids, DECISION_COLUMNS)`, from the rows `incumbent` read where no other
        connection wrote since and this one wrote no jobs row (the same rows, the same values); the jobs
        it did not read (not pending there) are read here."""
        kept, self._pending = self._pending, None
        if kept is None or kept[0] != run_id or kept[1] != self._data_version():
            return self._existing(cur, run_id, job_ids, _DECISION_COLUMNS)
        kind = self._row_type(("job_id", "id", *_DECISION_COLUMNS))
        out: dict[str, Any] = {}
        missing = []
        for jid in job_ids:
            r = kept[2].get(jid)
            if r is None:
                missing.append(jid)
                continue
            out[jid] = kind(r[0], r[1], r[2], self._decode("jobs", "est_runtime", r[3]), r[4], r[5])
        if missing:
            out.update(self._existing(cur, run_id, missing, _DECISION_COLUMNS))
        return out

    def active_job_ids(self, run_id: int) -> set[str]:
        return {str(r[0]) for r in self.conn.execute(
            "SELECT job_id FROM jobs WHERE run_id = ? AND state IN ('PENDING', 'RUNNING')", (run_id,))}

    def ingest(self, run_id: int, jobs: Iterable[Any], now: float) -> int:
        """As msched.store.writes.ingest_jobs, in its own transaction."""
        with self.write() as cur:
            return self._ingest(cur, run_id, rows.tagged(jobs), now)

    def record(self, run_id: int, result: Any, tracked: Sequence[Any], now: float, vanished: Sequence[str], *,
               unchanged: tuple | None = None, state_key: str | None = None,
               queue_digest: str | None = None) -> tuple[int, int, int]:
        """One transaction: the round's rows (msched.store.writes.record_round, or record_unchanged_round
        for `unchanged`: (the last round's row, pending, running)), the completions of the `tracked` jobs
        and the `vanished` ones. Returns (the round's id, completion rows changed, jobs marked vanished)."""
        with self.write() as cur:
            if unchanged:
                round_id = self._insert(cur, "rounds", [unchanged_round_values(
                    run_id, unchanged[0], now, *unchanged[1:], queue_digest=queue_digest)])
            else:
                round_id = self._record_round(cur, run_id, result, state_key=state_key, queue_digest=queue_digest)
            done = self._completions(cur, run_id, tracked, now)
            lost = 0
            if vanished:
                gone = [{"id": r.id, "state": "UNKNOWN"} for r in self._existing(cur, run_id, vanished, ()).values()]
                self._update_jobs(cur, gone)
                lost = len(gone)
        return round_id, done, lost

    def prune(self, run_id: int, now: float, retention_s: float, *, batch: int = 500) -> int:
        """As msched.store.retention.prune, in its own transaction."""
        cutoff = day_of(now - retention_s)
        with self.write() as cur:
            found = self._select(cur, "SELECT * FROM rounds WHERE run_id = ? AND time < ? ORDER BY time LIMIT ?",
                                 (run_id, cutoff, batch), "rounds")
            if not found:
                return 0
            by_day: dict[float, list[Any]] = {}
            for r in found:
                by_day.setdefault(day_of(r.time), []).append(r)
            for day, rs in by_day.items():
                have = self._select(cur, "SELECT * FROM round_days WHERE run_id = ? AND day = ? LIMIT 1",
                                    (run_id, day), "round_days")
                agg = rows.fold(dict(have[0]._asdict()) if have else rows.new_day(run_id, day, rs[0]), rs)
                if have:
                    self._update(cur, "round_days", [agg])
                else:
                    self._insert(cur, "round_days", [agg])
            ids = [r.id for r in found]
            for k in range(0, len(ids), 900):
                chunk = ids[k:k + 900]
                marks = ", ".join("?" * len(chunk))
                cur.execute(f"DELETE FROM decisions WHERE round_id IN ({marks})", chunk)
                cur.execute(f"DELETE FROM rounds WHERE id IN ({marks})", chunk)
        return len(ids)

    # ------------------------------------------------------------------ the writers' parts
    def _ingest(self, cur: sqlite3.Cursor, run_id: int, tagged: dict[str, tuple[Any, Any]], now: float) -> int:
        if not tagged:
            return 0
        known = self._existing(cur, run_id, list(tagged), ("state",))
        new_rows, changed = rows.ingest_rows(run_id, tagged, known, now)
        self._insert(cur, "jobs", new_rows)
        self._update_jobs(cur, changed)
        names = rows.referenced(tagged)
        if names:
            have: dict[str, str] = {}
            for k in range(0, len(names), 900):
                chunk = names[k:k + 900]
                have.update((str(n), g) for n, g in cur.execute(
                    f'SELECT name, "group" FROM reference_models WHERE name IN ({", ".join("?" * len(chunk))})', chunk))
            inserts, updates = rows.reference_changes(tagged, have)
            self._insert(cur, "reference_models", inserts)
            cur.executemany('UPDATE reference_models SET "group" = ? WHERE name = ?',
                            [(u["group"], u["name"]) for u in updates])
        return len(new_rows)

    def _completions(self, cur: sqlite3.Cursor, run_id: int, jobs: Iterable[Any], now: float | None) -> int:
        tagged = rows.tagged(jobs)
        if not tagged:
            return 0
        known = self._existing(cur, run_id, list(tagged), ("state", "start_time", "end_time", "actual_type"))
        missing = {jid: jt for jid, jt in tagged.items() if jid not in known}
        changed = self._ingest(cur, run_id, missing, rows.missing_first_seen(missing, now)) if missing else 0
        updates = rows.completion_updates(tagged, known)
        self._update_jobs(cur, updates)
        return changed + len(updates)

    def _record_round(self, cur: sqlite3.Cursor, run_id: int, result: Any, *, state_key: str | None,
                      queue_digest: str | None) -> int:
        writes = rows.update_counts(result)
        values = rows.round_values(run_id, result, writes, state_key=state_key, queue_digest=queue_digest)
        decisions = rows.planned_decisions(result)
        known = self._decision_rows(cur, run_id, [str(d.job_id) for d in decisions]) if decisions else {}
        changed, job_rows = rows.decision_changes(decisions, getattr(result, "incumbent", None), writes, known)
        values["decision_rows"] = len(changed)
        round_id = self._insert(cur, "rounds", [values])
        self._insert(cur, "decisions", [{"round_id": round_id, **r} for r in changed])
        self._update_jobs(cur, job_rows)
        seen = rows.seen_pairs(getattr(result.snapshot, "shard_gpus", ()))
        if seen:
            firsts = sorted({str(g.jobs[0]) for g in seen})
            have = {(str(a), str(b)) for a, b in cur.execute(
                f"SELECT job_a, job_b FROM packed_pairs WHERE run_id = ? AND job_a IN ({', '.join('?' * len(firsts))})",
                [run_id, *firsts])}
            self._insert(cur, "packed_pairs", rows.pair_rows(run_id, seen, have, result.time))
        return round_id

    def _existing(self, cur: sqlite3.Cursor, run_id: int, job_ids: Sequence[str], columns: Sequence[str]
                  ) -> dict[str, Any]:
        """As msched.store.writes._existing: this run's jobs rows by Slurm id (job_id, id and `columns`)."""
        names = ("job_id", "id", *columns)
        out: dict[str, Any] = {}
        ids = list(job_ids)
        for k in range(0, len(ids), 900):
            chunk = ids[k:k + 900]
            sql = (f"SELECT {', '.join(names)} FROM jobs WHERE run_id = ? "
                   f"AND job_id IN ({', '.join('?' * len(chunk))})")
            for row in self._select(cur, sql, [run_id, *chunk], "jobs", names):
                out[row.job_id] = row
        return out

    def _select(self, cur: sqlite3.Cursor, sql: str, params: Sequence[Any], table: str,
                names: Sequence[str] | None = None) -> list[Any]:
        """Rows as named tuples, the table's JSON columns decoded."""
        c = cur.execute(sql, params)
        names = tuple(names) if names is not None else tuple(d[0] for d in c.description)
        kind = self._row_type(names)
        json_at = [i for i, n in enumerate(names) if n in self._json[table]]
        out = []
        for raw in c.fetchall():
            if json_at:
                raw = list(raw)
                for i in json_at:
                    raw[i] = json.loads(raw[i]) if raw[i] is not None else None
            out.append(kind(*raw))
        return out

    def _row_type(self, names: tuple[str, ...]) -> type:
        """The named tuple of rows with these columns, one per column set."""
        kind = self._row_types.get(names)
        if kind is None:
            kind = self._row_types[names] = namedtuple("Row", names)  # noqa: PYI024 - one per column set
        return kind

    def _encode(self, table: str, column: str, value: Any) -> Any:
        return json.dumps(value) if column in self._json[table] else value

    def _decode(self, table: str, column: str, value: Any) -> Any:
        return json.loads(value) if column in self._json[table] and value is not None else value

    def _insert(self, cur: sqlite3.Cursor, table: str, values: Sequence[dict[str, Any]]) -> int:
        """INSERT the rows (dicts of one set of columns); returns the last row's id (0: none)."""
        if not values:
            return 0
        if table == "jobs":
            self._pending = None
        cols = list(values[0])
        sql = f'INSERT INTO "{table}" ({", ".join(f"{chr(34)}{c}{chr(34)}" for c in cols)}) ' \
              f'VALUES ({", ".join("?" * len(cols))})'
        params = [[self._encode(table, c, v[c]) for c in cols] for v in values]
        if len(params) == 1:
            cur.execute(sql, params[0])
            return int(cur.lastrowid)
        cur.executemany(sql, params)
        return 0

    def _update(self, cur: sqlite3.Cursor, table: str, values: Sequence[dict[str, Any]]) -> None:
        """UPDATE rows by id, one executemany per set of columns (as msched.store.writes._update_by_id)."""
        groups: dict[tuple[str, ...], list[dict[str, Any]]] = {}
        for v in values:
            groups.setdefault(tuple(sorted(k for k in v if k != "id")), []).append(v)
        for keys, group in groups.items():
            sets = ", ".join(f'"{k}" = ?' for k in keys)
            cur.executemany(f'UPDATE "{table}" SET {sets} WHERE id = ?',
                            [[*(self._encode(table, k, v[k]) for k in keys), v["id"]] for v in group])

    def _update_jobs(self, cur: sqlite3.Cursor, values: Sequence[dict[str, Any]]) -> None:
        if values:
            self._pending = None            # the rows `incumbent` kept are not the file's any more
        self._update(cur, "jobs", values)
