"""Issue 13 (the reorderer side) on the real dev cluster, with an ordinary user as the attacker: each
attack is reproduced and shown to fail. The reorderer runs as root, as on a site (cron).

- injection: a comment holding a whole fake squeue row (and every control byte) changes nothing;
- poisoned tag: `bs=` with 26 digits does not stop the round, before or after scancel;
- kill during `msched reorder --release` at every step (SIGKILL and SIGTERM): nothing stays held once
  the next round or `--release` has run;
- forged tags: queue jumping is bounded (plain jobs keep their rank; claims bounded by the time limit).
"""

from __future__ import annotations

import contextlib
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from msched.tag import JobTag, with_tag

sys.path.insert(0, str(Path(__file__).resolve().parent))
from helpers import VENV_BIN, measured_rows, wait_for  # noqa: E402
from test_reorder import _fill_gpus  # noqa: E402

MSCHED = str(VENV_BIN / "msched")
TYPES = ("a100", "titanv", "rtx2080ti", "titanxp")
PERF_CSV = measured_rows(["vgg16", "densenet169"], TYPES)
pytestmark = pytest.mark.slurm


# the rank tests' plans: the greedy list schedule, longest job first (the optimizing planner's balanced
# default has many equally good orders when every job waits for the same blockers)
MAKESPAN = 'objective = "makespan"\nplanner = "greedy"\n'


def _site(tmp_path: Path, *, wrap_dir: Path | None = None, extra: str = "") -> Path:
    """A site config (state, database, performance table under tmp_path); with wrap_dir, the Slurm
    commands msched runs are the wrappers in it (CliClient looks beside `sbatch`)."""
    perf = tmp_path / "perf.csv"
    perf.write_text(PERF_CSV)
    state = tmp_path / "state"
    cfg = tmp_path / "msched.toml"
    sbatch = f'sbatch = "{wrap_dir / "sbatch"}"\n' if wrap_dir else ""
    cfg.write_text(f'state_dir = "{state}"\nperformance = "{perf}"\ncluster_name = "test"\nbackend = "cli"\n'
                   f'database_url = "sqlite:///{state}/msched.db"\n{sbatch}{extra}')
    return cfg


def _tag(model: str = "vgg16", iters: int = 1000, added: str = "") -> str:
    return with_tag(JobTag(model=model, ref=model, group=model[:3], sim=1.0, flops=1.0, iters=iters, bs=12,
                           added=added, ver="test"), None)


def _user_submit(user, cluster, *args: str) -> str:
    proc = user.run(["sbatch", "--parsable", "--output=/dev/null", "--time=60", *args],
                    env={"SLURM_CONF": str(cluster.conf)})
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip().split(";")[0]


def _squeue(cluster, job_ids) -> dict[str, dict[str, str]]:
    """state, priority and reason of jobs, in fields no user text can hold."""
    proc = cluster.run(["squeue", "-h", "-t", "all", "-j", ",".join(job_ids), "-o", "%i %T %Q %r"])
    out = {}
    for line in proc.stdout.splitlines():
        jid, state, prio, reason = line.split()
        out[jid] = {"state": state, "priority": prio, "reason": reason}
    return out


