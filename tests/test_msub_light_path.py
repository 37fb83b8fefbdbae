"""msub's light path: what a submission imports, and the pieces that replace heavier standard modules.

msub's goal is under 100 ms on top of sbatch (bench/bench_msub.py measures it). Most of what it used to
spend was imports, so the path is pinned here by what it loads, not by a timing: a fresh interpreter
runs msub's whole decision for a torchvision model and must load exactly the light modules below.
"""

from __future__ import annotations

import json
import os
import pickle
import signal
import subprocess
import sys
from urllib.parse import quote

import pytest

from msched.config import Config, ConfigError
from msched.msub.spawn import spawn_and_wait
from msched.tag import _SAFE, JobTag, _quote, parse_comment, with_tag
from msched.util.record import record

# msched's modules on the path for a torchvision model (classify, estimate, choose, tag, constrain)
LIGHT_PATH = {
    "msched", "msched.config", "msched.msub.gpu_request", "msched.errors", "msched.estimate.runtime", "msched.models.features",
    "msched.estimate.perf_table", "msched.policy", "msched.policy.choice", "msched.slurm.feature_expr", "msched.util.record",
    "msched.msub.sbatch_args", "msched.models.shipped", "msched.models.classify", "msched.msub.main", "msched.tag",
    "msched.estimate.estimators", "msched.policy.feasibility", "msched.msub.cluster_view",
    "msched.msub.directives", "msched.msub.decide", "msched.msub.spawn",
    # the packages' own __init__ modules, each empty or lazy
    "msched.msub", "msched.models", "msched.estimate", "msched.slurm", "msched.util",
    "msched.util.text",
    "msched.models.precision",   # the job's precision flags (imports only `re`)
    "msched.estimate.memory", "msched.estimate.gpu_specs",   # the tag's `mem` against each type's memory (csv)
}
# standard or third-party modules whose import costs msub more than it needs (see msched.util.record)
NOT_ON_PATH = ("torch", "torchvision", "numpy", "sklearn", "sqlalchemy", "rich", "click", "dataclasses",
               "inspect", "typing", "pathlib", "subprocess", "urllib.parse", "tomllib", "hashlib",
               "msched.models.profiler", "msched.models.profile_cache", "msched.policy.base", "msched.policy.snapshot")


def _loaded_by_msub(tmp_path) -> tuple[set[str], str]:
    """Modules loaded by a fresh interpreter that decides one submission, as on a site: a config file,
    and a free-time file the reorderer published."""
    now = __import__("time").time()
    (tmp_path / "gpu_free_time.json").write_text(json.dumps({"time": now, "free_at": {"a100": now, "titanv": now}}))
    conf = tmp_path / "msched.toml"
    if not conf.exists():
        conf.write_text(f'state_dir = "{tmp_path}"\n[gpu_aliases]\n"A100-SXM4" = "a100"\n')
    code = (
        "import sys, json; from msched.msub.main import build_submission; "
        "sub, warnings = build_submission(['--model=resnet50', '--iterations=500', '--gres=gpu:1', '--wrap', 'true']); "
        "print(json.dumps([sorted(sys.modules), sub.argv, warnings]))"
    )
    env = {**os.environ, "MSCHED_CONFIG": str(conf), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    env.pop("MSCHED_CACHE_DIR", None)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env)
    assert proc.returncode == 0, proc.stderr
    modules, argv, warnings = json.loads(proc.stdout.strip().splitlines()[-1])
    assert not warnings, warnings
    return set(modules), " ".join(argv)


def test_torchvision_submission_loads_only_the_light_path(tmp_path):
    first, _ = _loaded_by_msub(tmp_path)
    assert "tomllib" in first                 # the first submission parses the site config ...
    modules, argv = _loaded_by_msub(tmp_path)  # ... later ones read the user's cached copy
    assert "msched:v1;model=resnet50;ref=resnet50" in argv and "--constraint=" in argv   # it really decided
    assert {m for m in modules if m.split(".")[0] == "msched"} == LIGHT_PATH
    assert [m for m in NOT_ON_PATH if m in modules] == []


