"""GPU-type constraints as Slurm feature expressions: reading the user's part back, writing msched's.

msched retypes a pending job through its feature constraint (SLURM-NOTES: Slurm 22.05 cannot retype a
pending gres request), and must keep whatever else the user asked for. A job's expression is read as
top-level AND terms; a term that is only GPU types joined by `|` (optionally in one pair of parentheses
or brackets) is a GPU-type term, anything else belongs to the user.

Writing (`combine`): the user's part AND msched's types, in one of these forms:

    types only            a100            a100|titanv
    user is an AND chain  ib&a100         ib&(a100|titanv)
    user has an OR        (ib|opa)&a100   (ib|opa)&(a100|titanv)

Checked on slurmctld 22.05.8 (`sbatch --test-only`, tests/test_rounds.py, slurm-marked): parenthesised
groups are evaluated as groups, `(titanv|rtx2080ti)&(a100|titanxp)` matches no node and
`(titanv|rtx2080ti)&(titanv|titanxp)` matches only the titanv node; without parentheses AND/OR are
applied left to right with no precedence (`titanv|rtx2080ti&a100|titanxp` lands on the titanxp node),
which is why an OR is always written inside parentheses next to an AND. Nested parentheses are not
supported by Slurm, so a group never holds another.
A user expression that already holds parentheses, brackets or counts (`[a*2&b*1]`, `(x&y)`) cannot be
wrapped without nesting, so msched leaves such jobs' constraints alone (`combine` returns None).

Reading (`matches`, `compile_constraint`, `feature_names`): the one evaluator of feature expressions in
msched and its simulator (slurm_sim imports it from here; msched never imports slurm_sim). One grammar,
applied left to right as above, with a choice of what a node count (`a*2`) means: ignored for the round
core, refused for the simulator. Malformed expressions raise ConstraintError with a one-line message.
Where it differs from slurmctld 22.05.8 (`sbatch --test-only -N1` on the dev cluster): slurmctld accepts
one trailing operator (`a|`, `a&`, `a,` read as `a`), which this reader refuses; it refuses nested
groups (`((a|b))`) and reads names case-sensitively, where this reader groups and folds case; it
accepts a count after a group (`(a|b)*2`), refused here, and placed `titanv*1`, `a100*1&titanv` and
`(titanv|a100)*2` on the titanxp node, so counts are not read as "the feature, N nodes" there either.
msched writes none of these forms.

msub imports this module on every submission: it uses the standard library only, and cheap parts of it
(no dataclasses, typing or pathlib).
"""

from __future__ import annotations

from msched.util.light import lru_cache

TYPE_CHECKING = False       # typing.TYPE_CHECKING without importing typing
if TYPE_CHECKING:           # for annotations only: importing collections.abc costs msub ~1 ms (predict14)
    from collections.abc import Collection, Iterable

_COMPLEX = set("()[]*")


def top_level_terms(expr: str) -> list[str]:
    """Split on `&` outside parentheses/brackets; commas (old AND syntax) count as `&`."""
    terms: list[str] = []
    depth = 0
    cur: list[str] = []
    for ch in expr.strip():
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        if ch in "&," and depth == 0:
            terms.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    if cur or terms:
        terms.append("".join(cur).strip())
    return [t for t in terms if t]


def _unwrap(term: str) -> str:
    t = term.strip()
    while len(t) >= 2 and t[0] in "([" and t[-1] == {"(": ")", "[": "]"}[t[0]] and not _COMPLEX & set(t[1:-1]):
        t = t[1:-1].strip()
    return t


def _names(term: str) -> list[str]:
    return [n.strip() for n in _unwrap(term).split("|")]


def type_term(term: str, gpu_type_of) -> tuple[str, ...] | None:
    """The GPU types of a pure GPU-type term (`a100`, `a100|titanv`, `(a|b)`); None for anything else."""
    inner = _unwrap(term)
    if _COMPLEX & set(inner) or "&" in inner:
        return None
    names = _names(inner)
    canon = [gpu_type_of(n) if n else None for n in names]
    if canon and all(canon):
        return tuple(canon)
    return None


def split(expr: str, gpu_type_of) -> tuple[str, tuple[str, ...]]:
    """(the non-GPU-type part, GPU types named by pure GPU-type terms) of a feature expression.

    `gpu_type_of(name)` returns the canonical GPU type of a feature name, or None for other features.
    When several GPU-type terms are ANDed, the types are their intersection.
    """
    if not expr or not expr.strip():
        return "", ()
    keep: list[str] = []
    types: list[str] | None = None
    for term in top_level_terms(expr):
        got = type_term(term, gpu_type_of)
        if got is None:
            keep.append(term)
        else:
            types = list(got) if types is None else [t for t in types if t in got]
    user = "&".join(keep)
    if len(keep) == 1:
        user = _unwrap(user)          # `(ib|opa)&(a|b)` -> `ib|opa`, as the user wrote it
    return user, tuple(dict.fromkeys(types or ()))


def names_gpu_type(expr: str, gpu_type_of) -> tuple[str, ...]:
    """Every GPU type named anywhere in the expression (a user naming one has pinned it)."""
    out = []
    for raw in expr.replace("&", "|").replace(",", "|").split("|"):
        name = raw.strip().strip("()[]").split("*")[0].strip()
        t = gpu_type_of(name) if name else None
        if t:
            out.append(t)
    return tuple(dict.fromkeys(out))


def types_expr(types: Iterable[str]) -> str:
    return "|".join(types)


