"""Scheduling policies: interchangeable objects behind one registry, `get_policy(name, **opts)`.

Each policy has `.name`, `.replans`, `.estimator_kind` ("tag" or "truth"), `.submit_types(job, free_time)`
and `.plan(snapshot) -> Plan` (a pure function of a `ClusterSnapshot`). See `base.py`.
"""

from __future__ import annotations

from msched.policy.base import Policy
from msched.policy.fastest import FastestPolicy
from msched.policy.fifo import FifoPolicy
from msched.policy.similarity import MschedOncePolicy, MschedPolicy, OraclePolicy

POLICIES: dict[str, type[Policy]] = {
    "fifo": FifoPolicy,
    "fastest": FastestPolicy,
    "msched-once": MschedOncePolicy,
    "msched": MschedPolicy,
    "oracle": OraclePolicy,
}
POLICY_NAMES = tuple(POLICIES)


class UnknownPolicy(ValueError):
    """A policy name that is not registered; the message lists the valid ones."""


def get_policy(name: str, **opts) -> Policy:
    """A fresh policy object. Options: slack, backfill, unknown_runtime_s (all); objective,
    starvation_age_s, hysteresis, affinity (msched, oracle); perf or ranking (fastest). Options a policy does not know are
    ignored for the ones listed here, so one option set can build every policy of a comparison."""
    try:
        cls = POLICIES[name.strip().lower()]
    except (KeyError, AttributeError):
        raise UnknownPolicy(f"unknown policy {name!r}; choose one of {', '.join(POLICY_NAMES)}") from None
    known = _OPTIONS[cls]
    unknown = sorted(set(opts) - _ALL_OPTIONS)
    if unknown:
        raise UnknownPolicy(f"unknown policy option(s) {', '.join(unknown)}; valid: {', '.join(sorted(_ALL_OPTIONS))}")
    return cls(**{k: v for k, v in opts.items() if k in known})


_COMMON = {"slack", "backfill", "unknown_runtime_s"}
_OPTIONS: dict[type[Policy], set[str]] = {
    FifoPolicy: _COMMON,
    FastestPolicy: _COMMON | {"perf", "ranking"},
    MschedOncePolicy: _COMMON,
    MschedPolicy: _COMMON | {"objective", "starvation_age_s", "hysteresis", "affinity"},
    OraclePolicy: _COMMON | {"objective", "starvation_age_s", "hysteresis", "affinity"},
}
_ALL_OPTIONS = set().union(*_OPTIONS.values())

__all__ = ["POLICIES", "POLICY_NAMES", "Policy", "UnknownPolicy", "get_policy"]