def _reorder(cfg: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([MSCHED, "reorder", "--config", str(cfg), *args], capture_output=True, text=True,
                          timeout=timeout)


# ------------------------------------------------------------------------------ kill during --release
KILLER = """#!/bin/sh
# scontrol wrapper: on call number $KILL_AT (counted in $COUNT_FILE) send $KILL_SIG to msched, the
# parent, before ($KILL_WHEN=before) or after (=after) running the real scontrol
[ -n "$COUNT_FILE" ] || exec REAL "$@"          # the repair runs: no counting, no kill
n=$(($(cat "$COUNT_FILE" 2>/dev/null || echo 0) + 1)); echo $n > "$COUNT_FILE"
echo "$n $*" >> "$COUNT_FILE.log"
if [ "$n" = "$KILL_AT" ] && [ "$KILL_WHEN" = before ]; then kill -s "$KILL_SIG" $PPID; exit 1; fi
REAL "$@"; rc=$?
if [ "$n" = "$KILL_AT" ] && [ "$KILL_WHEN" = after ]; then kill -s "$KILL_SIG" $PPID; fi
exit $rc
"""


# scontrol wrapper: before a batch (no arguments, commands on stdin) that releases jobs, record the
# state and reason of every pending job in $SNAP_FILE, then run the batch unchanged
SNAPSHOT_BEFORE_RELEASE = """#!/bin/sh
if [ $# -eq 0 ]; then
  input=$(cat)
  if printf '%s\\n' "$input" | grep -q '^release '; then
    echo "--- $(printf '%s\\n' "$input" | grep -c '^release ') releases" >> "$SNAP_FILE"
    SQUEUE -h -t PD -o "%i %r" >> "$SNAP_FILE"
  fi
  printf '%s\\n' "$input" | REAL
  exit $?
fi
exec REAL "$@"
"""


def _wrappers(tmp_path: Path, scontrol: str = KILLER) -> Path:
    import shutil
    d = tmp_path / "bin"
    d.mkdir()
    for name in ("sbatch", "squeue", "sinfo", "scancel", "sacct"):
        real = shutil.which(name)
        (d / name).write_text(f'#!/bin/sh\nexec {real} "$@"\n')
    (d / "scontrol").write_text(scontrol.replace("REAL", shutil.which("scontrol")).replace("SQUEUE",
                                                                                       shutil.which("squeue")))
    for f in d.iterdir():
        f.chmod(f.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return d


@pytest.mark.slow
def test_kill_during_release_at_every_step_leaves_nothing_held(slurm_cluster, janitor, ordinary_user, tmp_path):
    """Issue 13 item 3: `msched reorder --release` killed (SIGKILL, SIGTERM) before or after each of its
    scontrol calls (one for the type terms, one holding every job, one releasing every job). Afterwards the journal lets the next plain round (odd steps) or the next --release
    (even steps) release every job msched held: none stays JobHeldAdmin at priority 0, and a job its
    owner held themselves stays held (msched never releases a user's hold)."""
    wrap = _wrappers(tmp_path)
    cfg = _site(tmp_path, wrap_dir=wrap)
    janitor.extend(_fill_gpus(slurm_cluster, janitor))
    managed = [janitor.add(_user_submit(ordinary_user, slurm_cluster, "--gres=gpu:1", "--constraint=a100|titanv",
                                        f"--comment={_tag(added='a100|titanv')}", "--wrap=true")) for _ in range(2)]
    own_hold = janitor.add(_user_submit(ordinary_user, slurm_cluster, "--gres=gpu:1", f"--comment={_tag()}",
                                        "--hold", "--wrap=true"))
    count = tmp_path / "count"
    env = {**os.environ, "COUNT_FILE": str(count)}
    left_held = 0
    # three scontrol calls: the type terms of both jobs, then one hold pass, then one release pass
    steps = [(when, k) for k in range(1, 4) for when in ("before", "after")]
    for i, (when, k) in enumerate(steps):
        for sig in ("KILL", "TERM"):
            for jid in managed:                       # msched had set priorities (a round did)
                slurm_cluster.run(["scontrol", "update", f"jobid={jid}", "priority=5000",
                                   "Features=a100|titanv"], check=True)
            count.unlink(missing_ok=True)
            killed = subprocess.run([MSCHED, "reorder", "--config", str(cfg), "--release"], capture_output=True,
                                    text=True, timeout=120, env={**env, "KILL_AT": str(k), "KILL_WHEN": when,
                                                                 "KILL_SIG": sig})
            calls = count.read_text().strip() if count.exists() else "0"
            assert int(calls) >= k, (when, k, sig, killed.stderr)
            after_kill = _squeue(slurm_cluster, managed)
            left_held += sum(1 for v in after_kill.values() if v["priority"] == "0")
            repair = _reorder(cfg, "--release") if i % 2 else _reorder(cfg)
            assert repair.returncode == 0, repair.stderr
            q = _squeue(slurm_cluster, managed + [own_hold])
            for jid in managed:
                assert q[jid]["state"] == "PENDING" and q[jid]["priority"] != "0", (when, k, sig, q, killed.stderr)
            assert q[own_hold]["priority"] == "0"        # the owner's own hold is theirs
    assert left_held >= 4       # the kills did leave jobs held (hold done, release not): the journal undid it
    reason = slurm_cluster.run(["squeue", "-h", "-j", ",".join(managed), "-o", "%r"]).stdout.split()
    assert "JobHeldAdmin" not in reason
    from msched.store.db import Store
    from msched.store.holds import HoldJournal
    store = Store(f"sqlite:///{tmp_path}/state/msched.db", create=False)
    assert HoldJournal(store).open_entries() == []


def test_release_holds_every_job_before_it_releases_any(slurm_cluster, janitor, ordinary_user, tmp_path):
    """`--release` hands jobs back in one hold pass and one release pass: when the release pass starts,
    every managed job is held (so none can start ahead of one still waiting for its turn, as happened
    when jobs were held and released one at a time). Afterwards all are pending on Slurm's own
    priority, and the owner's own hold stays."""
    wrap = _wrappers(tmp_path, SNAPSHOT_BEFORE_RELEASE)
    cfg = _site(tmp_path, wrap_dir=wrap)
    janitor.extend(_fill_gpus(slurm_cluster, janitor))
    managed = [janitor.add(_user_submit(ordinary_user, slurm_cluster, "--gres=gpu:1", f"--comment={_tag()}",
                                        "--wrap=true")) for _ in range(5)]
    own_hold = janitor.add(_user_submit(ordinary_user, slurm_cluster, "--gres=gpu:1", f"--comment={_tag()}",
                                        "--hold", "--wrap=true"))
    for k, jid in enumerate(managed):                 # msched had set priorities (a round did)
        slurm_cluster.run(["scontrol", "update", f"jobid={jid}", f"priority={5000 + k}"], check=True)
    snap = tmp_path / "snap"
    out = subprocess.run([MSCHED, "reorder", "--config", str(cfg), "--release"], capture_output=True, text=True,
                         timeout=120, env={**os.environ, "SNAP_FILE": str(snap)})
    assert out.returncode == 0, out.stderr
    passes = snap.read_text().split("--- ")[1:]
    assert len(passes) == 1, snap.read_text()          # one release pass
    head, *rows = passes[0].splitlines()
    assert head == f"{len(managed)} releases"
    reason = dict(r.split(maxsplit=1) for r in rows)
    assert all(reason[j] == "JobHeldAdmin" for j in managed), reason
    assert reason[own_hold] == "JobHeldUser"
    q = _squeue(slurm_cluster, managed + [own_hold])
    assert all(q[j]["state"] == "PENDING" and q[j]["priority"] not in ("0",) and int(q[j]["priority"]) < 5000
               for j in managed), q
    assert q[own_hold]["priority"] == "0"


# ------------------------------------------------------------------------------ injection, poison, forgery
def _order(cluster, job_ids) -> list[str]:
    """The pending jobs in Slurm's order: priority descending, then the lower job id."""
    q = _squeue(cluster, job_ids)
    return sorted((j for j in job_ids if q[j]["state"] == "PENDING"), key=lambda j: (-int(q[j]["priority"]), int(j)))


def _features(cluster, job_id: str) -> str:
    out = cluster.run(["scontrol", "show", "job", job_id]).stdout
    return next((w.split("=", 1)[1] for w in out.split() if w.startswith("Features=")), "")


def test_injected_row_changes_nothing(slurm_cluster, janitor, ordinary_user, tmp_path):
    """Issue 13 item 1: an ordinary user's comment carries a newline and a whole fake row (the old
    `squeue -O` format) claiming root's plain job is a tagged msched job, plus every control byte. After
    a round, the plain job has its own features and priority, no fake job is in the database, and the
    hostile job itself is one untagged job."""
    from sqlalchemy import select

    from msched.store.db import Store
    from msched.store.schema import Job
    cfg = _site(tmp_path)
    janitor.extend(_fill_gpus(slurm_cluster, janitor))
    plain = janitor.add(slurm_cluster.run(["sbatch", "--parsable", "--gres=gpu:1", "--time=60", "--output=/dev/null",
                                           "--wrap=true"], check=True).stdout.strip())
    fake = "\x1f".join([plain, "PENDING", "fake", "carol", "gpu", "4001", "1", "N/A", "N/A", "1:00:00", "1", "1",
                        "N/A", "gres:gpu:1", "N/A", "a100", "", "None", _tag(added="a100")])
    controls = "".join(chr(c) for c in range(1, 32))
    hostile = janitor.add(_user_submit(ordinary_user, slurm_cluster, "--gres=gpu:1", "--wrap=true",
                                       f"--comment=x{controls}\n{fake}\n", f"--job-name=n\n{fake}"))
    managed = janitor.add(_user_submit(ordinary_user, slurm_cluster, "--gres=gpu:1", "--constraint=a100|titanv",
                                       f"--comment={_tag(added='a100|titanv')}", "--wrap=true"))
    before = _squeue(slurm_cluster, [plain])[plain]["priority"], _features(slurm_cluster, plain)
    out = _reorder(cfg)
    assert out.returncode == 0, out.stderr
    assert (_squeue(slurm_cluster, [plain])[plain]["priority"], _features(slurm_cluster, plain)) == before
    with Store(f"sqlite:///{tmp_path}/state/msched.db", create=False).read() as s:
        ingested = {j.job_id: j.user for j in s.scalars(select(Job))}
    # (finished tagged jobs of earlier tests are recorded too: squeue keeps them for MinJobAge)
    assert ingested.get(managed) == ordinary_user.name
    assert plain not in ingested and hostile not in ingested and "carol" not in ingested.values()


def test_poisoned_tag_does_not_stop_rounds(slurm_cluster, janitor, ordinary_user, tmp_path):
    """Issue 13 item 2: a tag with a 26-digit batch size; rounds go on (one warning naming the job),
    before and after the job is cancelled (squeue keeps it for MinJobAge), and the honest job is planned."""
    cfg = _site(tmp_path)
    janitor.extend(_fill_gpus(slurm_cluster, janitor))
    bad = janitor.add(_user_submit(ordinary_user, slurm_cluster, "--gres=gpu:1", "--wrap=true",
                                   "--comment=msched:v1;model=vgg16;ref=vgg16;bs=99999999999999999999999999"))
    janitor.add(_user_submit(ordinary_user, slurm_cluster, "--gres=gpu:1", f"--comment={_tag()}", "--wrap=true"))
    out = _reorder(cfg)
    assert out.returncode == 0, out.stderr
    assert out.stderr.count(f"job {bad}: tag refused (bs is not a whole number") == 1
    assert "pending=2 managed=1" in out.stderr
    slurm_cluster.run(["scancel", bad], check=True)
    out = _reorder(cfg)            # cancelled: squeue still lists it (MinJobAge), completion tracking reads it
    assert out.returncode == 0 and "pending=1 managed=1" in out.stderr, out.stderr


def test_forged_tags_do_not_jump_the_queue(slurm_cluster, janitor, ordinary_user, tmp_path):
    """Issue 13 item 5 on today's flat priorities (every job 1): root's plain job, submitted first, stays
    first after rounds although the user forges tags claiming huge work, both through --comment and through
    `scontrol update comment=` on their own pending job; a forged claim is planned no longer than the
    job's time limit."""
    import sqlite3
    cfg = _site(tmp_path)
    janitor.extend(_fill_gpus(slurm_cluster, janitor))
    plain = janitor.add(slurm_cluster.run(["sbatch", "--parsable", "--gres=gpu:1", "--time=60", "--output=/dev/null",
                                           "--wrap=true"], check=True).stdout.strip())
    forged = "msched:v1;model=vgg16;ref=vgg16;group=vgg;iters=100000000;bs=12"
    liar = janitor.add(_user_submit(ordinary_user, slurm_cluster, "--gres=gpu:1", f"--comment={forged}",
                                    "--wrap=true"))
    later = janitor.add(_user_submit(ordinary_user, slurm_cluster, "--gres=gpu:1", f"--comment={_tag()}",
                                     "--wrap=true"))
    upd = ordinary_user.run(["scontrol", "update", f"jobid={later}", f"comment={forged}"],
                            env={"SLURM_CONF": str(slurm_cluster.conf)})
    assert upd.returncode == 0, upd.stderr
    for _ in range(2):
        out = _reorder(cfg)
        assert out.returncode == 0, out.stderr
        assert _order(slurm_cluster, [plain, liar, later])[0] == plain
    assert _squeue(slurm_cluster, [plain])[plain]["priority"] == "1"
    db = sqlite3.connect(f"{tmp_path}/state/msched.db")
    runtimes = [json_rt for (json_rt,) in db.execute("SELECT est_runtime FROM jobs WHERE job_id IN (?, ?)",
                                                      (liar, later))]
    import json
    assert runtimes and all(all(v <= 3600 + 1e-6 for v in json.loads(rt).values()) for rt in runtimes)


def test_managed_jobs_are_permuted_among_their_places_when_priorities_leave_room(slurm_cluster, janitor,
                                                                                  ordinary_user, tmp_path):
    """Spaced priorities, as age and fair-share give them (set here by root on every job, since the dev
    cluster's weights are 0): plain P1 9000, managed M1 8000, plain P2 7000, managed M2 6000 and M3 5000.
    The plan (objective makespan: longest first) wants M3 (most work) first. After a round the plain jobs
    hold places 1 and 3 with their own values, managed jobs were reordered among places 2, 4 and 5, and
    with `managed_first = true` managed jobs may pass the plain ones."""
    cfg = _site(tmp_path, extra=MAKESPAN)
    janitor.extend(_fill_gpus(slurm_cluster, janitor))

    def plain_job() -> str:
        return janitor.add(slurm_cluster.run(["sbatch", "--parsable", "--gres=gpu:1", "--time=60",
                                              "--output=/dev/null", "--wrap=true"], check=True).stdout.strip())

    def managed_job(iters: int) -> str:
        return janitor.add(_user_submit(ordinary_user, slurm_cluster, "--gres=gpu:1", "--wrap=true",
                                        f"--comment={_tag(iters=iters)}"))
    p1, m1, p2, m2, m3 = plain_job(), managed_job(1000), plain_job(), managed_job(5000), managed_job(40000)
    values = {p1: 9000, m1: 8000, p2: 7000, m2: 6000, m3: 5000}
    for jid, v in values.items():
        slurm_cluster.run(["scontrol", "update", f"jobid={jid}", f"priority={v}"], check=True)
    ids = list(values)
    assert _order(slurm_cluster, ids) == ids
    out = _reorder(cfg)
    assert out.returncode == 0, out.stderr
    order = _order(slurm_cluster, ids)
    q = _squeue(slurm_cluster, ids)
    assert order[0] == p1 and order[2] == p2                                   # plain places kept
    assert (q[p1]["priority"], q[p2]["priority"]) == ("9000", "7000")          # and never written
    assert order[1] == m3 and order != ids, (out.stdout, out.stderr)            # the plan moved M3 up
    # opt-in: managed jobs first
    (tmp_path / "first").mkdir()
    cfg_first = _site(tmp_path / "first", extra=MAKESPAN + "managed_first = true\n")
    out = _reorder(cfg_first)
    assert out.returncode == 0, out.stderr
    order = _order(slurm_cluster, ids)
    assert order.index(p1) > order.index(m3)                                   # M3 now passes P1


@contextlib.contextmanager
def _age_weighted_cluster():
    """A private dev cluster (its own directory and ports) with multifactor's age weight on
    (PriorityWeightAge=100000, PriorityMaxAge=1 min: about 1667 a second of age); yields sl(*argv)."""
    import re
    import shutil

    from helpers import REPO
    d = Path("/tmp") / f"msched-mf-{os.getpid()}"
    script = REPO / "scripts" / "slurm-dev-cluster.sh"
    subprocess.run(["bash", str(script), "up", "--dir", str(d)], check=True, capture_output=True, timeout=300)
    env = {**os.environ, "SLURM_CONF": str(d / "slurm.conf")}

    def sl(*argv: str) -> str:
        p = subprocess.run(list(argv), env=env, capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, (argv, p.stderr)
        return p.stdout
    sl.env = env
    try:
        conf = (d / "slurm.conf").read_text()
        (d / "slurm.conf").write_text(re.sub(r"PriorityWeightAge=0", "PriorityWeightAge=100000\nPriorityMaxAge=0-00:01:00",
                                             conf))
        sl("scontrol", "reconfigure")
        time.sleep(1)
        for n in ("n1", "n2", "n3", "n4"):
            sl("sbatch", "--gres=gpu:4", f"--nodelist={n}", "--time=60", "--output=/dev/null", "--wrap=sleep 300")
        yield sl
    finally:
        subprocess.run(["bash", str(script), "down", "--dir", str(d)], capture_output=True, timeout=120)
        shutil.rmtree(d, ignore_errors=True)

def _plain_and_managed_queue(sl, ordinary_user, gap_s: float) -> list[str]:  # noqa: ANN001
    """plain, managed (1,000 iterations), plain, managed (5,000), managed (40,000): one GPU each, held
    back by nothing, `gap_s` apart so multifactor's age gives each a distinct priority. Managed jobs are
    the ordinary user's, tagged in their comment; plain ones root's. Their ids in that order."""
    ids = []
    for kind, iters in (("plain", 0), ("managed", 1000), ("plain", 0), ("managed", 5000), ("managed", 40000)):
        argv = ["sbatch", "--parsable", "--gres=gpu:1", "--time=60", "--output=/dev/null", "--wrap=true"]
        if kind == "managed":
            p = ordinary_user.run([*argv, f"--comment={_tag(iters=iters)}"], env={"SLURM_CONF": sl.env["SLURM_CONF"]})
            assert p.returncode == 0, p.stderr
            ids.append(p.stdout.strip())
        else:
            ids.append(sl(*argv).strip())
        time.sleep(gap_s)
    return ids


@pytest.mark.slow
def test_plain_jobs_keep_their_rank_with_multifactor_age_weights(slurm_cluster, ordinary_user, tmp_path):
    """Multifactor's age weight on: jobs submitted a few seconds apart get distinct, Slurm-computed
    priorities. msched's round permutes the managed jobs among their places only: it writes no plain
    job, and once every value is recalculated no plain job has lost a place."""
    with _age_weighted_cluster() as sl:
        ids = _plain_and_managed_queue(sl, ordinary_user, gap_s=4)
        for jid in ids:                       # recompute every job's multifactor priority now (age counted)
            sl("scontrol", "update", f"jobid={jid}", "nice=0")
        p1, m1, p2, m2, m3 = ids

        def prio() -> dict[str, int]:
            out = sl("squeue", "-h", "-j", ",".join(ids), "-o", "%i %Q")
            return {i: int(q) for i, q in (ln.split() for ln in out.splitlines())}
        before = prio()
        assert len(set(before.values())) == 5 and before[p1] > before[m1] > before[p2] > before[m2] > before[m3]
        cfg = _site(tmp_path, extra=MAKESPAN)
        out = subprocess.run([MSCHED, "reorder", "--config", str(cfg)], capture_output=True, text=True, timeout=120,
                             env=sl.env)
        assert out.returncode == 0, out.stderr
        # Slurm recalculates a job's multifactor value when it is updated (a new feature list, say) and
        # the others only every PriorityCalcPeriod: recalculate the jobs msched gave no explicit value
        # (the plain ones among them) so every value is today's before comparing places
        written = {ln.split()[0] for ln in sl("squeue", "-h", "-j", ",".join(ids), "-o", "%i %Q").splitlines()
                   if int(ln.split()[1]) != before[ln.split()[0]]}
        assert p1 not in written and p2 not in written
        for jid in [j for j in ids if j in (p1, p2) or (j not in written and j not in (m1, m2, m3))]:
            sl("scontrol", "update", f"jobid={jid}", "nice=0")
        after = prio()
        order = sorted(ids, key=lambda j: (-after[j], int(j)))
        # no plain job lost a place; as they age past the frozen explicit values a plain job may gain
        # places over managed ones (the drift README "Which priority lever" describes), never the reverse
        assert order.index(p1) == 0 and order.index(p2) <= 2, (before, after)
        assert order.index(m3) < 4 and order.index(m3) <= order.index(m2), (before, after)   # M3 moved up


@pytest.mark.slow
def test_which_lever_explicit_priority_freezes_age_nice_keeps_it(slurm_cluster):
    """The measurement behind README "Which priority lever": with the age weight on, a job given an
    explicit priority keeps that value while its neighbours age; a job shifted by a nice offset ages
    like a plain job (its distance to the plain job stays the offset)."""
    with _age_weighted_cluster() as sl:
        argv = ["sbatch", "--parsable", "--gres=gpu:1", "--time=60", "--output=/dev/null", "--wrap=true"]
        plain, explicit, niced = (sl(*argv).strip() for _ in range(3))
        ids = [plain, explicit, niced]

        def prio() -> dict[str, int]:
            for jid in (plain, niced):        # a multifactor recalculation of these two now
                sl("scontrol", "update", f"jobid={jid}", f"nice={-500 if jid == niced else 0}")
            out = sl("squeue", "-h", "-j", ",".join(ids), "-o", "%i %Q")
            return {i: int(q) for i, q in (ln.split() for ln in out.splitlines())}
        time.sleep(3)
        first = prio()
        sl("scontrol", "update", f"jobid={explicit}", f"priority={first[plain]}")
        first = prio()
        time.sleep(6)
        later = prio()
        assert later[plain] - first[plain] >= 5000                  # ~1667 a second of age
        assert later[explicit] == first[explicit]                   # frozen ...
        assert later[plain] - later[explicit] >= 4000               # ... and the plain job has aged past it
        assert later[niced] - later[plain] == first[niced] - first[plain] == 500 or \
            abs((later[niced] - later[plain]) - (first[niced] - first[plain])) <= 2


def test_begin_time_holds_go_through_the_journal_and_release_clears_them(slurm_cluster, janitor, ordinary_user,
                                                                        tmp_path):
    """The planner's lever (issue 17 point 3): a begin time recorded in the journal, then set; `msched
    reorder --release` clears it (the job can start at once) and closes the entry; an entry whose time
    has passed is closed as expired by the next round without a Slurm call."""
    from msched.config import load_config
    from msched.rounds.reorder import open_site_store
    from msched.slurm import get_client
    from msched.store.holds import HoldJournal
    cfg = _site(tmp_path)
    config = load_config(cfg)
    client = get_client("cli", config=config)
    janitor.extend(_fill_gpus(slurm_cluster, janitor))
    job = janitor.add(_user_submit(ordinary_user, slurm_cluster, "--gres=gpu:1", f"--comment={_tag()}", "--wrap=true"))
    store = open_site_store(config)
    journal = HoldJournal(store)
    when = time.time() + 3600
    journal.record_hold(job, "begin_time", str(when), "kept off a100 for the plan")
    client.set_begin_time(job, when)
    wait_for(lambda: _squeue(slurm_cluster, [job])[job]["reason"] == "BeginTime", 20,
             message="the scheduler to see the begin time")
    past = journal.record_hold(job, "begin_time", str(time.time() - 5), "an old one")
    out = _reorder(cfg)                               # a round: the expired entry is closed, the future one kept
    assert out.returncode == 0, out.stderr
    assert [e.kind for e in journal.open_entries()] == ["begin_time"] and past not in [e.id for e in journal.open_entries()]
    out = _reorder(cfg, "--release")
    assert out.returncode == 0, out.stderr
    assert journal.open_entries() == []
    wait_for(lambda: _squeue(slurm_cluster, [job])[job]["reason"] != "BeginTime", 20,
             message="the begin time to be cleared")
    store.dispose()