def combine(user: str, types: Collection[str]) -> str | None:
    """The feature expression for the user's part AND one of `types`; None where it cannot be written."""
    user = (user or "").strip()
    tx = types_expr(types)
    if not types:
        return user
    if not user:
        return tx
    if _COMPLEX & set(user):
        return None
    group = tx if len(types) == 1 else f"({tx})"
    if "|" in user:
        return f"({user})&{group}"
    return f"{user}&{group}"


# ------------------------------------------------------------------------------------------ reading
# The one reader of feature expressions, for the round core (`matches`, counts ignored) and for the
# simulated controller (`compile_constraint(..., counts="refuse")`). It lives here, not in slurm_sim,
# because msched must not import the simulator; slurm_sim imports it from here.

COUNTS = ("ignore", "refuse")
_OPERATORS = frozenset("&|,()[]*")
_CLOSE = {"(": ")", "[": "]"}


class ConstraintError(ValueError):
    """A feature expression that cannot be read. The message is one line (the expression is shown with
    repr, so even a newline in it stays escaped): it goes as it is into a log line or a SimError that
    stands in for sbatch's one-line refusal."""


def _tokens(text: str) -> list[str]:
    """Operators as one-character tokens, the runs of other characters between them as names.

    A name is any run of characters that are neither operators nor whitespace, as slurmctld reads it:
    whether a name exists is a separate check against the nodes' features (`feature_names`), which gives
    Slurm's "Invalid feature specification" rather than a parse error. Whitespace only separates.
    """
    out: list[str] = []
    start = -1
    for i, ch in enumerate(text):
        if ch in _OPERATORS or ch.isspace():
            if start >= 0:
                out.append(text[start:i])
                start = -1
            if not ch.isspace():
                out.append(ch)
        elif start < 0:
            start = i
    if start >= 0:
        out.append(text[start:])
    return out


@lru_cache(maxsize=4096)
def _compile(text: str, counts: str):
    """(predicate or None, feature names) of an expression; cached because the same few expressions are
    read over and over (every node class per job in the simulator, every node per round in the core).

    Grammar: expr = factor {("&" | "," | "|") factor}; factor = name ["*" digits] | "(" expr ")" |
    "[" expr "]". Operators are applied left to right with no precedence, as slurmctld 22.05 does.
    """
    if counts not in COUNTS:
        raise ValueError(f"counts must be one of {COUNTS}, not {counts!r}")
    if not text or not text.strip():
        return None, frozenset()
    toks = _tokens(text)
    names: list[str] = []
    pos = 0

    def fail(why: str):
        return ConstraintError(f"bad constraint {text!r}: {why}")

    def expr():
        nonlocal pos
        pred = factor()
        while pos < len(toks) and toks[pos] in ("&", ",", "|"):
            op = toks[pos]
            pos += 1
            rhs = factor()
            pred = _either(pred, rhs) if op == "|" else _both(pred, rhs)
        return pred

    def factor():
        nonlocal pos
        if pos >= len(toks):
            raise fail(f"ends after {toks[-1]!r}")
        tok = toks[pos]
        pos += 1
        if tok in _CLOSE:
            inner = expr()
            close = _CLOSE[tok]
            if pos >= len(toks):
                raise fail(f"missing {close!r}")
            if toks[pos] != close:
                raise fail(f"expected {close!r} to close {tok!r}, found {toks[pos]!r}")
            pos += 1
            if pos < len(toks) and toks[pos] == "*":
                raise fail("a count ('*N') must follow a feature name, not a group")
            return inner
        if tok in _OPERATORS:
            raise fail(f"unexpected {tok!r}")
        name = tok.lower()
        names.append(name)
        if pos < len(toks) and toks[pos] == "*":
            num = toks[pos + 1] if pos + 1 < len(toks) else ""
            if not (num.isascii() and num.isdigit()):
                raise fail(f"'*' after {tok!r} must be followed by a node count")
            if counts == "refuse":
                raise fail(f"counts ({tok}*{num}) are not supported here")
            pos += 2
        return _has(name)

    pred = expr()
    if pos < len(toks):
        raise fail(f"unexpected {toks[pos]!r}")
    return pred, frozenset(names)


def _has(name: str):
    return lambda feats: name in feats


def _either(a, b):
    return lambda feats: a(feats) or b(feats)


def _both(a, b):
    return lambda feats: a(feats) and b(feats)


def compile_constraint(text: str, *, counts: str = "ignore"):
    """A predicate over a node's set of lowercase feature names, or None for an empty expression (any
    node). Raises ConstraintError for an expression that cannot be read.

    `counts` says what `name*N` means: "ignore" reads it as `name` (the round core asks only "could a
    node of this type serve the job", and must read whatever slurmctld accepted); "refuse" raises (the
    simulator places a job on nodes of one class and cannot honour per-feature node counts; msched never
    writes them). Brackets group like parentheses: a job here never spans node types.
    """
    return _compile(text, counts)[0]


def feature_names(text: str, *, counts: str = "ignore") -> frozenset[str]:
    """Every feature name the expression mentions, lowercase (to refuse names no node has, as slurmctld
    does). Raises ConstraintError as `compile_constraint` does."""
    return _compile(text, counts)[1]


def matches(expr: str, features: Collection[str], *, counts: str = "ignore") -> bool:
    """Does a node with these features satisfy the expression? Empty expression: every node.

    Read as slurmctld 22.05 reads it (AND/OR left to right without precedence, parentheses and brackets
    group); counts ignored by default. Raises ConstraintError for an unreadable expression: a caller
    reading Slurm's queue decides what an unreadable one means for it.
    """
    pred = _compile(expr, counts)[0]
    return pred is None or pred({f.lower() for f in features})
