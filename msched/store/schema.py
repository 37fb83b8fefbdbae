"""The database schema (SQLAlchemy 2.x ORM). Written only by administrator commands (reorder, sim --db,
calibrate); read by report and `msched jobs`. msub never touches it (DESIGN: the flow).

Times are epoch seconds (simulated seconds for `msched sim --db` runs, whose `runs.kind` is "sim").
"""

from __future__ import annotations

from sqlalchemy import JSON, Float, ForeignKey, Index, Integer, String, Text
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from msched.store.base import SCHEMA_VERSION  # noqa: F401 - stamped by msched.store.db; light.py reads it too


class Base(DeclarativeBase):
    pass


class Meta(Base):
    """Key/value facts about the database itself, e.g. schema_version."""

    __tablename__ = "meta"
    key: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[str] = mapped_column(Text)


class Run(Base):
    """A source of jobs and rounds: the real cluster (one row per cluster name) or one simulated policy run."""

    __tablename__ = "runs"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    kind: Mapped[str] = mapped_column(String(16))            # "slurm" or "sim"
    name: Mapped[str] = mapped_column(String(128))           # cluster name, or "sim:<policy>:<trace>"
    policy: Mapped[str] = mapped_column(String(32), default="msched")
    created_at: Mapped[float] = mapped_column(Float)
    gpus: Mapped[dict] = mapped_column(JSON, default=dict)    # GPUs per type at creation
    __table_args__ = (Index("ix_runs_kind_name", "kind", "name", unique=True),)


class ReferenceModel(Base):
    """A reference model as the reorderer last saw it used (group = its family)."""

    __tablename__ = "reference_models"
    name: Mapped[str] = mapped_column(String(128), primary_key=True)
    group: Mapped[str] = mapped_column(String(64))


class Job(Base):
    """A job msched has seen (ingested from its tag), with what it planned and what actually happened."""

    __tablename__ = "jobs"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id"))
    job_id: Mapped[str] = mapped_column(String(64))           # Slurm's job id
    user: Mapped[str] = mapped_column(String(64), default="")
    name: Mapped[str] = mapped_column(String(256), default="")
    model: Mapped[str] = mapped_column(String(512), default="")
    reference: Mapped[str] = mapped_column(String(128), default="")
    group: Mapped[str] = mapped_column(String(64), default="")
    similarity: Mapped[float | None] = mapped_column(Float, nullable=True)
    flops_ratio: Mapped[float | None] = mapped_column(Float, nullable=True)
    iterations: Mapped[int | None] = mapped_column(Integer, nullable=True)
    batch_size: Mapped[int | None] = mapped_column(Integer, nullable=True)
    num_gpus: Mapped[int] = mapped_column(Integer, default=0)
    time_limit_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    pinned_type: Mapped[str | None] = mapped_column(String(32), nullable=True)
    added_constraint: Mapped[str] = mapped_column(String(256), default="")
    submit_time: Mapped[float | None] = mapped_column(Float, nullable=True)
    first_seen: Mapped[float] = mapped_column(Float)
    state: Mapped[str] = mapped_column(String(32), default="PENDING")
    planned_type: Mapped[str | None] = mapped_column(String(64), nullable=True)   # last plan's type(s), "|"-joined
    est_runtime: Mapped[dict] = mapped_column(JSON, default=dict)                 # seconds per type, last plan
    start_time: Mapped[float | None] = mapped_column(Float, nullable=True)
    end_time: Mapped[float | None] = mapped_column(Float, nullable=True)
    actual_type: Mapped[str | None] = mapped_column(String(32), nullable=True)
    # the incumbent (msched.rounds.settle): the priority msched holds the job to, with planned_type
    planned_priority: Mapped[int | None] = mapped_column(Integer, nullable=True)
    writes: Mapped[int | None] = mapped_column(Integer, nullable=True)           # Slurm updates of the job
    __table_args__ = (Index("ix_jobs_run_job", "run_id", "job_id", unique=True),)


class Round(Base):
    """One reorder round (real or simulated)."""

    __tablename__ = "rounds"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id"))
    time: Mapped[float] = mapped_column(Float)
    pending: Mapped[int] = mapped_column(Integer, default=0)
    running: Mapped[int] = mapped_column(Integer, default=0)
    changes: Mapped[int] = mapped_column(Integer, default=0)        # Slurm update calls made
    skipped: Mapped[int] = mapped_column(Integer, default=0)        # jobs skipped (started mid-round)
    plan_seconds: Mapped[float] = mapped_column(Float, default=0.0)
    est_makespan_s: Mapped[float | None] = mapped_column(Float, nullable=True)   # est. last end minus round time
    busy_gpus: Mapped[dict] = mapped_column(JSON, default=dict)     # busy GPUs per type at round time
    total_gpus: Mapped[dict] = mapped_column(JSON, default=dict)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    dry_run: Mapped[bool] = mapped_column(Integer, default=0)
    # what the round's writes bought (msched.rounds.settle), and what it recorded
    moved: Mapped[int | None] = mapped_column(Integer, nullable=True)            # jobs given a new place/type
    held_back: Mapped[int | None] = mapped_column(Integer, nullable=True)        # waiting for the write budget
    gain_makespan_s: Mapped[float | None] = mapped_column(Float, nullable=True)  # incumbent minus held
    gain_mean_end_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    decision_rows: Mapped[int | None] = mapped_column(Integer, nullable=True)    # jobs whose plan changed
    # an unchanged queue (msched.rounds.reorder): the Slurm state read, until when its plan holds (NULL:
    # for ever), and 1 on a round that found both unchanged and so did not plan
    state_key: Mapped[str | None] = mapped_column(String(32), nullable=True)
    stable_until: Mapped[float | None] = mapped_column(Float, nullable=True)
    unchanged: Mapped[int | None] = mapped_column(Integer, nullable=True)
    # the light round (msched.rounds.reorder): a digest of Slurm's queue in a tight format, taken before the
    # round's read (`SlurmClient.queue_digest`), and 1 on a round that found it unchanged and so read
    # nothing more (no squeue --json, no snapshot, no plan)
    queue_digest: Mapped[str | None] = mapped_column(String(32), nullable=True)
    light: Mapped[int | None] = mapped_column(Integer, nullable=True)
    __table_args__ = (Index("ix_rounds_run_time", "run_id", "time"),)


