"""Replay captured round calls (bench/round_phases.py with ROUND_PHASES_CAPTURE=DIR) in one process: the
planner's `plan` and `settle` on the exact inputs of a real round, timed in this process's CPU, with a
digest of what each returned, so two msched trees can be compared on the same calls (issue 21, settle18p).

    PYTHONPATH=TREE python TREE/bench/replay_rounds.py DIR [--repeat N] [--only K,...] [--json F]

Each call is unpickled afresh for each repetition and the module caches a round's process starts without
(the shared base timeline, the feasibility memo) are emptied first, so every repetition runs as the
round's process ran it; the cyclic collector is off, as in a round. Prints per call the min CPU (s) of the
planner and of settle over the repetitions and the digests: `plan` (the policy's plan: every decision's
id, priority, types, start and end, the makespan end, the free times, the measure) and `held` (what settle
returned, and its report's counts and measures). `captured`: whether the digests equal those of the
plan and held plan pickled by the round itself (the tree that captured them), so a tree that changes a
plan shows it without a second tree's replay.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import pickle
import sys
import time
from pathlib import Path


def plan_digest(plan) -> str:  # noqa: ANN001
    """Everything a round reads of a plan, hashed."""
    rows = [(d.job_id, int(d.priority), tuple(d.gpu_types), d.est_start, d.est_end) for d in plan.decisions]
    whole = (plan.policy, rows, plan.est_makespan_end, sorted(plan.free_time.items()),
             getattr(plan, "measure", None), getattr(plan, "makespan_slack_s", 0.0))
    return hashlib.sha256(repr(whole).encode()).hexdigest()[:16]


def report_digest(report) -> str:  # noqa: ANN001
    fields = ("new_jobs", "candidates", "moved", "held_back", "changes", "kept", "accepted", "makespan_incumbent",
              "makespan_new", "makespan_held", "mean_end_incumbent", "mean_end_held")
    whole = ([getattr(report, f, None) for f in fields], sorted(report.gain.items()), sorted(report.relative.items()),
             sorted(report.placed))
    return hashlib.sha256(repr(whole).encode()).hexdigest()[:16]


def fresh_process_caches() -> None:
    """The module-level caches a round's new process starts without."""
    from msched.policy import timeline
    from msched.policy.base import PossibleTypes

    timeline._BASE.clear()
    PossibleTypes._last = ((), {}, {})


def replay(raw: bytes) -> dict:
    """One call: the policy's plan, then settle on it; CPU seconds and digests."""
    from msched.rounds.settle import settle

    call = pickle.loads(raw)
    cls, state = pickle.loads(call["policy"])
    policy = cls.__new__(cls)
    try:        # an option a later tree added (a capture by an older one lacks it): its default
        policy.__dict__.update(vars(cls()))
    except TypeError:
        pass
    policy.__dict__.update(state)
    snapshot = call["snapshot"]
    fresh_process_caches()
    c0 = time.process_time()
    plan = policy.plan(snapshot)
    c1 = time.process_time()
    held, report = settle(snapshot, plan, call["incumbent"], **call["how"])
    c2 = time.process_time()
    digests = plan_digest(plan), plan_digest(held) + "/" + report_digest(report)
    captured = plan_digest(call["plan"]), plan_digest(call["held"]) + "/" + report_digest(call["report"])
    return {"planner_cpu_s": c1 - c0, "settle_cpu_s": c2 - c1, "plan": digests[0], "held": digests[1],
            "captured": digests == captured,
            "pending": len(snapshot.pending), "moved": report.moved, "kept": report.kept}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folder", type=Path)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--only", default="", help="the calls to replay, by index in name order (e.g. 0,5)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    files = sorted(args.folder.glob("call-*.pkl"))
    if args.only:
        files = [files[int(k)] for k in args.only.split(",")]
    gc.disable()
    rows = []
    for path in files:
        raw = path.read_bytes()
        runs = [replay(raw) for _ in range(args.repeat)]
        if len({(r["plan"], r["held"]) for r in runs}) != 1:
            raise SystemExit(f"{path.name}: the repetitions gave different plans")
        row = {**runs[0], "call": path.name, "planner_cpu_s": min(r["planner_cpu_s"] for r in runs),
               "settle_cpu_s": min(r["settle_cpu_s"] for r in runs)}
        rows.append(row)
        print(f"{path.name}: {row['pending']} pending, planner {row['planner_cpu_s']:.3f} s, settle "
              f"{row['settle_cpu_s']:.3f} s (moved {row['moved']}, kept {row['kept']}), plan {row['plan']}, "
              f"held {row['held']}, as captured: {row['captured']}", flush=True)
        gc.collect()
    total = {"planner_cpu_s": sum(r["planner_cpu_s"] for r in rows), "settle_cpu_s": sum(r["settle_cpu_s"] for r in rows)}
    print(json.dumps({"msched": str(Path(sys.modules["msched"].__file__).parent.parent), **total}))
    if args.json:
        args.json.write_text(json.dumps({"calls": rows, **total}, indent=1))


if __name__ == "__main__":
    main()
