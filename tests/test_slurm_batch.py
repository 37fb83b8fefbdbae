"""Batched job updates (`SlurmClient.update_jobs`, the command-line backend's one squeue + one scontrol per
field), from scontrol's recorded behaviour (tests/data/slurm/scontrol_batch.json, written by
tests/data/slurm/record_batch.py on the real 22.05.8 dev cluster) and against the real cluster itself.
The every-backend contract is in test_slurm_contract.py; the round core's use of it in test_rounds.py."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from helpers import wait_for

from msched.config import Config
from msched.rounds.core import Update, apply_updates
from msched.slurm.base import (
    JobNotPending,
    JobRequest,
    JobUpdate,
    SlurmClient,
    SlurmError,
    SlurmUnavailable,
    UpdateResult,
)
from msched.slurm.cli import (
    SEP,
    CliClient,
    classify_error,
    parse_scontrol_errors,
    scontrol_update_line,
)

DATA = Path(__file__).parent / "data" / "slurm"
RECORDED = json.loads((DATA / "scontrol_batch.json").read_text())
IDS = RECORDED["ids"]
PROBES = RECORDED["probes"]


def _stdin_ids(probe: dict) -> list[str]:
    return [line.split()[1].split("=", 1)[1] for line in probe["stdin"].splitlines()]


# ------------------------------------------------------------------------- what scontrol does (recorded)
def test_recorded_batch_reports_each_failed_job_and_runs_every_line():
    probe = PROBES["stdin_mixed"]
    assert probe["rc"] == 1
    per_job, other = parse_scontrol_errors(probe["stderr"], _stdin_ids(probe))
    assert other == []
    array_task = f"{IDS['array']}_9"
    assert set(per_job) == {IDS["finished"], IDS["running"], "999999", IDS["held"], IDS["pending3"], array_task}
    for job_id in (IDS["finished"], IDS["running"], "999999", IDS["held"], array_task):
        assert classify_error(per_job[job_id], JobNotPending) is JobNotPending, per_job[job_id]
    assert classify_error(per_job[IDS["pending3"]], JobNotPending) is SlurmError     # invalid feature
    after = probe["after"]
    # lines after failed ones were still run
    assert after[IDS["pending1"]]["priority"] == "501" and after[IDS["pending2"]]["priority"] == "503"
    # a refused Features= does not stop a later Priority= for the same job: why the client writes
    # features and priorities in two processes and drops the priority of a job whose features failed
    assert after[IDS["pending3"]]["priority"] == "506" and after[IDS["pending3"]]["features"] == "titanv"
    assert after[IDS["running"]]["features"] == "a100"


def test_recorded_features_batch_sets_clears_and_refuses_running_jobs():
    probe = PROBES["stdin_features"]
    per_job, other = parse_scontrol_errors(probe["stderr"], _stdin_ids(probe))
    assert probe["rc"] == 1 and other == [] and list(per_job) == [IDS["running"]]
    after = probe["after"]
    assert after[IDS["pending1"]]["features"] == "titanv|titanxp"
    assert after[IDS["pending2"]]["features"] == "(null)"                  # Features= clears it
    assert after[IDS["pending3"]]["features"] == "(titanv|titanxp)"


def test_recorded_one_command_for_several_jobs_still_fails_per_job():
    probe = PROBES["argv_list_priority"]
    per_job, other = parse_scontrol_errors(probe["stderr"], [IDS["pending1"], IDS["finished"], IDS["pending2"]])
    assert probe["rc"] == 1 and other == [] and set(per_job) == {IDS["finished"]}
    assert {probe["after"][IDS[k]]["priority"] for k in ("pending1", "pending2")} == {"600"}


def test_recorded_priority_and_features_in_one_command_are_not_atomic():
    probe = PROBES["combined_not_atomic"]
    assert probe["rc"] == 1 and "Invalid feature specification" in probe["stderr"]
    assert probe["after"][IDS["pending3"]]["priority"] == "700"


def test_recorded_priority_for_a_running_job_is_accepted_silently():
    """Why update_jobs checks which jobs are pending before writing priorities."""
    probe = PROBES["priority_running_accepted"]
    assert probe["rc"] == 0 and probe["stderr"] == ""
    assert probe["after"][IDS["running"]] == {"state": "RUNNING", "priority": "5", "features": "a100"}


def test_recorded_unreachable_controller_is_unavailable_for_every_line():
    probe = PROBES["stdin_down"]
    per_job, other = parse_scontrol_errors(probe["stderr"], _stdin_ids(probe))
    assert probe["rc"] == 1 and other == [] and len(per_job) == 2
    assert all(classify_error(reason) is SlurmUnavailable for reason in per_job.values())


def test_recorded_pending_listing_is_one_id_per_line():
    lines = PROBES["squeue_pending"]["stdout"].splitlines()
    assert lines and all(line.endswith(SEP) and line[:-1].isdigit() for line in lines)
    assert IDS["pending1"] in {line[:-1] for line in lines}


def test_update_lines_carry_only_plain_values():
    assert scontrol_update_line("12", "priority", 500) == "update JobId=12 Priority=500"
    assert scontrol_update_line("12_3", "features", "(a100|titanv)&ib") == "update JobId=12_3 Features=(a100|titanv)&ib"
    assert scontrol_update_line("12", "features", "") == "update JobId=12 Features="
    assert scontrol_update_line("12", "features", "[a100*2]") == "update JobId=12 Features=[a100*2]"
    for bad in ("a100\nupdate JobId=1 Priority=1", "a100 titanv", 'a100"', "a100'", "a\\b", "a100#x", "a\tb"):
        assert scontrol_update_line("12", "features", bad) is None, bad
    assert scontrol_update_line("12\n13", "priority", 5) is None
    assert scontrol_update_line("12 Priority=1", "features", "a100") is None


# ------------------------------------------------------------------------- the client, on replayed output
class Replay:
    """Stands in for CliClient._exec: records each command and its stdin, answers from a script."""

    def __init__(self, pending: list[str], scontrol: list[tuple[int, str]] | None = None):
        self.pending = pending
        self.scontrol = list(scontrol or [])
        self.calls: list[tuple[list[str], str | None]] = []

    def __call__(self, argv, *, input=None, timeout_s=None):  # noqa: ANN001, ANN204
        self.calls.append((list(argv), input))
        if argv[0] == "squeue":
            return subprocess.CompletedProcess(argv, 0, "".join(f"{j}{SEP}\n" for j in self.pending), "")
        rc, stderr = self.scontrol.pop(0) if self.scontrol else (0, "")
        return subprocess.CompletedProcess(argv, rc, "", stderr)


def _client(replay: Replay) -> CliClient:
    client = CliClient(Config())
    client._exec = replay          # type: ignore[method-assign]
    return client


def test_cli_batch_is_one_squeue_then_one_scontrol_per_field():
    replay = Replay(["1", "2", "3", "4"], [(1, "Invalid feature specification for job 3\n"),
                                           (1, "Job is no longer pending execution for job 2\n")])
    results = _client(replay).update_jobs([
        JobUpdate("1", priority=10, features="a100"),
        JobUpdate("2", priority=20),
        JobUpdate("3", priority=30, features="nosuch"),
        JobUpdate("4", features="titanv|titanxp"),
        JobUpdate("9", priority=90),                         # not among the pending jobs
    ])
    assert [argv[0] for argv, _ in replay.calls] == ["squeue", "scontrol", "scontrol"]
    assert all(argv == ["scontrol"] for argv, _ in replay.calls[1:])       # commands only on stdin
    assert replay.calls[1][1] == "update JobId=1 Features=a100\nupdate JobId=3 Features=nosuch\n" \
                                 "update JobId=4 Features=titanv|titanxp\n"
    # job 3's features were refused: no priority for it; job 9 is never written
    assert replay.calls[2][1] == "update JobId=1 Priority=10\nupdate JobId=2 Priority=20\n"
    by = {r.job_id: r for r in results}
    assert [r.job_id for r in results] == ["1", "2", "3", "4", "9"]
    assert by["1"] == UpdateResult("1", ("features", "priority"))
    assert by["2"].not_pending and by["2"].applied == () and "no longer pending" in str(by["2"].error)
    assert type(by["3"].error) is SlurmError and str(by["3"].error) == \
        "scontrol: Invalid feature specification for job 3"
    assert by["4"] == UpdateResult("4", ("features",))
    assert by["9"].not_pending


def test_cli_batch_sends_odd_values_through_their_own_argv():
    replay = Replay(["1", "2"])
    results = _client(replay).update_jobs([JobUpdate("1", features="a100 titanv"),
                                           JobUpdate("2", features="a100\nupdate JobId=7 Priority=1")])
    stdin_text = "".join(inp or "" for _, inp in replay.calls)
    assert "JobId=7" not in stdin_text
    assert [argv[:5] for argv, _ in replay.calls[:2]] == [["squeue", "-h", "-t", "PENDING", f"--jobs={j}"]
                                                          for j in ("1", "2")]      # a few jobs: each by its id
    assert [argv for argv, _ in replay.calls[2:]] == [
        ["scontrol", "update", "jobid=1", "Features=a100 titanv"],
        ["scontrol", "update", "jobid=2", "Features=a100\nupdate JobId=7 Priority=1"],
    ]
    assert all(r.ok for r in results)


def test_cli_batch_raises_when_the_controller_is_gone_or_the_failure_names_no_job():
    down = PROBES["stdin_down"]["stderr"]
    ids = _stdin_ids(PROBES["stdin_down"])
    with pytest.raises(SlurmUnavailable):
        _client(Replay(ids, [(1, down)])).update_jobs([JobUpdate(j, priority=5) for j in ids])
    with pytest.raises(SlurmError, match="Request aborted"):
        _client(Replay(["1"], [(1, "Request aborted\n")])).update_jobs([JobUpdate("1", priority=5)])
    with pytest.raises(SlurmError, match="exit status 1"):
        _client(Replay(["1"], [(1, "")])).update_jobs([JobUpdate("1", priority=5)])
    # an extra line repeating a named job's reason is not a separate failure
    ok = _client(Replay(["1", "2"], [(1, "Job has already finished for job 2\nslurm_update error: Job has already "
                                        "finished\n")])).update_jobs([JobUpdate("1", priority=5),
                                                                       JobUpdate("2", priority=6)])
    assert ok[0].ok and ok[1].not_pending


def test_cli_batch_of_nothing_runs_nothing():
    replay = Replay([])
    assert _client(replay).update_jobs([]) == []
    assert replay.calls == []
    with pytest.raises(ValueError):
        _client(replay).update_jobs([JobUpdate("1", priority=1), JobUpdate("1", priority=2)])


# ------------------------------------------------------------------------- the round core's use of it
class Scripted(SlurmClient):
    """A client whose update_jobs answers from a table; the per-job methods must not be used."""

    name = "scripted"

    def __init__(self, outcome: dict[str, UpdateResult]):
        self.outcome = outcome
        self.batches: list[list[JobUpdate]] = []

    def update_jobs(self, updates):  # noqa: ANN001, ANN201
        self.batches.append(list(updates))
        return [self.outcome.get(u.job_id) or UpdateResult(u.job_id, tuple(
            f for f in ("features", "priority") if getattr(u, f) is not None)) for u in updates]

    def now(self) -> float:
        return 0.0

    def submit(self, request: JobRequest) -> str:
        raise AssertionError("not used")

    def jobs(self, states=()):  # noqa: ANN001, ANN201
        return []

    def nodes(self):  # noqa: ANN201
        return []

    def set_priority(self, job_id: str, priority: int) -> None:
        raise AssertionError("a per-job call in a round")

    def set_features(self, job_id: str, features: str) -> None:
        raise AssertionError("a per-job call in a round")

    hold = release = cancel = set_features


UPDATES = [Update("1", "features", "a100", "titanv"), Update("2", "features", "titanv", "a100"),
           Update("1", "priority", 30, 1), Update("2", "priority", 20, 1), Update("3", "priority", 10, 1)]


def test_round_writes_in_one_batch_and_skips_jobs_not_pending():
    client = Scripted({"2": UpdateResult("2", (), JobNotPending("scontrol: Job is no longer pending for job 2"))})
    applied, skipped, calls = apply_updates(client, UPDATES)
    assert client.batches == [[JobUpdate("1", 30, "a100"), JobUpdate("2", 20, "titanv"), JobUpdate("3", 10)]]
    assert applied == [UPDATES[0], UPDATES[2], UPDATES[4]]
    assert skipped == ["2"] and calls == 4          # 3 written + 1 failed attempt, as one call per change counted


def test_round_skips_a_refused_job_with_a_warning_and_writes_the_rest(caplog):
    client = Scripted({"2": UpdateResult("2", (), SlurmError("scontrol: Invalid feature specification for job 2"))})
    applied, skipped, calls = apply_updates(client, UPDATES)
    assert len(client.batches) == 1 and len(client.batches[0]) == 3
    assert applied == [UPDATES[0], UPDATES[2], UPDATES[4]] and skipped == ["2"] and calls == 4
    assert "job 2: Slurm refused the update" in caplog.text and "Invalid feature specification" in caplog.text


# ------------------------------------------------------------------------- the real cluster
class Counting(CliClient):
    """The command-line client, counting the processes it starts."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.commands: list[str] = []

    def _exec(self, argv, **kwargs):  # noqa: ANN001, ANN003, ANN201
        self.commands.append(argv[0])
        return super()._exec(argv, **kwargs)


