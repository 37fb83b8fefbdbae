"""The begin-time lever on the real dev cluster, with an ordinary user's jobs (the decision and the
simulator: tests/test_levers.py).

The scenario (node n1 = 4 a100 GPUs; the other nodes held by plain blockers): X runs on 2 GPUs; B (4 GPUs)
is planned when X ends (by its estimate); C (2 GPUs, long) is planned after B. Slurm's backfill knows
only time limits: it reserves n1 for B at X's *limit*, so once C's limit fits before that (here: its
owner shortens it, as users may), backfill would start C now on the 2 free GPUs and B would wait for C.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from msched.slurm.base import SlurmJob
from msched.tag import JobTag, with_tag

sys.path.insert(0, str(Path(__file__).resolve().parent))
from helpers import wait_for  # noqa: E402
from test_hardening_slurm import _reorder, _site, _squeue, _user_submit  # noqa: E402

pytestmark = pytest.mark.slurm


def _fill_others(cluster, janitor) -> None:
    """Plain jobs holding every GPU but n1's, running (they are never written)."""
    ids = []
    for node in ("n2", "n3", "n4"):
        proc = cluster.run(["sbatch", "--parsable", "--gres=gpu:4", f"--nodelist={node}", "--time=60",
                            "--output=/dev/null", "--wrap=sleep 600"])
        assert proc.returncode == 0, proc.stderr
        ids.append(janitor.add(proc.stdout.strip().split(";")[0]))
    wait_for(lambda: all(v["state"] == "RUNNING" for v in _squeue(cluster, ids).values()), 30,
             message="the blockers running")


def _iters_for(config, seconds: float, gpus: int) -> int:
    """Iterations of vgg16 (batch 12) that the site's estimator puts at `seconds` on a100."""
    from msched.rounds.reorder import default_estimator

    job = SlurmJob("0", "PENDING", num_gpus=gpus)
    per_1000 = default_estimator(config)(job, JobTag(model="vgg16", ref="vgg16", iters=1000, bs=12))["a100"]
    return max(1, round(seconds * 1000 / per_1000))


def _tagged(config, seconds: float, gpus: int) -> str:
    """A tag claiming `seconds` on a100, the type its owner pinned (`--constraint=a100`: msched moves
    its priority and begin time, never its type, and `--release` leaves the constraint, so a released
    job stays on n1 behind B's reservation)."""
    return with_tag(JobTag(model="vgg16", ref="vgg16", group="vgg", sim=1.0, flops=1.0,
                           iters=_iters_for(config, seconds, gpus), bs=12, pinned="a100", ver="test"), None)


def _scenario(cluster, janitor, user, config, *, x_s: float, b_s: float, c_s: float, c_limit_min: int) -> tuple[str, str, str]:
    """X running on n1 (2 GPUs, actually sleeping x_s, estimated x_s, limit 10 min), then B and C pending."""
    def submit(gpus: int, est: float, sleep: float, limit_min: int) -> str:
        return janitor.add(_user_submit(user, cluster, f"--gres=gpu:{gpus}", "--constraint=a100",
                                        f"--time={limit_min}", f"--comment={_tagged(config, est, gpus)}",
                                        f"--wrap=sleep {sleep:g}"))
    x = submit(2, x_s, x_s, 10)
    wait_for(lambda: _squeue(cluster, [x])[x]["state"] == "RUNNING", 30, message="X running")
    b = submit(4, b_s, b_s * 0.75, 5)
    c = submit(2, c_s, 5, c_limit_min)
    time.sleep(2)                 # several backfill passes (bf_interval=1): C's limit keeps it waiting
    state = _squeue(cluster, [b, c])
    assert state[b]["state"] == state[c]["state"] == "PENDING", state
    return x, b, c


def _jobs(cluster, ids) -> dict[str, dict]:
    """state, reason, start and begin time (epoch) of jobs, from fields no user text can hold."""
    out = {}
    for line in cluster.run(["squeue", "-h", "-t", "all", "-j", ",".join(ids), "-o", "%i|%T|%r|%S"]).stdout.splitlines():
        jid, state, reason, start = line.split("|")
        out[jid] = {"state": state, "reason": reason, "start": _epoch(start)}
    return out


