"""Slurm feature constraints (`--constraint`), as the simulated controller evaluates them against nodes.

Supported: feature names, `a|b` (OR), `a&b` and `a,b` (AND), parentheses and square brackets
(brackets = "all nodes the same choice": a job here never spans types, so they group like parentheses).
AND and OR are evaluated left to right without precedence, as slurmctld 22.05 does (`a|b&c` is
`(a|b)&c`); msched writes parentheses where it matters. Counts (`a*2`) are refused: msched never writes them.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from functools import lru_cache

_TOKEN = re.compile(r"\s*(?:([A-Za-z0-9_.:+-]+)|([|&,()\[\]]))")

Predicate = Callable[[frozenset[str]], bool]


class ConstraintError(ValueError):
    """A constraint expression that cannot be parsed; one-line message."""


def _tokens(text: str) -> list[str]:
    out, pos = [], 0
    text = text.strip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m or m.end() == pos:
            raise ConstraintError(f"bad constraint {text!r}: unexpected {text[pos:].strip()[:10]!r}")
        out.append(m.group(1) or m.group(2))
        pos = m.end()
    return out


@lru_cache(maxsize=4096)
def parse_constraint(text: str) -> Predicate | None:
    """A predicate over a node's feature set; None for an empty constraint (any node)."""
    if not text or not text.strip():
        return None
    toks = _tokens(text)
    pos = 0

    def peek() -> str | None:
        return toks[pos] if pos < len(toks) else None

    def take() -> str:
        nonlocal pos
        tok = toks[pos]
        pos += 1
        return tok

    def expr() -> Predicate:
        # Slurm evaluates AND and OR left to right, without precedence: a|b&c = (a|b)&c
        pred = factor()
        while peek() in ("|", "&", ","):
            op = take()
            rhs = factor()
            pred = _either(pred, rhs) if op == "|" else _both(pred, rhs)
        return pred

    def factor() -> Predicate:
        tok = peek()
        if tok is None:
            raise ConstraintError(f"bad constraint {text!r}: ends too early")
        if tok in ("(", "["):
            take()
            inner = expr()
            close = ")" if tok == "(" else "]"
            if peek() != close:
                raise ConstraintError(f"bad constraint {text!r}: missing {close!r}")
            take()
            return inner
        if tok in ("|", "&", ",", ")", "]"):
            raise ConstraintError(f"bad constraint {text!r}: unexpected {tok!r}")
        name = take().lower()
        return lambda f, n=name: n in f

    pred = expr()
    if pos != len(toks):
        raise ConstraintError(f"bad constraint {text!r}: unexpected {toks[pos]!r}")
    return pred


def _either(a: Predicate, b: Predicate) -> Predicate:
    return lambda f: a(f) or b(f)


def _both(a: Predicate, b: Predicate) -> Predicate:
    return lambda f: a(f) and b(f)


def feature_names(text: str) -> set[str]:
    """Every feature name an expression mentions (to refuse names no node has, as Slurm does)."""
    if not text:
        return set()
    return {t.lower() for t in _tokens(text) if t not in ("|", "&", ",", "(", ")", "[", "]")}


def satisfies(text: str, features: Iterable[str]) -> bool:
    pred = parse_constraint(text)
    return True if pred is None else pred(frozenset(f.lower() for f in features))