def _later(client: CliClient, n: int, name: str, constraint: str = "titanv") -> list[str]:
    """Jobs that stay pending without holding a GPU (a begin time an hour ahead), not held."""
    return [client.submit(JobRequest(name=f"{name}-{i}", num_gpus=1, constraint=constraint, wrap="true",
                                     time_limit_s=60, extra={"--begin": "now+3600", "--output": "/dev/null"}))
            for i in range(n)]


def _on_a100(client: CliClient, janitor, name: str, wrap: str, state: str) -> str:  # noqa: ANN001
    """A job on the a100 node, once Slurm reports it in `state` (RUNNING, COMPLETED)."""
    job_id = janitor.add(client.submit(JobRequest(name=name, num_gpus=1, constraint="a100", wrap=wrap,
                                                  time_limit_s=120, extra={"--output": "/dev/null"})))
    wait_for(lambda: (j := client.job(job_id)) is not None and j.state == state, timeout=30,
             message=f"{name} {state}")
    return job_id


@pytest.mark.slurm
def test_real_batch_of_many_jobs_takes_three_processes(slurm_cluster, janitor):
    client = Counting(Config(), env={"SLURM_CONF": str(slurm_cluster.conf)})
    ids = [janitor.add(j) for j in _later(client, 24, "batch-many")]
    running = _on_a100(client, janitor, "batch-running", "sleep 60", "RUNNING")
    updates = [JobUpdate(j, priority=5000 + k, features="titanxp" if k % 2 else None) for k, j in enumerate(ids)]
    client.commands.clear()
    results = client.update_jobs([*updates, JobUpdate(running, priority=7, features="titanv")])
    assert client.commands == ["squeue", "scontrol", "scontrol"]
    assert all(r.ok for r in results[:-1]) and results[-1].not_pending
    jobs = {j.job_id: j for j in client.jobs()}
    for k, j in enumerate(ids):
        assert jobs[j].priority == 5000 + k
        assert jobs[j].features == ("titanxp" if k % 2 else "titanv")
    assert jobs[running].priority != 7 and jobs[running].features == "a100"
    client.commands.clear()
    client.update_jobs([JobUpdate(j, priority=100) for j in ids])
    assert client.commands == ["squeue", "scontrol"]                 # no features: no features process


