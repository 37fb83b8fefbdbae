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
"""

from __future__ import annotations

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


def matches(expr: str, features: Collection[str]) -> bool:
    """Does a node with these features satisfy the expression? Slurm 22.05's reading: AND/OR left to
    right without precedence, one level of parentheses or brackets (brackets group like parentheses:
    a job here never spans node types), counts (`*2`) ignored. Empty expression: every node."""
    feats = {f.lower() for f in features}
    tokens = [t for t in _tokenize(expr) if t]
    if not tokens:
        return True

    def evaluate(seq: list[str]) -> bool:
        value: bool | None = None
        op = "&"
        i = 0
        while i < len(seq):
            tok = seq[i]
            if tok in ("&", ",", "|"):
                op = "|" if tok == "|" else "&"
                i += 1
                continue
            if tok in ("(", "["):
                depth, k = 0, i
                while k < len(seq):
                    depth += seq[k] in ("(", "[")
                    depth -= seq[k] in (")", "]")
                    if depth == 0:
                        break
                    k += 1
                term = evaluate(seq[i + 1:k])
                i = k + 1
            else:
                term = tok.split("*")[0].strip().lower() in feats
                i += 1
            value = term if value is None else (value or term) if op == "|" else (value and term)
        return bool(value)

    return evaluate(tokens)


def _tokenize(expr: str) -> list[str]:
    out: list[str] = []
    cur = ""
    for ch in expr or "":
        if ch in "&|,()[]":
            if cur.strip():
                out.append(cur.strip())
            cur = ""
            out.append(ch)
        else:
            cur += ch
    if cur.strip():
        out.append(cur.strip())
    return out