def _begin_time(cluster, job: str) -> float | None:
    return _epoch(cluster.run(["squeue", "-h", "-j", job, "-O", "EligibleTime"]).stdout.strip())


def _epoch(text: str) -> float | None:
    try:
        return time.mktime(time.strptime(text.strip(), "%Y-%m-%dT%H:%M:%S"))
    except ValueError:
        return None


def test_a_job_held_by_the_lever_starts_at_its_begin_time_after_the_job_it_was_kept_for(
        slurm_cluster, janitor, ordinary_user, tmp_path):
    from msched.config import load_config
    from msched.policy.reservations import BeginTimeOptions
    from msched.rounds.core import run_round
    from msched.rounds.reorder import default_estimator, default_policy, open_site_store
    from msched.slurm import get_client
    from msched.store.holds import HoldJournal

    config = load_config(_site(tmp_path, extra='begin_time_lever = true\n'))
    client = get_client("cli", config=config)
    _fill_others(slurm_cluster, janitor)
    x, b, c = _scenario(slurm_cluster, janitor, ordinary_user, config, x_s=20, b_s=20, c_s=600, c_limit_min=15)
    store = open_site_store(config)
    journal = HoldJournal(store)
    # the round core as the reorderer runs it; short hold thresholds keep the test under a minute
    result = run_round(client, default_policy("jct", backfill=True, planner="greedy"), default_estimator(config),
                       begin_times=BeginTimeOptions(True, min_hold_s=5, tolerance_s=5), journal=journal,
                       gpu_type_of=config.canonical_gpu_type)
    assert [ch.job_id for ch in result.begin_times] == [c], result.begin_times     # never X, B or a blocker
    (change,) = result.begin_times
    planned = result.plan.by_job()
    assert change.when == pytest.approx(planned[c].est_start, abs=1)               # its planned start, no later
    assert planned[b].est_start < change.when
    (entry,) = journal.open_entries()
    assert (entry.job_id, entry.kind, int(float(entry.value))) == (c, "begin_time", int(change.when))
    wait_for(lambda: _squeue(slurm_cluster, [c])[c]["reason"] == "BeginTime", 20, message="C held by its begin time")
    assert abs(_begin_time(slurm_cluster, c) - change.when) <= 1
    # C's owner shortens its limit (users may): by the limits backfill would now start it on n1's free GPUs
    proc = ordinary_user.run(["scontrol", "update", f"jobid={c}", "TimeLimit=2"], env={"SLURM_CONF": str(slurm_cluster.conf)})
    assert proc.returncode == 0, proc.stderr
    time.sleep(3)
    assert _squeue(slurm_cluster, [c])[c]["state"] == "PENDING"
    # no more rounds: X ends, B starts on all four GPUs, C starts by itself at its begin time, after B
    wait_for(lambda: _squeue(slurm_cluster, [c])[c]["state"] in ("RUNNING", "COMPLETED", "COMPLETING"), 90,
             interval=0.5, message="C to start at its begin time")
    start = {j: v["start"] for j, v in _jobs(slurm_cluster, [x, b, c]).items()}
    assert start[b] < start[c] and start[c] >= change.when - 1, (start, change.when)
    store.dispose()


