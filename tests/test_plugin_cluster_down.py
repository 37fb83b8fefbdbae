"""`scripts/slurm-dev-cluster.sh down` (and `make slurm-down`, which runs it) on a real dev cluster:
it waits for its daemons to exit and stops the munged that `up` started, and leaves a munged that
someone else started alone (the plugin issue found `down` leaving munged running: it looked for live
daemons while the ones it had killed were still unreaped zombies, and dropped its marker).

munged is host-wide, and other Slurm clusters may share this host (other test sessions, other
engineers): each scenario runs in its own PID and mount namespaces (`unshare`), with a private
/run/munge, so `down` sees only its own daemons and the host's munged is never touched. PID 1 of the
namespace is a process that waits for its own child only and never reaps orphans (as the init of a
container or a VM may): the daemons `down` kills stay zombies, exactly what fooled the old `down`.
When the scenario ends, the kernel ends whatever it left behind.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile

import pytest
from conftest import SCRIPT

pytestmark = pytest.mark.slurm

# Prints one `key=value` line per fact the test checks; runs as PID 1 of fresh namespaces.
SCENARIO = r"""
set -u
script=$1; dir=$2; own_munged=$3
mkdir -p "$dir"
mount -t tmpfs -o mode=0755 tmpfs /run/munge
chown munge:munge /run/munge
gone() { local s; s=$(ps -o stat= -p "$1" | tr -d ' '); [[ -z $s || $s == Z* ]]; }
if [[ $own_munged == 1 ]]; then       # a munged the dev cluster did not start
    runuser -u munge -- /usr/sbin/munged 9>&-
    for _ in $(seq 100); do munge -n 2>/dev/null | unmunge >/dev/null 2>&1 && break; sleep 0.1; done
fi
bash "$script" up --dir "$dir" >/dev/null 2>"$dir/up.err" || { echo "up=failed"; tail -n 3 "$dir/up.err"; exit 1; }
echo "up=ok"
echo "marker_after_up=$([[ -f /run/munge/started-by-slurm-dev ]] && echo yes || echo no)"
munged=$(cat /run/munge/munged.pid)
daemons=$(cat "$dir"/run/slurmctld.pid "$dir"/run/slurmd-*.pid | tr '\n' ' ')
echo "daemons=$daemons"
bash "$script" down --dir "$dir" >/dev/null 2>"$dir/down.err" || { echo "down=failed"; tail -n 3 "$dir/down.err"; exit 1; }
echo "down=ok"
left=""
for pid in $daemons; do gone "$pid" || left="$left $pid"; done
echo "daemons_left=${left# }"
echo "munged_running=$(gone "$munged" && echo no || echo yes)"
echo "munge_works=$(munge -n 2>/dev/null | unmunge >/dev/null 2>&1 && echo yes || echo no)"
echo "marker_after_down=$([[ -f /run/munge/started-by-slurm-dev ]] && echo yes || echo no)"
"""

# PID 1 of the namespace: runs the scenario and waits for it alone (orphans stay unreaped zombies)
PID1 = "import subprocess, sys; sys.exit(subprocess.run(sys.argv[1:]).returncode)"


def _run_scenario(own_munged: bool) -> dict[str, str]:
    if os.geteuid() != 0:
        pytest.skip("the scenario mounts a private /run/munge and starts daemons: it needs root")
    for tool in ("unshare", "munged", "slurmctld"):
        if not (shutil.which(tool) or os.path.exists(f"/usr/sbin/{tool}")):
            pytest.skip(f"{tool} is not installed")
    probe = subprocess.run(["unshare", "--mount", "--pid", "--fork", "--mount-proc", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"cannot make PID and mount namespaces here: {probe.stderr.decode().strip()}")
    top = tempfile.mkdtemp(prefix="msched-down-")
    try:
        os.chmod(top, 0o755)
        proc = subprocess.run(["unshare", "--mount", "--pid", "--fork", "--mount-proc", sys.executable, "-c", PID1,
                               "bash", "-c", SCENARIO, "scenario", str(SCRIPT), os.path.join(top, "cluster"), "1" if own_munged else "0"],
                              capture_output=True, text=True, timeout=300)
    finally:
        shutil.rmtree(top, ignore_errors=True)
    facts = dict(line.split("=", 1) for line in proc.stdout.splitlines() if "=" in line)
    assert proc.returncode == 0 and facts.get("down") == "ok", proc.stdout + proc.stderr
    return facts


def test_down_waits_for_its_daemons_and_stops_the_munged_it_started():
    facts = _run_scenario(own_munged=False)
    assert facts["marker_after_up"] == "yes"               # up started munged and said so
    assert len(facts["daemons"].split()) >= 2              # slurmctld and at least one slurmd
    assert facts["daemons_left"] == ""                     # each has exited (a zombie has exited)
    assert facts["munged_running"] == "no" and facts["munge_works"] == "no"
    assert facts["marker_after_down"] == "no"


def test_down_leaves_a_munged_it_did_not_start_alone():
    facts = _run_scenario(own_munged=True)
    assert facts["marker_after_up"] == "no"                # munged was already serving
    assert facts["daemons_left"] == ""
    assert facts["munged_running"] == "yes" and facts["munge_works"] == "yes"
    assert facts["marker_after_down"] == "no"