def test_cached_config_follows_the_file(tmp_path, monkeypatch):
    from msched.config import load_config

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("MSCHED_CACHE_DIR", raising=False)
    conf = tmp_path / "msched.toml"
    conf.write_text('cluster_name = "one"\n')
    assert load_config(conf, cached=True).cluster_name == "one"
    cache = tmp_path / "cache" / "msched" / "site_config.json"
    assert oct(cache.stat().st_mode & 0o777) == "0o600"
    conf.write_text('cluster_name = "two, longer"\n')      # edited: size and mtime change
    assert load_config(conf, cached=True).cluster_name == "two, longer"
    conf.write_text('objective = "fastest"\n')             # a broken edit is refused, never cached
    with pytest.raises(ConfigError, match="objective"):
        load_config(conf, cached=True)
    cache.write_text("not json")                            # a damaged cache is only a miss
    conf.write_text('cluster_name = "three"\n')
    assert load_config(conf, cached=True).cluster_name == "three"


# ----------------------------------------------------------------------------- spawn_and_wait
def test_spawn_feeds_stdin_and_captures_both_streams():
    status, out, err = spawn_and_wait(["/bin/sh", "-c", "cat; echo oops >&2; exit 3"], b"script body\n", True)
    assert (status, out, err) == (3, b"script body\n", b"oops\n")


def test_spawn_large_input_and_output_do_not_deadlock():
    data = os.urandom(1 << 20)                   # far beyond a pipe's 64 KiB
    status, out, err = spawn_and_wait(["/bin/sh", "-c", "cat; head -c 300000 /dev/zero >&2"], data, True)
    assert status == 0 and out == data and err == b"\0" * 300000


def test_spawn_reports_a_signal_as_a_shell_does():
    status, _, _ = spawn_and_wait(["/bin/sh", "-c", "kill -TERM $$"], None, True)
    assert status == 128 + signal.SIGTERM


def test_spawn_without_capture_leaves_output_to_the_terminal(capfd):
    status, out, err = spawn_and_wait(["/bin/sh", "-c", "cat"], b"passed through\n", False)
    assert (status, out, err) == (0, b"", b"")
    assert capfd.readouterr().out == "passed through\n"


def test_spawn_child_that_ignores_stdin_is_not_an_error():
    status, out, _ = spawn_and_wait(["/bin/sh", "-c", "exit 0"], b"x" * (1 << 20), True)
    assert status == 0 and out == b""


def test_spawn_missing_program_raises_oserror():
    with pytest.raises(OSError):
        spawn_and_wait(["/nonexistent/sbatch"], None, True)


# ----------------------------------------------------------------------------- records
@record
class _Point:
    """A test record."""

    x: int
    y: int = 0
    label: str = ""

    @property
    def norm1(self) -> int:
        return abs(self.x) + abs(self.y)

    def _checked(self) -> _Point:
        if self.x < 0:
            raise ValueError("x must be >= 0")
        return self._replace(label=self.label or f"{self.x},{self.y}")


def test_record_fields_defaults_methods_and_check():
    p = _Point(3, y=4)
    assert (p.x, p.y, p.label, p.norm1) == (3, 4, "3,4", 7)
    assert _Point._fields == ("x", "y", "label") and _Point.__doc__ == "A test record."
    assert repr(p) == "_Point(x=3, y=4, label='3,4')"
    assert p._replace(y=0) == _Point(3, 0, "3,4") and hash(p) == hash(_Point(3, 4))
    with pytest.raises(ValueError, match="x must be"):
        _Point(-1)
    with pytest.raises(AttributeError):
        p.x = 5                                   # immutable, as a frozen dataclass


def test_record_refuses_a_field_without_default_after_one_with():
    with pytest.raises(TypeError, match="without a default"):
        @record
        class _Bad:
            a: int = 0
            b: int


def test_config_normalises_and_validates():
    c = Config(gpu_aliases={"A100-SXM4": "A100"}, state_dir="/srv/msched")
    assert c.canonical_gpu_type(" a100-sxm4 ") == "a100" and c.free_time_path == "/srv/msched/gpu_free_time.json"
    assert c.database_url == "sqlite:////srv/msched/msched.db"
    assert pickle.loads(pickle.dumps(c)) == c            # e.g. handed to a worker process
    with pytest.raises(ConfigError, match="objective 'fastest' is not one of balanced, makespan, jct"):
        Config(objective="fastest")


# ----------------------------------------------------------------------------- the tag's quoting
@pytest.mark.parametrize("text", ["resnet50", "/home/u/my net.py:build", "a;b=c%d", "modèle", "a100|titanv", "",
                                  "sbatch refused msched's GPU-type constraint", "".join(map(chr, range(32, 127)))])
def test_tag_quoting_is_urllib_quote(text):
    assert _quote(text) == quote(text, safe=_SAFE)
    tag = JobTag(model=text or "m", ref="resnet50", added="a100|titanv")
    assert parse_comment(with_tag(tag, "user words"))[0] == tag
