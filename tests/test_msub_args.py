"""msched.msub.sbatch_args and msched.msub.gpu_request: sbatch's command line and #SBATCH lines read as sbatch reads them.

The replay test compares against what the real sbatch 22.05.8 reported for the same argv/script/env
(`sbatch -v --test-only`, recorded in tests/data/sbatch_parse_recorded.json by tests/msub_cases.py);
the Slurm-marked test re-runs the recording against the installed sbatch.
"""

from __future__ import annotations

import json
import math
import os
import shutil

import msub_cases
import pytest

from msched.msub.gpu_request import add_types, gpu_request, parse_gpus, parse_gres, pinned_types
from msched.msub.sbatch_args import (
    LONG_OPTIONS,
    SbatchArgsError,
    directive_words,
    effective_request,
    env_options,
    invalid_directive,
    parse_command_line,
    parse_script_options,
    parse_time_limit,
    split_directive,
)

RECORDED = json.loads(msub_cases.RECORDED.read_text())["cases"]
PLAIN_KEYS = ("comment", "constraint", "job-name", "partition", "nodes", "ntasks", "array", "wrap", "gpus",
              "gpus-per-node", "gpus-per-task")


def _request(case):
    cmd = parse_command_line(case["argv"])
    script = case["script"] or ""
    return cmd, effective_request(cmd.options, parse_script_options(script), env_options(case["env"]))


def _gres_as_sbatch_prints(value: str) -> str:
    return ",".join(item if item.startswith("gres:") else f"gres:{item}" for item in value.split(","))


@pytest.mark.parametrize("case", RECORDED, ids=[c["name"] for c in RECORDED])
def test_replay_matches_real_sbatch(case):
    expected = case["options"]
    if case["invalid_directive"]:
        word = case["invalid_directive"].rsplit(":", 1)[1].strip()
        assert invalid_directive(case["script"]) == word
        return
    assert invalid_directive(case["script"] or "") is None
    cmd, req = _request(case)
    for key in PLAIN_KEYS:
        assert req.get(key) == expected.get(key), key
    if "gres" in expected:
        assert _gres_as_sbatch_prints(req.get("gres")) == expected["gres"]
    else:
        assert not req.has("gres")
    if "time" in expected:
        # sbatch rounds a limit with seconds up to whole minutes
        mine = req.time_limit_s
        assert math.ceil(mine / 60) * 60 == parse_time_limit(expected["time"])
    else:
        assert req.get("time") is None
    assert req.parsable == ("parsable" in expected)
    for flag in ("overcommit", "no-kill", "nice"):     # (a bare --nice means 100 to sbatch)
        assert req.has(flag) == (flag in expected)


def test_recording_covers_what_msub_reads():
    seen = {k for c in RECORDED for k in c["options"]}
    for key in ("comment", "constraint", "gres", "gpus", "gpus-per-node", "gpus-per-task", "job-name",
                "partition", "nodes", "time", "array", "parsable", "wrap"):
        assert key in seen, key


@pytest.mark.slurm
def test_recording_still_matches_installed_sbatch(slurm_cluster):
    sbatch = "/usr/bin/sbatch" if os.path.exists("/usr/bin/sbatch") else shutil.which("sbatch")
    env_backup = dict(os.environ)
    try:
        os.environ.update(slurm_cluster.env)
        for case in RECORDED:
            got = msub_cases.run_case(sbatch, case["argv"], case["script"], case["env"])
            assert got["options"] == case["options"], case["name"]
            assert got["invalid_directive"] == case["invalid_directive"], case["name"]
    finally:
        os.environ.clear()
        os.environ.update(env_backup)


# ----------------------------------------------------------------------------- getopt details
def test_spans_let_options_be_removed_exactly():
    argv = ["-p", "gpu", "--model", "resnet50", "--gres=gpu:1", "job.sh", "--model", "x"]
    cmd = parse_command_line(argv, {"model": "required"})
    ours = [o for o in cmd.options if o.name == "model"]
    assert [(o.value, o.start, o.end) for o in ours] == [("resnet50", 2, 4)]
    assert cmd.script == "job.sh" and cmd.script_args == ("--model", "x")


def test_extra_options_match_exactly_only():
    # `--batch` is sbatch's own option: msub's --batch-size must not steal it or its prefixes
    cmd = parse_command_line(["--batch=x", "--batch-size=4", "--ba=y", "w.sh"], {"batch-size": "required"})
    assert [(o.name, o.value) for o in cmd.options] == [("batch", "x"), ("batch-size", "4"), ("batch", "y")]


def test_ambiguous_and_unknown_are_left_for_sbatch():
    cmd = parse_command_line(["--gre=gpu:1", "--bogus", "-j", "s.sh"])
    assert cmd.unknown == ("--gre=gpu:1", "--bogus", "-j")
    assert cmd.script == "s.sh"


