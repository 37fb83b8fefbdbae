"""The reorderer's light round on the real local Slurm cluster (issue 21, fifth pass).

A round first reads a digest of Slurm's queue (`CliClient.queue_digest`: one `squeue -t all -O` in a tight
format and one sinfo). When it equals the last round's, that round wrote nothing, and no hold is open, the
round records one summary row and stops: no squeue --json, no snapshot, no plan. These tests settle a real
queue (16 GPUs busy with blockers, managed jobs submitted by an ordinary user, plain jobs) until a round is
light, then make each kind of change Slurm can see and check that the next round is not light; a light
round imports nothing of the planning core; an older store gains the new columns and works.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import select

from msched.rounds.reorder import Reorderer, open_site_store
from msched.store.db import Store
from msched.store.schema import Round
from msched.tag import with_tag

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_reorder import _fill_gpus, _submit, _wait_idle, site_config, tag_for  # noqa: E402

# what the light round must not load (README: Running the reorderer)
HEAVY = ("torch", "sklearn", "rich", "matplotlib", "ortools", "highspy")
PLANNING = ("msched.policy", "msched.rounds.core", "msched.rounds.settle", "msched.rounds.packing", "msched.estimate")


@pytest.fixture
def site(tmp_path):
    return site_config(tmp_path, "light")


def _user_submit(user, cluster, *, name: str, model: str, iters: int, constraint: str = "titanxp") -> str:
    """A managed job as msub submits it (untyped gres, the tag in the comment, the type as a feature),
    submitted by the ordinary user so that the user can change it afterwards."""
    comment = with_tag(tag_for(model, iters, added=constraint), None)
    proc = user.run(["sbatch", "--parsable", f"--job-name={name}", "--gres=gpu:4", "--time=60",
                     "--output=/dev/null", f"--constraint={constraint}", f"--comment={comment}",
                     "--wrap=sleep 2"], env={"SLURM_CONF": str(cluster.conf)}, cwd="/tmp")
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip().split(";")[0]


def _settle(reorderer: Reorderer, rounds: int = 8):  # noqa: ANN202 - the light RoundOutcome
    """Rounds until one is light; a round before it in this call wrote nothing."""
    outcomes = []
    for _ in range(rounds):
        out = reorderer.round()
        outcomes.append(out)
        if out.light:
            if len(outcomes) >= 2:
                assert outcomes[-2].result is None or outcomes[-2].result.update_calls == 0
            return out
    pytest.fail(f"no light round in {rounds} rounds: {[o.summary() for o in outcomes]}")


def _remembered(cluster) -> set[str]:  # noqa: ANN001
    """Every job Slurm remembers (squeue -t all: pending, running and those that ended within MinJobAge)."""
    return set(cluster.run(["squeue", "-h", "-t", "all", "-o", "%i"], check=True).stdout.split())


def _light_again(cluster, reorderer: Reorderer, run=None):  # noqa: ANN001, ANN202 - what `run` returns
    """The next round (`run`, default `reorderer.round`) on a settled queue nobody changes: light. Unless
    slurmctld purged jobs that had ended MinJobAge ago (earlier tests' jobs, in a long session; its purge
    runs about once a minute) in between: the digest (squeue -t all) sees a purge, so that round reads the
    queue, rightly. Then the queue settles again and the next round is taken, twice at most; only a
    purge seen by the listings around the round excuses one. Without this, such a purge failed these
    tests now and then (a run of the light-path tests in four; reproduced with MinJobAge=60, sixteenth
    pass)."""
    run = run or reorderer.round
    for _ in range(3):
        before = _remembered(cluster)
        out = run()
        outcome = out[0] if isinstance(out, tuple) else out
        if outcome.light:
            return out
        purged = before - _remembered(cluster)
        assert purged and outcome.read_because == "digest-differs", (outcome.read_because, outcome.summary())
        print(f"slurmctld purged ended jobs {sorted(purged)} before this round: settled again")   # -s shows it
        _settle(reorderer)
    pytest.fail("ended jobs purged before each of three rounds")


@pytest.fixture
def settled_queue(slurm_cluster, janitor, ordinary_user, site):
    """Blockers on all 16 GPUs, 6 managed jobs of the ordinary user and 3 plain jobs (the last the user's)
    pending, a store."""
    from msched.slurm import get_client

    _wait_idle(slurm_cluster)
    blockers = _fill_gpus(slurm_cluster, janitor)
    managed = [janitor.add(_user_submit(ordinary_user, slurm_cluster, name=f"{m}-{i}", model=m, iters=it))
               for i, (m, it) in enumerate([("vgg16", 40000), ("densenet169", 40000), ("vgg16", 20000),
                                            ("densenet169", 30000), ("vgg16", 30000), ("densenet169", 20000)])]
    plain = [janitor.add(_submit(slurm_cluster, name=f"plain-{i}", gpus=4, seconds=2)) for i in range(2)]
    proc = ordinary_user.run(["sbatch", "--parsable", "--job-name=user-plain", "--gres=gpu:4", "--time=60",
                              "--output=/dev/null", "--wrap=sleep 2"], env={"SLURM_CONF": str(slurm_cluster.conf)},
                             cwd="/tmp")
    assert proc.returncode == 0, proc.stderr
    plain.append(janitor.add(proc.stdout.strip().split(";")[0]))
    store = open_site_store(site)
    client = get_client("cli", config=site)
    try:
        yield Reorderer(site, client, store), blockers, managed, plain
    finally:
        store.dispose()
        slurm_cluster.run(["scontrol", "update", "nodename=n4", "state=resume"])


@pytest.mark.slurm
def test_a_settled_queue_gives_light_rounds_and_every_change_a_full_one(slurm_cluster, ordinary_user, site,
                                                                          settled_queue, janitor):
    reorderer, blockers, managed, plain = settled_queue
    first = reorderer.round()
    assert first.result is not None and not first.light and first.result.update_calls > 0
    light = _settle(reorderer)
    assert light.pending == 9 and light.running == 4 and "light=yes" in light.summary()
    store = reorderer.store
    with store.read() as s:
        rows = s.scalars(select(Round).order_by(Round.id)).all()
    assert rows[-1].light == 1 and rows[-1].unchanged == 1 and rows[-1].changes == 0
    assert rows[-1].queue_digest == rows[-2].queue_digest and len(rows[-1].queue_digest) == 32
    # the first round wrote, so no round after it could be light: it records no digest (ninth pass: its
    # lines are made only for a round that wrote nothing); the round before the light one wrote nothing
    assert rows[0].light == 0 and rows[0].changes > 0 and rows[0].queue_digest is None
    planned = [r for r in rows if not r.unchanged]
    assert planned[-1].changes == 0 and planned[-1].queue_digest is not None
    published = json.loads(Path(site.free_time_path).read_text())
    assert published["time"] == rows[-1].time                   # the light round published again
    assert _light_again(slurm_cluster, reorderer).light         # and stays light while nothing changes

    user, env = ordinary_user, {"SLURM_CONF": str(slurm_cluster.conf)}
    mine = managed[-1]

    def other_type() -> str:          # a type the job does not hold now (msched may have retyped it)
        held = slurm_cluster.run(["squeue", "-h", "-j", mine, "-o", "%f"], check=True).stdout.strip()
        return next(t for t in ("titanv", "rtx2080ti", "a100") if t != held)
    changes = {
        "a new job": lambda: janitor.add(_submit(slurm_cluster, name="late", gpus=4, seconds=2)),
        "a pending job ends (cancelled)": lambda: slurm_cluster.run(["scancel", plain[0]], check=True),
        "the user's comment": lambda: user.run(["scontrol", "update", f"jobid={mine}",
                                                 f"comment={with_tag(tag_for('vgg16', 39999, added='titanxp'), None)}"],
                                                env=env, check=True),
        "the user's features": lambda: user.run(["scontrol", "update", f"jobid={mine}", f"features={other_type()}"],
                                                 env=env, check=True),
        # a plain job's: on a job msched gave an explicit priority, Slurm 22.05.8 takes a user's nice with
        # exit status 0 and changes nothing (Nice stays 0), so nothing the plan reads moves
        "the user's nice": lambda: user.run(["scontrol", "update", f"jobid={plain[-1]}", "nice=50"], env=env,
                                            check=True),
        "the user's time limit": lambda: user.run(["scontrol", "update", f"jobid={managed[0]}", "timelimit=30"],
                                                   env=env, check=True),
        "the user holds the job": lambda: user.run(["scontrol", "hold", managed[1]], env=env, check=True),
        "the user releases it": lambda: user.run(["scontrol", "release", managed[1]], env=env, check=True),
        "a node drained": lambda: slurm_cluster.run(["scontrol", "update", "nodename=n4", "state=drain",
                                                     "reason=light-path-test"], check=True),
        "the node resumed": lambda: slurm_cluster.run(["scontrol", "update", "nodename=n4", "state=resume"],
                                                      check=True),
        "a running job ends": lambda: slurm_cluster.run(["scancel", blockers[0]], check=True),
    }
    for what, change in changes.items():
        _settle(reorderer)
        change()
        out = reorderer.round()
        assert not out.light, f"{what}: the round after it was light"
        assert out.result is not None or out.unchanged, what


@pytest.mark.slurm
def test_a_job_whose_text_ends_in_spaces_costs_no_extra_full_round(slurm_cluster, ordinary_user, janitor,
                                                                    settled_queue):
    """A full round that wrote nothing records the digest of its own tight read; the tight read's padding
    hides a value's own trailing spaces, so before both sides of the digest dropped the spaces before
    each separator (client._digest_lines), one job named `x ` made that digest differ from the light
    round's squeue: one more full round after every round that planned, for everybody, while the job
    stayed in `squeue -t all`. Now the round after the settled one is light."""
    reorderer, *_ = settled_queue
    proc = ordinary_user.run(["sbatch", "--parsable", "--hold", "--job-name=trailing   ", "--comment=note   ",
                              "--gres=gpu:1", "--time=60", "--output=/dev/null", "--wrap=true"],
                             env={"SLURM_CONF": str(slurm_cluster.conf)}, cwd="/tmp")
    assert proc.returncode == 0, proc.stderr
    job_id = janitor.add(proc.stdout.strip().split(";")[0])
    shown = slurm_cluster.run(["squeue", "-h", "-j", job_id, "-O", "Name:|,Comment:|"], check=True).stdout
    assert shown.startswith("trailing   |note   |")     # Slurm keeps the spaces: the case is real
    outcomes = [reorderer.round()]
    while outcomes[-1].result is not None and outcomes[-1].result.update_calls and len(outcomes) < 6:
        outcomes.append(reorderer.round())
    assert outcomes[-1].result is not None and outcomes[-1].result.update_calls == 0    # planned, wrote nothing
    assert _light_again(slurm_cluster, reorderer).light


@pytest.mark.slurm
def test_a_round_that_cannot_be_light_reads_the_queue_once(slurm_cluster, settled_queue):
    """A round whose last planned round wrote (or the first round) cannot be light, so it runs no digest
    squeue: it records the digest of its own tight read (CliClient.read_digest), which is the digest the
    light round's squeue gives of the same queue (so the round after a settled one is light). A round
    that could be light reads the digest first, as before."""
    reorderer, _blockers, _managed, plain = settled_queue
    client = reorderer.client
    calls: list[str] = []
    digest_squeue = client.queue_digest
    client.queue_digest = lambda setup="": calls.append(setup) or digest_squeue(setup)
    first = reorderer.round()
    assert first.result is not None and first.result.update_calls > 0
    assert calls == [] and client.last_read == "tight"
    # with `activity_hint` (the default) it kept sdiag's job counters, read beside its squeue: the light
    # check after the rounds that wrote compares with the counters of the last read of Slurm
    from msched.rounds.reorder import ACTIVITY_FILE
    assert (Path(reorderer.config.state_dir) / ACTIVITY_FILE).read_text() == client.activity()
    outcomes = [reorderer.round()]
    while outcomes[-1].result is not None and outcomes[-1].result.update_calls and len(outcomes) < 6:
        assert calls == []                  # after a round that wrote: no digest squeue
        outcomes.append(reorderer.round())
    assert calls == []                      # the settled round's last planned round wrote
    light = reorderer.round()               # the digest squeue, equal to the settled round's own
    assert light.light and len(calls) == 1
    client.digest_wanted = True
    client.jobs()
    client.nodes()
    assert reorderer._read_digest() == reorderer._queue_digest() is not None
    # a change after the light round: the next round reads the digest first, then the queue (it does not
    # build the lines of a digest it has), and records the digest it read (with `activity_hint` off: with
    # it, a cancel moves sdiag's counters and the round skips the digest, tested below)
    reorderer.config = reorderer.config._replace(activity_hint=False)
    slurm_cluster.run(["scancel", plain[0]], check=True)
    calls.clear()
    after = reorderer.round()
    assert not after.light and len(calls) == 1 and not client.digest_wanted
    assert reorderer._read_digest() is None


@pytest.mark.slurm
def test_the_reads_started_beside_the_digest_end_with_a_light_round_and_serve_an_event_round(
        slurm_cluster, settled_queue, monkeypatch):
    """Off (the default), a light round runs no read of the whole queue. With `digest_overlap` on, the light
    check starts the round's tight squeue and sinfo beside the digest's squeue (eleventh pass: an event
    round then waits for one squeue, not two in a row), and a light round ends what it started: no
    command left running, nothing left to collect. A round the digest sends on reads the queue from the
    squeue started beside the digest: one tight squeue in that round, and the read is the tight read."""
    import msched.slurm.cli.client as cli
    from msched.slurm.cli.tight import NARROW, tight_format

    reorderer, _blockers, _managed, plain = settled_queue
    client = reorderer.client
    _settle(reorderer)
    started: list = []
    start = cli._Started.__init__

    def counted(self, argv, env, timeout_s):  # noqa: ANN001, ANN202
        start(self, argv, env, timeout_s)
        started.append(self)

    monkeypatch.setattr(cli._Started, "__init__", counted)

    def tight_squeues() -> list:
        return [s for s in started if tight_format(NARROW) in s.argv]

    # off: a light round runs the digest's squeue and no read of the whole queue (the activity hint off
    # too: with it, the event round below would skip the digest and its overlap)
    reorderer.config = reorderer.config._replace(digest_overlap=False, activity_hint=False)
    _settle(reorderer)                          # a changed config is a new state: a full round first
    def light_from_here():  # noqa: ANN202 - the next round, with the commands it starts counted from here
        started.clear()
        return reorderer.round()

    assert _light_again(slurm_cluster, reorderer, light_from_here).light and not tight_squeues()
    reorderer.config = reorderer.config._replace(digest_overlap=True)
    _settle(reorderer)                          # a changed config is a new state: a full round first
    assert _light_again(slurm_cluster, reorderer, light_from_here).light
    assert len(tight_squeues()) == 1 and not client._prefetched
    assert all(s.proc.poll() is not None for s in started)          # ended, not left running
    slurm_cluster.run(["scancel", plain[0]], check=True)
    started.clear()
    after = reorderer.round()
    assert not after.light and client.last_read == "tight"
    assert len(tight_squeues()) == 1 and not client._prefetched     # the one started beside the digest


@pytest.mark.slurm
def test_when_slurms_job_counters_moved_the_round_skips_the_digest_and_reads_the_queue_at_once(
        slurm_cluster, settled_queue, monkeypatch):
    """`activity_hint` (on by default, twelfth pass): the light check first reads sdiag's job counters
    (`CliClient.activity`). Unchanged since the last light check (the state directory's ACTIVITY_FILE),
    it reads the digest as before and a quiet queue's round is light. After a job ends (a cancel: the
    counters move) the round runs no digest squeue: it reads the queue at once. A change the counters do
    not count (a hold) the digest still sees. A round the counters send on when Slurm is as the last round
    left it plans nothing (`_unchanged_round`) and records the digest of its own read, by which the next
    round is light."""
    import msched.slurm.cli.client as cli
    from msched.rounds.reorder import ACTIVITY_FILE
    from msched.slurm.cli.tight import NARROW, tight_format

    reorderer, _blockers, _managed, plain = settled_queue
    client = reorderer.client
    assert reorderer.config.activity_hint and not reorderer.config.digest_overlap
    events: list[str] = []
    start = cli._Started.__init__
    digest = cli.CliClient.queue_digest

    def counted(self, argv, env, timeout_s):  # noqa: ANN001, ANN202
        start(self, argv, env, timeout_s)
        events.append("tight" if tight_format(NARROW) in argv else "other")

    def digested(self, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        events.append("digest")
        return digest(self, *args, **kwargs)

    monkeypatch.setattr(cli._Started, "__init__", counted)
    monkeypatch.setattr(cli.CliClient, "queue_digest", digested)

    def round_after(change: list[str] | None = None):  # noqa: ANN202 - (outcome, the events of its reads)
        if change:
            slurm_cluster.run(change, check=True)
        events.clear()
        return reorderer.round(), list(events)

    _settle(reorderer)
    kept = Path(reorderer.config.state_dir) / ACTIVITY_FILE
    assert kept.read_text() == client.activity() and "Jobs canceled:" in kept.read_text()
    out, seen = _light_again(slurm_cluster, reorderer, round_after)
    assert out.light and seen == ["digest"]                         # the counters did not move
    out, seen = round_after(["scancel", plain[0]])
    assert not out.light and out.result is not None and client.last_read == "tight"
    assert out.read_because == "job-counters-moved"
    assert "digest" not in seen and seen.count("tight") == 1 and not client._prefetched
    assert kept.read_text() == client.activity()
    _settle(reorderer)
    out, seen = _light_again(slurm_cluster, reorderer, round_after)
    assert out.light and seen == ["digest"]
    out, seen = round_after(["scontrol", "hold", plain[1]])         # not counted: the digest sees it
    assert not out.light and client.last_read == "tight" and out.read_because == "digest-differs"
    assert seen.index("digest") < seen.index("tight") and seen.count("tight") == 1
    _settle(reorderer)
    kept.write_text("the counters of another day")                  # moved, but Slurm is as it was
    out, seen = round_after()
    assert out.unchanged and out.result is None and not out.light and "digest" not in seen
    out, seen = round_after()
    assert out.light and seen == ["digest"]         # by the digest of that round's own read, recorded


@pytest.mark.slurm
def test_a_light_round_imports_nothing_of_the_planning_core(slurm_cluster, site, settled_queue):
    """`msched reorder` in a new process (as cron runs it) after the queue settled: the round is light
    and the process never loaded the planning core, the estimators, the heavy libraries, SQLAlchemy or
    click."""
    reorderer, *_ = settled_queue
    reorderer.round()
    _settle(reorderer)
    script = (
        "import json, sys\n"
        "from msched.cli import main\n"
        "try:\n"
        f"    main(['reorder', '--config', {site.source!r}])\n"
        "except SystemExit as exc:\n"
        "    assert not exc.code, exc.code\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          env=slurm_cluster.env)
    assert proc.returncode == 0, proc.stderr
    assert "light=yes" in proc.stderr, proc.stderr
    loaded = json.loads(proc.stdout.strip().splitlines()[-1])
    assert "msched.rounds.reorder" in loaded and "sqlite3" in loaded            # the check sees imports
    bad = [m for m in loaded if m.split(".")[0] in HEAVY or m.startswith(PLANNING)]
    assert not bad, bad
    # sixth pass: the store through plain sqlite3 (msched.store.light), the command without click
    assert not [m for m in loaded if m.split(".")[0] in ("sqlalchemy", "click")]
    with reorderer.store.read() as s:
        last = s.scalars(select(Round).order_by(Round.id.desc())).first()
    assert last.light == 1


@pytest.mark.slurm
def test_an_old_store_gains_the_columns_and_its_last_round_is_not_taken_as_light(slurm_cluster, site,
                                                                                 settled_queue):
    """A store written before the light round (no queue_digest, no light column) is upgraded on open; its
    last round has no digest, so the first round after the upgrade reads Slurm; later ones can be light."""
    reorderer, *_ = settled_queue
    reorderer.round()
    _settle(reorderer)
    path = Path(site.database_url.removeprefix("sqlite:///"))
    reorderer.store.dispose()
    con = sqlite3.connect(path)
    con.execute("ALTER TABLE rounds DROP COLUMN queue_digest")
    con.execute("ALTER TABLE rounds DROP COLUMN light")
    con.commit()
    con.close()
    store = Store(site.database_url)
    with store.engine.connect() as conn:
        cols = {r[1] for r in conn.exec_driver_sql("PRAGMA table_info(rounds)")}
    assert {"queue_digest", "light"} <= cols
    reorderer.store = store
    try:
        after = reorderer.round()
        assert not after.light and after.unchanged      # Slurm unchanged: not planned, but read
        assert _light_again(slurm_cluster, reorderer).light
    finally:
        store.dispose()


@pytest.mark.slurm
def test_the_digest_leaves_out_what_slurm_rewrites_by_itself(slurm_cluster, site, settled_queue):
    """Digests of an unchanged queue taken over a few seconds are equal, while backfill (bf_interval=1)
    keeps re-estimating the pending jobs' start times and reasons; a digest on another setup differs."""
    import time

    reorderer, *_ = settled_queue
    client = reorderer.client
    a = client.queue_digest("x")
    assert a is not None and len(a) == 32
    deadline = time.monotonic() + 3.0
    seen = set()
    while time.monotonic() < deadline:
        seen.add(client.queue_digest("x"))
    assert seen == {a}
    assert client.queue_digest("y") != a


# ------------------------------------------------------------------ the conditions, on the simulator
def _sim_reorderer(tmp_path, **settings):  # noqa: ANN003, ANN202
    """A Reorderer over the simulator's dev-cluster queue (bench busy_sim, 300 pending) whose client offers
    a queue digest (the simulator has none of its own: here the round core's state key of all it holds)."""
    from msched.config import Config
    from msched.rounds.core import slurm_state_key
    from msched.slurm.base import ACTIVE_STATES, FINISHED_STATES

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
    import bench_reorder as br

    c, _blockers, _perf = br.busy_sim(300, seed=2)
    every = ACTIVE_STATES + FINISHED_STATES
    c.queue_digest = lambda setup="": slurm_state_key(c.jobs(every), c.nodes(), setup)
    cfg = Config(state_dir=str(tmp_path / "state"), performance=str(br.PERF), cluster_name="light-sim",
                 backend="cli", **settings)
    store = open_site_store(cfg)
    return c, Reorderer(cfg, c, store, run_kind="sim", run_name="light-sim"), store


@pytest.mark.parametrize("lever", [False, True])
def test_a_light_round_needs_every_condition(tmp_path, lever):
    """Light only after a round that wrote nothing, before its plan's stable_until, with no hold or begin
    time open in the journal (the nice lever's records of owners' offsets do not count) and the
    begin-time lever off; each condition broken alone makes the round read Slurm again."""
    from msched.store.holds import HoldJournal

    c, reorderer, store = _sim_reorderer(tmp_path, begin_time_lever=lever)
    try:
        outcomes = [reorderer.round() for _ in range(6)]
        if lever:                                   # the lever decides on the clock: never light
            assert not any(o.light for o in outcomes)
            return
        first = next(i for i, o in enumerate(outcomes) if o.light)
        assert first >= 1 and all(o.light for o in outcomes[first:])
        assert outcomes[0].read_because == "no-planned-round" and "read=no-planned-round" in outcomes[0].summary()
        assert all(o.read_because == "" and "read=" not in o.summary() for o in outcomes[first:])
        before = outcomes[first - 1]
        assert before.result is None or before.result.update_calls == 0
        with store.read() as s:
            last = s.scalars(select(Round).order_by(Round.id.desc())).first()
            assert (last.light, last.changes, last.decision_rows) == (1, 0, 0)

        journal = HoldJournal(store)
        job = next(j.job_id for j in c.jobs() if j.is_pending)
        (nice,) = [journal.record_hold(job, "nice", "0", "owner's offset")]
        assert reorderer.round().light                  # a nice record is not a hold to undo
        hold = journal.record_hold(job, "hold", "", "an interrupted round")
        held = reorderer.round()
        assert not held.light and held.read_because == "open-hold"  # the round reads and replays it
        journal.close([hold, nice], "test")
        assert reorderer.round().light

        c.cancel(job)
        ended = reorderer.round()
        assert not ended.light and ended.read_because == "digest-differs"   # the digest saw the job end
        _settle(reorderer)
        with store.read() as s:
            stable_until = s.scalars(select(Round).order_by(Round.id.desc())).first().stable_until
        assert stable_until is not None and stable_until > c.now()
        expired = reorderer.round(now=stable_until)
        assert not expired.light and expired.read_because == "plan-expired"   # the clock alone changes the plan
        reorderer.skip_unchanged = False
        off = reorderer.round()
        assert not off.light and off.read_because == "light-checks-off"      # switched off: every round reads
    finally:
        store.dispose()


# ------------------------------------------------------------------ the digest's failure modes
FAKE = """#!/bin/sh
# stands in for squeue and sinfo: prints $OUT_<command>, $ERR_<command> on stderr, exits $RC_<command>
name=$(basename "$0")
eval "printf '%s' \\"\\$OUT_$name\\""
eval "printf '%s' \\"\\$ERR_$name\\"" >&2
eval "exit \\${RC_$name:-0}"
"""


def _fake_client(tmp_path, **env):  # noqa: ANN003, ANN202
    import stat

    from msched.config import Config
    from msched.slurm.cli import CliClient

    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    for name in ("squeue", "sinfo"):
        (bindir / name).write_text(FAKE)
        (bindir / name).chmod(stat.S_IRWXU)
    return CliClient(Config(), bin_dir=bindir, env={"OUT_squeue": "1\x1fPD\x1f\n", "OUT_sinfo": "n1\x1fidle\x1f\n",
                                                    **env})


def test_the_digest_changes_with_what_squeue_and_sinfo_print_and_fails_safe(tmp_path):
    """The digest hashes both commands' output with the setup; an error on stderr (a field this Slurm does
    not know: squeue says so and exits 0) gives no digest (the round reads Slurm whole), and an
    unreachable controller raises SlurmUnavailable as every read does."""
    from msched.slurm.base import SlurmUnavailable

    base = _fake_client(tmp_path).queue_digest("s")
    assert base is not None and len(base) == 32 and base == _fake_client(tmp_path).queue_digest("s")
    assert _fake_client(tmp_path).queue_digest("t") != base
    assert _fake_client(tmp_path, OUT_squeue="1\x1fR\x1f\n").queue_digest("s") != base
    assert _fake_client(tmp_path, OUT_sinfo="n1\x1fdrain\x1f\n").queue_digest("s") != base
    # the same bytes split differently between the two commands are not the same digest
    assert _fake_client(tmp_path, OUT_squeue="1\x1fPD\x1f\nn1", OUT_sinfo="\x1fidle\x1f\n").queue_digest("s") != base
    unknown = "squeue: error: Invalid job format specification: admin_comment\n"
    assert _fake_client(tmp_path, ERR_squeue=unknown).queue_digest("s") is None
    assert _fake_client(tmp_path, ERR_sinfo="sinfo: error: boom\n", RC_sinfo="1").queue_digest("s") is None
    with pytest.raises(SlurmUnavailable):
        _fake_client(tmp_path, ERR_squeue="squeue: error: Unable to contact slurm controller (connect failure)\n",
                     RC_squeue="1").queue_digest("s")