@pytest.mark.slurm
def test_real_pending_check_of_a_few_jobs_asks_for_each_by_id(slurm_cluster, janitor):
    """A round that writes a few jobs asks squeue for each of them by id (`pending_job_ids(among)`, the
    controller then reads one job, not its whole table): the same answer as the whole pending list, for a
    pending, a running, a finished and an unknown job (squeue -j of an id the controller never had exits 1:
    not pending, not an error); more than PENDING_BY_ID jobs, the whole list."""
    from msched.slurm.cli.client import PENDING_BY_ID

    client = CliClient(Config(), env={"SLURM_CONF": str(slurm_cluster.conf)})
    waiting = [janitor.add(j) for j in _later(client, PENDING_BY_ID + 1, "by-id")]
    running = _on_a100(client, janitor, "by-id-run", "sleep 60", "RUNNING")
    done = _on_a100(client, janitor, "by-id-done", "true", "COMPLETED")
    every = client.pending_job_ids()
    assert set(waiting) <= every and not {running, done} & every
    assert PENDING_BY_ID == 3
    assert client.pending_job_ids([waiting[0], running, done]) == {waiting[0]}
    assert client.pending_job_ids([done, "987654321", waiting[1]]) == {waiting[1]}
    assert client.pending_job_ids(waiting[:PENDING_BY_ID]) == set(waiting[:PENDING_BY_ID])
    assert client.pending_job_ids([*waiting, running]) == set(waiting)      # PENDING_BY_ID + 2: the whole list
    results = {r.job_id: r for r in client.update_jobs([JobUpdate(waiting[0], priority=77), JobUpdate(done, priority=9)])}
    assert results[waiting[0]].ok and results[done].not_pending
    assert client.job(waiting[0]).priority == 77