def test_missing_required_argument_raises():
    with pytest.raises(SbatchArgsError, match="requires an argument"):
        parse_command_line(["--partition"])
    with pytest.raises(SbatchArgsError):
        parse_command_line(["-p"])


def test_no_argument_option_with_value_is_unknown():
    cmd = parse_command_line(["--parsable=yes", "s.sh"])
    assert cmd.unknown == ("--parsable=yes",) and not cmd.options


def test_short_optional_argument_only_attached():
    cmd = parse_command_line(["-k", "s.sh"])
    assert [(o.name, o.value) for o in cmd.options] == [("no-kill", None)] and cmd.script == "s.sh"
    cmd = parse_command_line(["-koff", "s.sh"])
    assert [(o.name, o.value) for o in cmd.options] == [("no-kill", "off")]


def test_every_short_option_maps_to_a_long_one():
    from msched.msub.sbatch_args import SHORT_OPTIONS
    assert set(SHORT_OPTIONS.values()) <= set(LONG_OPTIONS)


def test_directive_words_stop_at_first_command():
    script = "#!/bin/sh\n#SBATCH -J a\n\n   \n# note\n#SBATCH -p b\necho\n#SBATCH -t 5\n"
    assert directive_words(script) == ["-J", "a", "-p", "b"]


def test_split_directive_quotes_escapes_comments():
    assert split_directive(' --comment="a b" -J \'c d\'') == ["--comment=a b", "-J", "c d"]
    assert split_directive(' --comment "a b"') == ["--comment", "a b"]
    assert split_directive(r" --comment=a\"b") == ['--comment=a"b']
    assert split_directive(r" --comment=a\ b") == ["--comment=a", "b"]
    assert split_directive(" -J x # -p ignored") == ["-J", "x"]
    assert split_directive(" --constraint='x # y'") == ["--constraint=x # y"]


@pytest.mark.parametrize("text,seconds", [
    ("10", 600), ("2:30", 150), ("1:02:03", 3723), ("1-0", 86400), ("1-2", 93600), ("1-2:30", 95400),
    ("1-2:30:05", 95405), ("UNLIMITED", None), ("infinite", None), ("bogus", None),
])
def test_time_limits(text, seconds):
    assert parse_time_limit(text) == seconds


# ----------------------------------------------------------------------------- GPU requests
def test_parse_gres_and_gpus():
    assert parse_gres("gpu:2") == [(None, 2)]
    assert parse_gres("gpu:a100:2,shard:3") == [("a100", 2)]
    assert parse_gres("gres:gpu:titanv") == [("titanv", 1)]
    assert parse_gres("gpu") == [(None, 1)]
    assert parse_gres("shard:1") == []
    assert parse_gpus("8") == [(None, 8)]
    assert parse_gpus("a100:2,titanv:1") == [("a100", 2), ("titanv", 1)]


def _req(argv, script=""):
    cmd = parse_command_line(argv)
    return effective_request(cmd.options, parse_script_options(script))


def test_gpu_request_counts():
    assert gpu_request(_req(["--gres=gpu:2", "-N", "2"])).total == 4
    assert gpu_request(_req(["--gpus=8"])).total == 8
    assert gpu_request(_req(["--gpus-per-node=2", "-N", "3"])).total == 6
    assert gpu_request(_req(["--gpus-per-task=1", "-n", "3"])).total == 3
    assert gpu_request(_req(["-c", "4"])) is None
    typed = gpu_request(_req([], "#!/bin/sh\n#SBATCH --gres=gpu:A100:1\n"))
    assert typed.types == ("a100",) and typed.typed


def test_pinned_by_constraint_naming_a_gpu_type():
    known = {"a100", "titanv"}
    req = _req(["-C", "ib&(a100|titanv)", "--gres=gpu:1"])
    assert pinned_types(req, gpu_request(req), known) == ("a100", "titanv")
    req = _req(["-C", "ib", "--gres=gpu:1"])
    assert pinned_types(req, gpu_request(req), known) == ()
    req = _req(["--gpus=titanv:2"])
    assert pinned_types(req, gpu_request(req), known) == ("titanv",)


def test_add_types_keeps_user_constraint():
    assert add_types("", ["a100"]) == "a100"
    assert add_types(None, ["a100", "titanv"]) == "a100|titanv"
    assert add_types("", ["a100", "titanv"], multi_node=True) == "[a100|titanv]"
    assert add_types("ib", ["a100", "titanv"]) == "ib&(a100|titanv)"
    assert add_types("ib|opa", ["a100"]) == "(ib|opa)&a100"
    assert add_types("[rack1*2&rack2*1]", ["a100"]) is None      # cannot be extended without nesting
    assert add_types("ib", []) is None
