"""Site configuration: one TOML file, with defaults that work with no file at all.

The file is `/etc/msched/msched.toml`, or the path in `MSCHED_CONFIG`. Every key is optional:

    database_url   = "sqlite:////var/lib/msched/msched.db"   # any SQLAlchemy URL
    sbatch         = "/usr/bin/sbatch"     # the real sbatch (msub may be installed as `sbatch`)
    state_dir      = "/var/lib/msched"     # lock file, published free-time file
    references     = "msched/data/reference_models.json"   # or a list of model names
    performance    = "msched/data/gpu_performance.csv"
    starvation_age_s = 86400
    objective      = "balanced"            # or "makespan", "jct" (msched.policy.planner)
    plan_time_s    = 2.0                   # the planner's safety net per round, CPU seconds (its budget is work)
    planner        = "optimize"            # or "greedy": the list schedule alone; "cpsat": CP-SAT alone (msched.policy.planner)
    metric         = "cosine"              # or "euclidean", "manhattan"
    backend        = "auto"                # "cli", "pyslurm" or "auto"
    cluster_name   = "local"
    constraint_slack = 1.25                # msub: types within this factor of the best are OR-ed in
    constraint_informed_slack = 1.25       # ... this factor instead when the last round's free times say
                                           #   some type is busy now (msched.policy.choice.submit_slack)
    constraint_free_slack = 1.25           # ... at most this factor when the best type is free now and another
                                           #   is busy (msched.policy.choice.completion_choice)
    submit_price   = ""                    # reorder: publish submit prices for the scarce fast types,
                                           #   "saving:Q" or "ratio:Q" ("": off; msched.policy.price)
    write_budget   = 3000                  # reorder: Slurm updates per round at most (~0.33 ms each)
    settle_margin  = 0.01                  # reorder: a new plan must beat the incumbent by this share
    moves_per_change = 8                   # reorder: optional moves per job that arrived or left the queue
    write_head     = 1.0                   # reorder: places at the queue's head written per GPU (0: all)
    replan_head    = 0                     # reorder: places re-planned per GPU once msched holds the queue
                                           #   (0: the whole queue; msched.rounds.settle 7.)
    trial_workers  = 1                     # reorder: processes weighing settle's trial plans at once
                                           #   (2: every other trial in a forked child; off: it measured
                                           #   no faster at 10,000 pending on the 2-core dev machine)
    retention_days = 14                    # store: detailed rounds this long, daily aggregates after
    managed_first  = false                 # reorder: true lets msub jobs pass plain ones (README: Security model)
    pack_partitions = ["gpu"]              # packing (gres/shard) is on by default for jobs in these
                                           # partitions ("*": jobs naming none); #MSCHED --no-pack opts out
    shard_partition = "shared"             # the partition of the nodes whose GPUs carry shards
    pack_threshold = 1.0                   # least predicted combined throughput of a pair that is packed
    pack_guard     = "bound"               # "bound": each job's 10% quantile own speed >= 0.5x solo, inside
                                           #   the data, on its best shard type; "mean": the mean forest only
    pack_exclude   = false                 # reorder: keep a pending shard job off the nodes where a shard job
                                           #   it would pair badly with runs alone (ExcNodeList)
    pack_queue_share = 1.0                 # msub: pack when this share of the queued shard jobs are good
                                           #   partners (each running one must be; < 1 needs pack_exclude)
    type_lever     = "feature"             # how msched steers a job's GPU type: "feature" (--constraint)
                                           # or "partition" (-p, where a site gives each type its partition)
    priority_lever = "priority"            # reorder: write the order as explicit priorities, or as "nice"
                                           #   offsets (multifactor sites: age and fair-share keep moving)
    begin_time_lever = false               # reorder: keep backfill off GPUs the plan keeps for an earlier job
    begin_time_max_jobs = 20               #   by a begin time (StartTime=, expires by itself; hold journal),
    begin_time_horizon_s = 14400           #   at most this many writes a round, for starts this far ahead,
    begin_time_min_gain = 1.0              #   where the delay it avoids is this many times the hold or more
    tight_queue    = true                  # read the queue with fixed-width `squeue -O` (false: squeue --json)
    digest_overlap = false                 # reorder: start the queue read beside the light check's digest
    activity_hint  = true                  # reorder: skip the light check when sdiag's job counters moved

    [type_partitions]                      # type_lever = "partition": GPU type -> its partition
    a100 = "gpu-a100"
    gpu_specs      = "site_gpu_specs.csv"  # extra/overriding GPU spec rows (msched/data/gpu_specs.csv's columns)
    estimator      = "table"               # iteration times: "table" (measured + FLOPs-scaled reference) or
                                           # "predictor" (per-layer cost model, reference-corrected, memory check)
    cost_model     = "site_cost_model.json"  # the predictor's parameters refitted by `msched calibrate refit`

    [gpu_aliases]                          # Slurm gres/feature name -> canonical lowercase name
    "A100-SXM4-40GB" = "a100"
    "tesla_v100" = "v100"

This module must stay cheap to import: msub reads it on every submission.
"""

