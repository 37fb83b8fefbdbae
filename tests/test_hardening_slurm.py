"""Issue 13 (the reorderer side) on the real dev cluster, with an ordinary user as the attacker: each
attack is reproduced and shown to fail. The reorderer runs as root, as on a site (cron).

- injection: a comment holding a whole fake squeue row (and every control byte) changes nothing;
- poisoned tag: `bs=` with 26 digits does not stop the round, before or after scancel;
- kill during `msched reorder --release` at every step (SIGKILL and SIGTERM): nothing stays held once
  the next round or `--release` has run;
- forged tags: queue jumping is bounded (plain jobs keep their rank; claims bounded by the time limit).
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from msched.tag import JobTag, with_tag

sys.path.insert(0, str(Path(__file__).resolve().parent))
from helpers import VENV_BIN, measured_rows  # noqa: E402
from test_reorder import _fill_gpus  # noqa: E402

MSCHED = str(VENV_BIN / "msched")
TYPES = ("a100", "titanv", "rtx2080ti", "titanxp")
PERF_CSV = measured_rows(["vgg16", "densenet169"], TYPES)
pytestmark = pytest.mark.slurm


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
n=$(($(cat "$COUNT_FILE" 2>/dev/null || echo 0) + 1)); echo $n > "$COUNT_FILE"
echo "$n $*" >> "$COUNT_FILE.log"
if [ "$n" = "$KILL_AT" ] && [ "$KILL_WHEN" = before ]; then kill -s "$KILL_SIG" $PPID; exit 1; fi
REAL "$@"; rc=$?
if [ "$n" = "$KILL_AT" ] && [ "$KILL_WHEN" = after ]; then kill -s "$KILL_SIG" $PPID; fi
exit $rc
"""


def _wrappers(tmp_path: Path) -> Path:
    import shutil
    d = tmp_path / "bin"
    d.mkdir()
    for name in ("sbatch", "squeue", "sinfo", "scancel", "sacct"):
        real = shutil.which(name)
        (d / name).write_text(f'#!/bin/sh\nexec {real} "$@"\n')
    (d / "scontrol").write_text(KILLER.replace("REAL", shutil.which("scontrol")))
    for f in d.iterdir():
        f.chmod(f.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return d


@pytest.mark.slow
def test_kill_during_release_at_every_step_leaves_nothing_held(slurm_cluster, janitor, ordinary_user, tmp_path):
    """Issue 13 item 3: `msched reorder --release` killed (SIGKILL, SIGTERM) before or after each of its
    scontrol calls. Afterwards the journal lets the next plain round (odd steps) or the next --release
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
    steps = [("before", 1)] + [("after", k) for k in range(1, 7)]      # 2 jobs x (features, hold, release)
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
