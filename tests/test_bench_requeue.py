"""bench/bench_requeue.py's lever model on cases worked out by hand (the simulator's requeue itself:
tests/test_sim.py)."""

from __future__ import annotations

import sys
from pathlib import Path

from msched.estimate.perf_table import PerfRow, PerfTable
from msched.slurm.base import JobRequest
from slurm_sim.client import SimClient

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
from bench_requeue import RequeueLever  # noqa: E402

# one model, 400 s on a100 and 1000 s on titanxp (4000 iterations of 100 / 250 ms)
TRUTH = PerfTable([PerfRow("m", "a100", 1, 12, "float", 100.0), PerfRow("m", "titanxp", 1, 12, "float", 250.0)])
MODEL = {"model": "m", "iterations": 4000, "batch_size": 12}


def cluster_with_a_job_on_titanxp_and_the_a100_freed_at(free_at: float) -> tuple[SimClient, str]:
    c = SimClient.from_spec("a100:1x1,titanxp:1x1", truth=TRUTH)
    c.submit(JobRequest(name="x", num_gpus=1, constraint="a100", extra={"runtime_s": free_at}))
    a = c.submit(JobRequest(name="a", num_gpus=1, constraint="titanxp", extra=dict(MODEL)))
    c.run_until(free_at)
    return c, a


def test_a_young_job_moves_to_the_freed_faster_type_and_loses_what_it_ran():
    """At 100 a (titanxp, ends at 1000) can end at 100 + 400 = 500 on the free a100: requeued, it does."""
    c, a = cluster_with_a_job_on_titanxp_and_the_a100_freed_at(100)
    lever = RequeueLever(max_age_s=300, speedup=2.0)
    lever(c.sim, c.sim.now)
    c.run_until(5000)
    job = c.sim.jobs[a]
    assert (job.gpu_type, job.start_time, job.end_time, lever.requeues, lever.lost_s) == ("a100", 100, 500, 1, 100)


def test_too_old_too_little_faster_or_no_gain_leaves_it_running():
    """Age 100 > 60; speedup 2.5 < 3; and at 700 the a100 would end it at 1100, after its own 1000."""
    for free_at, lever in ((100, RequeueLever(max_age_s=60)), (100, RequeueLever(speedup=3.0)),
                           (700, RequeueLever())):
        c, a = cluster_with_a_job_on_titanxp_and_the_a100_freed_at(free_at)
        lever(c.sim, c.sim.now)
        c.run_until(5000)
        job = c.sim.jobs[a]
        assert (job.gpu_type, job.start_time, job.end_time, lever.requeues) == ("titanxp", 0, 1000, 0)


def test_a_checkpointed_job_keeps_its_work():
    """keep_work at 500: half of the titanxp run is done, so the a100 runs the other half, 200 s: 500-700."""
    c, a = cluster_with_a_job_on_titanxp_and_the_a100_freed_at(500)
    lever = RequeueLever(keep_work=True)
    lever(c.sim, c.sim.now)
    c.run_until(5000)
    job = c.sim.jobs[a]
    assert (job.gpu_type, job.start_time, job.end_time, lever.lost_s) == ("a100", 500, 700, 0)
