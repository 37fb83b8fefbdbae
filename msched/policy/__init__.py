"""Scheduling policies: interchangeable objects behind one registry, `get_policy(name, **opts)`.

Each policy has `.name`, `.replans`, `.estimator_kind` ("tag" or "truth"), `.submit_types(job, free_time)`
and `.plan(snapshot) -> Plan` (a pure function of a `ClusterSnapshot`). See `base.py`.

The policy classes are imported when first asked for: msub imports `msched.policy.choice` and
`msched.slurm.feature_expr` on every submission and must not pay for the planner (see `msched.util.record`).
"""

from __future__ import annotations

from msched.util.light import lru_cache

_COMMON = frozenset({"slack", "backfill", "unknown_runtime_s"})
_REPLANNING = _COMMON | {"objective", "starvation_age_s", "hysteresis", "affinity", "managed_first", "planner",
                         "time_box_s", "head_jobs", "tolerance", "cpsat_jobs", "cpsat_work", "lp_start",
                         "informed_slack", "batch_objective", "price_quantile", "price_window_s", "price_measure", "free_slack", "wait_factor",
                         "wait_weight", "age_weight", "settled_s", "settled_work", "settled_evals",
                         "short_first", "balance_types", "short_types", "short_reference", "drain_wide"}
# the policies, in listing order, and the options each takes (options a policy does not know are
# ignored for the ones listed here)
_OPTIONS = {"fifo": _COMMON, "fastest": _COMMON | {"perf", "ranking"}, "msched-once": _COMMON,
            "msched": _REPLANNING, "oracle": _REPLANNING}
POLICY_NAMES = tuple(_OPTIONS)
_ALL_OPTIONS = frozenset().union(*_OPTIONS.values())


class UnknownPolicy(ValueError):
    """A policy name that is not registered; the message lists the valid ones."""


@lru_cache(maxsize=1)
def policy_classes() -> dict[str, type]:
    """Name -> policy class, in POLICY_NAMES order."""
    from msched.policy.fastest import FastestPolicy
    from msched.policy.fifo import FifoPolicy
    from msched.policy.msched import MschedOncePolicy
    from msched.policy.planner import OptimizingOraclePolicy, OptimizingPolicy

    return {"fifo": FifoPolicy, "fastest": FastestPolicy, "msched-once": MschedOncePolicy,
            "msched": OptimizingPolicy, "oracle": OptimizingOraclePolicy}


def get_policy(name: str, **opts):  # noqa: ANN201 - a Policy (msched.policy.base), imported lazily
    """A fresh policy object. Options: slack, backfill, unknown_runtime_s (all); objective,
    starvation_age_s, hysteresis, affinity, managed_first, planner ("optimize", "greedy" or "cpsat"), time_box_s,
    head_jobs, tolerance, cpsat_jobs, cpsat_work, lp_start, batch_objective, settled_s, settled_work, settled_evals,
    short_first, balance_types, short_types, short_reference (msched, oracle: msched.policy.planner), drain_wide
    (msched, oracle: msched.policy.drain), informed_slack
    (msched, oracle: msched.policy.choice.submit_slack); perf or ranking (fastest). Options a
    policy does not know are
    ignored for the ones listed here, so one option set can build every policy of a comparison."""
    key = name.strip().lower() if isinstance(name, str) else None
    if key not in _OPTIONS:
        raise UnknownPolicy(f"unknown policy {name!r}; choose one of {', '.join(POLICY_NAMES)}")
    unknown = sorted(set(opts) - _ALL_OPTIONS)
    if unknown:
        raise UnknownPolicy(f"unknown policy option(s) {', '.join(unknown)}; valid: {', '.join(sorted(_ALL_OPTIONS))}")
    return policy_classes()[key](**{k: v for k, v in opts.items() if k in _OPTIONS[key]})


def __getattr__(name: str):  # noqa: ANN202 - PEP 562: the registry's classes on first use
    if name == "POLICIES":
        return policy_classes()
    if name == "Policy":
        from msched.policy.base import Policy
        return Policy
    raise AttributeError(f"module 'msched.policy' has no attribute {name!r}")


__all__ = ["POLICIES", "POLICY_NAMES", "Policy", "UnknownPolicy", "get_policy", "policy_classes"]
