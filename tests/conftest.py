"""Shared fixtures: the real local Slurm cluster and an ordinary (non-root) user.

`slurm_cluster` (session) brings up `scripts/slurm-dev-cluster.sh` in `.slurm-dev` of the repository
(or MSCHED_SLURM_DIR), sets SLURM_CONF for the whole session and yields a `SlurmCluster`. Several test
sessions (several engineers, several pytest runs) share that one cluster: each registers a lease, and
the last session to leave stops the cluster only if a fixture started it (a cluster someone started
by hand, `make slurm-up`, is left running; MSCHED_KEEP_SLURM=1 keeps it up too).

Where it cannot run (not root, Slurm missing and no apt-get) the tests that use it are skipped with the
reason; with MSCHED_REQUIRE_SLURM=1 (set by .ci/run) that skip is a failure instead. Where it could
run but `up` fails, that is a failure everywhere.

`ordinary_user` (session) creates the account `mschedtest` (MSCHED_TEST_USER) and yields an
`OrdinaryUser` whose `.run(argv, env=None, ...)` runs a command as that user (runuser, clean env).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import pwd
import shutil
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from helpers import REPO, JobJanitor, run_as  # noqa: E402

SCRIPT = REPO / "scripts" / "slurm-dev-cluster.sh"
NODE_TYPES = {"n1": "a100", "n2": "titanv", "n3": "rtx2080ti", "n4": "titanxp"}
GPUS_PER_NODE = 4


def _require_slurm() -> bool:
    return os.environ.get("MSCHED_REQUIRE_SLURM") == "1"


def _cannot_run(reason: str) -> None:
    """Skip, or fail where the Slurm tests must run (CI)."""
    if _require_slurm():
        pytest.fail(f"MSCHED_REQUIRE_SLURM=1 but the local Slurm cluster cannot run: {reason}", pytrace=False)
    pytest.skip(f"local Slurm cluster unavailable: {reason}")


@dataclass(frozen=True)
class SlurmCluster:
    """The running dev cluster: its directory, config and an environment for Slurm's commands."""

    dir: Path
    conf: Path
    env: dict[str, str] = field(hash=False)
    started_here: bool = False
    node_types: dict[str, str] = field(default_factory=lambda: dict(NODE_TYPES), hash=False)
    gpus_per_node: int = GPUS_PER_NODE

    @property
    def jobcomp(self) -> Path:
        return self.dir / "jobcomp.txt"

    def run(self, argv: Sequence[str], *, check: bool = False, timeout: float = 60.0,
            input: str | None = None) -> subprocess.CompletedProcess[str]:
        """Run a Slurm command (argv list) as the test process's user against this cluster."""
        return subprocess.run(list(argv), env=self.env, capture_output=True, text=True, check=check,
                              timeout=timeout, input=input)


def _slurm_dir() -> Path:
    return Path(os.environ.get("MSCHED_SLURM_DIR") or REPO / ".slurm-dev").resolve()


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _pid_alive(pid: int) -> bool:
    try:
        stat = subprocess.run(["ps", "-o", "stat=", "-p", str(pid)], capture_output=True, text=True).stdout.strip()
    except OSError:
        return False
    return bool(stat) and not stat.startswith("Z")


