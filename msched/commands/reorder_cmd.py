"""`msched reorder`: re-plan the pending queue (cron every minute, or `--every 60`).

Exit status: 0 after a round (or when another round holds the lock: cron overlaps are normal),
1 when Slurm is unreachable or the database cannot be written (one line on stderr; nothing changed in
Slurm unless the line says otherwise), 2 for bad options.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import time

import click

from msched.config import BACKENDS, OBJECTIVES, ConfigError, load_config

LOG_FORMAT = "%(asctime)s msched-reorder[%(process)d] %(levelname)s %(message)s"


def _setup_logging(verbose: bool) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(LOG_FORMAT, datefmt="%Y-%m-%dT%H:%M:%S%z"))
    root = logging.getLogger("msched")
    root.handlers[:] = [handler]
    root.setLevel(logging.DEBUG if verbose else logging.INFO)
    root.propagate = False


@click.command("reorder")
@click.option("--dry-run", is_flag=True, help="Print the plan as a table; change nothing (Slurm, database, free-time file).")
@click.option("--every", type=click.FloatRange(min=1.0), default=None, metavar="SECONDS",
              help="Run a round every SECONDS until interrupted (default: one round).")
@click.option("--objective", type=click.Choice(OBJECTIVES), default=None,
              help="What the plan optimises: balanced (mean JCT, the makespan kept within 25% of its best; "
                   "a batch submitted together: the makespan first), makespan or jct. Default: config (balanced).")
@click.option("--backend", type=click.Choice(BACKENDS), default=None, help="Slurm client backend. Default: config.")
@click.option("--release", is_flag=True,
              help="Hand every managed job back to Slurm's own priorities and drop msched's type constraint.")
@click.option("--config", "config_file", type=click.Path(dir_okay=False), default=None,
              help="Site configuration file (default: $MSCHED_CONFIG or /etc/msched/msched.toml).")
@click.option("-v", "--verbose", is_flag=True, help="Also log every update written (or, with --dry-run, that would be).")
def reorder(dry_run: bool, every: float | None, objective: str | None, backend: str | None, release: bool,
            config_file: str | None, verbose: bool) -> None:
    """Re-plan the pending queue: each msub job's priority and GPU type."""
    if release and (dry_run or every):
        raise click.UsageError("--release runs once and cannot be combined with --dry-run or --every")
    _setup_logging(verbose)
    log = logging.getLogger("msched.rounds.reorder")
    try:
        config = load_config(config_file)
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None

    from msched.rounds.reorder import (
        LockBusy,
        Reorderer,
        ReorderError,
        open_site_store,
        round_lock,
        wait_interval,
    )
    from msched.slurm import SlurmError, get_client
    from msched.store.db import StoreError

    try:
        client = get_client(backend or config.backend, config=config)
    except (SlurmError, ValueError) as exc:
        raise click.ClickException(str(exc)) from None

    def _terminate(_sig, _frame) -> None:  # noqa: ANN001
        raise KeyboardInterrupt   # SIGTERM (kill, systemd stop) ends like Ctrl-C: between Slurm calls

    signal.signal(signal.SIGTERM, _terminate)

    def one_round() -> bool:
        """True when a round ran; False when another holds the lock."""
        try:
            with round_lock(config.lock_path):
                store = None if dry_run else _release_store(config, log) if release else open_site_store(config)
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


def _fmt_s(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    return f"{seconds / 3600:.1f}h"


def print_plan(result) -> None:  # noqa: ANN001
    """The round's plan as a rich table, highest priority first: what would change and why."""
    from rich.console import Console
    from rich.table import Table

    plan = result.plan
    pending = {p.job_id: p for p in result.snapshot.pending}
    jobs = {j.job_id: j for j in (getattr(result, "jobs", None) or [])}
    decisions = sorted(plan.decisions if plan is not None else [], key=lambda d: -d.priority)
    now = result.time
    table = Table(title=f"msched plan ({plan.policy if plan is not None else '-'}): "
                        f"{len(decisions)} managed pending job(s)", show_lines=False)
    for col in ("#", "job", "user", "model", "group", "priority", "gpu type", "est start", "est runtime"):
        table.add_column(col, justify="right" if col in ("#", "priority", "est start") else "left")
    for rank, d in enumerate(decisions, 1):
        p = pending.get(d.job_id)
        j = jobs.get(d.job_id)
        tag = j.tag if j is not None else None
        cur_prio = p.priority if p is not None else None
        prio = str(d.priority) if cur_prio in (None, d.priority) else f"{cur_prio} -> {d.priority}"
        new_types = "|".join(d.gpu_types) or "(any)"
        cur_types = "|".join(p.current_types) if p is not None and p.current_types else "(any)"
        pinned = p is not None and p.pinned_type
        types = f"{new_types} (pinned)" if pinned else (new_types if cur_types == new_types or not d.gpu_types
                                                       else f"{cur_types} -> {new_types}")
        est = " ".join(f"{t}:{_fmt_s(v)}" for t, v in sorted(dict(d.est_runtime_s).items(), key=lambda kv: kv[1]))
        start = _fmt_s(max(0.0, d.est_start - now)) if d.est_start is not None else "-"
        table.add_row(str(rank), d.job_id, j.user if j else "", tag.model if tag else "",
                      p.group if p is not None else "", prio, types, f"+{start}" if start != "-" else start, est or "?")
    console = Console(width=max(120, Console().width))
    console.print(table)
    console.print(f"updates that would be made: {len(result.updates)}; "
                  f"estimated makespan: {_fmt_s(plan.est_makespan_end - now) if plan and plan.est_makespan_end else '-'}")
