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
    why     why msub added no constraint (e.g. "claim longer than the time limit"), for the job's owner
            (`msched jobs`), or why it packed the job (or, for an owner who asked, why not); a head with `why` and no `model` (`msched:v1;why=unknown%20model%20x`)
            is how msub records why a job went untagged: it is not a tag (no warning), see `why_of`
    pack    msub submitted the job as a shard job (gres/shard, packing): the combined normalized throughput
            msched predicted for it and its likely partners (msched.msub.packing)

Trust (README "Security model"): a tag is whatever the job's owner put in their comment, so every
field is checked when read against the declarative table TAG_FIELDS (type, numeric bounds, length,
allowed characters). The same table is what `msched plugin install` turns into the job_submit.lua
check, so the controller and the reorderer accept exactly the same tags. A tag that fails any check is
not a tag: the job is treated as untagged (a plain job) for the round, with one reason to log; nothing a
job carries can raise out of here or reach the database out of range (e.g. `bs=` with 26 digits).

The grammar, strictly (what the Lua generator must accept and nothing more):
- the comment starts with PREFIX; the tag is the text up to the first space (at most TAG_MAX_LEN
  characters); items are separated by `;`, each `key=value`, no key twice; empty items are skipped;
- a key is lowercase letters, digits and `_` (KEY_CHARS); keys not in TAG_FIELDS are ignored (a newer
  msub may add fields) but obey the same length and character rules as a `str` field of MAX_OTHER_LEN;
