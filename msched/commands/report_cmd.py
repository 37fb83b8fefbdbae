"""`msched report`: read the database (and Slurm's queue, when it answers) and show what msched did."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import click

from msched.config import ConfigError, load_config
from msched.util.text import one_line

LIVE_TIMEOUT_S = 10.0


def _db_url(value: str) -> str:
    """A SQLAlchemy URL, or a plain path meaning an SQLite file."""
    return value if "://" in value else f"sqlite:///{Path(value).expanduser().resolve()}"


def _sqlite_path(url: str) -> Path | None:
    if not url.startswith("sqlite:"):
        return None
    path = url.split(":///", 1)[1] if ":///" in url else ""
    return Path(path.split("?", 1)[0]) if path and path != ":memory:" else None


def _live_jobs(config):
    """Tagged jobs from Slurm now, or None when Slurm is not configured or does not answer: the report
    must work on a machine with only the database (a laptop with a copy, a cluster that is down)."""
    if not (os.environ.get("SLURM_CONF") or Path("/etc/slurm/slurm.conf").exists()):
        return None
    if not shutil.which("squeue"):
        return None
    try:
        from msched.report.data import LiveJob
        from msched.slurm import get_client

        try:   # a controller that does not answer must not hold the report up for long
            client = get_client(config.backend, config=config, timeout_s=LIVE_TIMEOUT_S)
        except TypeError:
            client = get_client(config.backend, config=config)
        out = []
        for job in client.jobs():
            tag = job.tag
            if tag is None:
                continue
            # what Slurm holds now (msched's last write), else what msub picked
            planned = "" if job.is_running else (job.features or tag.pinned or tag.added or "")
            out.append(LiveJob(job_id=job.job_id, state=job.state, group=tag.group, model=tag.model,
                               submit_time=job.submit_time, planned_type=planned))
        return out
    except Exception as exc:   # optional source: never fail the report over it
        click.echo(f"note: Slurm's live queue not read ({one_line(exc)}); "
                   "showing the database's last state", err=True)
        return None


def _table_estimator(config):
    """Estimates from the site's performance table, for finished jobs no round planned (see build_report):
    the one estimate rule (`msched.estimate.runtime.estimate_job`) on the job's recorded tag fields."""
    from msched.estimate.perf_table import PerfTable, PerfTableError
    from msched.estimate.runtime import estimate_job, times_for
    from msched.tag import JobTag

    try:
        times = times_for(config, PerfTable.load(config.performance))
    except PerfTableError:
        return None

    def estimate(job) -> dict[str, float]:
        tag = JobTag(model=job.model or "", ref=job.reference or "", flops=job.flops_ratio or 1.0,
                     iters=job.iterations, bs=job.batch_size, pinned=job.pinned_type or "")
        est = estimate_job(tag, num_gpus=job.num_gpus or 1, time_limit_s=job.time_limit_s, times=times,
                           within_time_limit=False)
        return {t: e.seconds for t, e in est.items()}
    return estimate


@click.command("report")
@click.option("--since", "since", metavar="DURATION", help="Only the last DURATION (e.g. 2h, 7d); default: everything.")
@click.option("--run", "run_name", metavar="NAME", help="Only this run (a cluster name, or a `sim:...` run).")
@click.option("--kind", type=click.Choice(["slurm", "sim"]), help="Only real-cluster or only simulated runs.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON instead of tables.")
@click.option("--html", "html_path", type=click.Path(dir_okay=False, writable=True),
              help="Also write a self-contained HTML page with plots to FILE.")
@click.option("--db", "db", metavar="URL", help="Database URL or SQLite file (default: the site config's).")
@click.option("--slurm/--no-slurm", "use_slurm", default=True,
              help="Read the live queue from Slurm when it answers (default) or use the database alone.")
def report(since, run_name, kind, as_json, html_path, db, use_slurm) -> None:
    """What the scheduler did and how well its estimates held: queue, GPU use, waits, estimates, rounds."""
    from sqlalchemy import create_engine
    from sqlalchemy.exc import SQLAlchemyError
    from sqlalchemy.orm import Session

    from msched.report.data import Report, ReportError, build_report, has_schema, parse_duration, to_jsonable

    try:
        config = load_config()
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None
    url = _db_url(db) if db else config.database_url
    try:
        since_s = parse_duration(since) if since else None
    except ReportError as exc:
        raise click.BadParameter(str(exc), param_hint="--since") from None
    shown = url if "@" not in url else url.split("://", 1)[0] + "://…"   # never print a password

    path = _sqlite_path(url)
    result: Report | None = None
    if path is not None and not path.exists():
        result = Report(generated_at=_now(), database=shown, since_s=since_s,
                        starvation_age_s=config.starvation_age_s,
                        message=f"No database at {path} yet: msched has not recorded anything. "
                                "Run `msched reorder` (from cron) or `msched sim --db` to fill it.")
    else:
        if path is not None:   # read-only: the report must never create or change the database
            url = f"sqlite:///file:{path}?mode=ro&uri=true"
        engine = create_engine(url)
        try:
            if not has_schema(engine):
                result = Report(generated_at=_now(), database=shown, since_s=since_s,
                                starvation_age_s=config.starvation_age_s,
                                message="The database has no msched tables yet: nothing recorded so far.")
            else:
                live = _live_jobs(config) if use_slurm and kind != "sim" else None
                with Session(engine) as session:
                    result = build_report(session, database=shown, since_s=since_s, run_name=run_name,
                                          kind=kind, starvation_age_s=config.starvation_age_s,
                                          live_jobs=live, live_run=config.cluster_name,
                                          estimator=_table_estimator(config))
        except ReportError as exc:
            raise click.ClickException(one_line(exc)) from None
        except SQLAlchemyError as exc:
            raise click.ClickException(f"cannot read the database {shown}: {one_line(exc)}") from None
        finally:
            engine.dispose()

    if as_json:
        click.echo(json.dumps(to_jsonable(result), indent=1))
    else:
        from msched.report.terminal import render

        render(result)
    if html_path:
        from msched.report.html import render_html

        try:
            Path(html_path).write_text(render_html(result), encoding="utf-8")
        except OSError as exc:
            raise click.ClickException(f"cannot write {html_path}: {exc.strerror}") from None
        click.echo(f"wrote {html_path}", err=as_json)


def _now() -> float:
    import time

    return time.time()
