"""msub's light path: what a submission imports, and the pieces that replace heavier standard modules.

msub's goal is under 100 ms on top of sbatch (bench/bench_msub.py measures it). Most of what it used to
spend was imports, so the path is pinned here by what it loads, not by a timing: a fresh interpreter
runs msub's whole decision for a torchvision model and must load exactly the light modules below.
"""

from __future__ import annotations

import copy
import csv
import io
import json
import os
import pickle
import re
import signal
import subprocess
import sys
from urllib.parse import quote

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from msched.config import DATA_DIR, Config, ConfigError
from msched.errors import ProfileError
from msched.models.precision import _FLAGS as PRECISION_FLAGS
from msched.models.precision import _VALUED as PRECISION_VALUED
from msched.models.precision import detect_precision, normalise_precision
from msched.msub.directives import _CANDIDATE_PATTERNS, _is_file_spec, _option_values
from msched.msub.gpu_request import _parse_count
from msched.msub.sbatch_args import _first_int, parse_time_limit
from msched.msub.spawn import spawn_and_wait
from msched.tag import _SAFE, JobTag, _quote, parse_comment, with_tag
from msched.util.light import DictReader, json_loads
from msched.util.light import lru_cache as light_lru_cache
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
    "msched.util.light",         # JSON and CSV through the C modules, without `re` (below)
}
# standard or third-party modules whose import costs msub more than it needs (see msched.util.record)
NOT_ON_PATH = ("torch", "torchvision", "numpy", "sklearn", "sqlalchemy", "rich", "click", "dataclasses",
               "inspect", "typing", "pathlib", "subprocess", "urllib.parse", "tomllib", "hashlib",
               "msched.models.profiler", "msched.models.profile_cache", "msched.policy.base", "msched.policy.snapshot",
               "re", "json", "csv", "enum",      # `re` and what imports it (msched.util.light)
               # the collections package, and functools and types that import it (msched.util.record,
               # msched.util.light's lru_cache)
               "collections", "collections.abc", "functools", "types", "reprlib", "operator", "keyword")