- a value is percent-decoded (UTF-8; an invalid escape or byte makes the tag bad), then checked:
  `int`: ASCII digits only (INT_CHARS), at most 13 of them, within [lo, hi];
  `float`: characters of FLOAT_CHARS only (no `nan`, `inf`, `_`), a finite number within [lo, hi];
  `str`: at most max_len characters, every one in the field's charset (never a control byte), or, for
  a field marked `unicode` (the model: a user's path), a printable non-ASCII character;
- `model` is required and non-empty; an empty value of another field means "not given".
"""

from __future__ import annotations

from msched.util.light import lru_cache
from msched.util.record import record

PREFIX = "msched:v1;"
_SAFE = "|:/.,-_+()[]&!*"
# what urllib.parse.quote(..., safe=_SAFE) leaves as it is: such values are written without calling it
_UNQUOTED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-~" + _SAFE)

# ---------------------------------------------------------------------------------- the bounds table
ALNUM = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
KEY_CHARS = "abcdefghijklmnopqrstuvwxyz0123456789_"
NAME_CHARS = ALNUM + "_.-+"                   # references, groups, versions: torchvision names and PEP 440
MODEL_CHARS = "".join(chr(c) for c in range(0x20, 0x7F))   # printable ASCII: a path may hold a space
TYPES_CHARS = ALNUM + "_.-|"                   # GPU type names joined by `|`
INT_CHARS = "0123456789"
FLOAT_CHARS = "0123456789.eE+-"
TAG_MAX_LEN = 1024          # the tag part of a comment (Slurm's comment is far longer; msub checks that)
MAX_OTHER_LEN = 256         # a field this version does not know
INT_MAX_DIGITS = 13
WHY_MAX_LEN = 160           # msub's reason for no tag or no constraint (printable ASCII)


@record
class TagField:
    """One field of the tag: its type and what the reorderer (and job_submit.lua) accept."""

    name: str
    kind: str                      # "str", "int" or "float"
    lo: float | None = None        # numeric bounds, inclusive
    hi: float | None = None
    max_len: int = 0               # str: longest value
    charset: str = ""              # str: every allowed ASCII character
    unicode: bool = False          # str: also any printable non-ASCII character (str.isprintable: no C1
                                   # control, no format character such as a bidi override)
    required: bool = False


TAG_FIELDS: tuple[TagField, ...] = (
    TagField("model", "str", max_len=256, charset=MODEL_CHARS, unicode=True, required=True),
    TagField("ref", "str", max_len=128, charset=NAME_CHARS),
    TagField("group", "str", max_len=64, charset=NAME_CHARS),
    TagField("sim", "float", lo=-1.0, hi=1.0),              # cosine in [-1, 1]; 1/(1+d) in (0, 1]
    TagField("flops", "float", lo=1e-6, hi=1e6),
    TagField("iters", "int", lo=1, hi=10**12),
    TagField("bs", "int", lo=1, hi=1 << 20),
    TagField("added", "str", max_len=256, charset=TYPES_CHARS),
    TagField("pinned", "str", max_len=256, charset=TYPES_CHARS),
    TagField("ver", "str", max_len=32, charset=NAME_CHARS),
    TagField("pref", "str", max_len=128, charset=NAME_CHARS),
    TagField("pflops", "float", lo=1e-6, hi=1e6),
    TagField("why", "str", max_len=WHY_MAX_LEN, charset=MODEL_CHARS),   # msub's reason, shown to the owner
    TagField("pack", "float", lo=0.0, hi=4.0),              # packed: predicted combined throughput
    TagField("prec", "str", max_len=8, charset=KEY_CHARS),   # float|half|bfloat16|double (msched.models.precision)
    TagField("mem", "float", lo=0.0, hi=1e5),   # predicted peak training memory per GPU, GB (estimate.memory)
)
FIELDS_BY_NAME = {f.name: f for f in TAG_FIELDS}
_CHARSETS = {f.name: frozenset(f.charset) for f in TAG_FIELDS if f.kind == "str"}
_KEY_SET = frozenset(KEY_CHARS)
_INT_SET = frozenset(INT_CHARS)
_FLOAT_SET = frozenset(FLOAT_CHARS)
_OTHER_SET = frozenset(MODEL_CHARS)


def _quote(text: str) -> str:
    """Percent-encode a tag value. Names and numbers need nothing, and then msub skips importing
    urllib.parse (~5 ms of its budget, see msched.util.record)."""
    if _UNQUOTED.issuperset(text):
        return text
    if text.isascii():          # what quote() does for ASCII (msub's reasons: words and spaces)
        return "".join(c if c in _UNQUOTED else f"%{ord(c):02X}" for c in text)
    from urllib.parse import quote

    return quote(text, safe=_SAFE)


def _unquote(text: str) -> str:
    """Percent-decode strictly: a malformed escape or bytes that are not UTF-8 raise ValueError."""
    if "%" not in text:
        return text
    from urllib.parse import unquote_to_bytes

    pieces = text.split("%")
    for p in pieces[1:]:
        if len(p) < 2 or not all(c in "0123456789abcdefABCDEF" for c in p[:2]):
            raise ValueError("a malformed %-escape")
    return unquote_to_bytes(text).decode("utf-8")     # UnicodeDecodeError is a ValueError


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
    why: str = ""
    pack: float | None = None
    prec: str = ""          # the job's precision as msub detected it; "" = not said (planned as float)
    mem: float | None = None   # predicted peak training memory per GPU (GB); None = unknown

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


def check_value(spec: TagField, text: str) -> tuple[object, str]:
    """(value, "") for a decoded value that fits the field, else (None, why). Never raises."""
    if spec.kind == "str":
        if len(text) > spec.max_len:
            return None, f"{spec.name} longer than {spec.max_len} characters"
        allowed = _CHARSETS[spec.name]
        if not allowed.issuperset(text) and not (
                spec.unicode and all(c in allowed or (c > "\x7f" and c.isprintable()) for c in text)):
            return None, f"{spec.name} holds a character outside its set"
        return text, ""
    if not text:
        return None, ""
    if spec.kind == "int":
        if len(text) > INT_MAX_DIGITS or not _INT_SET.issuperset(text):
            return None, f"{spec.name} is not a whole number of at most {INT_MAX_DIGITS} digits"
        value: float = int(text)
    else:
        if len(text) > 32 or not _FLOAT_SET.issuperset(text):
            return None, f"{spec.name} is not a number"
        try:
            value = float(text)
        except ValueError:
            return None, f"{spec.name} is not a number"
        if value != value or value in (float("inf"), float("-inf")):
            return None, f"{spec.name} is not finite"
    if not spec.lo <= value <= spec.hi:
        return None, f"{spec.name}={text} outside [{spec.lo:g}, {spec.hi:g}]"
    return value, ""


def validate(tag: JobTag) -> str:
    """Why a JobTag (e.g. one msub is about to write) would be refused when read back; "" if it would not."""
    encoded = tag.encode()
    if len(encoded) > TAG_MAX_LEN:
        return f"tag longer than {TAG_MAX_LEN} characters"
    return parse_tag(encoded)[2]


def with_tag(tag: JobTag, user_comment: str | None) -> str:
    """The comment msub submits: the tag, then the user's own comment kept after one space."""
    encoded = tag.encode()
    return f"{encoded} {user_comment}" if user_comment else encoded


@lru_cache(maxsize=1 << 16)
def parse_tag(comment: str | None) -> tuple[JobTag | None, str, str]:
    """(tag or None, the user's own comment, why the tag was refused or "") for a Slurm comment.

    A comment that does not start with PREFIX carries no tag (reason ""); one that does but breaks a
    rule of the grammar or a bound of TAG_FIELDS gives None and one reason, for one warning: the job
    is then a plain job for the round. Never raises. Cached: a round asks for each job's tag several
    times (snapshot, ingestion, completion tracking), and the result is immutable."""
    if not comment or not comment.startswith(PREFIX):
        return None, comment or "", ""
    head, _, user = comment.partition(" ")
    if len(head) > TAG_MAX_LEN:
        return None, user, f"tag longer than {TAG_MAX_LEN} characters"
    values: dict[str, object] = {}
    seen: set[str] = set()
    for item in head[len(PREFIX):].split(";"):
        if not item:
            continue
        key, value, why = _read_item(item)
        if why is _MALFORMED:
            return None, user, why
        if key in seen:
            return None, user, f"{key} given twice"
        seen.add(key)
        if why:
            return None, user, why
        if value is not None and value != "":
            values[key] = value
    if "model" not in values:
        # msub's record of why a job went untagged is no tag, and nothing to warn about
        return None, user, "" if values.get("why") else "no model"
    return JobTag(**values), user, ""


_MALFORMED = "a malformed item (not key=value)"


@lru_cache(maxsize=1 << 14)
def _read_item(item: str) -> tuple[str, object, str]:
    """(key, value, why it is refused or "") of one `key=value` item of a tag's head, `parse_tag`'s rules
    (why is _MALFORMED itself for an item that is not key=value; the value is None for a field this
    version does not know, or an empty number). Cached apart from the whole tag: a queue's tags differ
    in a few items (the iterations, the memory) and share the rest (model, reference, group, batch
    size, types, version), and reading each item anew was most of the round's first parse of 8,000
    tags (issue 21, sixteenth pass)."""
    key, sep, raw = item.partition("=")
    if not sep or not key or not _KEY_SET.issuperset(key):
        return key, None, _MALFORMED
    try:
        text = _unquote(raw)
    except ValueError:
        return key, None, f"{key} has a malformed %-escape"
    spec = FIELDS_BY_NAME.get(key)
    if spec is None:
        if len(text) > MAX_OTHER_LEN or not _OTHER_SET.issuperset(text):
            return key, None, f"unknown field {key} holds a control byte or is too long"
        return key, None, ""
    value, why = check_value(spec, text)
    return key, value, why


def untagged_record(why: str) -> str:
    """The comment head msub writes on a job it leaves untagged: only why (see `why_of`)."""
    return f"{PREFIX}why={_quote(short_why(why))}"


def short_why(text: str) -> str:
    """A reason as the tag's `why` field holds it: one line of printable ASCII, at most WHY_MAX_LEN."""
    flat = " ".join(str(text).split())
    flat = "".join(c if " " <= c <= "~" else "?" for c in flat)
    return flat if len(flat) <= WHY_MAX_LEN else flat[:WHY_MAX_LEN - 3] + "..."


def why_of(comment: str | None) -> str:
    """msub's reason recorded in a job's comment: a tag's `why`, or that of an untagged record; ""
    when there is none (or the head is refused)."""
    tag, _, problem = parse_tag(comment)
    if tag is not None:
        return tag.why
    if problem or not comment:
        return ""
    head = comment.partition(" ")[0]
    for item in head[len(PREFIX):].split(";"):
        key, _, raw = item.partition("=")
        if key == "why":
            try:
                text = _unquote(raw)
            except ValueError:
                return ""
            value, problem = check_value(FIELDS_BY_NAME["why"], text)   # printable, bounded: safe to print
            return "" if problem else str(value)
    return ""


def parse_comment(comment: str | None) -> tuple[JobTag | None, str]:
    """Split a Slurm comment into (tag or None, the user's own comment). Never raises.

    A tag-shaped head that is refused (parse_tag says why) is not the user's comment either: the
    user's part is what follows it."""
    tag, user, _ = parse_tag(comment)
    return tag, user


def tag_problem(comment: str | None) -> str:
    """Why the tag at the start of this comment is refused ("" when it is fine or there is none)."""
    return parse_tag(comment)[2]
