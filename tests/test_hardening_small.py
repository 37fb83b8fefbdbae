"""Issue 13 item 7 (the reorderer's side), each with a test: control bytes never reach the terminal raw
(`msched jobs`, `msched report`), the reorderer refuses a damaged database with one clean line, and a
killed round's scontrol does not keep writing."""

from __future__ import annotations

import os
import shutil
import signal
import sqlite3
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

sys.path.insert(0, str(Path(__file__).resolve().parent))
import report_fill  # noqa: E402
from helpers import VENV_BIN  # noqa: E402
from test_reorder import _dead_slurm_conf  # noqa: E402

ESC_NAME = "evil\x1b]0;pwned\x07\x1b[31m[bold]red"


def test_msched_jobs_escapes_control_bytes_and_markup(capsys):
    from msched.commands.jobs_cmd import JobRow, render_table
    row = JobRow(job_id="7", user="mallory", state="PENDING", name=ESC_NAME, partition="gpu", num_gpus=1,
                 model="vgg16", group="vgg", reference="vgg16", similarity=1.0, pinned="", added="",
                 constraint="a100\x1b[2J", planned_type=None, gpu_type=None, reason="", tagged=True, in_db=False)
    render_table([row])
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out
    assert "\\x1b" in out and "\\x07" in out         # escaped, visible
    assert "[bold]" in out                   # shown as typed, not read as rich markup


def test_msched_report_escapes_control_bytes(tmp_path):
    """A database whose rows hold control bytes (a model name, a round's error text): the report shows
    them escaped."""
    from msched.commands.report_cmd import report as report_cmd
    from msched.store.db import Store
    path = tmp_path / "msched.db"
    store = Store(f"sqlite:///{path}")
    report_fill.fill(store, time.time())
    store.dispose()
    db = sqlite3.connect(path)
    db.execute("UPDATE jobs SET model = ?, \"group\" = ? WHERE id = (SELECT min(id) FROM jobs)",
               ("m\x1b[31m", "g\x1b]0;x\x07"))
    db.execute("UPDATE rounds SET error = ? WHERE id = (SELECT max(id) FROM rounds)", ("boom\x1b[2J\x00",))
    db.commit()
    db.close()
    res = CliRunner().invoke(report_cmd, ["--db", str(path), "--no-slurm"])
    assert res.exit_code == 0, res.output
    assert "\x1b" not in res.output and "\x07" not in res.output and "\x00" not in res.output
    assert "\\x1b" in res.output


def _corrupt(path: Path) -> None:
    """Overwrite pages in the middle of the file with bytes that are not a b-tree page."""
    size = path.stat().st_size
    with open(path, "r+b") as fh:
        for off in range(4096, size - 4096, 8192):
            fh.seek(off)
            fh.write(bytes(range(256)) * 8)


def _damaged_site(tmp_path: Path) -> Path:
    """A site config whose database holds a filled store with pages corrupted (it fails quick_check)."""
    from msched.store.db import Store
    state = tmp_path / "state"
    path = state / "msched.db"
    store = Store(f"sqlite:///{path}")
    report_fill.fill(store, time.time())
    store.dispose()
    for suffix in ("-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    _corrupt(path)
    cfg = tmp_path / "msched.toml"
    cfg.write_text(f'state_dir = "{state}"\ndatabase_url = "sqlite:///{path}"\nbackend = "cli"\n')
    return cfg


def test_reorderer_refuses_a_damaged_database_with_one_clean_line(tmp_path):
    """`msched reorder` on a database failing quick_check: exit 1, one printable line naming the check,
    nothing changed in Slurm (Slurm is unreachable here: the check comes first); `msched report` on it
    prints no raw byte either."""
    from msched.commands.report_cmd import report as report_cmd
    cfg = _damaged_site(tmp_path)
    proc = subprocess.run([str(VENV_BIN / "msched"), "reorder", "--config", str(cfg)], capture_output=True,
                          text=True, timeout=120, env={**os.environ, "SLURM_CONF": "/nonexistent/slurm.conf"})
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 1 and len(lines) == 1, proc.stderr
    assert "quick_check" in lines[0] or "malformed" in lines[0]
    assert "nothing changed in Slurm" in lines[0] and lines[0].isprintable()
    res = CliRunner().invoke(report_cmd, ["--db", str(tmp_path / "state" / "msched.db"), "--no-slurm"])
    assert all(ch.isprintable() or ch in "\n" for ch in res.output), repr(res.output[-300:])


STUCK_SCONTROL = """#!/bin/sh
# reads the batch, then takes its time before "writing" (a marker) as a slow controller would
cat > /dev/null
sleep 2
echo wrote > "$MARKER"
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_killed_rounds_scontrol_does_not_keep_writing(tmp_path):
    """The round (here a process running the client's batched scontrol) is killed with SIGKILL while its
    scontrol runs: the scontrol dies with it and never writes (issue 13: 6 of 10 tries kept writing)."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "scontrol").write_text(STUCK_SCONTROL)
    (bindir / "scontrol").chmod(stat.S_IRWXU)
    marker = tmp_path / "marker"
    code = textwrap.dedent(f"""
        from msched.config import Config
        from msched.slurm.cli import CliClient
        c = CliClient(Config(), bin_dir={str(bindir)!r}, env={{"MARKER": {str(marker)!r}}})
        c._scontrol_batch({{"1": "update JobId=1 Priority=5"}})
    """)
    round_ = subprocess.Popen([sys.executable, "-c", code])
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:          # wait for the scontrol child to run
        kids = subprocess.run(["pgrep", "-P", str(round_.pid)], capture_output=True, text=True).stdout.split()
        if kids:
            break
        time.sleep(0.05)
    assert kids, "scontrol never started"
    os.kill(round_.pid, signal.SIGKILL)
    round_.wait()
    time.sleep(3)
    assert not marker.exists()
    assert shutil.which("sh")


def test_release_works_without_a_usable_database(tmp_path):
    """The off switch must work when the database does not: a damaged database gives one warning and
    --release goes on (here it then stops at Slurm, unreachable, with its own one line)."""
    cfg = _damaged_site(tmp_path)
    proc = subprocess.run([str(VENV_BIN / "msched"), "reorder", "--config", str(cfg), "--release"],
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "SLURM_CONF": str(_dead_slurm_conf(tmp_path))})
    lines = proc.stderr.strip().splitlines()
    assert "releasing without the hold journal" in lines[0], proc.stderr
    assert "Slurm" in lines[-1] and proc.returncode == 1 and all(ln.isprintable() for ln in lines)