def _loaded_by_msub(tmp_path) -> tuple[set[str], str]:
    """Modules loaded by a fresh interpreter that decides one submission, as on a site: a config file,
    and a free-time file the reorderer published."""
    now = __import__("time").time()
    (tmp_path / "gpu_free_time.json").write_text(json.dumps({"time": now, "free_at": {"a100": now, "titanv": now}}))
    conf = tmp_path / "msched.toml"
    if not conf.exists():
        conf.write_text(f'state_dir = "{tmp_path}"\n[gpu_aliases]\n"A100-SXM4" = "a100"\n')
    code = (
        "import sys; from msched.msub.main import build_submission; "
        "sub, warnings = build_submission(['--model=resnet50', '--iterations=500', '--gres=gpu:1', '--wrap', 'true']); "
        "loaded = sorted(sys.modules); import json; print(json.dumps([loaded, sub.argv, warnings]))"
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


# ----------------------------------------------------------------------------- parsing without `re`
# msub's hot path parses a GPU count and a time limit with string methods instead of the patterns below
# (each compiled pattern cost it ~0.1-0.2 ms); these are the patterns as they were, the oracle here.
_COUNT_RE = re.compile(r"(\d+)([kKmMgG]?)")
_TIME_RE = re.compile(r"(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?")
# digits (ASCII and others `\d` takes: Arabic-Indic, fullwidth; and superscripts it does not), separators,
# units, spaces
_PIECES = st.sampled_from(["0", "1", "7", "12", "٣", "５", "²", "-", ":", "k", "M", "g", "x", " ", "\t", "unlimited"])


def _count_by_re(text: str) -> int | None:
    m = _COUNT_RE.fullmatch(text.strip())
    if not m:
        return None
    return int(m.group(1)) * {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3}[m.group(2).lower()]


def _time_by_re(text: str) -> float | None:
    s = text.strip().lower()
    if not s or s in ("unlimited", "infinite", "-1"):
        return None
    m = _TIME_RE.fullmatch(s)
    if not m:
        return None
    days, a, b, c = m.groups()
    if days is not None:
        return float(((int(days) * 24 + int(a)) * 60 + int(b or 0)) * 60 + int(c or 0))
    if c is not None:
        return float((int(a) * 60 + int(b)) * 60 + int(c))
    return float(int(a) * 60 + int(b)) if b is not None else float(int(a) * 60)


@settings(max_examples=600, deadline=None)
@given(st.lists(_PIECES, max_size=7).map("".join))
def test_count_and_time_parse_as_the_patterns_did(text):
    assert _parse_count(text) == _count_by_re(text)
    assert parse_time_limit(text) == _time_by_re(text)


@pytest.mark.parametrize("text", ["", "4", " 2k ", "3M", "1g", "٣", "k", "2kk", "1.5", "-1", "0x10"])
def test_count_examples(text):
    assert _parse_count(text) == _count_by_re(text)


@pytest.mark.parametrize("text", ["10", "2:30", "1:02:03", "1-0", "1-2:30:05", "1-2:3:4:5", "-5", "5-", "1::2",
                                  "1-2-3", " 7 ", "٣-١", "UNLIMITED", "-1", ""])
def test_time_examples(text):
    assert parse_time_limit(text) == _time_by_re(text)


def _precision_by_re(texts: list[str]) -> str | None:
    """detect_precision as it was, with the patterns (msched.models.precision keeps them as its reference)."""
    for text in texts:
        for line in text.splitlines():
            stripped = line.strip()
            if not stripped or stripped.startswith("#"):
                continue
            found = [(m.start(), normalise_precision(m.group(1))) for m in re.finditer(PRECISION_VALUED, line)]
            found = [f for f in found if f[1]]
            for pattern, named in PRECISION_FLAGS:
                m = re.search(pattern, line)
                if m:
                    found.append((m.start(), named))
            if found:
                return min(found)[1]
    return None


_WORDS = st.sampled_from(["--", "-", "=", " ", "  ", "\t", "\n", "\u00a0", "use", "_", "precision", "mixed", "opt",
                          "level", "dtype", "amp", "autocast", "fp16", "half", "bf16", "16", "bf16-mixed", "O2", "64",
                          "python", "x", "'", '"', "#"])


@settings(max_examples=2000, deadline=None)
@given(st.lists(_WORDS, max_size=12).map("".join))
def test_precision_flags_read_as_the_patterns_read_them(text):
    assert detect_precision([text]) == _precision_by_re([text])


@pytest.mark.parametrize("line", [
    "python t.py --amp", "--use-amp --bf16", "x --precision bf16-mixed", "--precision --precision=16",
    "--precision=\"16\" --fp16", "--opt_level=O2", "--dtype= 64", "--half=1", "--amp=1", "a--fp16", " --use_half",
    "--mixed-precision 16 --bf16", "--precision=bogus --fp16", "--use-autocast\t--precision=64"])
def test_precision_examples(line):
    assert detect_precision([line]) == _precision_by_re([line])


_FIRST_INT_RE = re.compile(r"\s*(\d+)")


@settings(max_examples=400, deadline=None)
@given(st.lists(_PIECES, max_size=6).map("".join))
def test_first_int_as_the_pattern_did(text):
    m = _FIRST_INT_RE.match(text)
    assert _first_int(text) == (int(m.group(1)) if m else None)


# the model options (`--arch X`, `--model=path/net.py:build`) are read without `re`: every value the first
# candidate pattern finds, in order, for lines built of the pieces that pattern cares about
_MODEL_PIECES = st.sampled_from(["--", "-", "arch", "model", "_name", "-name", "network", "net", "=", " ", "  ", "\t",
                                 "\u00a0", "'", '"', "resnet50", "a", ".py", ":", "b", "~", "/", ".", "x_1", "٣",
                                 "é", ",", "(", "python", "--arch=vgg16"])
_FILE_SPEC_RE = re.compile(r"[^:\s]+\.py:\w+")


@settings(max_examples=1500, deadline=None)
@given(st.lists(_MODEL_PIECES, max_size=12).map("".join))
def test_model_option_values_as_the_pattern_finds_them(line):
    assert list(_option_values(line)) == [m.group(1) for m in re.finditer(_CANDIDATE_PATTERNS[0], line)]
    assert _is_file_spec(line) == bool(_FILE_SPEC_RE.fullmatch(line))


@pytest.mark.parametrize("line", [
    "python train.py --arch resnet50 --epochs 1", "--arch=vgg16", " --model 'nets/my.py:build' --net x",
    "--model_name=a.py:b.py:c", "--arch_name  ~/x.py:f", "x--arch y", "--arch", "--arch= y", "--network=n --net m",
    "--model=.py:f", "--model=a.py:", "\u00a0--arch\u00a0z", "--archx y --model z"])
def test_model_option_examples(line):
    assert list(_option_values(line)) == [m.group(1) for m in re.finditer(_CANDIDATE_PATTERNS[0], line)]


# JSON and CSV through msched.util.light: the same values as the json and csv packages give, and the
# same errors (json.loads's own)
_JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
    max_leaves=12)


