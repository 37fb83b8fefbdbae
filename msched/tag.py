"""The Slurm job tag: what msub tells the reorderer, carried in the job's comment.

Format (DESIGN, a stable interface): `msched:v1;key=value;...` at the start of the comment, then one
space and the user's own comment, if any. Values are percent-encoded so they never hold a space,
`;`, `=` or `%`. Keys:

    ver     msched version that wrote the tag
    model   the model spec (torchvision name or path/to/file.py:factory)
    ref     nearest reference model            group   similarity group (family of `ref`)
    sim     similarity to `ref`                flops   FLOPs ratio job / reference
    pref    the nearest reference that has measurements (estimates come from it; DESIGN point 3),
            when it is not `ref`              pflops  FLOPs ratio job / `pref`
    iters   iterations (work), if known        bs      per-GPU batch size
    added   the constraint msched added ("" = none), e.g. `a100|titanv`
    pinned  the GPU type the user pinned, if any
"""

from __future__ import annotations

from functools import lru_cache

from msched.util.record import record

PREFIX = "msched:v1;"
_SAFE = "|:/.,-_+()[]&!*"
# what urllib.parse.quote(..., safe=_SAFE) leaves as it is: such values are written without calling it
_UNQUOTED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-~" + _SAFE)


def _quote(text: str) -> str:
    """Percent-encode a tag value. Names and numbers need nothing, and then msub skips importing
    urllib.parse (~5 ms of its budget, see msched.util.record)."""
    if _UNQUOTED.issuperset(text):
        return text
    from urllib.parse import quote

    return quote(text, safe=_SAFE)


def _unquote(text: str) -> str:
    if "%" not in text:
        return text
    from urllib.parse import unquote

    return unquote(text)


@record
class JobTag:
    model: str
    ref: str = ""
    group: str = ""
    sim: float = 0.0
    flops: float = 1.0
    iters: int | None = None
    bs: int | None = None
    added: str = ""
    pinned: str = ""
    ver: str = ""
    pref: str = ""
    pflops: float | None = None

    @property
    def perf_flops_ratio(self) -> float:
        return self.pflops if self.pref and self.pflops else self.flops

    def encode(self) -> str:
        parts = []
        for name, value in self._asdict().items():
            if value is None or value == "":
                continue
            if isinstance(value, float):
                value = f"{value:.6g}"
            parts.append(f"{name}={_quote(str(value))}")
        return PREFIX + ";".join(parts)


_CONVERT = {"sim": float, "flops": float, "iters": int, "bs": int, "pflops": float}


def with_tag(tag: JobTag, user_comment: str | None) -> str:
    """The comment msub submits: the tag, then the user's own comment kept after one space."""
    encoded = tag.encode()
    return f"{encoded} {user_comment}" if user_comment else encoded


@lru_cache(maxsize=1 << 16)
def parse_comment(comment: str | None) -> tuple[JobTag | None, str]:
    """Split a Slurm comment into (tag or None, the user's own comment). Never raises.

    Cached: a reorder round asks for each job's tag several times (snapshot, ingestion, completion
    tracking), and the result is immutable."""
    if not comment or not comment.startswith(PREFIX):
        return None, comment or ""
    head, _, user = comment.partition(" ")
    values: dict[str, object] = {}
    known = JobTag._fields
    for item in head[len(PREFIX):].split(";"):
        key, sep, raw = item.partition("=")
        if not sep or key not in known:
            continue
        try:
            values[key] = _CONVERT.get(key, str)(_unquote(raw))
        except ValueError:
            continue
    if "model" not in values:
        return None, comment
    return JobTag(**values), user
