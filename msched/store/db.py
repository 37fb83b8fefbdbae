"""The database connection: one `Store` per process, SQLite by default, any SQLAlchemy URL works.

Why it looks like this:
- Several administrator commands (a cron `msched reorder`, a `msched sim --db`, `msched calibrate`) may
  write at once. SQLite's WAL mode lets readers run beside one writer, but a transaction that starts
  as a reader and later writes fails at once with "database is locked" when another writer got there
  first (the busy handler cannot help a lock upgrade). So every write transaction starts with
  `BEGIN IMMEDIATE`, which takes the write lock up front and waits on the busy timeout instead.
  Python's sqlite3 driver issues its own BEGIN, so it is switched to autocommit and SQLAlchemy's
  `begin` event emits the BEGIN we want (SQLAlchemy's documented pysqlite recipe).
- The schema is created once, under an flock on a sibling lock file, and stamped with a schema
  version in `meta`; a database written by a newer msched is refused with a clear message rather
  than misread. Columns added later (schema changes are additive) are added on open.
- The database and its directory get modest permissions (0640 / 0750, lock file 0600): it holds
  users' job names and models, and only the administrator's commands write it.
"""

from __future__ import annotations

import fcntl
import os
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import create_engine, event, inspect, select, text
from sqlalchemy.engine import URL, Engine, make_url
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.pool import StaticPool

from msched.store.base import BUSY_TIMEOUT_S, SCHEMA_VERSION, StoreError
from msched.store.schema import Base, Meta, Run
from msched.util.text import one_line

__all__ = ["BUSY_TIMEOUT_S", "SCHEMA_VERSION", "Store", "StoreError", "open_store"]
DB_MODE = 0o640
DIR_MODE = 0o750
LOCK_MODE = 0o600
_WRITE_OPTION = "msched_write"


def _display(url: URL) -> str:
    return url.render_as_string(hide_password=True)


def _sqlite_path(url: URL) -> Path | None:
    """The file behind a SQLite URL; None for other databases and for in-memory SQLite."""
    if url.get_backend_name() != "sqlite":
        return None
    db = url.database or ""
    if db in ("", ":memory:") or db.startswith("file:"):
        return None
    return Path(db).expanduser().absolute()


def _prepare_file(path: Path) -> None:
    """Create the directory (0750) and an empty database file (0640) ourselves, so SQLite never
    creates them with the process umask's wider defaults. Existing files keep their modes."""
    parent = path.parent
    if not parent.exists():
        parent.mkdir(parents=True, exist_ok=True)
        os.chmod(parent, DIR_MODE)
    if not path.exists():
        fd = os.open(path, os.O_RDWR | os.O_CREAT, DB_MODE)
        os.close(fd)
        os.chmod(path, DB_MODE)


@contextmanager
def _flock(path: Path) -> Iterator[None]:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, LOCK_MODE)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def _install_sqlite_hooks(engine: Engine, busy_timeout_s: float = BUSY_TIMEOUT_S) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection, _record) -> None:  # noqa: ANN001
        # take BEGIN away from the driver; SQLAlchemy's "begin" event below issues it
        dbapi_connection.isolation_level = None
        cur = dbapi_connection.cursor()
        cur.execute(f"PRAGMA busy_timeout = {int(busy_timeout_s * 1000)}")
        cur.execute("PRAGMA foreign_keys = ON")
        cur.execute("PRAGMA synchronous = NORMAL")
        cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn) -> None:  # noqa: ANN001
        mode = "IMMEDIATE" if conn.get_execution_options().get(_WRITE_OPTION) else "DEFERRED"
        conn.exec_driver_sql(f"BEGIN {mode}")


