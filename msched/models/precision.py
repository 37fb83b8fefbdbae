"""Which precision a training job runs at, from what its submission says (issue: precision in the tag).

`#MSCHED --precision=half` wins; else the first precision flag on the script's command lines or `--wrap`:
`--amp`/`--use-amp`, `--fp16`/`--half`, `--bf16`, `--precision X` / `--mixed-precision X` (PyTorch Lightning's
`16`, `16-mixed`, `bf16-mixed`, `32`, `64` included), `--opt-level O1|O2|O3` (apex). The answer is one of
the performance table's precisions: `float`, `half`, `bfloat16`, `double`; None when nothing says
(the job is planned at `float`). Pure Python with `re` only, imported only for a line that can hold a
flag: msub's light path (the call belongs in msched.msub.directives, beside the model detection).
"""

from __future__ import annotations

PRECISIONS = ("float", "half", "bfloat16", "double")
_NAMES = {
    "half": "half", "fp16": "half", "float16": "half", "16": "half", "16-mixed": "half", "amp": "half",
    "mixed": "half", "o1": "half", "o2": "half", "o3": "half", "16-true": "half",
    "bf16": "bfloat16", "bfloat16": "bfloat16", "bf16-mixed": "bfloat16", "bf16-true": "bfloat16",
    "float": "float", "fp32": "float", "float32": "float", "32": "float", "32-true": "float", "tf32": "float",
    "single": "float", "o0": "float",
    "double": "double", "fp64": "double", "float64": "double", "64": "double", "64-true": "double",
}
_VALUED = r"(?:^|\s)--(?:precision|mixed[-_]precision|opt[-_]level|dtype)(?:=|\s+)[\"']?([\w\-]+)"
_FLAGS = (
    (r"(?:^|\s)--(?:use[-_])?(?:amp|autocast)(?=\s|$|=)", "half"),
    (r"(?:^|\s)--(?:use[-_])?(?:fp16|half)(?=\s|$)", "half"),
    (r"(?:^|\s)--(?:use[-_])?bf16(?=\s|$)", "bfloat16"),
)
# a word that every match of one of the patterns above contains: a line with none of them cannot match,
# and the patterns are compiled only for a line that has one (compiling them cost msub ~0.45 ms a job)
_NEEDED = ("precision", "level", "dtype", "amp", "autocast", "fp16", "half", "bf16")


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
            if not any(word in line for word in _NEEDED):
                continue
            import re

            found: list[tuple[int, str]] = []
            for m in re.finditer(_VALUED, line):
                named = normalise_precision(m.group(1))
                if named:
                    found.append((m.start(), named))
            for pattern, named in _FLAGS:
                m = re.search(pattern, line)
                if m:
                    found.append((m.start(), named))
            if found:
                return min(found)[1]
    return None
