"""Which precision a training job runs at, from what its submission says (issue: precision in the tag).

`#MSCHED --precision=half` wins; else the first precision flag on the script's command lines or `--wrap`:
`--amp`/`--use-amp`, `--fp16`/`--half`, `--bf16`, `--precision X` / `--mixed-precision X` (PyTorch Lightning's
`16`, `16-mixed`, `bf16-mixed`, `32`, `64` included), `--opt-level O1|O2|O3` (apex). The answer is one of
the performance table's precisions: `float`, `half`, `bfloat16`, `double`; None when nothing says
(the job is planned at `float`). Pure Python in string methods (the patterns below say what they read):
msub's light path (the call belongs in msched.msub.directives, beside the model detection).
"""

from __future__ import annotations

from msched.util.text import option_value_start

PRECISIONS = ("float", "half", "bfloat16", "double")
_NAMES = {
    "half": "half", "fp16": "half", "float16": "half", "16": "half", "16-mixed": "half", "amp": "half",
    "mixed": "half", "o1": "half", "o2": "half", "o3": "half", "16-true": "half",
    "bf16": "bfloat16", "bfloat16": "bfloat16", "bf16-mixed": "bfloat16", "bf16-true": "bfloat16",
    "float": "float", "fp32": "float", "float32": "float", "32": "float", "32-true": "float", "tf32": "float",
    "single": "float", "o0": "float",
    "double": "double", "fp64": "double", "float64": "double", "64": "double", "64-true": "double",
}
# The flags, as patterns (the reference the string scanner below follows exactly; tests/test_msub_light_path.py
# checks it against them): `--NAME VALUE` / `--NAME=VALUE`, and bare flags, each after the line's start or a
# space. msub reads them without `re` (importing it costs ~4 ms a job: msched.util.light).
_VALUED = r"(?:^|\s)--(?:precision|mixed[-_]precision|opt[-_]level|dtype)(?:=|\s+)[\"']?([\w\-]+)"
_FLAGS = (
    (r"(?:^|\s)--(?:use[-_])?(?:amp|autocast)(?=\s|$|=)", "half"),
    (r"(?:^|\s)--(?:use[-_])?(?:fp16|half)(?=\s|$)", "half"),
    (r"(?:^|\s)--(?:use[-_])?bf16(?=\s|$)", "bfloat16"),
)
# the same, as (option names, or bare flag words and whether `=` may follow them)
_VALUED_NAMES = ("precision", "mixed-precision", "mixed_precision", "opt-level", "opt_level", "dtype")
_FLAG_WORDS = ((("amp", "autocast"), True), (("fp16", "half"), False), (("bf16",), False))


def _dashes(line: str):  # noqa: ANN202 - an iterator of (match start, index after `--`)
    r"""Where `(?:^|\s)--` matches, left to right: the match's start and the index after its `--`."""
    q = line.find("--")
    while q >= 0:
        if q == 0 or line[q - 1].isspace():
            yield max(q - 1, 0), q + 2
        q = line.find("--", q + 1)


def _valued(line: str) -> list[tuple[int, str]]:
    """(start, group 1) of each match of `re.finditer(_VALUED, line)`, in string methods."""
    out, n, resume = [], len(line), 0
    for start, r in _dashes(line):
        if start < resume:
            continue                        # inside the previous match (finditer's matches do not overlap)
        name = next((w for w in _VALUED_NAMES if line.startswith(w, r)), None)
        if name is None:
            continue
        t = option_value_start(line, r + len(name))
        if t is None:
            continue
        end = t
        while end < n and (line[end].isalnum() or line[end] in "_-"):
            end += 1
        if end > t:
            out.append((start, line[t:end]))
            resume = end
    return out


def _flag(line: str, words: tuple[str, ...], equals: bool) -> int | None:
    """The start of `re.search` of one bare-flag pattern, in string methods; None when it does not match."""
    n = len(line)
    for start, r in _dashes(line):
        for at in ((r + 4, r) if line[r:r + 4] in ("use-", "use_") else (r,)):
            for word in words:
                end = at + len(word)
                if line.startswith(word, at) and (end == n or line[end].isspace() or (equals and line[end] == "=")):
                    return start
    return None


def normalise_precision(text: str) -> str | None:
    """A precision word (`fp16`, `bf16-mixed`, `O2`, `64`...) as the table's name, or None."""
    return _NAMES.get(text.strip().strip("\"'").lower())


def detect_precision(texts: list[str], directive: str | None = None) -> str | None:
    """The job's precision: the `#MSCHED --precision=` value when valid, else the first flag on a
    command line of `texts` (comment lines skipped), else None."""
    if directive:
        named = normalise_precision(directive)
        if named:
            return named
    for text in texts:
        for line in text.splitlines():
            stripped = line.strip()
            if not stripped or stripped.startswith("#"):
                continue
            found: list[tuple[int, str]] = []
            for start, value in _valued(line):
                named = normalise_precision(value)
                if named:
                    found.append((start, named))
            for (words, equals), (_, named) in zip(_FLAG_WORDS, _FLAGS, strict=True):
                start = _flag(line, words, equals)
                if start is not None:
                    found.append((start, named))
            if found:
                return min(found)[1]
    return None