@pytest.mark.slurm
def test_real_jobs_that_stop_pending_after_the_check_come_back_per_job(slurm_cluster, janitor):
    """The check said pending, then the job ran or ended: scontrol's own per-job refusal is reported."""
    client = CliClient(Config(), env={"SLURM_CONF": str(slurm_cluster.conf)})
    waiting = [janitor.add(j) for j in _later(client, 2, "batch-stale")]
    running = _on_a100(client, janitor, "batch-stale-run", "sleep 60", "RUNNING")
    done = _on_a100(client, janitor, "batch-stale-done", "true", "COMPLETED")
    client.pending_job_ids = lambda among=None: {*waiting, running, done}  # type: ignore[method-assign]
    results = client.update_jobs([JobUpdate(waiting[0], priority=321, features="titanxp"),
                                  JobUpdate(running, features="titanv", priority=9),
                                  JobUpdate(done, priority=9),
                                  JobUpdate(waiting[1], priority=123)])
    by = {r.job_id: r for r in results}
    assert by[waiting[0]].ok and by[waiting[1]].ok
    assert by[running].not_pending and by[running].applied == ()
    assert by[done].not_pending and "finished" in str(by[done].error)
    jobs = {j.job_id: j for j in client.jobs()}
    assert jobs[waiting[0]].priority == 321 and jobs[waiting[0]].features == "titanxp"
    assert jobs[waiting[1]].priority == 123
    assert jobs[running].features == "a100"


@pytest.mark.slurm
def test_real_batch_against_an_unreachable_controller_raises_unavailable(slurm_cluster, tmp_path):
    conf = [ln for ln in slurm_cluster.conf.read_text().splitlines()
            if not ln.startswith(("SlurmctldPort=", "MessageTimeout="))]
    (tmp_path / "slurm.conf").write_text("\n".join([*conf, "SlurmctldPort=9", "MessageTimeout=1"]) + "\n")
    (tmp_path / "gres.conf").write_text((slurm_cluster.dir / "gres.conf").read_text())
    client = CliClient(Config(), env={"SLURM_CONF": str(tmp_path / "slurm.conf")}, timeout_s=30)
    with pytest.raises(SlurmUnavailable):                                 # the pending check
        client.update_jobs([JobUpdate("1", priority=5)])
    client.pending_job_ids = lambda among=None: {"1", "2"}                # type: ignore[method-assign]
    with pytest.raises(SlurmUnavailable) as err:                          # scontrol itself
        client.update_jobs([JobUpdate("1", priority=5), JobUpdate("2", features="a100")])
    assert "\n" not in str(err.value)