def test_release_clears_the_begin_times_a_round_set(slurm_cluster, janitor, ordinary_user, tmp_path):
    """`msched reorder` (cron's command, the site's `begin_time_lever = true`) sets C's begin time
    through the journal; `msched reorder --release` clears it: the job is startable at once."""
    from msched.config import load_config
    from msched.rounds.reorder import open_site_store
    from msched.store.holds import HoldJournal

    cfg = _site(tmp_path, extra='begin_time_lever = true\nobjective = "jct"\nplanner = "greedy"\n')
    config = load_config(cfg)
    _fill_others(slurm_cluster, janitor)
    _, _, c = _scenario(slurm_cluster, janitor, ordinary_user, config, x_s=150, b_s=150, c_s=900, c_limit_min=15)
    out = _reorder(cfg)
    assert out.returncode == 0, out.stderr
    wait_for(lambda: _squeue(slurm_cluster, [c])[c]["reason"] == "BeginTime", 20, message="C held by its begin time")
    journal = HoldJournal(open_site_store(config))
    assert [(e.job_id, e.kind) for e in journal.open_entries()] == [(c, "begin_time")]
    held = _begin_time(slurm_cluster, c)
    assert time.time() + 200 < held <= time.time() + 310       # the plan's start: X's end + B (150 s each)
    out = _reorder(cfg)                                              # a second round: nothing to change
    assert out.returncode == 0, out.stderr
    assert [e.job_id for e in journal.open_entries()] == [c] and abs(_begin_time(slurm_cluster, c) - held) <= 1
    out = _reorder(cfg, "--release")
    assert out.returncode == 0, out.stderr
    assert journal.open_entries() == []
    wait_for(lambda: _squeue(slurm_cluster, [c])[c]["reason"] != "BeginTime", 20, message="the begin time cleared")
    assert (_begin_time(slurm_cluster, c) or 0) <= time.time() + 1
    journal.store.dispose()


@pytest.mark.slow
def test_nice_lever_writes_the_order_and_multifactor_ages_keep_moving(slurm_cluster, ordinary_user, tmp_path):
    """`priority_lever = "nice"` on a cluster with multifactor's age weight on (the measurement behind the
    lever: test_hardening_slurm's explicit-priority test): the round writes the plan's order as nice
    offsets on managed jobs only, plain jobs keep their places, every job keeps aging, the owner can
    only lower a job (a nice >= 0: at most back to where plain sbatch puts it) and `--release` puts the
    offsets back."""
    import subprocess

    from test_hardening_slurm import MAKESPAN, MSCHED, _age_weighted_cluster, _plain_and_managed_queue

    with _age_weighted_cluster() as sl:
        ids = _plain_and_managed_queue(sl, ordinary_user, gap_s=3)
        p1, m1, p2, m2, m3 = ids

        def nice() -> dict[str, int]:
            return {i: int(n) for i, n in (ln.split() for ln in sl("squeue", "-h", "-j", ",".join(ids), "-o", "%i %y").splitlines())}

        def prio() -> dict[str, int]:
            for jid, n in nice().items():     # a multifactor recalculation of every job now (same offset)
                sl("scontrol", "update", f"jobid={jid}", f"nice={n}")
            return {i: int(q) for i, q in (ln.split() for ln in sl("squeue", "-h", "-j", ",".join(ids), "-o", "%i %Q").splitlines())}

        before = prio()
        assert before[p1] > before[m1] > before[p2] > before[m2] > before[m3]
        cfg = _site(tmp_path, extra=MAKESPAN + 'priority_lever = "nice"\n')
        out = subprocess.run([MSCHED, "reorder", "--config", str(cfg)], capture_output=True, text=True, timeout=120,
                             env=sl.env)
        assert out.returncode == 0, out.stderr
        offsets = nice()
        assert offsets[p1] == offsets[p2] == 0                       # plain jobs: never written
        assert offsets[m3] < 0 < offsets[m1]                         # longest first (makespan): m3 up, m1 down
        after = prio()
        order = sorted(ids, key=lambda j: -after[j])
        # managed jobs permuted among their places (the plain ones keep theirs), the longest moved up
        assert order[0] == p1 and order[2] == p2 and order.index(m3) < order.index(m1), (before, after, offsets)
        time.sleep(4)
        later = prio()
        assert all(later[j] - after[j] >= 4000 for j in ids), (after, later)    # ~1667 a second: age keeps moving
        assert sorted(ids, key=lambda j: -later[j]) == order
        # what the owner can undo: a demotion, back to plain sbatch's place (nice 0), never a boost
        env = {"SLURM_CONF": sl.env["SLURM_CONF"]}
        assert ordinary_user.run(["scontrol", "update", f"jobid={m1}", "nice=0"], env=env).returncode == 0
        refused = ordinary_user.run(["scontrol", "update", f"jobid={m3}", f"nice={offsets[m3] - 1000}"], env=env)
        assert refused.returncode != 0 and nice()[m3] == offsets[m3], refused.stderr
        out = subprocess.run([MSCHED, "reorder", "--config", str(cfg), "--release"], capture_output=True, text=True,
                             timeout=120, env=sl.env)
        assert out.returncode == 0, out.stderr
        assert nice() == dict.fromkeys(ids, 0)


