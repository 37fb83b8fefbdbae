"""The submit-time GPU-type choice: which types to allow a job before any round has planned it.

Kept apart from the planner (snapshot, timeline, list scheduling) because msub makes this choice on
every submission and must not import the planner (see `msched.util.record`); the msched-once policy and
the msched policy's submit-time answer call the same function, so msub and the simulator agree.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

DEFAULT_SLACK = 1.25
DEFAULT_UNKNOWN_RUNTIME_S = 3600.0


def completion_choice(est: Mapping[str, float], free_time: Mapping[str, float] | None,
                      now: float | None, slack: float) -> tuple[str, ...]:
    """Types within `slack` of the best projected completion (free time of the type + estimate),
    earliest first. `est` holds the job's estimated runtime on each type it may use; types missing
    from a non-empty `free_time` are not in the cluster (unless none of `est`'s types is)."""
    if not est:
        return ()
    now = time.time() if now is None else now
    free_time = free_time or {}
    types = [t for t in est if (not free_time or t in free_time)] or list(est)
    done = {t: max(now, free_time.get(t, now)) + est[t] for t in types}
    best = min(done.values())
    horizon = now + (best - now) * slack
    return tuple(sorted((t for t in types if done[t] <= horizon + 1e-9), key=lambda t: (done[t], t)))
