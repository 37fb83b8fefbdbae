"""`msched jobs`: the jobs in Slurm's queue that msub tagged, joined with what the reorderer recorded.

Slurm is the source of truth about jobs (DESIGN, the flow): the queue is read in one batched
`client.jobs()` call and every column that comes from the tag (model, group, nearest reference) is
read from the job's own comment, so the command works with no database at all. The database adds
only what the reorderer decided: the GPU type it last planned for each job. The type a job was
given is Slurm's: the allocated node's type for a running job, the constraint it holds while pending.
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict, dataclass

import click

from msched.slurm.base import ACTIVE_STATES, SlurmJob
from msched.tag import why_of
from msched.util.text import one_line


@dataclass(frozen=True)
class JobRow:
    job_id: str
    user: str
    state: str
    name: str
    partition: str
    num_gpus: int
    model: str
    group: str
    reference: str
    similarity: float | None
    pinned: str
    added: str                    # the constraint msub added ("" = none)
    constraint: str               # the feature constraint Slurm holds now
    planned_type: str | None      # the reorderer's last plan (database), None = not recorded
    gpu_type: str | None          # the GPU type Slurm gave a running job
    reason: str
    tagged: bool
    in_db: bool
    why: str = ""                 # msub's reason for no tag or no constraint (the tag's `why`)


def planned_types(job_ids: list[str], config, db_url: str | None) -> tuple[dict[str, str | None], str | None]:  # noqa: ANN001
    """{job_id: planned type} for the jobs the reorderer recorded, and a note when the DB can't be read."""
    if not job_ids:
        return {}, None
    try:
        from msched.store.db import Store, StoreError
        from msched.store.queries import planned_types as recorded_plan
    except ImportError as exc:                     # pragma: no cover - a broken install
        return {}, f"database support unavailable ({exc})"
    url = db_url or config.database_url
    try:
        store = Store(url, create=False)
    except StoreError as exc:
        return {}, f"{exc}; planned types not shown"
    try:
        with store.read() as session:
            out = recorded_plan(session, config.cluster_name, job_ids)
            if out is None:
                return {}, f"no reorder round recorded for cluster {config.cluster_name!r} yet"
            return out, None
    except Exception as exc:  # noqa: BLE001 - SQLAlchemy's many error kinds: the queue is still shown
        return {}, f"cannot read database {store.display_url}: {one_line(exc)}"
    finally:
        store.dispose()


def build_rows(jobs: list[SlurmJob], planned: dict[str, str | None], *, include_untagged: bool,
               own_user: str | None = None) -> list[JobRow]:
    """Rows for tagged jobs (every job with INCLUDE_UNTAGGED); OWN_USER's untagged jobs are listed too
    when msub recorded why they went untagged, so a user whose client hides msub's warnings (submitit
    shows sbatch's stderr only on failure) can read it later."""
    rows = []
    for j in jobs:
        tag = j.tag
        why = why_of(j.comment)
        if tag is None and not include_untagged and not (why and j.user == own_user):
            continue
        rows.append(JobRow(
            job_id=j.job_id, user=j.user, state=j.state, name=j.name, partition=j.partition, num_gpus=j.num_gpus,
            model=tag.model if tag else "", group=tag.group if tag else "", reference=tag.ref if tag else "",
            similarity=tag.sim if tag else None, pinned=tag.pinned if tag else "",
            added=tag.added if tag else "", constraint=j.features or "", planned_type=planned.get(j.job_id),
            gpu_type=j.gpu_type, reason=j.reason, tagged=tag is not None, in_db=j.job_id in planned, why=why,
        ))
    rows.sort(key=_job_sort_key)
    return rows


def _own_user() -> str | None:
    import os
    import pwd

    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return None


def _job_sort_key(row: JobRow) -> tuple:
    head = row.job_id.split("_")[0]
    return (0, int(head), row.job_id) if head.isdigit() else (1, 0, row.job_id)


def render_table(rows: list[JobRow]) -> None:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    from msched.util.text import printable

    table = Table(title=None, show_lines=False, header_style="bold")
    for col, kw in (("JOBID", {"justify": "right"}), ("USER", {}), ("STATE", {}), ("NAME", {}),
                    ("GPUS", {"justify": "right"}), ("MODEL", {}), ("GROUP", {}), ("NEAREST", {}),
                    ("SIM", {"justify": "right"}), ("PLANNED", {}), ("GIVEN", {}), ("WHY", {})):
        table.add_column(col, **kw)
    for r in rows:
        given = r.gpu_type or (r.constraint or r.pinned if r.state == "PENDING" else "")
        cells = (
            r.job_id, r.user, r.state, r.name, str(r.num_gpus), r.model or "-", r.group or "-", r.reference or "-",
            f"{r.similarity:.3f}" if r.similarity is not None else "-",
            r.planned_type or ("-" if not r.in_db else ""),
            given + (" (pinned)" if r.pinned else ""), r.why,
        )
        # users write names, comments and features: control bytes escaped, no rich markup interpreted
        table.add_row(*(Text(printable(c)) for c in cells))
    console = Console()
    if not console.is_terminal:            # piped: don't squeeze the table into 80 columns
        console = Console(width=max(console.width, 200))
    console.print(table)


@click.command()
@click.option("--json", "as_json", is_flag=True, help="One JSON list on stdout instead of the table.")
@click.option("--all", "include_untagged", is_flag=True, help="Also list jobs not submitted through msub.")
@click.option("-u", "--user", "users", multiple=True, help="Only these users' jobs (repeatable).")
@click.option("--db", "db_url", default=None, metavar="URL", help="Database URL (default: the site config's).")
def jobs(as_json: bool, include_untagged: bool, users: tuple[str, ...], db_url: str | None) -> None:
    """Tagged jobs in Slurm's queue: model, group, nearest reference, GPU type planned and given.

    GIVEN is the allocated GPU type of a running job, or the constraint a pending job holds now.
    WHY is msub's reason when it added no GPU-type constraint; your own jobs that msub left untagged
    are listed with its reason too (e.g. "unknown model 'my_transformer'").
    Works without a database (PLANNED stays empty).
    """
    from msched.config import ConfigError, load_config
    from msched.slurm import SlurmError, get_client

    try:
        config = load_config()
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None
    try:
        client = get_client(config.backend, config=config)
        queue = list(client.jobs(ACTIVE_STATES))
    except SlurmError as exc:
        raise click.ClickException(f"cannot read Slurm's queue: {exc}") from None
    if users:
        queue = [j for j in queue if j.user in users]
    ids = [j.job_id for j in queue if include_untagged or j.tag is not None]
    planned, note = planned_types(ids, config, db_url)
    rows = build_rows(queue, planned, include_untagged=include_untagged, own_user=_own_user())
    if note:
        click.echo(f"msched jobs: note: {note}", err=True)
    if as_json:
        json.dump([asdict(r) for r in rows], sys.stdout, indent=1)
        sys.stdout.write("\n")
        return
    if not rows:
        click.echo("no jobs in the queue" if include_untagged else "no tagged jobs in the queue (--all lists every job)")
        return
    render_table(rows)
