"""The one reader of Slurm feature expressions (msched.slurm.feature_expr), shared by the round core
(counts ignored) and the simulator (counts refused): grammar, left-to-right evaluation as slurmctld 22.05
does it (tests/test_rounds.py checks the same forms against the real slurmctld), and its errors."""

from __future__ import annotations

import ast
import inspect
import re

import pytest

from msched.slurm import feature_expr as mod
from msched.slurm.feature_expr import ConstraintError, compile_constraint, feature_names, matches

A100_IB = {"a100", "ib"}


@pytest.mark.parametrize(("expr", "features", "expected"), [
    # left to right, no precedence: `a|b&c` is `(a|b)&c`, not `a|(b&c)`
    ("a100|titanv&ib", {"a100"}, False),
    ("a100|titanv&ib", A100_IB, True),
    ("ib&titanv|a100", {"a100"}, True),                       # (ib&titanv)|a100
    ("titanv|rtx2080ti&a100|titanxp", {"titanv"}, False),     # precedence would say True
    ("titanv|rtx2080ti&a100|titanxp", {"titanxp"}, True),
    # parentheses and brackets group
    ("(titanv|rtx2080ti)&(a100|titanxp)", {"titanxp"}, False),
    ("(titanv|rtx2080ti)&(titanv|titanxp)", {"titanv"}, True),
    ("ib&(a100|titanv)", {"titanv"}, False),
    ("[a100|titanv]", {"titanv"}, True),
    ("[a100|titanv]&ib", {"titanv"}, False),
    ("a100|[titanv&ib]", {"titanv"}, False),
    # commas are AND, with the same left-to-right reading
    ("ib,ssd", {"ib"}, False),
    ("ib,ssd", {"ib", "ssd"}, True),
    ("a100|titanv,ib", {"a100"}, False),                      # (a100|titanv),ib
    # case and spaces do not matter; any non-operator characters make a name, as in slurmctld
    (" A100 | titanv ", {"a100"}, True),
    ("a100", {"A100"}, True),
    ("gpu=a100|x", {"gpu=a100"}, True),
    ("", set(), True),
    ("   ", {"a100"}, True),
])
def test_expressions_are_read_like_slurmctld(expr, features, expected):
    assert matches(expr, features) is expected
    pred = compile_constraint(expr, counts="refuse")
    assert (pred is None or pred(frozenset(f.lower() for f in features))) is expected


def test_counts_are_ignored_or_refused_as_asked():
    """The round core reads `a*2` as `a` (slurmctld accepted it; the question is only which types could
    serve); the simulator refuses it (it cannot honour node counts per feature)."""
    expr = "[a100*2&ib*1]"
    assert matches(expr, A100_IB) and not matches(expr, {"a100"})
    assert feature_names(expr) == {"a100", "ib"}
    with pytest.raises(ConstraintError, match=r"counts \(a100\*2\) are not supported"):
        compile_constraint(expr, counts="refuse")
    with pytest.raises(ConstraintError, match="counts"):
        matches("a100*1", {"a100"}, counts="refuse")
    with pytest.raises(ConstraintError, match="counts"):
        feature_names(expr, counts="refuse")
    with pytest.raises(ConstraintError, match=re.escape("unexpected '*'")):
        matches("a100*2*3", {"a100"})                # one count per name


def test_empty_and_compiled_predicates_are_cached():
    assert compile_constraint("") is None and compile_constraint(" ", counts="refuse") is None
    assert feature_names("") == frozenset()
    first = compile_constraint("ib&(a100|titanv)")
    assert first is compile_constraint("ib&(a100|titanv)")        # compiled once, then reused
    assert first(frozenset(A100_IB)) and not first(frozenset({"a100"}))


@pytest.mark.parametrize(("expr", "why"), [
    ("a100|", "ends after '|'"),
    ("|a100", "unexpected '|'"),
    ("a100&&ib", "unexpected '&'"),
    ("a100,", "ends after ','"),
    ("()", "unexpected ')'"),
    ("(a100|titanv", "missing ')'"),
    ("[a100|titanv", "missing ']'"),
    ("(a100|titanv]", "expected ')' to close '(', found ']'"),
    ("a100)", "unexpected ')'"),
    ("a100 titanv", "unexpected 'titanv'"),
    ("(a100)titanv", "unexpected 'titanv'"),
    ("a100*", "must be followed by a node count"),
    ("a100*two", "must be followed by a node count"),
    ("*2", "unexpected '*'"),
    ("(a100|titanv)*2", "must follow a feature name"),
    ("a100|\n", "ends after '|'"),
])
@pytest.mark.parametrize("counts", ["ignore", "refuse"])
def test_malformed_expressions_raise_one_line_errors(expr, why, counts):
    with pytest.raises(ConstraintError, match=re.escape(why)) as exc:
        compile_constraint(expr, counts=counts)
    msg = str(exc.value)
    assert "\n" not in msg and msg.startswith(f"bad constraint {expr!r}: ")
    with pytest.raises(ConstraintError):
        matches(expr, A100_IB, counts=counts)
    assert isinstance(exc.value, ValueError)            # callers that catch ValueError (sim client) see it


def test_unknown_counts_mode_is_a_programming_error():
    with pytest.raises(ValueError, match="counts must be one of"):
        compile_constraint("a100", counts="honour")


def test_feature_names_lists_every_name_once_lowercased():
    assert feature_names("ib&(A100|titanv*2),IB") == {"ib", "a100", "titanv"}


def test_module_imports_only_cheap_standard_library_modules():
    """msub imports this module on every submission; keep its own imports to these."""
    tree = ast.parse(inspect.getsource(mod))
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            imported.add(node.module)
    # msched.util.light: functools' lru_cache without functools; collections.abc: for annotations only
    assert imported <= {"__future__", "re", "msched.util.light", "collections.abc"}, imported