def _live_leases(lease_dir: Path) -> list[Path]:
    live = []
    for lease in lease_dir.glob("*"):
        try:
            pid = int(lease.name)
        except ValueError:
            continue
        if pid != os.getpid() and _pid_alive(pid):
            live.append(lease)
        elif pid != os.getpid():
            lease.unlink(missing_ok=True)     # a session that died without cleaning up
    return live


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[SlurmCluster]:
    """The real local Slurm cluster (4 nodes x 4 typed GPUs), shared by the whole session."""
    if os.geteuid() != 0:
        _cannot_run("starting slurmctld/slurmd needs root (run the tests as root, or start it with "
                    "`sudo make slurm-up` and run as root)")
    if not shutil.which("sbatch") and not shutil.which("apt-get"):
        _cannot_run("Slurm is not installed and apt-get is not available to install it")
    if not SCRIPT.exists():
        _cannot_run(f"{SCRIPT} is missing")
    sdir = _slurm_dir()
    lease_dir = sdir / "leases"
    lock = sdir / ".fixture-lock"
    marker = sdir / "run" / "fixture-started"
    with _locked(lock):
        proc = subprocess.run(["bash", str(SCRIPT), "up", "--dir", str(sdir)], capture_output=True,
                              text=True, timeout=600)
        if proc.returncode != 0:
            # Root with Slurm or apt at hand: a cluster that does not come up is a bug, not a skip.
            tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
            pytest.fail(f"scripts/slurm-dev-cluster.sh up --dir {sdir} failed: {tail}", pytrace=False)
        started = "already running" not in proc.stderr
        if started:
            marker.parent.mkdir(parents=True, exist_ok=True)
            marker.touch()
        lease_dir.mkdir(parents=True, exist_ok=True)
        (lease_dir / str(os.getpid())).touch()
    conf = sdir / "slurm.conf"
    old = os.environ.get("SLURM_CONF")
    os.environ["SLURM_CONF"] = str(conf)
    env = dict(os.environ)
    try:
        yield SlurmCluster(dir=sdir, conf=conf, env=env, started_here=started)
    finally:
        if old is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = old
        with _locked(lock):
            (lease_dir / str(os.getpid())).unlink(missing_ok=True)
            if (marker.exists() and not _live_leases(lease_dir)
                    and os.environ.get("MSCHED_KEEP_SLURM") != "1"):
                subprocess.run(["bash", str(SCRIPT), "down", "--dir", str(sdir)], capture_output=True,
                               text=True, timeout=120)
                marker.unlink(missing_ok=True)


@dataclass(frozen=True)
class OrdinaryUser:
    """A non-root account; `.run` executes an argv list as it (runuser, a clean environment)."""

    name: str
    uid: int
    gid: int
    home: Path

    def run(self, argv: Sequence[str], env: Mapping[str, str] | None = None, *,
            cwd: str | os.PathLike | None = None, input: str | None = None, timeout: float = 120.0,
            check: bool = False) -> subprocess.CompletedProcess[str]:
        return run_as(self.name, argv, env, cwd=cwd, input=input, timeout=timeout, check=check)


def _let_others_reach(*paths: Path) -> None:
    """Grant traverse (o+x, never read) on the directories above the interpreter and the repository.

    Why: a venv made from a pyenv Python under /root (0700) is unusable by anyone else; on a real
    cluster msub is installed where users can run it, and the tests must reproduce that.
    """
    for path in paths:
        for parent in path.parents:
            mode = parent.stat().st_mode
            if not mode & 0o001:
                os.chmod(parent, mode | 0o001)


@pytest.fixture(scope="session")
def ordinary_user() -> OrdinaryUser:
    """A non-root user that can read the repository and run the venv's msub/msched (as on a real cluster)."""
    name = os.environ.get("MSCHED_TEST_USER", "mschedtest")
    if os.geteuid() != 0:
        _cannot_run("creating the ordinary test user needs root")
    try:
        pw = pwd.getpwnam(name)
    except KeyError:
        proc = subprocess.run(["useradd", "--create-home", "--shell", "/bin/bash", name],
                              capture_output=True, text=True)
        if proc.returncode != 0 and "already exists" not in proc.stderr:
            _cannot_run(f"useradd {name} failed: {proc.stderr.strip()}")
        pw = pwd.getpwnam(name)
    user = OrdinaryUser(name=name, uid=pw.pw_uid, gid=pw.pw_gid, home=Path(pw.pw_dir))
    _let_others_reach(Path(sys.executable).resolve(), REPO)
    probe = user.run([sys.executable, "-c", "import msched.tag, msched.config"], timeout=60)
    if probe.returncode != 0:
        _cannot_run(f"user {name} cannot run {sys.executable} with the msched package (check that the "
                    f"repository and venv are world-readable): {probe.stderr.strip().splitlines()[-1:]}")
    return user


@pytest.fixture
def janitor(slurm_cluster: SlurmCluster) -> Iterator[JobJanitor]:
    """Collects the ids of jobs a test submits and cancels them when the test ends."""
    j = JobJanitor(slurm_cluster.env)
    yield j
    j.cancel_all()