class Decision(Base):
    """What one round changed for one job: a row when the job's planned type, priority or estimate
    differs from what the store held for it (the jobs table holds the current plan)."""

    __tablename__ = "decisions"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    round_id: Mapped[int] = mapped_column(ForeignKey("rounds.id"))
    job_id: Mapped[str] = mapped_column(String(64))
    priority: Mapped[int] = mapped_column(Integer)
    gpu_type: Mapped[str] = mapped_column(String(64), default="")
    est_start: Mapped[float | None] = mapped_column(Float, nullable=True)
    est_runtime: Mapped[dict] = mapped_column(JSON, default=dict)
    changed: Mapped[bool] = mapped_column(Integer, default=0)
    __table_args__ = (Index("ix_decisions_round", "round_id"),)


class RoundDay(Base):
    """One day of a run's rounds, once the detailed rows are past the retention (`retention_days`):
    sums and extremes from which the report's figures are made (means are sums over `rounds`)."""

    __tablename__ = "round_days"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id"))
    day: Mapped[float] = mapped_column(Float)                       # epoch of the day's 00:00 UTC
    first_time: Mapped[float] = mapped_column(Float)
    last_time: Mapped[float] = mapped_column(Float)
    rounds: Mapped[int] = mapped_column(Integer, default=0)
    dry_runs: Mapped[int] = mapped_column(Integer, default=0)
    errors: Mapped[int] = mapped_column(Integer, default=0)
    changes: Mapped[int] = mapped_column(Integer, default=0)
    max_changes: Mapped[int] = mapped_column(Integer, default=0)
    skipped: Mapped[int] = mapped_column(Integer, default=0)
    decision_rows: Mapped[int] = mapped_column(Integer, default=0)
    plan_seconds: Mapped[float] = mapped_column(Float, default=0.0)       # sum
    max_plan_seconds: Mapped[float] = mapped_column(Float, default=0.0)
    pending: Mapped[int] = mapped_column(Integer, default=0)              # sum over rounds
    running: Mapped[int] = mapped_column(Integer, default=0)
    busy_gpus: Mapped[dict] = mapped_column(JSON, default=dict)           # type -> sum over rounds
    total_gpus: Mapped[dict] = mapped_column(JSON, default=dict)          # the day's last
    __table_args__ = (Index("ix_round_days_run_day", "run_id", "day", unique=True),)


class Hold(Base):
    """The hold journal: every lever the reorderer pulls that Slurm will not undo by itself within a
    round (an admin hold, a begin time), written *before* the Slurm call and closed after the undo, so
    a round killed at any step leaves a record the next round or `msched reorder --release` replays
    (msched.rounds.holds). Open entries: closed_at IS NULL."""

    __tablename__ = "holds"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    job_id: Mapped[str] = mapped_column(String(64))
    kind: Mapped[str] = mapped_column(String(16))                   # "hold" or "begin_time"
    value: Mapped[str] = mapped_column(String(64), default="")      # the begin time (epoch) set, if any
    reason: Mapped[str] = mapped_column(Text, default="")
    created_at: Mapped[float] = mapped_column(Float)
    closed_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    outcome: Mapped[str] = mapped_column(String(64), default="")    # released / gone / expired / ...
    own: Mapped[str | None] = mapped_column(Text, nullable=True)    # exc_nodes: the job's own list, kept
    __table_args__ = (Index("ix_holds_open", "closed_at", "job_id"),)


class PackedPair(Base):
    """Two shard jobs the round saw sharing one GPU (gres/shard, the Packing issue): the own/solo speed
    predicted for each beside the other when the pair was first seen, and the speed measured (a
    simulated run's truth; Slurm reports no speed of a shared job, so a real run leaves it empty)."""

    __tablename__ = "packed_pairs"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id"))
    job_a: Mapped[str] = mapped_column(String(64))                  # the one that started first
    job_b: Mapped[str] = mapped_column(String(64))
    gpu_type: Mapped[str] = mapped_column(String(64), default="")
    seen_at: Mapped[float] = mapped_column(Float)
    predicted_a: Mapped[float | None] = mapped_column(Float, nullable=True)
    predicted_b: Mapped[float | None] = mapped_column(Float, nullable=True)
    measured_a: Mapped[float | None] = mapped_column(Float, nullable=True)
    measured_b: Mapped[float | None] = mapped_column(Float, nullable=True)
    __table_args__ = (Index("ix_packed_pairs_run_jobs", "run_id", "job_a", "job_b", unique=True),)