from __future__ import annotations

import os

from msched.util.record import record

MappingProxyType = type(type.__dict__)   # types.MappingProxyType, as types.py defines it
TYPE_CHECKING = False       # typing.TYPE_CHECKING without importing typing
if TYPE_CHECKING:           # for annotations only: importing collections.abc costs msub ~1 ms (predict14)
    from collections.abc import Mapping

# Paths are plain strings here: msub imports this module on every submission (see msched.util.record).
PROJECT_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The shipped tables are package data (setup.cfg's package_data), so they sit beside this module in a
# checkout and in an installed wheel alike. A plain path rather than importlib.resources: msub reads them on
# every submission and importlib.resources costs pathlib and more; wheels are never imported zipped.
DATA_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
DEFAULT_CONFIG_PATH = "/etc/msched/msched.toml"
OBJECTIVES = ("balanced", "makespan", "jct")
METRICS = ("cosine", "euclidean", "manhattan")
BACKENDS = ("auto", "cli", "pyslurm")
ESTIMATORS = ("table", "predictor")
TYPE_LEVERS = ("feature", "partition")
PRIORITY_LEVERS = ("priority", "nice")
PACK_GUARDS = ("bound", "mean")          # msched.estimate.interference.GUARDS (not imported: msub's light path)
FREE_TIME_FILE = "gpu_free_time.json"
PRICE_MEASURES = ("saving", "ratio")     # msched.policy.price.MEASURES (defined here: msub's light path)
LOCK_FILE = "reorder.lock"


class ConfigError(ValueError):
    """A configuration file that cannot be used; the message is one line naming the problem."""


def _default_state_dir() -> str:
    if os.geteuid() == 0:
        return "/var/lib/msched"
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return os.path.join(base, "msched")


@record
class Config:
    database_url: str = ""                  # "" = sqlite in state_dir
    sbatch: str = "/usr/bin/sbatch"
    state_dir: str = ""                     # "" = /var/lib/msched for root, else the user's XDG state dir
    references: str | tuple[str, ...] = os.path.join(DATA_DIR, "reference_models.json")
    performance: str = os.path.join(DATA_DIR, "gpu_performance.csv")
    starvation_age_s: float = 86400.0
    objective: str = "balanced"
    plan_time_s: float = 2.0
    planner: str = "optimize"
    metric: str = "cosine"
    backend: str = "auto"
    cluster_name: str = "local"
    constraint_slack: float = 1.25
    constraint_informed_slack: float = 1.25  # msub, with a fresh round's view of busy types (choice.submit_slack)
    constraint_free_slack: float = 1.25     # msub, when the best type is free now (choice.completion_choice)
    submit_price: str = ""                  # reorder: "saving:Q" / "ratio:Q" submit prices (msched.policy.price)
    write_budget: int = 3000                # Slurm updates per reorder round (msched.rounds.settle)
    settle_margin: float = 0.01             # share of the horizon a new plan must gain over the incumbent
    moves_per_change: int = 8               # rate limit on optional moves (msched.rounds.settle)
    write_head: float = 1.0                 # places at the queue's head written, per GPU (0: the whole queue)
    replan_head: float = 0.0                # places re-planned per GPU in an event round (0: the whole queue)
    trial_workers: int = 1                  # processes weighing settle's trials (msched.rounds.settle.TrialsAside)
    retention_days: float = 14.0            # detailed rounds and decisions kept; daily aggregates after
    managed_first: bool = False             # reorder: may raise msub jobs above plain ones (off: keep ranks)
    gpu_aliases: Mapping[str, str] = MappingProxyType({})   # _checked replaces it: configs pickle
    pack_partitions: tuple[str, ...] = ()   # packing on by default in these partitions (msched.msub.packing)
    shard_partition: str = "shared"
    pack_threshold: float = 1.0
    pack_guard: str = "bound"               # the packing guard (msched.estimate.interference: "bound" or "mean")
    pack_exclude: bool = False              # reorder: ExcNodeList keeps bad pairs apart (msched.rounds.packing)
    pack_queue_share: float = 1.0           # msub: the looser queue rule (msched.policy.packing.submit_verdict)
    type_lever: str = "feature"
    type_partitions: Mapping[str, str] = MappingProxyType({})
    priority_lever: str = "priority"        # reorder: "priority" (explicit) or "nice" (msched.rounds.core.diff_plan)
    begin_time_lever: bool = False          # reorder: the begin-time lever (msched.policy.reservations)
    begin_time_max_jobs: int = 20
    begin_time_horizon_s: float = 14400.0
    begin_time_min_gain: float = 1.0
    tight_queue: bool = True                # the queue read (msched.slurm.cli.tight; false: squeue --json)
    # the light check starts the round's queue read beside its digest's squeue (msched.rounds.reorder
    # `_light_round`): an event round waits for one squeue, a light round ends the read it did not need.
    # Off by default: the read a light round ends has already cost the controller a whole job-table dump,
    # and most rounds are light
    digest_overlap: bool = False
    # the light check first reads sdiag's job counters (SlurmClient.activity, no job-table read): when they
    # moved since the last light check (a job arrived, started or ended) the round skips the digest's squeue
    # and reads the queue at once, recording the digest of that read for the next light check (twelfth pass)
    activity_hint: bool = True
    gpu_specs: str = ""                     # a site's own GPU spec rows, added to msched/data/gpu_specs.csv
    estimator: str = "table"                # the iteration-time source: see msched.estimate.runtime.times_for
    cost_model: str = ""                    # refitted cost-model parameters ("" = msched/data/cost_model.json)
    source: str = "defaults"

    def _checked(self) -> Config:
        if self.objective not in OBJECTIVES:
            raise ConfigError(f"objective {self.objective!r} is not one of {', '.join(OBJECTIVES)}")
        if self.planner not in ("optimize", "greedy", "cpsat"):
            raise ConfigError(f"planner {self.planner!r} is not one of optimize, greedy, cpsat")
        if not (isinstance(self.plan_time_s, int | float) and self.plan_time_s > 0):
            raise ConfigError(f"plan_time_s must be a positive number of seconds (got {self.plan_time_s!r})")
        for key in ("constraint_slack", "constraint_informed_slack", "constraint_free_slack"):
            v = getattr(self, key)
            if not (isinstance(v, int | float) and v >= 1.0):
                raise ConfigError(f"{key} must be a number >= 1 (got {v!r})")
        try:
            self.price_options   # noqa: B018 - validates submit_price
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        if self.metric not in METRICS:
            raise ConfigError(f"metric {self.metric!r} is not one of {', '.join(METRICS)}")
        if self.backend not in BACKENDS:
            raise ConfigError(f"backend {self.backend!r} is not one of {', '.join(BACKENDS)}")
        if not isinstance(self.write_budget, int) or self.write_budget < 0:
            raise ConfigError(f"write_budget {self.write_budget!r} must be a whole number >= 0")
        if self.trial_workers not in (1, 2) or isinstance(self.trial_workers, bool):
            raise ConfigError(f"trial_workers {self.trial_workers!r} must be 1 or 2")
        if not isinstance(self.moves_per_change, int) or self.moves_per_change < 0:
            raise ConfigError(f"moves_per_change {self.moves_per_change!r} must be a whole number >= 0")
        if not isinstance(self.write_head, int | float) or isinstance(self.write_head, bool) or self.write_head < 0:
            raise ConfigError(f"write_head {self.write_head!r} must be a number >= 0 (0: write the whole queue)")
        if not isinstance(self.replan_head, int | float) or isinstance(self.replan_head, bool) or self.replan_head < 0:
            raise ConfigError(f"replan_head {self.replan_head!r} must be a number >= 0 (0: plan the whole queue)")
        if not 0 <= float(self.settle_margin) < 1:
            raise ConfigError(f"settle_margin {self.settle_margin!r} must be in [0, 1)")
        if not float(self.retention_days) > 0:
            raise ConfigError(f"retention_days {self.retention_days!r} must be positive")
        if self.estimator not in ESTIMATORS:
            raise ConfigError(f"estimator {self.estimator!r} is not one of {', '.join(ESTIMATORS)}")
        if self.type_lever not in TYPE_LEVERS:
            raise ConfigError(f"type_lever {self.type_lever!r} is not one of {', '.join(TYPE_LEVERS)}")
        if self.type_lever == "partition" and not self.type_partitions:
            raise ConfigError("type_lever = \"partition\" needs a [type_partitions] table (GPU type -> partition)")
        if not isinstance(self.pack_partitions, list | tuple) or not all(isinstance(p, str) for p in self.pack_partitions):
            raise ConfigError(f"pack_partitions {self.pack_partitions!r} must be a list of partition names")
        if not isinstance(self.pack_threshold, int | float) or not 0 < self.pack_threshold <= 2:
            raise ConfigError(f"pack_threshold {self.pack_threshold!r} must be a number in (0, 2]")
        if self.pack_guard not in PACK_GUARDS:
            raise ConfigError(f"pack_guard {self.pack_guard!r} is not one of {', '.join(PACK_GUARDS)}")
        if self.priority_lever not in PRIORITY_LEVERS:
            raise ConfigError(f"priority_lever {self.priority_lever!r} is not one of {', '.join(PRIORITY_LEVERS)}")
        if not isinstance(self.pack_exclude, bool):
            raise ConfigError(f"pack_exclude {self.pack_exclude!r} must be true or false")
        if not isinstance(self.pack_queue_share, int | float) or not 0 < self.pack_queue_share <= 1:
            raise ConfigError(f"pack_queue_share {self.pack_queue_share!r} must be a number in (0, 1]")
        if self.pack_queue_share < 1 and not self.pack_exclude:
            raise ConfigError("pack_queue_share below 1 packs beside bad partners in the queue: it needs "
                              "pack_exclude = true (the round keeps them apart)")
        if not isinstance(self.begin_time_lever, bool):
            raise ConfigError(f"begin_time_lever {self.begin_time_lever!r} must be true or false")
        for name in ("tight_queue", "digest_overlap", "activity_hint"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"{name} {getattr(self, name)!r} must be true or false")
        if not isinstance(self.begin_time_max_jobs, int) or self.begin_time_max_jobs < 0:
            raise ConfigError(f"begin_time_max_jobs {self.begin_time_max_jobs!r} must be a whole number >= 0")
        if not (isinstance(self.begin_time_horizon_s, int | float) and self.begin_time_horizon_s > 0):
            raise ConfigError(f"begin_time_horizon_s {self.begin_time_horizon_s!r} must be a positive number of seconds")
        if not (isinstance(self.begin_time_min_gain, int | float) and self.begin_time_min_gain >= 0):
            raise ConfigError(f"begin_time_min_gain {self.begin_time_min_gain!r} must be a number >= 0")
        state_dir = os.fspath(self.state_dir) if self.state_dir else _default_state_dir()
        return self._replace(
            state_dir=state_dir,
            database_url=self.database_url or f"sqlite:///{os.path.join(state_dir, 'msched.db')}",
            references=self.references if isinstance(self.references, str) else tuple(self.references),
            gpu_aliases={str(k).lower(): str(v).lower() for k, v in self.gpu_aliases.items()},   # a fresh dict
            type_partitions={str(k).lower(): str(v) for k, v in self.type_partitions.items()},
            pack_partitions=tuple(self.pack_partitions),
        )

    @property
    def lock_path(self) -> str:
        return os.path.join(self.state_dir, LOCK_FILE)

    @property
    def price_options(self) -> dict:
        """The round policy's submit-price options from `submit_price` ({} when off)."""
        text = str(self.submit_price or "").strip()
        if not text:
            return {}
        measure, _, q = text.partition(":")
        try:
            quantile = float(q)
        except ValueError:
            quantile = -1.0
        if measure not in PRICE_MEASURES or not 0 <= quantile <= 1:
            raise ValueError(f"submit_price {self.submit_price!r} must be \"saving:Q\" or \"ratio:Q\" with Q in [0, 1], "
                             "or \"\" (off)")
        return {"price_quantile": quantile, "price_measure": measure}

    @property
    def free_time_path(self) -> str:
        """The small file the reorderer publishes for msub: projected free time per GPU type."""
        return os.path.join(self.state_dir, FREE_TIME_FILE)

    def canonical_gpu_type(self, name: str) -> str:
        """Map a Slurm gres type or feature name to msched's canonical lowercase GPU type."""
        key = name.strip().lower()
        return self.gpu_aliases.get(key, key)


def user_cache_dir(environ: Mapping[str, str] | None = None) -> str:
    """The calling user's msched cache: MSCHED_CACHE_DIR, else XDG_CACHE_HOME/msched, else ~/.cache/msched
    (read from `environ`, default os.environ: the plugin's resident decider locates another process's)."""
    env = os.environ if environ is None else environ
    explicit = env.get("MSCHED_CACHE_DIR")
    if explicit:
        return explicit
    base = env.get("XDG_CACHE_HOME") or os.path.join(env.get("HOME") or os.path.expanduser("~"), ".cache")
    return os.path.join(base, "msched")


def config_path() -> str:
    return os.environ.get("MSCHED_CONFIG") or DEFAULT_CONFIG_PATH


def load_config(path: str | os.PathLike | None = None, *, cached: bool = False) -> Config:
    """Read the site configuration; a missing default file means all defaults.

    `cached=True` (msub) keeps the parsed file in the user's cache, keyed by the file's identity and
    modification time: parsing TOML costs ~19 ms of imports (tomllib, typing, datetime), a fifth of
    msub's budget, and the file changes rarely. Any trouble with the cache just parses the file.
    """
    explicit = path is not None or "MSCHED_CONFIG" in os.environ
    p = os.fspath(path) if path is not None else config_path()
    try:
        st = os.stat(p)
    except FileNotFoundError:
        if explicit:
            raise ConfigError(f"configuration file {p} does not exist") from None
        return Config()
    except OSError as exc:
        raise ConfigError(f"cannot read configuration {p}: {exc.strerror}") from exc
    identity = [os.path.abspath(p), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns]
    data = _cache_read(identity) if cached else None
    if data is None:
        data = _parse(p)
        if cached:
            _cache_write(identity, data)
    return Config(**data, source=p)


def _parse(p: str) -> dict:
    import tomllib

    try:
        with open(p, encoding="utf-8") as fh:
            data = tomllib.loads(fh.read())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"cannot read configuration {p}: {exc}") from exc
    known = set(Config._fields) - {"source"}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ConfigError(f"{p}: unknown key(s) {', '.join(unknown)}; valid keys: {', '.join(sorted(known))}")
    base = os.path.dirname(os.path.abspath(p))
    for key in ("references", "performance", "gpu_specs", "cost_model"):
        if isinstance(data.get(key), str) and not os.path.isabs(data[key]):
            candidate = os.path.join(base, data[key])
            data[key] = candidate if os.path.exists(candidate) else os.path.join(PROJECT_ROOT, data[key])
    Config(**data)                                  # refuse bad values before they are cached
    return data


def _cache_file() -> str:
    return os.path.join(user_cache_dir(), "site_config.json")


def _cache_read(identity: list) -> dict | None:
    from msched.util.light import json_load

    try:
        with open(_cache_file(), encoding="utf-8") as fh:
            cached = json_load(fh)
        return cached["data"] if cached.get("identity") == identity and isinstance(cached["data"], dict) else None
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _cache_write(identity: list, data: dict) -> None:
    """Atomically, owner-only; values JSON cannot hold (TOML dates) are simply not cached."""
    import json

    from msched.util.files import write_atomically

    path = _cache_file()
    try:
        text = json.dumps({"identity": identity, "data": data})
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        write_atomically(path, text, mode=0o600)
    except (OSError, TypeError, ValueError):
        pass