@settings(max_examples=400, deadline=None)
@given(_JSON_VALUES, st.sampled_from(["", " ", "\n", " \t\r\n"]), st.sampled_from(["", " ", "\n"]))
def test_json_loads_gives_what_json_loads_gives(value, before, after):
    text = before + json.dumps(value) + after
    assert json_loads(text) == json.loads(text)


@pytest.mark.parametrize("text", ["", " ", "{", '{"a": 1} x', '{"a": 1}{}', "\ufeff{}", "[1,]", "nul", '"\x01"',
                                  "[NaN, Infinity, -Infinity]", '{"a": 1e400, "b": -0.0, "c": 12345678901234567890}',
                                  '"\\ud800"', "  [1, 2]  \n", '{"a":1,"a":2}'])
def test_json_loads_edge_cases_and_errors(text):
    try:
        expected = json.loads(text)
    except json.JSONDecodeError as exc:
        with pytest.raises(json.JSONDecodeError) as got:
            json_loads(text)
        assert (str(got.value), got.value.pos) == (str(exc), exc.pos)
        return
    got = json_loads(text)
    assert json.dumps(got) == json.dumps(expected) and type(got) is type(expected)   # NaN-safe comparison


_CSV_PIECES = st.sampled_from(["a", "b", "model", ",", ",,", '"', '""', "x y", "\n", "\r\n", "\n\n", " ", "1.5", "é"])


@settings(max_examples=600, deadline=None)
@given(st.lists(_CSV_PIECES, max_size=14).map("".join))
def test_dict_reader_reads_as_csv_dictreader(text):
    def read(reader_type, source):
        r = reader_type(source)
        try:
            return r.fieldnames, list(r), r.line_num, None
        except csv.Error as exc:
            return None, None, None, str(exc)
    assert read(DictReader, io.StringIO(text, newline="")) == read(csv.DictReader, io.StringIO(text, newline=""))
    lines = text.splitlines(keepends=True)          # msub's reference_rows gives it a list of lines
    assert read(DictReader, lines) == read(csv.DictReader, lines)


# records are built as namedtuple builds its classes, without compiling source (msched.util.record); the
# oracle is the record as it was: a namedtuple subclass
def _record_by_namedtuple(cls: type) -> type:
    from collections import namedtuple

    names = list(cls.__dict__.get("__annotations__", {}))
    defaults = [cls.__dict__[n] for n in names if n in cls.__dict__]
    base = namedtuple(cls.__name__, names, defaults=defaults, module=cls.__module__)
    body = {k: v for k, v in cls.__dict__.items() if k not in names and k not in ("__dict__", "__weakref__")}
    body["__slots__"] = ()
    checked = body.get("_checked")
    if checked is not None:
        def __new__(subcls, *args, **kwargs):  # noqa: N807
            return checked(base.__new__(subcls, *args, **kwargs))
        body["__new__"] = __new__
    return type(cls.__name__, (base,), body)


def _outcome(fn, *args, **kwargs):
    try:
        return "ok", fn(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001 - the outcome compared is the exception's type and message
        return type(exc).__name__, str(exc)


_FIELD_NAMES = [f"f{i}" for i in range(16)] + ["x", "label", "count"]


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 15), st.data())
def test_records_behave_as_the_namedtuple_records_did(n_fields, data):
    names = data.draw(st.lists(st.sampled_from(_FIELD_NAMES), min_size=n_fields, max_size=n_fields, unique=True))
    n_defaults = data.draw(st.integers(0, n_fields))
    doc = data.draw(st.sampled_from([None, "A record."]))
    checked = data.draw(st.booleans())

    def make(builder):
        body = {"__annotations__": dict.fromkeys(names, "int"), "__module__": __name__, "__qualname__": "R",
                "__doc__": doc, "total": property(lambda self: sum(v for v in self if isinstance(v, int)))}
        body.update({n: 100 + i for i, n in enumerate(names[n_fields - n_defaults:])})
        if checked:
            def _checked(self):
                if self and self[0] == -1:
                    raise ValueError("refused")
                return self
            body["_checked"] = _checked
        return builder(type("R", (), body))

    new, old = make(record), make(_record_by_namedtuple)
    for attr in ("_fields", "_field_defaults", "__match_args__", "__doc__", "__module__", "__qualname__", "__name__"):
        assert getattr(new, attr) == getattr(old, attr), attr
    assert [getattr(new, n).__doc__ for n in names] == [getattr(old, n).__doc__ for n in names]
    values = st.one_of(st.integers(-1, 3), st.text(max_size=2), st.none())
    for _ in range(4):
        args = data.draw(st.lists(values, max_size=n_fields + 1))
        kwargs = data.draw(st.dictionaries(st.sampled_from(names + ["zz"]), values, max_size=3))
        got, want = _outcome(new, *args, **kwargs), _outcome(old, *args, **kwargs)
        assert got[0] == want[0] and (got[1] == want[1] if got[0] != "ok" else tuple(got[1]) == tuple(want[1]))
        if got[0] != "ok":
            continue
        a, b = got[1], want[1]
        assert type(a) is new and repr(a) == repr(b) and a._asdict() == b._asdict() and a.total == b.total
        assert hash(a) == hash(b) and a == b and copy.copy(a) == a and copy.deepcopy(a) == a
        change = data.draw(st.dictionaries(st.sampled_from(names + ["zz"]), values, max_size=2))
        replaced = _outcome(a._replace, **change), _outcome(b._replace, **change)
        assert replaced[0][0] == replaced[1][0] and tuple(replaced[0][1]) == tuple(replaced[1][1])
        items = data.draw(st.lists(values, max_size=n_fields + 1))
        made = _outcome(new._make, items), _outcome(old._make, items)
        assert made[0][0] == made[1][0] and tuple(made[0][1]) == tuple(made[1][1])


