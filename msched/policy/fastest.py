"""`fastest`: every job asks for the GPU type that is fastest on average (what users do by hand)."""

from __future__ import annotations

import math
from collections.abc import Mapping

from msched.estimate.perf_table import DEFAULT_PRECISION, PerfTable
from msched.policy.base import Policy


def rank_types(perf: PerfTable, precision: str = DEFAULT_PRECISION) -> list[str]:
    """GPU types, fastest on average first: geometric mean over the table's models of each type's
    single-GPU iteration time relative to that model's fastest type (models measured on every type
    count; when none is, every model measured on the type counts)."""
    types = perf.gpu_types()
    speeds = {m: perf.speeds(m, 1, None, precision) for m in sorted(perf.models())}
    common = [m for m, s in speeds.items() if s and all(t in s for t in types)]
    score = {}
    for t in types:
        models = common or [m for m, s in speeds.items() if t in s]
        rel = [math.log(speeds[m][t] / min(speeds[m].values())) for m in models if t in speeds[m]]
        score[t] = sum(rel) / len(rel) if rel else math.inf
    return sorted(types, key=lambda t: (score[t], t))


class FastestPolicy(Policy):
    """Constraint at submit = the best-ranked type the job can use; no rounds."""

    name = "fastest"
    replans = False

    def __init__(self, *, perf: PerfTable | None = None, ranking: list[str] | None = None, **opts):
        super().__init__(**opts)
        self._perf = perf
        self._ranking = list(ranking) if ranking is not None else None

    @property
    def ranking(self) -> list[str]:
        """Types fastest on average first; from `perf`, else the site's table; [] when there is none
        (then each job takes the type fastest for itself)."""
        if self._ranking is None:
            perf = self._perf
            if perf is None:
                try:
                    from msched.config import load_config
                    perf = PerfTable.load(load_config().performance)
                except (OSError, ValueError):
                    perf = None
            self._ranking = rank_types(perf) if perf is not None else []
        return self._ranking

    def submit_choice(self, est: Mapping[str, float], free_at: Mapping[str, float],
                      now: float) -> tuple[str, ...]:
        """The best-ranked type among those the job can use (its fastest when no ranking is known)."""
        ranking = self.ranking or sorted(est, key=lambda t: (est[t], t))
        usable = [t for t in ranking if t in est and (not free_at or t in free_at)]
        return (usable[0],) if usable else ()
