"""One contract, every backend: what the round core, `msched jobs` and calibrate rely on from a SlurmClient.

Runs against the command-line backend on the real local cluster (scripts/slurm-dev-cluster.sh), the
pyslurm backend where pyslurm imports, and the simulator's SimClient. Real Slurm moves on its own
clock, the simulator only when told: `Backend.wait` polls (bounded) on the first and advances the
simulated clock on the second, so each test reads the same on both.

The real cluster is shared by the whole session (and by other sessions): every job a test submits is
cancelled at its end, jobs sleep briefly, and each test works on one GPU type so tests don't collide.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TypeVar

import pytest
from helpers import wait_for

from msched.config import Config
from msched.slurm.base import (
    ACTIVE_STATES,
    FINISHED_STATES,
    PENDING,
    RUNNING,
    JobNotPending,
    JobRequest,
    JobUpdate,
    SlurmClient,
    SlurmError,
    SlurmJob,
)
from msched.tag import JobTag, with_tag

T = TypeVar("T")
TYPES = ("a100", "titanv", "rtx2080ti", "titanxp")
SIM_SPEC = "a100:4x1,titanv:4x1,rtx2080ti:4x1,titanxp:4x1"


@dataclass
class Backend:
    name: str
    client: SlurmClient
    real: bool
    submitted: list[str] = field(default_factory=list)

    def submit(self, **kwargs) -> str:
        kwargs.setdefault("time_limit_s", 600)
        extra = dict(kwargs.pop("extra", {}))
        extra.setdefault("--output", "/dev/null")      # the cluster is shared: no slurm-N.out litter
        job_id = self.client.submit(JobRequest(extra=extra, **kwargs))
        self.submitted.append(job_id)
        return job_id

    def job(self, job_id: str) -> SlurmJob | None:
        for j in self.client.jobs(states=ACTIVE_STATES + FINISHED_STATES):
            if j.job_id == job_id:
                return j
        return None

    def wait(self, predicate: Callable[[], T], timeout: float = 30.0, message: str = "condition") -> T:
        """Bounded wait: wall-clock polling on real Slurm, simulated seconds on the simulator."""
        if self.real:
            return wait_for(predicate, timeout=timeout, interval=0.1, message=message)
        start = self.client.now()
        while True:
            value = predicate()
            if value:
                return value
            if self.client.now() - start >= timeout:
                raise AssertionError(f"simulated {timeout}s passed waiting for {message}")
            self.client.advance(1)          # type: ignore[attr-defined]

    def settle(self) -> None:
        """Let the scheduler act on a change (the simulator only moves when told)."""
        if not self.real:
            self.client.advance(0)          # type: ignore[attr-defined]

    def wait_state(self, job_id: str, state: str, timeout: float = 30.0) -> SlurmJob:
        return self.wait(lambda: (j := self.job(job_id)) is not None and j.state == state and j,
                         timeout=timeout, message=f"job {job_id} to be {state}")

    def cleanup(self) -> None:
        for job_id in self.submitted:
            try:
                self.client.cancel(job_id)
            except SlurmError:
                pass


def _sim_backend() -> Backend:
    sim_client = pytest.importorskip("slurm_sim.client", reason="slurm_sim.client (the simulator) is not built yet")
    return Backend("sim", sim_client.SimClient.from_spec(SIM_SPEC), real=False)


@pytest.fixture(params=[
    pytest.param("cli", marks=pytest.mark.slurm),
    pytest.param("pyslurm", marks=pytest.mark.slurm),
    pytest.param("sim"),
])
def backend(request) -> Iterator[Backend]:
    if request.param == "sim":
        b = _sim_backend()
    else:
        cluster = request.getfixturevalue("slurm_cluster")
        if request.param == "cli":
            from msched.slurm.cli import CliClient
            b = Backend("cli", CliClient(Config(), env={"SLURM_CONF": str(cluster.conf)}), real=True)
        else:
            pytest.importorskip("pyslurm", reason="pyslurm does not import here (none builds for Slurm 22.05)")
            from msched.slurm.pyslurm_backend import PyslurmClient
            b = Backend("pyslurm", PyslurmClient(Config()), real=True)
    try:
        yield b
    finally:
        b.cleanup()


def _tag_comment(user_comment: str = "") -> str:
    return with_tag(JobTag(model="resnet50", ref="resnet50", group="resnet", iters=100, added="a100|titanv"),
                    user_comment)


def test_nodes_have_gpu_types_and_features(backend: Backend):
    nodes = backend.client.nodes()
    by_type = {n.gpu_type: n for n in nodes}
    assert set(TYPES) <= set(by_type), f"GPU types seen: {sorted(t or '' for t in by_type)}"
    for gpu_type in TYPES:
        node = by_type[gpu_type]
        assert node.gpus == 4
        assert gpu_type in node.features          # the feature msched retypes jobs through
        assert node.usable
        assert 0 <= node.gpus_alloc <= node.gpus


def test_submit_and_read_back(backend: Backend):
    comment = _tag_comment("my own note")
    untyped = backend.submit(name="contract-untyped", num_gpus=2, constraint="a100|titanv",
                             comment=comment, hold=True)
    typed = backend.submit(name="contract-typed", num_gpus=1, gpu_type="titanv", hold=True)
    backend.settle()
    jobs = {j.job_id: j for j in backend.client.jobs()}
    assert untyped in jobs and typed in jobs
    u = jobs[untyped]
    assert u.state == PENDING and u.is_pending
    assert u.name == "contract-untyped"
    assert u.num_gpus == 2
    assert u.gres_gpu_type is None
    assert u.features == "a100|titanv"
    assert u.comment == comment
    assert u.tag is not None and u.tag.model == "resnet50" and u.tag.iters == 100
    assert u.tag.added == "a100|titanv"
    assert u.user_comment == "my own note"
    assert u.time_limit_s == 600
    assert u.priority == 0 and u.reason.startswith("JobHeld")
    assert 0 <= u.submit_time <= backend.client.now() + 1
    assert u.start_time is None and u.gpu_type is None
    t = jobs[typed]
    assert t.num_gpus == 1 and t.gres_gpu_type == "titanv"
    assert t.tag is None and t.features == ""
    # A job never shows up among the wrong states.
    assert untyped not in {j.job_id for j in backend.client.jobs(states=(RUNNING,))}


def test_submit_refused_is_one_line_error(backend: Backend):
    with pytest.raises(SlurmError) as err:
        backend.submit(name="contract-bad", num_gpus=1, constraint="nosuchfeature", wrap="sleep 1")
    message = str(err.value)
    assert "\n" not in message and "feature" in message.lower()


def test_running_job_reports_its_gpu_type_and_refuses_updates(backend: Backend):
    job_id = backend.submit(name="contract-run", num_gpus=1, constraint="a100", wrap="sleep 60")
    job = backend.wait_state(job_id, RUNNING)
    assert job.gpu_type == "a100"
    assert job.nodes
    assert job.start_time is not None and job.start_time >= job.submit_time
    with pytest.raises(JobNotPending):
        backend.client.set_priority(job_id, 500)
    with pytest.raises(JobNotPending):
        backend.client.set_features(job_id, "titanv")
    backend.client.cancel(job_id)
    done = backend.wait(lambda: (j := backend.job(job_id)) is not None and j.state in FINISHED_STATES and j,
                        message="cancelled job to end")
    assert done.state == "CANCELLED"
    assert job_id not in {j.job_id for j in backend.client.jobs()}


def test_set_features_retypes_a_pending_job(backend: Backend):
    job_id = backend.submit(name="contract-retype", num_gpus=1, constraint="titanv", wrap="sleep 30",
                            comment=_tag_comment(), hold=True)
    backend.settle()
    backend.client.set_features(job_id, "titanxp")
    assert backend.job(job_id).features == "titanxp"
    backend.client.release(job_id)
    job = backend.wait_state(job_id, RUNNING)
    assert job.gpu_type == "titanxp"
    assert job.comment == _tag_comment()        # an update never touches the tag


def test_set_features_empty_clears_the_constraint(backend: Backend):
    job_id = backend.submit(name="contract-clear", num_gpus=1, constraint="a100|titanv", wrap="sleep 1",
                            hold=True)
    backend.settle()
    backend.client.set_features(job_id, "")
    assert backend.job(job_id).features == ""


def test_set_priority_changes_start_order(backend: Backend):
    """Fill rtx2080ti with a blocker, queue first then second, give second the higher priority,
    release the blocker: second starts, first still waits (without the update, first would)."""
    blocker = backend.submit(name="contract-blocker", num_gpus=4, constraint="rtx2080ti", wrap="sleep 300")
    backend.wait_state(blocker, RUNNING, timeout=60)
    first = backend.submit(name="contract-first", num_gpus=4, constraint="rtx2080ti", wrap="sleep 30")
    second = backend.submit(name="contract-second", num_gpus=4, constraint="rtx2080ti", wrap="sleep 30")
    backend.settle()
    backend.client.set_priority(first, 1000)
    backend.client.set_priority(second, 2000)
    jobs = {j.job_id: j for j in backend.client.jobs(states=(PENDING,))}
    assert jobs[first].priority == 1000 and jobs[second].priority == 2000
    backend.client.cancel(blocker)
    started = backend.wait(
        lambda: [j.job_id for j in backend.client.jobs(states=(RUNNING,)) if j.job_id in (first, second)],
        message="one of the queued jobs to start")
    assert started == [second]
    assert backend.job(first).state == PENDING


def test_update_jobs_writes_every_job_and_reports_each_failure(backend: Backend):
    """A round's batched write: every pending job gets its values, a job that is not pending comes back
    JobNotPending, a refused feature expression comes back as that job's SlurmError (and its priority
    is then not written), one result per update, in order."""
    blocker = backend.submit(name="contract-batch-blocker", num_gpus=4, constraint="rtx2080ti", wrap="sleep 300")
    backend.wait_state(blocker, RUNNING, timeout=60)
    first = backend.submit(name="contract-batch-1", num_gpus=4, constraint="rtx2080ti", wrap="sleep 1")
    second = backend.submit(name="contract-batch-2", num_gpus=4, constraint="rtx2080ti", wrap="sleep 1")
    refused = backend.submit(name="contract-batch-refused", num_gpus=4, constraint="rtx2080ti", wrap="sleep 1")
    held = backend.submit(name="contract-batch-held", num_gpus=1, constraint="titanv", wrap="sleep 1", hold=True)
    gone = backend.submit(name="contract-batch-gone", num_gpus=1, constraint="titanxp", wrap="sleep 1", hold=True)
    backend.settle()
    backend.client.cancel(gone)
    backend.wait_state(gone, "CANCELLED")
    before = {j.job_id: j for j in backend.client.jobs()}
    results = backend.client.update_jobs([
        JobUpdate(first, priority=4242, features="rtx2080ti"),
        JobUpdate(blocker, priority=4343),                      # running: never written
        JobUpdate(second, priority=4141),
        JobUpdate(refused, priority=4444, features="nosuchfeature"),
        JobUpdate(held, features="titanv|titanxp"),              # a held job takes features
        JobUpdate(gone, priority=4545, features="titanxp"),      # ended
    ])
    assert [r.job_id for r in results] == [first, blocker, second, refused, held, gone]
    by = {r.job_id: r for r in results}
    assert by[first].ok and by[first].applied == ("features", "priority")
    assert by[second].ok and by[second].applied == ("priority",)
    assert by[held].ok and by[held].applied == ("features",)
    assert by[blocker].not_pending and by[blocker].applied == ()
    assert by[gone].not_pending and by[gone].applied == ()
    assert by[refused].error is not None and not by[refused].not_pending and by[refused].applied == ()
    assert "\n" not in str(by[refused].error)
    after = {j.job_id: j for j in backend.client.jobs()}
    assert after[first].priority == 4242 and after[first].features == "rtx2080ti"
    assert after[second].priority == 4141
    assert after[held].features == "titanv|titanxp"
    assert after[blocker].priority == before[blocker].priority and after[blocker].state == RUNNING
    assert after[refused].priority == before[refused].priority and after[refused].features == "rtx2080ti"
    assert backend.client.update_jobs([]) == []
    with pytest.raises(ValueError):
        backend.client.update_jobs([JobUpdate(first, priority=1), JobUpdate(first, features="rtx2080ti")])


def test_hold_and_release(backend: Backend):
    blocker = backend.submit(name="contract-hold-blocker", num_gpus=4, constraint="titanv", wrap="sleep 300")
    backend.wait_state(blocker, RUNNING, timeout=60)
    queued = backend.submit(name="contract-held", num_gpus=4, constraint="titanv", wrap="sleep 30")
    backend.settle()
    backend.client.hold(queued)
    held = backend.job(queued)
    assert held.state == PENDING and held.priority == 0 and held.reason.startswith("JobHeld")
    backend.client.release(queued)
    released = backend.job(queued)
    assert released.priority > 0 and not released.reason.startswith("JobHeld")
    backend.client.cancel(blocker)
    backend.wait_state(queued, RUNNING)


def test_cancel_pending_job(backend: Backend):
    job_id = backend.submit(name="contract-cancel", num_gpus=1, constraint="titanxp", wrap="sleep 30", hold=True)
    backend.settle()
    backend.client.cancel(job_id)
    backend.settle()
    assert job_id not in {j.job_id for j in backend.client.jobs()}
    assert backend.job(job_id).state == "CANCELLED"


def test_finished_jobs_keep_tag_and_type(backend: Backend):
    since = backend.client.now() - 1
    job_id = backend.submit(name="contract-done", num_gpus=1, constraint="titanxp", wrap="sleep 1",
                            comment=_tag_comment("done"))
    done = backend.wait(lambda: next((j for j in backend.client.finished_jobs(since=since) if j.job_id == job_id),
                                     None), message="the job among finished_jobs()")
    assert done.state == "COMPLETED"
    assert done.gpu_type == "titanxp"
    assert done.tag is not None and done.tag.model == "resnet50" and done.user_comment == "done"
    assert done.start_time is not None and done.end_time is not None and done.end_time >= done.start_time
    assert done.end_time >= since


def test_now_is_the_cluster_clock(backend: Backend):
    if backend.real:
        assert abs(backend.client.now() - time.time()) < 5
    else:
        t0 = backend.client.now()
        backend.client.advance(10)      # type: ignore[attr-defined]
        assert backend.client.now() == pytest.approx(t0 + 10)