@pytest.mark.slow
def test_a_round_killed_at_any_step_of_the_lever_leaves_nothing_held(slurm_cluster, janitor, ordinary_user, tmp_path):
    """`msched reorder` with the lever on, killed (SIGKILL, SIGTERM) before or after each of its scontrol
    calls (the scheduler read, the batched writes, the begin time), sometimes followed by a whole round:
    the journal's replay (what `--release` runs first) then leaves C startable and the journal empty,
    whether the begin time was written (cleared) or only recorded (closed)."""
    import os
    import subprocess

    from test_hardening_slurm import MSCHED, _wrappers

    from msched.config import load_config
    from msched.rounds.holds import replay
    from msched.rounds.reorder import open_site_store
    from msched.slurm import get_client
    from msched.store.holds import HoldJournal

    wrap = _wrappers(tmp_path)
    cfg = _site(tmp_path, wrap_dir=wrap, extra='begin_time_lever = true\nobjective = "jct"\nplanner = "greedy"\n')
    config = load_config(cfg)
    _fill_others(slurm_cluster, janitor)
    _, _, c = _scenario(slurm_cluster, janitor, ordinary_user, config, x_s=300, b_s=150, c_s=900, c_limit_min=15)
    count = tmp_path / "count"
    env = {**os.environ, "COUNT_FILE": str(count), "KILL_AT": "0", "KILL_WHEN": "after", "KILL_SIG": "KILL"}
    client = get_client("cli", config=config)
    journal = HoldJournal(open_site_store(config))

    def undo() -> None:
        """--release's journal step (msched.rounds.holds.replay, everything): its hold-and-release of every
        managed job would let backfill start C while B is held, which is not what this test is about."""
        replay(client, journal, everything=True)

    undo()
    whole = subprocess.run([MSCHED, "reorder", "--config", str(cfg)], capture_output=True, text=True, timeout=120, env=env)
    assert whole.returncode == 0, whole.stderr
    calls = int(count.read_text().strip())
    assert "StartTime=" in (tmp_path / "count.log").read_text().splitlines()[-1]    # the lever's write, last
    killed_held = 0
    for k in range(1, calls + 1):
        for when in ("before", "after"):
            for sig in ("KILL", "TERM"):
                undo()                                                     # a clean start: nothing held
                count.unlink(missing_ok=True)
                last = subprocess.run([MSCHED, "reorder", "--config", str(cfg)], capture_output=True, text=True,
                                      timeout=120, env={**env, "KILL_AT": str(k), "KILL_WHEN": when, "KILL_SIG": sig})
                # the begin time itself, not the Reason: Slurm rewrites a job's reason only at its next
                # scheduling pass, so right after the kill it may still read None with the begin time set
                killed_held += (_begin_time(slurm_cluster, c) or 0) > time.time() + 1
                out = _reorder(cfg) if (k + (when == "after")) % 2 else None     # sometimes a round runs first
                assert out is None or out.returncode == 0, out.stderr
                undo()
                state = _squeue(slurm_cluster, [c])[c]
                assert state["state"] == "PENDING" and state["reason"] not in ("BeginTime", "JobHeldAdmin"), \
                    (k, when, sig, state, last.stderr[-500:])
                assert (_begin_time(slurm_cluster, c) or 0) <= time.time() + 1
                assert journal.open_entries() == [], (k, when, sig)
    assert killed_held >= 1        # a kill after the begin-time call did leave it set: the journal cleared it
    out = _reorder(cfg, "--release")
    assert out.returncode == 0, out.stderr
    journal.store.dispose()
