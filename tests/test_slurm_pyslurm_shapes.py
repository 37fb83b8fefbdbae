"""The pyslurm backend's conversions, on objects shaped like pyslurm 23.x's `Job`/`Node`.

pyslurm cannot be built on these machines (no release for Slurm 22.05, SLURM-NOTES), so where it does
not import this file puts a stand-in module in its place: only to import the backend and check that
pyslurm's attribute names and value shapes (GRES dicts, minute time limits, constraint lists, RPCError
messages) map onto SlurmJob/SlurmNode as the command-line backend reports them. The real proof is
tests/test_slurm_contract.py, which runs the pyslurm backend wherever pyslurm imports.
"""

from __future__ import annotations

import importlib
import sys
import types
from dataclasses import dataclass, field

import pytest

from msched.config import Config
from msched.slurm.base import JobNotPending, JobUpdate, SlurmUnavailable


class RPCError(RuntimeError):
    pass


@dataclass
class FakeJob:                         # attribute names as in pyslurm/core/job/job.pyx
    id: int
    state: str = "PENDING"
    name: str = "j"
    user_name: str = "alice"
    partition: str = "gpu"
    priority: int = 1
    submit_time: int = 1_700_000_000
    start_time: int | None = None
    end_time: int | None = None
    time_limit: int | None = 60        # minutes
    num_nodes: int = 1
    ntasks: int = 1
    gres_per_node: dict = field(default_factory=dict)
    constraints: list = field(default_factory=list)
    comment: str | None = None
    allocated_nodes: str | None = None
    state_reason: str = "None"


@dataclass
class FakeNode:
    name: str
    state: str = "IDLE"
    configured_gres: dict = field(default_factory=dict)
    allocated_gres: dict = field(default_factory=dict)
    available_features: list = field(default_factory=list)
    partitions: list = field(default_factory=list)


@pytest.fixture
def backend(monkeypatch):
    try:
        import pyslurm  # noqa: F401
        pytest.skip("the real pyslurm imports here: the contract suite covers it")
    except ImportError:
        pass
    fake = types.ModuleType("pyslurm")
    fake.RPCError = RPCError
    state = {"jobs": {}, "nodes": {}, "modified": []}

    class Jobs:
        @staticmethod
        def load():
            return dict(state["jobs"])

    class Nodes:
        @staticmethod
        def load():
            return dict(state["nodes"])

    class JobSubmitDescription:
        def __init__(self, **kw):
            self.kw = kw

    class Job:
        def __init__(self, job_id):
            self.job_id = job_id

        @staticmethod
        def load(job_id):
            if job_id not in state["jobs"]:
                raise RPCError("Invalid job id specified")
            return state["jobs"][job_id]

        def modify(self, desc):
            job = state["jobs"][self.job_id]
            if job.state != "PENDING":
                raise RPCError("Job is no longer pending execution")
            state["modified"].append((self.job_id, desc.kw))

    fake.Jobs, fake.Nodes, fake.Job, fake.JobSubmitDescription = Jobs, Nodes, Job, JobSubmitDescription
    monkeypatch.setitem(sys.modules, "pyslurm", fake)
    sys.modules.pop("msched.slurm.pyslurm_backend", None)
    module = importlib.import_module("msched.slurm.pyslurm_backend")
    yield module.PyslurmClient(Config(gpu_aliases={"tesla_v100": "v100"})), state
    sys.modules.pop("msched.slurm.pyslurm_backend", None)


def test_jobs_and_nodes_map_like_the_cli_backend(backend):
    client, state = backend
    state["nodes"] = {
        "g1": FakeNode("g1", "MIXED", {"gpu:tesla_v100": 4}, {"gpu:tesla_v100": 2}, ["tesla_v100"], ["gpu"]),
        "g2": FakeNode("g2", "IDLE+DRAIN", {"gpu:a100": 8}, {}, ["a100"], ["gpu"]),
    }
    state["jobs"] = {
        1: FakeJob(1, gres_per_node={"gpu": 2}, constraints=["a100|tesla_v100"],
                   comment="msched:v1;model=resnet50 note"),
        2: FakeJob(2, state="RUNNING", gres_per_node={"gpu:tesla_v100": 1}, num_nodes=2, start_time=1_700_000_100,
                   allocated_nodes="g1", time_limit=90),
        3: FakeJob(3, state="COMPLETED", end_time=1_700_000_200, start_time=1_700_000_100),
    }
    nodes = {n.name: n for n in client.nodes()}
    assert nodes["g1"].gpu_type == "v100" and nodes["g1"].gpus == 4 and nodes["g1"].gpus_alloc == 2
    assert not nodes["g2"].usable and nodes["g2"].gpus_free == 0
    jobs = {j.job_id: j for j in client.jobs()}
    assert set(jobs) == {"1", "2"}
    assert jobs["1"].num_gpus == 2 and jobs["1"].features == "a100|tesla_v100" and jobs["1"].tag.model == "resnet50"
    assert jobs["2"].num_gpus == 2 and jobs["2"].gres_gpu_type == "v100" and jobs["2"].gpu_type == "v100"
    assert jobs["2"].time_limit_s == 90 * 60 and jobs["1"].start_time is None
    finished = client.finished_jobs(since=1_700_000_150)
    assert [j.job_id for j in finished] == ["3"]


def test_updates_and_errors(backend):
    client, state = backend
    state["jobs"] = {1: FakeJob(1), 2: FakeJob(2, state="RUNNING")}
    client.set_priority("1", 700)
    client.set_features("1", "a100")
    assert state["modified"] == [(1, {"priority": 700}), (1, {"constraints": "a100"})]
    with pytest.raises(JobNotPending):
        client.set_priority("2", 5)
    with pytest.raises(JobNotPending):
        client.set_features("2", "a100")
    with pytest.raises(JobNotPending):
        client.set_priority("99", 5)

    def down():
        raise RPCError("Unable to contact slurm controller (connect failure)")
    state_jobs = type("Boom", (), {"load": staticmethod(down)})
    sys.modules["pyslurm"].Jobs = state_jobs
    with pytest.raises(SlurmUnavailable):
        client.jobs()


def test_batched_updates_use_the_per_job_calls_features_first(backend):
    """pyslurm keeps SlurmClient's default update_jobs: features of every job, then priorities."""
    client, state = backend
    state["jobs"] = {1: FakeJob(1), 2: FakeJob(2, state="RUNNING"), 3: FakeJob(3)}
    results = client.update_jobs([JobUpdate("1", priority=700, features="a100"), JobUpdate("2", priority=5),
                                  JobUpdate("3", priority=600, features="v100"), JobUpdate("99", priority=1)])
    assert state["modified"] == [(1, {"constraints": "a100"}), (3, {"constraints": "v100"}),
                                 (1, {"priority": 700}), (3, {"priority": 600})]
    assert [r.applied for r in results] == [("features", "priority"), (), ("features", "priority"), ()]
    assert results[1].not_pending and results[3].not_pending
