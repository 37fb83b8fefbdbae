"""The simulator's seam for bench/bench_liar.py: a user's tags may misstate iterations (SimSetup.claim_factors)
while the jobs' true work stays the trace's. Hand-computed on one a100 GPU (100 ms an iteration)."""

from __future__ import annotations

from dataclasses import replace

from msched.estimate.perf_table import PerfRow, PerfTable
from slurm_sim.cluster import parse_cluster
from slurm_sim.compare import Classifier, SimSetup, replay
from slurm_sim.trace import TraceJob


def test_a_deflated_claim_moves_the_liars_job_ahead_and_its_true_runtime_stays():
    """C (1000 it, 100 s) starts at t=0; A (honest) and B (the liar's) arrive at t=1, 1000 it each.
    Honest, the jct objective keeps their order: A 100-200, B 200-300. B claiming a tenth (100 it, 10 s)
    is planned first by the round at t=60: B 100-200, A 200-300. Either way each job runs its true 100 s."""
    truth = PerfTable([PerfRow("resnet50", "a100", 1, 12, "float", 100.0)])
    cluster = parse_cluster("a100:1x1")
    trace = [TraceJob("C", 0.0, "carol", "resnet50", 1, 12, 1000), TraceJob("A", 1.0, "alice", "resnet50", 1, 12, 1000),
             TraceJob("B", 1.0, "mallory", "resnet50", 1, 12, 1000)]
    setup = SimSetup(cluster, truth, truth, Classifier(["resnet50"], truth), objective="jct")
    honest = {o.job_id: (o.start, o.end) for o in replay(trace, "msched", setup).outcomes}
    assert honest == {"C": (0, 100), "A": (100, 200), "B": (200, 300)}
    lying = {o.job_id: (o.start, o.end) for o in
             replay(trace, "msched", replace(setup, claim_factors={"mallory": 0.1})).outcomes}
    assert lying == {"C": (0, 100), "B": (100, 200), "A": (200, 300)}