@pytest.mark.parametrize("n_fields", [0, 1, 12, 13, 43])
def test_records_of_any_size_construct_and_pickle(n_fields):
    names = [f"f{i}" for i in range(n_fields)]
    cls = record(type("_Sized", (), {"__annotations__": dict.fromkeys(names, "int"), "__module__": __name__,
                                     "__qualname__": "_Sized", **{n: i for i, n in enumerate(names[1:])}}))
    old = _record_by_namedtuple(type("_Sized", (), {"__annotations__": dict.fromkeys(names, "int"),
                                                    **{n: i for i, n in enumerate(names[1:])}}))
    globals()["_Sized"] = cls                          # where pickle looks the class up
    try:
        r = cls(*range(7, 7 + n_fields)) if n_fields else cls()
        assert pickle.loads(pickle.dumps(r)) == r and type(pickle.loads(pickle.dumps(r))) is cls
        assert repr(r) == repr(old(*r)) and cls.__new__.__doc__ == old.__new__.__doc__
        if n_fields > 1:
            assert cls(f0=5) == old(f0=5) and cls(5)._replace(f1=9) == (5, 9, *range(1, n_fields - 1))
            assert _outcome(cls) == _outcome(old) == \
                ("TypeError", "_Sized.__new__() missing 1 required positional argument: 'f0'")
    finally:
        del globals()["_Sized"]


def test_record_refuses_an_underscore_field_as_namedtuple_does():
    with pytest.raises(ValueError, match="Field names cannot start with an underscore: '_x'"):
        @record
        class _Bad:
            _x: int


# functools.lru_cache without functools (msched.util.light): the same cache as functools' own, call for call
@settings(max_examples=300, deadline=None)
@given(st.integers(1, 4), st.lists(st.tuples(st.integers(0, 5), st.booleans()), max_size=30))
def test_lru_cache_caches_and_evicts_as_functools_does(maxsize, calls):
    import functools

    def make(decorator):
        log = []

        def f(x, y=0):
            """Doc."""
            log.append((x, y))
            if x == 5:
                raise ValueError(x)               # an exception is not cached
            return [x, y]
        return decorator(maxsize)(f), log

    (ours, our_log), (theirs, their_log) = make(light_lru_cache), make(functools.lru_cache)
    for x, keyword in calls:
        got = _outcome(ours, x, y=1) if keyword else _outcome(ours, x)
        want = _outcome(theirs, x, y=1) if keyword else _outcome(theirs, x)
        assert got == want
        assert tuple(ours.cache_info()) == tuple(theirs.cache_info())
    assert our_log == their_log
    assert repr(ours.cache_info()) == repr(theirs.cache_info())
    assert ours.cache_parameters() == theirs.cache_parameters()
    for attr in ("__name__", "__qualname__", "__doc__", "__module__", "__annotations__"):
        assert getattr(ours, attr) == getattr(theirs, attr), attr
    assert ours.__wrapped__ is not None and ours.__wrapped__.__name__ == "f"
    ours.cache_clear()
    assert ours.cache_info().currsize == 0


