"""`msched reorder`'s round loop without click (issue 21, sixth pass): cron runs `msched reorder` every
minute, and most of those rounds are light; `msched.cli.main` calls `run` directly for the plain forms
(`msched reorder [--config F] [-v] [--backend B] [--objective O]`), so such a round never imports click,
and a light one never SQLAlchemy either (msched.store.light). Everything else goes through click
(msched.commands.reorder_cmd), which calls the same `run`.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import time

from msched.config import ConfigError, load_config

LOG_FORMAT = "%(asctime)s msched-reorder[%(process)d] %(levelname)s %(message)s"


class CommandError(Exception):
    """A usage or setup error, one line: click's `Error: ...` and exit status 1."""


def _setup_logging(verbose: bool) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(LOG_FORMAT, datefmt="%Y-%m-%dT%H:%M:%S%z"))
    root = logging.getLogger("msched")
    root.handlers[:] = [handler]
    root.setLevel(logging.DEBUG if verbose else logging.INFO)
    root.propagate = False


def run(*, dry_run: bool = False, every: float | None = None, objective: str | None = None,
        backend: str | None = None, release: bool = False, config_file: str | None = None,
        verbose: bool = False) -> None:
    """One round, or one every `every` seconds (see `msched reorder --help`). Raises CommandError for a
    usage or setup error and SystemExit(1) for a failed round."""
    if release and (dry_run or every):
        raise CommandError("--release runs once and cannot be combined with --dry-run or --every")
    _setup_logging(verbose)
    log = logging.getLogger("msched.rounds.reorder")
    try:
        config = load_config(config_file)
    except ConfigError as exc:
        raise CommandError(str(exc)) from None

    from msched.rounds.reorder import (
        LockBusy,
        Reorderer,
        ReorderError,
        round_lock,
        wait_interval,
    )
    from msched.slurm import SlurmError, get_client
    from msched.store.base import StoreError

    try:
        client = get_client(backend or config.backend, config=config)
    except (SlurmError, ValueError) as exc:
        raise CommandError(str(exc)) from None

    def _terminate(_sig, _frame) -> None:  # noqa: ANN001
        raise KeyboardInterrupt   # SIGTERM (kill, systemd stop) ends like Ctrl-C: between Slurm calls

    signal.signal(signal.SIGTERM, _terminate)

    def one_round() -> bool:
        """True when a round ran; False when another holds the lock."""
        try:
            with round_lock(config.lock_path):
                store = None if dry_run else _release_store(config, log) if release else _round_store(config)
                try:
                    reorderer = Reorderer(config, client, store, objective=objective)
                    if release:
                        released = reorderer.release_all()
                        log.info("released %d managed job(s) to Slurm's own priorities", len(released))
                        return True
                    outcome = reorderer.round(dry_run=dry_run)
                finally:
                    if store is not None:
                        store.dispose()
        except LockBusy as exc:
            log.info("%s; not running a second round", exc)
            return False
        except StoreError as exc:
            log.error("%s; nothing changed in Slurm", exc)
            raise SystemExit(1) from None
        except (ReorderError, ConfigError, *_perf_table_error()) as exc:
            log.error("%s", exc)
            raise SystemExit(1) from None
        except PermissionError as exc:
            log.error("cannot take the reorder lock %s: %s; nothing changed in Slurm", config.lock_path, exc.strerror)
            raise SystemExit(1) from None
        except KeyboardInterrupt:
            raise
        except Exception as exc:  # noqa: BLE001 - a bug must not spill a traceback into the cron log
            log.error("round failed: %s: %s; every update already written leaves a valid queue "
                      "(run with -v for the traceback)", type(exc).__name__, str(exc).splitlines()[0] if str(exc) else "")
            log.debug("traceback", exc_info=True)
            raise SystemExit(1) from None
        log.info("%s", outcome.summary())
        if dry_run:
            print_plan(outcome.result)
        return True

    if not every:
        one_round()
        return
    log.info("reordering every %gs (pid %d); Ctrl-C stops", every, os.getpid())
    try:
        while True:
            started = time.monotonic()
            try:
                one_round()
            except SystemExit as exc:
                # a failed round (Slurm down, database locked out) is logged; the loop keeps going
                log.info("round failed (exit %s); next try in %gs", exc.code, every)
            wait_interval(every, started)
    except KeyboardInterrupt:
        log.info("stopped")


def _perf_table_error() -> tuple[type[Exception], ...]:
    """PerfTableError when the performance table's module is loaded (a round that planned), else nothing:
    a light round never loads it (nor anything of the planning core), so it cannot have raised one."""
    module = sys.modules.get("msched.estimate.perf_table")
    return (module.PerfTableError,) if module is not None else ()


def _release_store(config, log):  # noqa: ANN001, ANN202
    """The store for --release (its hold journal), or None with a warning: the off switch must work
    without the database, at the price of no journal for this run."""
    from msched.rounds.reorder import open_site_store
    from msched.store.db import StoreError

    store = None
    try:
        store = open_site_store(config)
        store.check_integrity()
        store.check_writable()
        return store
    except StoreError as exc:
        if store is not None:
            store.dispose()
        log.warning("%s: releasing without the hold journal (a kill now could leave a job held)", exc)
        return None


def _round_store(config):  # noqa: ANN001, ANN202
    """The round's store: the light view (plain sqlite3, msched.store.light) where the site's SQLite file
    is current, else the SQLAlchemy store; a round that turns out not light opens the latter itself."""
    from msched.rounds.reorder import open_site_store
    from msched.store.light import open_light_store

    return open_light_store(config) or open_site_store(config)


def print_plan(result) -> None:  # noqa: ANN001
    from msched.commands.reorder_cmd import print_plan as show

    show(result)