class Store:
    """The msched database. `with store.write() as s:` is one write transaction (BEGIN IMMEDIATE on
    SQLite), committed on leaving the block and rolled back on an exception; `with store.read() as s:`
    a read-only one.

    `create=False` opens an existing database only (for readers such as `msched jobs`): a missing
    database is a StoreError instead of a new file.
    """

    def __init__(self, url: str, *, create: bool = True, echo: bool = False,
                 busy_timeout_s: float = BUSY_TIMEOUT_S):
        try:
            self.url = make_url(url)
        except Exception as exc:  # noqa: BLE001 - SQLAlchemy raises several kinds for a bad URL
            raise StoreError(f"invalid database URL {url!r}: {exc}") from None
        self.display_url = _display(self.url)
        self.path = _sqlite_path(self.url)
        self.is_sqlite = self.url.get_backend_name() == "sqlite"
        kwargs: dict = {"echo": echo, "future": True}
        if self.is_sqlite:
            kwargs["connect_args"] = {"timeout": busy_timeout_s, "check_same_thread": False}
            if self.path is None:       # in-memory: one shared connection, or every session sees an empty db
                kwargs["poolclass"] = StaticPool
        if self.path is not None:
            if create:
                try:
                    _prepare_file(self.path)
                except OSError as exc:
                    raise StoreError(f"cannot create database {self.path}: {exc.strerror}") from None
            elif not self.path.exists():
                raise StoreError(f"database {self.path} does not exist (run `msched reorder` once to create it)")
        try:
            self.engine = create_engine(self.url, **kwargs)
        except Exception as exc:  # noqa: BLE001 - missing driver, bad options
            raise StoreError(f"cannot open database {self.display_url}: {exc}") from None
        if self.is_sqlite:
            _install_sqlite_hooks(self.engine, busy_timeout_s)
        self._sessions = sessionmaker(bind=self.engine, expire_on_commit=False)
        self._local = threading.local()
        self._open(create)

    # ------------------------------------------------------------------ schema
    @property
    def lock_path(self) -> Path | None:
        return None if self.path is None else self.path.with_name(self.path.name + ".lock")

    def _open(self, create: bool) -> None:
        try:
            if self.path is not None and create:
                with _flock(self.lock_path):
                    self._ensure_schema(create)
            else:
                self._ensure_schema(create)
        except StoreError:
            raise
        except OSError as exc:
            raise StoreError(f"cannot lock database {self.path}: {exc.strerror}") from None
        except (SQLAlchemyError, sqlite3.Error) as exc:
            raise StoreError(f"cannot open database {self.display_url}: {one_line(exc)}") from None

    def _ensure_schema(self, create: bool) -> None:
        if self.is_sqlite and self.path is not None and create:
            with self.engine.connect() as conn:
                # on the driver's connection: SQLAlchemy would wrap the statement in a transaction,
                # and the journal mode cannot change inside one
                cur = conn.connection.dbapi_connection.cursor()
                mode = cur.execute("PRAGMA journal_mode = WAL").fetchone()[0]
                cur.close()
                if str(mode).lower() != "wal":
                    raise StoreError(f"database {self.path}: cannot switch to WAL journal mode (got {mode})")
        version = self.schema_version()
        if version is not None and version > SCHEMA_VERSION:
            raise StoreError(
                f"database {self.display_url} has schema version {version}, newer than this msched "
                f"supports ({SCHEMA_VERSION}); upgrade msched")
        if version == SCHEMA_VERSION and not self._missing_columns():
            return
        if not create:
            if version is None:
                raise StoreError(f"database {self.display_url} holds no msched schema")
            return   # an older schema: readable; the next writer upgrades it
        with self.write() as session:
            conn = session.connection()
            Base.metadata.create_all(conn)
            self._add_missing_columns(conn)
            session.merge(Meta(key="schema_version", value=str(SCHEMA_VERSION)))
            if session.get(Meta, "created_at") is None:
                session.add(Meta(key="created_at", value=f"{time.time():.3f}"))

    def schema_version(self) -> int | None:
        """The version stamped in `meta`, or None for a database without msched's schema."""
        with self.engine.connect() as conn:
            if not inspect(conn).has_table(Meta.__tablename__):
                return None
            raw = conn.execute(select(Meta.value).where(Meta.key == "schema_version")).scalar()
        try:
            return int(raw) if raw is not None else None
        except ValueError:
            raise StoreError(f"database {self.display_url}: unreadable schema_version {raw!r}") from None

    def _missing_columns(self, conn=None) -> list[tuple[str, object]]:  # noqa: ANN001
        def scan(c) -> list[tuple[str, object]]:  # noqa: ANN001
            insp = inspect(c)
            out = []
            for table in Base.metadata.sorted_tables:
                if not insp.has_table(table.name):
                    out.append((table.name, None))
                    continue
                have = {col["name"] for col in insp.get_columns(table.name)}
                out.extend((table.name, col) for col in table.columns if col.name not in have)
            return out
        if conn is not None:
            return scan(conn)
        with self.engine.connect() as c:
            return scan(c)

    def _add_missing_columns(self, conn) -> None:  # noqa: ANN001
        """Additive schema changes: a column added to schema.py appears in older databases (nullable)."""
        for table, col in self._missing_columns(conn):
            if col is None:
                continue   # create_all made the table
            coltype = col.type.compile(dialect=conn.dialect)
            conn.exec_driver_sql(f'ALTER TABLE "{table}" ADD COLUMN "{col.name}" {coltype}')

    # ------------------------------------------------------------ transactions
    @contextmanager
    def write(self) -> Iterator[Session]:
        """One write transaction: BEGIN IMMEDIATE (SQLite), commit on success, rollback on error.

        Not re-entrant: a second write() inside the first would wait for the first's lock until the
        busy timeout, so it is refused at once (call store.run_id() before opening the block)."""
        if getattr(self._local, "writing", False):
            raise StoreError("nested Store.write() in one thread: it would wait on its own lock")
        self._local.writing = True
        try:
            with self._write_session() as session:
                yield session
        finally:
            self._local.writing = False

    @contextmanager
    def _write_session(self) -> Iterator[Session]:
        with self.engine.connect() as conn:
            conn.execution_options(**{_WRITE_OPTION: True})
            session = Session(bind=conn, expire_on_commit=False)
            try:
                session.connection()     # BEGIN IMMEDIATE now: take the write lock before reading
                yield session
                session.commit()
            except BaseException:
                session.rollback()
                raise
            finally:
                session.close()

    @contextmanager
    def read(self) -> Iterator[Session]:
        """A read transaction (a consistent snapshot in WAL mode); anything written is rolled back."""
        session = self._sessions()
        try:
            yield session
        finally:
            session.close()      # ends the transaction; loaded objects stay readable (detached)

    # ------------------------------------------------------------------- runs
    def run_id(self, kind: str, name: str, policy: str = "msched", gpus: dict[str, int] | None = None) -> int:
        """The id of the run (kind, name), created on first use. `gpus` fills an empty GPU inventory."""
        with self.write() as session:
            run = session.scalars(select(Run).where(Run.kind == kind, Run.name == name)).first()
            if run is None:
                run = Run(kind=kind, name=name, policy=policy, created_at=time.time(), gpus=dict(gpus or {}))
                session.add(run)
                session.flush()
            elif gpus and dict(run.gpus or {}) != dict(gpus):
                run.gpus = dict(gpus)
            return run.id

    def check_writable(self) -> None:
        """Raise StoreError unless a write transaction can be opened now (reorder checks this before
        it changes anything in Slurm)."""
        try:
            with self.write() as session:
                session.execute(text("UPDATE meta SET value = value WHERE key = 'schema_version'"))
        except SQLAlchemyError as exc:
            raise StoreError(f"database {self.display_url} is not writable: {one_line(exc)}") from None

    def check_integrity(self) -> None:
        """Raise StoreError (one printable line) unless SQLite's `PRAGMA quick_check` passes: the reorderer
        must not keep writing into a damaged file (issue 13). quick_check reads every page but skips
        the index cross-checks of integrity_check (O(N) instead of O(N log N))."""
        if not self.is_sqlite:
            return
        try:
            with self.engine.connect() as conn:
                rows = [str(r[0]) for r in conn.exec_driver_sql("PRAGMA quick_check").fetchmany(3)]
        except (SQLAlchemyError, sqlite3.Error) as exc:
            raise StoreError(f"database {self.display_url} fails PRAGMA quick_check: {one_line(exc)}") from None
        if rows != ["ok"]:
            raise StoreError(f"database {self.display_url} fails PRAGMA quick_check: {one_line('; '.join(rows))}")

    def dispose(self) -> None:
        self.engine.dispose()


def open_store(config=None, *, create: bool = True) -> Store:  # noqa: ANN001
    """The Store named by the site configuration (`database_url`)."""
    if config is None:
        from msched.config import load_config
        config = load_config()
    return Store(config.database_url, create=create)