def test_msub_turns_the_collector_off_only_in_its_own_process(tmp_path, monkeypatch, capsys):
    """msub's own process (allow_exec) runs without the cyclic garbage collector; a caller's process
    (allow_exec=False: tests, a resident decider) keeps its collector as it was."""
    import gc

    from msched.msub.main import main

    conf = tmp_path / "msched.toml"
    conf.write_text(f'sbatch = "/bin/true"\nstate_dir = "{tmp_path}"\n')
    monkeypatch.setenv("MSCHED_CONFIG", str(conf))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert gc.isenabled()
    assert main(["--msched-dry-run", "--wrap", "true"], allow_exec=False) == 0
    assert gc.isenabled()
    assert "sbatch command: /bin/true --wrap true" in capsys.readouterr().out
    code = ("import gc, sys; from msched.msub.main import main; "
            "rc = main(['--msched-dry-run', '--wrap', 'true']); print(gc.isenabled()); sys.exit(rc)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "MSCHED_CONFIG": str(conf), "XDG_CACHE_HOME": str(tmp_path / "cache")})
    assert proc.returncode == 0 and proc.stdout.splitlines()[-1] == "False", (proc.stdout, proc.stderr)


# the shipped profile table through the user's marshal copy (msched.models.shipped): what the JSON says,
# whatever the copy holds, unless the copy is the user's own and was made from the same bytes
def test_shipped_table_cache_follows_the_file_bytes(tmp_path, monkeypatch):
    import marshal

    from msched.models import shipped

    monkeypatch.setenv("MSCHED_CACHE_DIR", str(tmp_path / "cache"))
    table = tmp_path / "data" / "torchvision_features.json"
    table.parent.mkdir()
    with open(os.path.join(DATA_DIR, "torchvision_features.json"), "rb") as fh:
        original = fh.read()
    table.write_bytes(original)

    def read():
        shipped.load_table.cache_clear()
        return shipped.load_table(str(table))

    try:
        assert read() == json.loads(original)                     # first read: the JSON, and a copy made
        copy = tmp_path / "cache" / "torchvision_features.json.marshal"
        assert oct(copy.stat().st_mode & 0o777) == "0o600"
        assert read() == json.loads(original)
        # the copy is what a later read uses (a copy with other contents for the same bytes shows through) ...
        copy.write_bytes(marshal.dumps((marshal.version, original, {"models": {"from_the_copy": {}}})))
        assert list(read()["models"]) == ["from_the_copy"]
        # ... but never for other bytes, even of the same size and modification time
        st = table.stat()
        edited = original.replace(b'"models"', b'"modelz"', 1)
        assert len(edited) == len(original)
        table.write_bytes(edited)
        os.utime(table, ns=(st.st_atime_ns, st.st_mtime_ns))
        assert read() == json.loads(edited) and "models" not in read()
        table.write_bytes(original)
        assert read() == json.loads(original)
        # a copy others can write, or a damaged one, is not used
        copy.write_bytes(marshal.dumps((marshal.version, original, {"models": {"from_the_copy": {}}})))
        copy.chmod(0o622)
        assert read() == json.loads(original)
        copy.chmod(0o600)
        copy.write_bytes(copy.read_bytes()[:50])
        assert read() == json.loads(original)
        # no cache directory to write: the JSON, every time
        monkeypatch.setenv("MSCHED_CACHE_DIR", str(table / "not-a-directory"))
        assert read() == json.loads(original)
        table.unlink()
        with pytest.raises(ProfileError, match="cannot read shipped profiles .*torchvision_features.json"):
            read()
    finally:
        shipped.load_table.cache_clear()


def test_records_work_on_an_interpreter_without_the_c_field_accessor(monkeypatch):
    """record.py takes namedtuple's C accessor from `_collections`; where that module is missing it builds
    the same read-only field properties itself, as collections.py does."""
    import importlib.util

    import msched.util.record as shipped

    monkeypatch.setitem(sys.modules, "_collections", None)      # `import _collections` now raises ImportError
    spec = importlib.util.spec_from_file_location("record_without_c_accessor", shipped.__file__)
    fallback = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fallback)
    assert fallback._tuplegetter is not shipped._tuplegetter     # the fallback was taken

    @fallback.record
    class Pair:
        left: int
        right: str = "r"

    pair = Pair(1)
    assert (pair.left, pair.right) == (1, "r")
    assert Pair.left.__doc__ == "Alias for field number 0"
    with pytest.raises(AttributeError):
        pair.left = 2
    assert pair._replace(right="x") == (1, "x")
