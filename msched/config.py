"""Site configuration: one TOML file, with defaults that work with no file at all.

The file is `/etc/msched/msched.toml`, or the path in `MSCHED_CONFIG`. Every key is optional:

    database_url   = "sqlite:////var/lib/msched/msched.db"   # any SQLAlchemy URL
    sbatch         = "/usr/bin/sbatch"     # the real sbatch (msub may be installed as `sbatch`)
    state_dir      = "/var/lib/msched"     # lock file, published free-time file
    references     = "profiles/reference_models.json"   # or a list of model names
    performance    = "profiles/gpu_performance.csv"
    starvation_age_s = 86400
    objective      = "makespan"            # or "jct"
    metric         = "cosine"              # or "euclidean", "manhattan"
    backend        = "auto"                # "cli", "pyslurm" or "auto"
    cluster_name   = "local"
    constraint_slack = 1.25                # msub: types within this factor of the best are OR-ed in

    [gpu_aliases]                          # Slurm gres/feature name -> canonical lowercase name
    "A100-SXM4-40GB" = "a100"
    "tesla_v100" = "v100"

This module must stay cheap to import: msub reads it on every submission.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent
PROFILES_DIR = PROJECT_ROOT / "profiles"
DEFAULT_CONFIG_PATH = Path("/etc/msched/msched.toml")
OBJECTIVES = ("makespan", "jct")
METRICS = ("cosine", "euclidean", "manhattan")
BACKENDS = ("auto", "cli", "pyslurm")


class ConfigError(ValueError):
    """A configuration file that cannot be used; the message is one line naming the problem."""


def _default_state_dir() -> Path:
    if os.geteuid() == 0:
        return Path("/var/lib/msched")
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "msched"


@dataclass
class Config:
    database_url: str = ""
    sbatch: str = "/usr/bin/sbatch"
    state_dir: Path = field(default_factory=_default_state_dir)
    references: str | list[str] = str(PROFILES_DIR / "reference_models.json")
    performance: str = str(PROFILES_DIR / "gpu_performance.csv")
    starvation_age_s: float = 86400.0
    objective: str = "makespan"
    metric: str = "cosine"
    backend: str = "auto"
    cluster_name: str = "local"
    constraint_slack: float = 1.25
    gpu_aliases: dict[str, str] = field(default_factory=dict)
    source: str = "defaults"

    def __post_init__(self) -> None:
        self.state_dir = Path(self.state_dir)
        if not self.database_url:
            self.database_url = f"sqlite:///{self.state_dir / 'msched.db'}"
        if self.objective not in OBJECTIVES:
            raise ConfigError(f"objective {self.objective!r} is not one of {', '.join(OBJECTIVES)}")
        if self.metric not in METRICS:
            raise ConfigError(f"metric {self.metric!r} is not one of {', '.join(METRICS)}")
        if self.backend not in BACKENDS:
            raise ConfigError(f"backend {self.backend!r} is not one of {', '.join(BACKENDS)}")
        self.gpu_aliases = {str(k).lower(): str(v).lower() for k, v in self.gpu_aliases.items()}

    @property
    def lock_path(self) -> Path:
        return self.state_dir / "reorder.lock"

    @property
    def free_time_path(self) -> Path:
        """The small file the reorderer publishes for msub: projected free time per GPU type."""
        return self.state_dir / "gpu_free_time.json"

    def canonical_gpu_type(self, name: str) -> str:
        """Map a Slurm gres type or feature name to msched's canonical lowercase GPU type."""
        key = name.strip().lower()
        return self.gpu_aliases.get(key, key)


def config_path() -> Path:
    return Path(os.environ.get("MSCHED_CONFIG") or DEFAULT_CONFIG_PATH)


def load_config(path: str | os.PathLike | None = None) -> Config:
    """Read the site configuration; a missing default file means all defaults."""
    explicit = path is not None or "MSCHED_CONFIG" in os.environ
    p = Path(path) if path is not None else config_path()
    if not p.exists():
        if explicit:
            raise ConfigError(f"configuration file {p} does not exist")
        return Config()
    import tomllib  # only when there is a file: msub starts faster without one

    try:
        data = tomllib.loads(p.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"cannot read configuration {p}: {exc}") from exc
    known = {f.name for f in fields(Config)} - {"source"}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ConfigError(f"{p}: unknown key(s) {', '.join(unknown)}; valid keys: {', '.join(sorted(known))}")
    base = p.parent
    for key in ("references", "performance"):
        if isinstance(data.get(key), str) and not Path(data[key]).is_absolute():
            candidate = base / data[key]
            data[key] = str(candidate if candidate.exists() else PROJECT_ROOT / data[key])
    return Config(**data, source=str(p))
