"""Where a simulated round's CPU goes, per call: bench_sim's online trace (the same generator, `--jobs` of
it) replayed under msched with a CPU timer (time.process_time) around the round's calls, each call's own
time (the wrapped calls inside it taken out), per round. The wrappers cost a few microseconds a call, so
calls made many times a round (construct, score) read a little high; the split, not the sum, is the figure.
Prints the replay's outcomes digest too (start, end, type, state and writes of every job): the same digest
with a cut on and off (`--cuts-anew`, bench_sim.py's) is the plan-identical check on a whole replay.

    .venv/bin/python bench/profile_rounds.py [--jobs 5000] [--cuts-anew] [--rounds-anew] [--cuts12-anew]
                                             [--cuts13-anew] [--cuts14-anew] [--cuts15-anew] [--cuts16-anew]
                                             [--settled-work F]
"""

from __future__ import annotations

import argparse
import collections
import functools
import hashlib
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import bench_sim  # noqa: E402

import msched.policy.planner as planner  # noqa: E402
import msched.rounds.core as core  # noqa: E402
from msched.estimate.perf_table import PerfTable  # noqa: E402
from msched.policy.msched import MschedPolicy  # noqa: E402
from slurm_sim.client import SimClient  # noqa: E402
from slurm_sim.cluster import parse_cluster  # noqa: E402
from slurm_sim.commands import default_truth_path  # noqa: E402
from slurm_sim.compare import Classifier, SimSetup, replay  # noqa: E402
from slurm_sim.metrics import trace_bound  # noqa: E402
from slurm_sim.simulator import Simulator  # noqa: E402

CALLS = [(core, "build_snapshot"), (core, "settle"), (core, "diff_plan"), (core, "deferred"), (core, "packing_round"),
         (core, "within_budget"), (core, "published_free_time"), (core, "policy_prices"), (core, "apply_updates"),
         (core, "incumbent_after"), (core, "head_places"), (core, "with_pairing"), (core, "shard_view"),
         (planner.OptimizingPolicy, "plan"), (planner.OptimizingPolicy, "order"),
         (planner.OptimizingPolicy, "_each_ends_at_its_earliest"), (planner.OptimizingPolicy, "_split"),
         (planner._Search, "__init__"), (planner._Search, "run"), (planner._Search, "_cpsat_worth_it"),
         (planner, "score"), (MschedPolicy, "construct"), (MschedPolicy, "plan_from"),
         (Simulator, "run_until"), (SimClient, "jobs"), (SimClient, "nodes"), (SimClient, "update_jobs")]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=5000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--load", type=float, default=0.85)
    ap.add_argument("--cuts-anew", action="store_true", help="planner11's cuts off (bench_sim.cuts_anew)")
    ap.add_argument("--rounds-anew", action="store_true", help="planner10's kept readings off (bench_sim.rounds_anew)")
    ap.add_argument("--cuts12-anew", action="store_true", help="planner12's cuts off (bench_sim.cuts12_anew)")
    ap.add_argument("--cuts13-anew", action="store_true", help="planner13's cuts off (bench_sim.cuts13_anew)")
    ap.add_argument("--cuts14-anew", action="store_true", help="planner14's cuts off (bench_sim.cuts14_anew)")
    ap.add_argument("--cuts15-anew", action="store_true", help="planner15's cuts off (bench_sim.cuts15_anew)")
    ap.add_argument("--cuts16-anew", action="store_true", help="planner16's cuts off (bench_sim.cuts16_anew)")
    ap.add_argument("--settled-work", type=float, default=None, help="msched's settled_work option (changes plans)")
    a = ap.parse_args()
    if a.cuts12_anew:
        bench_sim.cuts12_anew()
    if a.cuts13_anew:
        bench_sim.cuts13_anew()
    if a.cuts14_anew:
        bench_sim.cuts14_anew()
    if a.cuts15_anew:
        bench_sim.cuts15_anew()
    if a.cuts16_anew:
        bench_sim.cuts16_anew()
    if a.cuts_anew:
        bench_sim.cuts_anew()
    if a.rounds_anew:
        bench_sim.rounds_anew()
    own: collections.Counter = collections.Counter()
    count: collections.Counter = collections.Counter()
    stack: list[float] = []
    clock = time.process_time

    def wrap(owner, name: str) -> None:  # noqa: ANN001
        fn = getattr(owner, name)
        label = f"{getattr(owner, '__name__', owner)}.{name}"

        @functools.wraps(fn)
        def timed(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
            t0 = clock()
            stack.append(0.0)
            try:
                return fn(*args, **kwargs)
            finally:
                spent = clock() - t0
                inner = stack.pop()
                own[label] += spent - inner
                count[label] += 1
                if stack:
                    stack[-1] += spent
        setattr(owner, name, timed)

    for owner, name in CALLS:
        wrap(owner, name)
    truth = PerfTable.load(default_truth_path())
    cluster = parse_cluster(bench_sim.CLUSTER)
    perf, refs = bench_sim.knowledge(truth)
    trace, _ = bench_sim.online_trace(a.jobs, truth, cluster, a.seed, a.load)
    options = {"settled_work": a.settled_work} if a.settled_work is not None else {}
    setup = SimSetup(cluster, truth, perf, Classifier(refs, perf), round_s=60.0, policy_options=options)
    bound = trace_bound(trace, truth, cluster)
    c0 = clock()
    res = replay(trace, "msched", setup, bound=bound)
    total = clock() - c0
    rounds = max(1, res.rounds)
    print(f"{a.jobs} jobs: replay {total:.2f} s CPU, {res.rounds} rounds ({res.rounds_skipped} skipped), "
          f"{total / rounds * 1e3:.3f} ms a round, mean JCT {res.metrics['mean_jct_s'] / 3600:.3f} h")
    for label, spent in own.most_common():
        print(f"  {label:48s} {spent / rounds * 1e3:7.3f} ms/round {100 * spent / total:5.1f}%  "
              f"{count[label] / rounds:6.2f} calls/round")
    print(f"  {'(the rest: the replay loop, submissions, run_round itself)':48s} "
          f"{(total - sum(own.values())) / rounds * 1e3:7.3f} ms/round")
    digest = hashlib.sha256(repr([(o.job_id, o.gpu_type, o.start, o.end, o.state, o.writes)
                                  for o in res.outcomes]).encode()).hexdigest()[:16]
    print(f"outcomes digest {digest}")


if __name__ == "__main__":
    main()
