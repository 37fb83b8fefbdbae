"""msched as a Slurm plugin, without Slurm: the generated Lua run by a real Lua 5.1 interpreter.

The controller's check (job_submit.lua) must accept exactly the tags the reorderer accepts
(msched.tag.parse_tag): both are fed the same comments, hand-made and random. The filter's Lua
(cli_filter.lua) is run with stand-ins for the Python it calls (one that hangs, one that crashes) to
show the job goes in unchanged with one stderr line and nothing on stdout, within the timeout.
The Python entry point (msched.plugin.filter) is checked against msub's own decision.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from msched.cli import cli
from msched.config import Config
from msched.plugin import filter as pfilter
from msched.plugin.generate import CLI_FILTER, JOB_SUBMIT, SLURM_CONF_LINES, install
from msched.slurm.feature_expr import combine, split
from msched.tag import PREFIX, TAG_FIELDS, parse_tag, untagged_record

LUA = shutil.which("lua5.1")
needs_lua = pytest.mark.skipif(LUA is None and os.environ.get("MSCHED_REQUIRE_SLURM") != "1",
                               reason="lua5.1 is not installed (apt-get install lua5.1)")

# A stand-in for Slurm's Lua API: what both scripts call.
SLURM_STUB = """
slurm = { SUCCESS = 0, ERROR = -1, ESLURM_ACCESS_DENIED = 2002, logged = {} }
function slurm.log_info(fmt, ...) slurm.logged[#slurm.logged + 1] = string.format(fmt, ...) end
"""


def _hex(text: str) -> str:
    return text.encode("utf-8", "surrogateescape").hex()


@pytest.fixture(scope="module")
def plugin_dir(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("plugin")
    install(str(d), Config(), admin_uids=[0, 64030])
    return d


def run_lua(plugin_dir: Path, body: str, stdin: str = "", timeout: float = 60,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    assert LUA is not None, "lua5.1 is required here (MSCHED_REQUIRE_SLURM=1)"
    prog = plugin_dir / "driver.lua"
    prog.write_text(SLURM_STUB + body)
    return subprocess.run([LUA, str(prog)], input=stdin, capture_output=True, text=True, timeout=timeout,
                          cwd=plugin_dir, env={**os.environ, **(env or {})})


STAMP_DRIVER = """
dofile("job_submit.lua")
local function unhex(h) return (h:gsub("%x%x", function(x) return string.char(tonumber(x, 16)) end)) end
for line in io.lines() do
    local comment = unhex(line)
    local values, why = msched_parse_tag(comment)
    if values then io.write("ok\\n") elseif why then io.write("bad\\n") else io.write("none\\n") end
end
"""

HAND_MADE = [
    "", "hello", "msched:v1;", "msched:v1;model=resnet50", "msched:v1;model=resnet50 my own comment",
    "msched:v1;model=resnet50;sim=0.5;flops=2;iters=100;bs=64;added=a100|titanv;ver=0.1.0",
    "msched:v1;model=resnet50;sim=nan", "msched:v1;model=resnet50;sim=inf", "msched:v1;model=resnet50;sim=1e999",
    "msched:v1;model=resnet50;sim=1.5", "msched:v1;model=resnet50;sim=-1", "msched:v1;model=resnet50;flops=0",
    "msched:v1;model=resnet50;bs=" + "9" * 26, "msched:v1;model=resnet50;bs=0", "msched:v1;model=resnet50;bs=1048577",
    "msched:v1;model=resnet50;iters=1000000000000", "msched:v1;model=resnet50;iters=1000000000001",
    "msched:v1;model=resnet50;model=vgg16", "msched:v1;model=resnet50;noequals", "msched:v1;model=resnet50;=x",
    "msched:v1;model=resnet50;Key=x", "msched:v1;model=resnet50;future=ok", "msched:v1;model=resnet50;future=%00",
    "msched:v1;model=my%20model.py:build", "msched:v1;model=a%2", "msched:v1;model=a%zz", "msched:v1;model=%C3%A9",
    "msched:v1;model=resnet50;added=a100&x", "msched:v1;model=resnet50;ref=res net", "msched:v1;model=",
    "msched:v1;ref=resnet50", "msched:v1;model=resnet50;;;sim=0.1", "msched:v1;model=resnet50;sim=",
    "msched:v1;model=resnet50;sim=1e-3", "msched:v1;model=resnet50;sim=+.5", "msched:v1;model=resnet50;sim=1e",
    "msched:v1;model=resnet50;sim=.", "msched:v1;model=resnet50;sim=--1", "msched:v1;model=resnet50;bs=+5",
    "msched:v1;model=" + "x" * 300, "msched:v1;model=resnet50;future=" + "y" * 257,
    "msched:v1;model=resnet50;" + "a=b;" * 300, "msched:v2;model=resnet50", "MSCHED:v1;model=resnet50",
    "msched:v1;model=resnet50\nforged line",
]


def _random_comments(n: int, seed: int = 7) -> list[str]:
    rng = random.Random(seed)
    keys = [f.name for f in TAG_FIELDS] + ["future", "Bad", ""]
    values = ["resnet50", "0.5", "1e-7", "1e6", "2e6", "-0.5", "nan", "1", "0", "13", "9" * 14, "a100|titanv",
              "x.py:f", "%41", "%4", "%%", "a b", "1.5.5", "+1", "-", "e", "1E+2", "\t", "é", "a;b", "",
              "%C3%A9", "%C3", "%E2%80%AE", "%C2%85", "%F0%9F%98%80", "%ED%A0%80", "%C0%AF", "模型.py:f",
              "\u200b", "\u00a0", "%7F", "%E2%80%A8", "é" * 200, "é" * 300]
    out = []
    for _ in range(n):
        items = [f"{rng.choice(keys)}={rng.choice(values)}" if rng.random() > 0.05 else rng.choice(values)
                 for _ in range(rng.randint(0, 6))]
        if rng.random() < 0.7:
            items.insert(0, f"model={rng.choice(values)}")
        out.append(PREFIX + ";".join(items) + (" user text" if rng.random() < 0.3 else ""))
    return out


@needs_lua
def test_controller_accepts_exactly_the_tags_the_reorderer_accepts(plugin_dir):
    comments = HAND_MADE + _random_comments(3000)
    proc = run_lua(plugin_dir, STAMP_DRIVER, "\n".join(_hex(c) for c in comments) + "\n")
    assert proc.returncode == 0, proc.stderr
    lua = proc.stdout.split()
    assert len(lua) == len(comments)
    disagree = []
    for comment, got in zip(comments, lua, strict=True):
        tag, _, why = parse_tag(comment)
        want = "ok" if tag is not None else ("bad" if why else "none")
        if got != want:
            disagree.append((comment, want, got, why))
    assert not disagree, disagree[:5]
    # both outcomes are well represented, so the agreement is not trivial
    assert 200 < lua.count("ok") < len(lua) - 200


STAMP_ONE = """
dofile("job_submit.lua")
local stamp, result = msched_stamp(io.read("*l"), io.read("*l"), false)
io.write(tostring(stamp), "\\n", tostring(result), "\\n")
"""


def _stamp(plugin_dir, comment: str, features: str = "") -> tuple[str, str]:
    proc = run_lua(plugin_dir, STAMP_ONE, f"{comment}\n{features}\n")
    assert proc.returncode == 0, proc.stderr
    stamp, result = proc.stdout.split("\n")[:2]
    return stamp, result


@needs_lua
def test_stamp_rebuilds_a_torchvision_models_classification_from_the_table(plugin_dir):
    # what msub itself writes for resnet50 (its own decision, a job without GPUs), as the reference
    from msched.msub.decide import plan_tag_and_types
    from msched.msub.directives import MschedSettings
    from msched.msub.sbatch_args import SbatchRequest

    truth, _, _ = plan_tag_and_types("resnet50", MschedSettings(), SbatchRequest(), Config(), "/nonexistent/sbatch")
    forged = "msched:v1;model=resnet50;ref=vgg16;group=vgg;sim=0.99;flops=5;iters=500;ver=0.1.0 mine"
    stamp, features = _stamp(plugin_dir, forged, "ib")
    assert stamp == truth._replace(iters=500, ver="0.1.0", why="").encode()   # msub's why is no claim to stamp
    assert "vgg" not in stamp and "0.99" not in stamp
    assert features == "nil"                      # no types added: the user's features stay as they are


@needs_lua
def test_stamp_refuses_unknown_models_and_keeps_claims_of_a_users_own_model(plugin_dir):
    assert _stamp(plugin_dir, "msched:v1;model=my_transformer;sim=0.5")[0] == "nil"
    stamp, _ = _stamp(plugin_dir, "msched:v1;model=nets/my.py:build;ref=vgg16;sim=0.5;flops=2")
    assert stamp == "msched:v1;model=nets/my.py:build;ref=vgg16;sim=0.5;flops=2"


FEATURE_CASES = [
    ("", ["a100"]), ("", ["a100", "titanv"]), ("ib", ["a100"]), ("ib", ["a100", "titanv"]),
    ("ib|opa", ["titanv"]), ("ib&a100", ["a100", "titanv"]), ("(ib|opa)&(a100|titanv)", ["titanv"]),
    ("a100|titanv", ["rtx2080ti"]), ("ib&x", ["a100", "titanv"]), ("[a*2&b*1]", ["a100"]),
]


@needs_lua
@pytest.mark.parametrize(("features", "types"), FEATURE_CASES)
def test_features_are_rebuilt_as_msub_writes_them(plugin_dir, features, types):
    config = Config()
    known = {"a100", "titanv", "rtx2080ti", "titanxp"}
    user, _ = split(features, lambda n: config.canonical_gpu_type(n) if n.lower() in known else None)
    want = combine(user, types)
    comment = f"msched:v1;model=x.py:f;added={'|'.join(types)}"
    stamp, got = _stamp(plugin_dir, comment, features)
    assert got == (want if want is not None else "nil")
    assert (f"added={'|'.join(types)}" in stamp) == (want is not None)


@needs_lua
def test_a_type_the_table_does_not_know_is_dropped_from_the_stamp(plugin_dir):
    stamp, features = _stamp(plugin_dir, "msched:v1;model=x.py:f;added=a100|warp9000")
    assert stamp == "msched:v1;model=x.py:f;added=a100"
    assert features == "a100"


MODIFY_DRIVER = """
dofile("job_submit.lua")
local rec = { admin_comment = io.read("*l"), job_id = 7 }
if rec.admin_comment == "" then rec.admin_comment = nil end
local uid = tonumber(io.read("*l"))
local field = io.read("*l")
local desc = {}
if field ~= "" then desc[field] = "msched:v1;model=vgg16" end
io.write(tostring(slurm_job_modify(desc, rec, {}, uid)), "\\n")
"""


@needs_lua
@pytest.mark.parametrize(("stamped", "uid", "field", "want"), [
    (True, 1001, "comment", 2002), (True, 1001, "features", 2002), (True, 1001, "", 0),
    (True, 0, "comment", 0), (True, 64030, "features", 0), (False, 1001, "comment", 0),
])
def test_modify_refuses_non_admin_changes_to_a_stamped_job(plugin_dir, stamped, uid, field, want):
    rec = "msched:v1;model=resnet50" if stamped else ""
    proc = run_lua(plugin_dir, MODIFY_DRIVER, f"{rec}\n{uid}\n{field}\n")
    assert proc.returncode == 0, proc.stderr
    assert int(proc.stdout.strip()) == want


@needs_lua
def test_submit_hook_stamps_admin_comment_and_never_copies_a_bad_tag(plugin_dir):
    body = """
dofile("job_submit.lua")
for _, comment in ipairs({"msched:v1;model=resnet50;added=a100 mine", "msched:v1;model=resnet50;sim=nan",
                          "plain comment"}) do
    local job = { comment = comment, features = nil, min_nodes = 1 }
    local rc = slurm_job_submit(job, {}, 1001)
    io.write(rc, "|", tostring(job.admin_comment), "|", tostring(job.features), "|", job.comment, "\\n")
end
io.write(#slurm.logged, "\\n")
"""
    proc = run_lua(plugin_dir, body)
    assert proc.returncode == 0, proc.stderr
    good, bad, plain, logged = proc.stdout.splitlines()
    assert good.startswith("0|msched:v1;model=resnet50;ref=") and good.endswith("|a100|msched:v1;model=resnet50;added=a100 mine")
    assert bad == "0|nil|nil|msched:v1;model=resnet50;sim=nan"
    assert plain == "0|nil|nil|plain comment"
    assert logged == "1"                     # the refused tag is logged once in slurmctld's log


# ------------------------------------------------------------------------------------------ the filter
FILTER_DRIVER = """
local wrap = os.getenv("WRAP") or "python t.py --arch resnet50"
local options = { type = "sbatch", comment = "keep me", wrap = wrap, gres = "gres:gpu:1" }
slurm.json_cli_options = function(o)
    return '{"comment":"keep me","gres":"gres:gpu:1","wrap":"' .. wrap .. '"}'
end
dofile("cli_filter.lua")
local t0 = os.time()
local rc = slurm_cli_pre_submit(options, 0)
io.stderr:write("elapsed ", os.time() - t0, "\\n")
io.stderr:write("rc ", rc, " comment ", tostring(options.comment), " constraint ", tostring(options.constraint), "\\n")
"""


def _fake_python(tmp_path: Path, body: str) -> str:
    path = tmp_path / "python"
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(0o755)
    return str(path)


@needs_lua
@pytest.mark.parametrize("behaviour", ["sleep 30", "echo 'Traceback (most recent call last):' >&2; exit 1",
                                       "printf 'msched-filter 1\\ncomment msched:v1;model=half'"])
def test_filter_submits_untagged_with_one_line_when_the_decision_hangs_or_crashes(tmp_path, behaviour):
    install(str(tmp_path), Config(), python=_fake_python(tmp_path, behaviour))
    t0 = time.monotonic()
    proc = run_lua(tmp_path, FILTER_DRIVER, timeout=20)
    elapsed = time.monotonic() - t0
    assert proc.returncode == 0
    assert proc.stdout == ""                                       # sbatch's stdout is never touched
    lines = proc.stderr.splitlines()
    warnings = [ln for ln in lines if ln.startswith("msched: warning:")]
    assert len(warnings) == 1, lines
    assert "submitted without msched's tag" in warnings[0]
    # untagged, no constraint; the user's comment kept after msub's record of why (for `msched jobs`)
    record = untagged_record("msched's decision did not answer within 2 s or failed")
    assert f"rc 0 comment {record} keep me constraint nil" in lines
    assert elapsed < 6, elapsed                                     # the 2 s timeout held (interpreter start aside)


@needs_lua
@pytest.mark.parametrize(("wrap", "asked"), [
    ("./simulate --steps 100", False), ("hostname", False), ("python t.py --arch ResNet50", True),
    ("python -m torchvision.models.vgg16", True), ("python t.py --model nets/m.py:build", True),
])
def test_filter_starts_python_only_when_a_model_could_be_found(tmp_path, wrap, asked):
    marker = tmp_path / "asked"
    install(str(tmp_path), Config(), python=_fake_python(tmp_path, f"touch {marker}; exit 1"))
    proc = run_lua(tmp_path, FILTER_DRIVER, env={"WRAP": wrap, "MSCHED_MODEL": ""})
    assert proc.returncode == 0 and proc.stdout == ""
    assert marker.exists() == asked
    assert (proc.stderr.count("msched: warning:") == 1) == asked     # silent otherwise
    status = next(ln for ln in proc.stderr.splitlines() if ln.startswith("rc "))
    if not asked:      # a GPU job (the stand-in options ask for one) without a model: msub's record, in Lua
        assert status == "rc 0 comment msched:v1;why=no%20model%20named keep me constraint nil"
    proc = run_lua(tmp_path, FILTER_DRIVER, env={"WRAP": "hostname", "MSCHED_MODEL": "resnet50"})
    assert marker.exists()                                            # the environment names one


@needs_lua
def test_filter_leaves_a_job_msub_already_decided_to_the_controller(tmp_path):
    marker = tmp_path / "asked"
    install(str(tmp_path), Config(), python=_fake_python(tmp_path, f"touch {marker}; exit 1"))
    body = FILTER_DRIVER.replace('comment = "keep me"', 'comment = "msched:v1;model=resnet50;added=a100 mine"')
    proc = run_lua(tmp_path, body, env={"MSCHED_MODEL": "resnet50"})
    assert proc.returncode == 0 and proc.stdout == "" and not marker.exists()
    assert "rc 0 comment msched:v1;model=resnet50;added=a100 mine constraint nil" in proc.stderr.splitlines()


@needs_lua
def test_filter_applies_the_real_decision(tmp_path, monkeypatch):
    now = time.time()
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "gpu_free_time.json").write_text(json.dumps({"time": now, "free_at": {"a100": now, "titanv": now}}))
    conf = tmp_path / "msched.toml"
    conf.write_text(f'state_dir = "{tmp_path / "state"}"\n')
    monkeypatch.setenv("MSCHED_CONFIG", str(conf))
    install(str(tmp_path), Config(), timeout_s=20)      # a shared test machine can be slow: the answer counts
    proc = run_lua(tmp_path, FILTER_DRIVER)
    assert proc.returncode == 0 and proc.stdout == ""
    status = [ln for ln in proc.stderr.splitlines() if ln.startswith("rc ")]
    assert status, proc.stderr
    assert " comment msched:v1;model=resnet50;" in status[0] and status[0].split(" constraint ")[0].endswith(" keep me")
    assert status[0].split(" constraint ")[1] in ("a100", "titanv", "a100|titanv", "titanv|a100")


def _decide(options: dict, env: dict | None = None, kind: str = "sbatch"):
    return pfilter.decide(kind, options, env or {})


def test_decide_tags_a_named_model_and_ands_the_types_into_the_users_constraint(tmp_path, monkeypatch):
    now = time.time()
    (tmp_path / "gpu_free_time.json").write_text(json.dumps({"time": now, "free_at": {"a100": now, "titanv": now}}))
    (tmp_path / "msched.toml").write_text(f'state_dir = "{tmp_path}"\n')
    monkeypatch.setenv("MSCHED_CONFIG", str(tmp_path / "msched.toml"))
    monkeypatch.delenv("SLURM_CONF", raising=False)   # no dev cluster: its nodes carry no `ib` (no type fits)
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/sh\n#MSCHED --iterations=300\npython train.py\n")
    changes, warnings = _decide({"gres": "gres:gpu:1", "constraint": "ib", "comment": "msched:v1;model=vgg16 mine",
                                 "time": "2982616-04:14:00", "argv": [str(script)]}, {"MSCHED_MODEL": "resnet50"})
    assert not warnings
    from msched.tag import parse_comment
    tag, user = parse_comment(changes["comment"])
    assert tag.model == "resnet50" and tag.iters == 300 and user == "mine"   # an old tag is replaced
    assert changes["constraint"] in (f"ib&{tag.added}", f"ib&({tag.added})")


def test_decide_records_why_a_gpu_job_went_untagged_and_leaves_other_jobs_alone():
    assert _decide({"wrap": "hostname", "comment": "mine"}) == ({}, [])          # no GPUs: nothing to say
    # a GPU job without a model: msub's record (a forged tag in the comment is replaced, as msub does)
    changes, warnings = _decide({"gres": "gres:gpu:1", "wrap": "hostname", "comment": "msched:v1;model=vgg16 mine"})
    assert changes == {"comment": "msched:v1;why=no%20model%20named mine"} and warnings == []
    changes, warnings = _decide({"gres": "gres:gpu:1", "wrap": "hostname"}, {"MSCHED_MODEL": "my_transformer"})
    assert len(warnings) == 1 and "unknown model 'my_transformer'" in warnings[0]
    assert changes["comment"].startswith("msched:v1;why=unknown%20model%20")


def test_decide_refuses_a_comment_slurm_would_refuse():
    changes, warnings = _decide({"wrap": "python t.py --arch resnet50", "comment": "x" * 1000})
    assert changes == {} and "1024" in warnings[0]
    # already too long without the tag: Slurm says so itself, msched adds nothing
    assert _decide({"wrap": "python t.py --arch resnet50", "comment": "x" * 1025}) == ({}, [])


def test_filter_entry_point_answers_in_its_line_protocol_and_stays_light(tmp_path):
    # as on a site: a config, and the free times the last round published (else one sinfo call)
    now = time.time()
    (tmp_path / "gpu_free_time.json").write_text(json.dumps({"time": now, "free_at": {"a100": now}}))
    (tmp_path / "msched.toml").write_text(f'state_dir = "{tmp_path}"\n')
    options = {"wrap": "python t.py --arch resnet50", "comment": "a\nb %"}
    code = ("import sys, runpy; sys.argv = ['filter', 'sbatch']; "
            "import msched.plugin.filter as f; f.main(); "
            "print('MODULES', ' '.join(sorted(sys.modules)), file=sys.stderr)")
    proc = subprocess.run([sys.executable, "-I", "-c", code], input=json.dumps(options), capture_output=True,
                          text=True, timeout=60, env={**os.environ, "XDG_CACHE_HOME": str(tmp_path),
                                                                   "MSCHED_CONFIG": str(tmp_path / "msched.toml")})
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "msched-filter 1" and lines[-1] == "end"
    comment = next(ln for ln in lines if ln.startswith("comment "))
    assert comment.endswith("%20a%0Ab%20%25")                      # one line, the user's bytes kept
    loaded = set(proc.stderr.split("MODULES ", 1)[1].split())
    heavy = {"torch", "numpy", "sklearn", "sqlalchemy", "click", "subprocess", "msched.policy.base"} & loaded
    assert not heavy, heavy


def test_install_command_writes_both_files_and_prints_the_slurm_conf_lines(tmp_path):
    result = CliRunner().invoke(cli, ["plugin", "install", "--dir", str(tmp_path)])
    assert result.exit_code == 0, result.output
    for name in (CLI_FILTER, JOB_SUBMIT):
        assert (tmp_path / name).stat().st_mode & 0o444 == 0o444
        assert "-- @GENERATED@" not in (tmp_path / name).read_text()
    for line in SLURM_CONF_LINES:
        assert f"    {line}" in result.output
    bad = CliRunner().invoke(cli, ["plugin", "install", "--dir", str(tmp_path), "--python", "python3"])
    assert bad.exit_code == 2 and "not an executable absolute path" in bad.output


@needs_lua
def test_a_site_steering_by_partition_keeps_the_users_features(tmp_path):
    install(str(tmp_path), Config(type_lever="partition", type_partitions={"a100": "gpu-a100"}))
    stamp, features = _stamp(tmp_path, "msched:v1;model=x.py:f;added=a100|warp9000", "ib")
    assert stamp == "msched:v1;model=x.py:f;added=a100" and features == "nil"


# ------------------------------------------------------------------------------ heterogeneous jobs
HET_DRIVER = """
local script = os.getenv("SCRIPT")
local options = { type = "sbatch", comment = "keep me", gres = "gres:gpu:1", argv = { script } }
slurm.json_cli_options = function(o) return '{"gres":"gres:gpu:1","argv":["' .. script .. '"]}' end
dofile("cli_filter.lua")
slurm_cli_pre_submit(options, tonumber(os.getenv("OFFSET")))
io.stderr:write("comment ", tostring(options.comment), " constraint ", tostring(options.constraint), "\\n")
"""


@needs_lua
@pytest.mark.parametrize(("script", "offset", "heterogeneous"), [
    ("#!/bin/sh\n#SBATCH -t 5\n#SBATCH hetjob\n#SBATCH --gres=gpu:2\npython t.py --arch resnet50\n", 0, True),
    ("#!/bin/sh\n#SBATCH packjob\npython t.py --arch resnet50\n", 0, True),
    ("#!/bin/sh\npython t.py --arch resnet50\n", 1, True),           # a later component: always
    ("#!/bin/sh\npython t.py --arch resnet50\n# hetjob\n", 0, False),
    ("#!/bin/sh\necho x\n#SBATCH hetjob\npython t.py --arch resnet50\n", 0, False),   # sbatch stopped reading
])
def test_filter_leaves_heterogeneous_jobs_untagged_with_the_reason(tmp_path, script, offset, heterogeneous):
    marker = tmp_path / "asked"
    install(str(tmp_path), Config(), python=_fake_python(tmp_path, f"touch {marker}; exit 1"))
    (tmp_path / "job.sh").write_text(script)
    proc = run_lua(tmp_path, HET_DRIVER, env={"SCRIPT": str(tmp_path / "job.sh"), "OFFSET": str(offset),
                                              "MSCHED_MODEL": ""})
    assert proc.returncode == 0 and proc.stdout == ""
    status = next(ln for ln in proc.stderr.splitlines() if ln.startswith("comment "))
    if heterogeneous:
        assert not marker.exists() and "warning" not in proc.stderr       # decided in Lua, silently
        from msched.plugin.generate import HETJOB_WHY
        assert status == f"comment {untagged_record(HETJOB_WHY)} keep me constraint nil"
    else:
        assert marker.exists()                                              # a single job: msched decides


@needs_lua
def test_the_controller_never_stamps_a_heterogeneous_jobs_component(plugin_dir):
    body = """
dofile("job_submit.lua")
for _, offset in ipairs({0, 1, 4294967294}) do
    local job = { comment = "msched:v1;model=resnet50;added=a100 mine", min_nodes = 1, het_job_offset = offset }
    slurm_job_submit(job, {}, 1001)
    io.write(offset, "|", tostring(job.admin_comment), "|", tostring(job.features), "\\n")
end
"""
    proc = run_lua(plugin_dir, body)
    assert proc.returncode == 0, proc.stderr
    first, second, single = proc.stdout.splitlines()
    assert first == "0|nil|nil" and second == "1|nil|nil"
    assert single.startswith("4294967294|msched:v1;model=resnet50;ref=") and single.endswith("|a100")
