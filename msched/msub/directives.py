"""What a submission says about msched: its `#MSCHED` lines and msub's options, and the model its
command lines name.

msub's own settings (`--model`, `--iterations`, `--batch-size`) come from msub's options and from
`#MSCHED` lines; when neither names the model, it is looked for in the script's command lines and in
`--wrap` (`--arch resnet50`, `-a vgg16`, `torchvision.models.densenet121`, `path/file.py:factory`).
Light path: no dataclasses, pathlib or typing (see msched.util.record), and no `re` for the common cases
(`--arch`/`--model` options, #MSCHED lines): importing it costs msub ~4 ms (msched.util.light says more).
"""

from __future__ import annotations

import os

from msched.msub.sbatch_args import is_command_line, split_directive
from msched.util.record import record
from msched.util.text import option_value_start

MSCHED_DIRECTIVE = "#MSCHED"


# --------------------------------------------------------------------------- msched's own settings
@record
class MschedSettings:
    model: str | None = None
    iterations: int | None = None
    batch_size: int | None = None
    pack: bool | None = None        # --pack / --no-pack; None: the site's default for the partition
    precision: str | None = None      # `--precision=half` (msched.models.precision's names)
    dry_run: bool = False
    problems: tuple[str, ...] = ()


# the environment's names for the same settings (issue 20: clients such as submitit cannot add
# options or #MSCHED lines easily); they give way to #MSCHED lines and msub's options
ENV_SETTINGS = {"MSCHED_MODEL": "model", "MSCHED_ITERATIONS": "iterations", "MSCHED_BATCH_SIZE": "batch_size"}
_MSCHED_KEYS = {"model": "model", "iterations": "iterations", "iters": "iterations", "batch-size": "batch_size",
                "batch_size": "batch_size", "precision": "precision", **ENV_SETTINGS}
_FLAGS = {"pack": True, "no-pack": False, "no_pack": False}    # the Packing issue: a flag, no value


def _label(key: str) -> str:
    return key if key in ENV_SETTINGS else f"--{key}"


def _positive_int(key: str, raw: str | None, problems: list[str]) -> int | None:
    try:
        value = int(str(raw))
    except ValueError:
        value = 0
    if value <= 0:
        problems.append(f"{_label(key)} must be a positive integer, not {raw!r}; ignored")
        return None
    return value


def env_settings(environ=None) -> list[tuple[str, str | None]]:
    """(key, value) pairs from MSCHED_MODEL, MSCHED_ITERATIONS and MSCHED_BATCH_SIZE, lowest precedence
    first in what `settings_from_words` is given (later pairs win). Unset or empty variables say nothing."""
    env = os.environ if environ is None else environ
    return [(name, env[name]) for name in ENV_SETTINGS if env.get(name)]


def settings_from_words(pairs: list[tuple[str, str | None]], dry_run: bool = False) -> MschedSettings:
    """Settings from (key, value) pairs, later pairs winning; bad values become warnings.

    Keys are #MSCHED/msub option names or the environment's (ENV_SETTINGS); msub passes the
    environment's first, then the script's #MSCHED lines, then its own options."""
    problems: list[str] = []
    values: dict[str, object] = {}
    for key, raw in pairs:
        if key in _FLAGS:
            if raw not in (None, ""):
                problems.append(f"--{key} takes no value (got {raw!r}); ignored")
            else:
                values["pack"] = _FLAGS[key]
            continue
        field_name = _MSCHED_KEYS.get(key)
        if field_name is None:
            problems.append(f"unknown #MSCHED option --{key}; valid: --model, --iterations, --batch-size, "
                            "--precision, --pack, --no-pack")
            continue
        if raw is None or raw == "":
            problems.append(f"{_label(key)} needs a value")
            continue
        if field_name == "model":
            values["model"] = raw
        elif field_name == "precision":
            from msched.models.precision import PRECISIONS, normalise_precision

            named = normalise_precision(raw)
            if named is None:
                problems.append(f"--precision={raw} is not a precision; valid: {', '.join(PRECISIONS)} "
                                "(or fp16, bf16, amp, 16-mixed...); ignored")
            else:
                values["precision"] = named
        else:
            parsed = _positive_int(key, raw, problems)
            if parsed is not None:
                values[field_name] = parsed
    return MschedSettings(dry_run=dry_run, problems=tuple(problems), **values)  # type: ignore[arg-type]


def msched_directives(script: str) -> tuple[list[tuple[str, str | None]], bool]:
    """`#MSCHED` key/values of a script and whether any exist.

    Like sbatch's `#SBATCH`, the word must start the line (an indented one may sit in a here-document,
    whose text msub must not change); unlike it, they count anywhere in the script (comments to the shell).
    """
    pairs: list[tuple[str, str | None]] = []
    found = False
    for line in script.splitlines():
        if not line.startswith(MSCHED_DIRECTIVE):
            continue
        found = True
        words = split_directive(line[len(MSCHED_DIRECTIVE):])
        i = 0
        while i < len(words):
            word = words[i].lstrip("-")
            key, eq, value = word.partition("=")
            if not eq and key not in _FLAGS and i + 1 < len(words) and not words[i + 1].startswith("-"):
                value = words[i + 1]
                i += 1
            pairs.append((key, value if (eq or value) else None))
            i += 1
    return pairs, found


# --------------------------------------------------------------------------- model detection
def known_models() -> set[str]:
    """Names msub accepts when it finds a model on a command line: the shipped torchvision table's."""
    from msched.models.shipped import model_names

    return set(model_names())    # an unreadable table raises: msub warns, never submits silently untagged



# in order; the first is read by `_option_values` (no `re`), the others by `re`, imported and each pattern
# compiled only when a command line reaches it
_CANDIDATE_PATTERNS = (
    # a `path/file.py:factory` first: the plain word pattern alone would stop before `:factory`
    r"(?:^|\s)--(?:arch|model|model[-_]name|arch[-_]name|network|net)(?:=|\s+)[\"']?"
    r"([\w.\-/~]+\.py:\w+|[\w.\-/]+)",
    r"(?:^|\s)-a(?:=|\s+)?[\"']?([A-Za-z_][\w.]*)",
    r"torchvision\.models\.([A-Za-z_]\w*)",
    r"(?<![\w.])models\.([A-Za-z_]\w*)\s*\(",
    r"get_model\(\s*[\"']([A-Za-z_]\w*)[\"']",
)
# the first pattern's option names, in its order
_OPTION_NAMES = ("arch", "model", "model-name", "model_name", "arch-name", "arch_name", "network", "net")


def _is_word(c: str) -> bool:
    return c.isalnum() or c == "_"          # `re`'s `\w` for str


def _run_end(line: str, i: int, extra: str) -> int:
    """The end of the run of word characters and characters of EXTRA that starts at I."""
    n = len(line)
    while i < n and (_is_word(line[i]) or line[i] in extra):
        i += 1
    return i


def _value_at(line: str, u: int) -> tuple[str, int] | None:
    r"""`([\w.\-/~]+\.py:\w+|[\w.\-/]+)` matched at U: (the value, its end) or None."""
    n = len(line)
    end = _run_end(line, u, ".-/~")
    # `[\w.\-/~]+\.py:` ends where that run ends (`:` is not in it): the run must end in `.py` after at
    # least one character, and a `:` and a word character follow it
    if end - u >= 4 and line.startswith(".py", end - 3) and end + 1 < n and line[end] == ":" \
            and _is_word(line[end + 1]):
        stop = _run_end(line, end + 1, "")
        return line[u:stop], stop
    end = _run_end(line, u, ".-/")
    return (line[u:end], end) if end > u else None


def _option_at(line: str, q: int) -> tuple[str, int] | None:
    """The first pattern matched from its `--` at Q: (group 1, the match's end) or None."""
    if not line.startswith("--", q):
        return None
    for name in _OPTION_NAMES:
        t = option_value_start(line, q + 2 + len(name)) if line.startswith(name, q + 2) else None
        if t is None:
            continue
        found = _value_at(line, t)
        if found is not None:
            return found
    return None


def _option_values(line: str):  # noqa: ANN202 - an iterator of str
    """group(1) of each match of `re.finditer(_CANDIDATE_PATTERNS[0], line)`, in order, in string methods
    (tests/test_msub_light_path.py checks them against the pattern)."""
    p, n = 0, len(line)
    while p < n:
        found = _option_at(line, 0) if p == 0 else None          # `^`, tried first
        if found is None and line[p].isspace():
            found = _option_at(line, p + 1)                       # `\s`
        if found is None:
            p += 1
            continue
        yield found[0]
        p = found[1]


def _pattern_values(k: int, line: str):  # noqa: ANN202 - an iterator of str
    if k == 0:
        return _option_values(line)
    import re

    return (m.group(1) for m in re.finditer(_CANDIDATE_PATTERNS[k], line))


def _is_file_spec(cand: str) -> bool:
    r"""`re.fullmatch(r"[^:\s]+\.py:\w+", cand)` in string methods."""
    head, colon, factory = cand.partition(":")
    return bool(colon) and len(head) > 3 and head.endswith(".py") and not any(c.isspace() for c in head) \
        and bool(factory) and all(_is_word(c) for c in factory)


def detect_model(texts: list[str], known: set[str]) -> str | None:
    """The first model named on a command line that is a known torchvision model (or an existing
    `file.py:factory`); words that merely look like one (`-a all`, `--model big`) are ignored."""
    for text in texts:
        for line in text.splitlines():
            stripped = line.strip()
            if not stripped or stripped.startswith("#"):
                continue
            for k in range(len(_CANDIDATE_PATTERNS)):
                for value in _pattern_values(k, line):
                    cand = value.strip("\"'")
                    if cand in known:
                        return cand
                    lowered = cand.lower()
                    if lowered in known:
                        return lowered
                    if _is_file_spec(cand) and os.path.isfile(cand.split(":")[0]):
                        return cand
    return None


def script_command_lines(script: str) -> str:
    """The part of a script the shell runs (directives and comments are not command lines)."""
    return "\n".join(line for line in script.splitlines() if is_command_line(line))


def find_model(named: str | None, script: str | None, wrap: str | None) -> str | None:
    """The job's model: the one named (msub's option, an #MSCHED line, the environment), else one found
    on the script's command lines or in --wrap; None for a job msched knows nothing of. msub and the
    cli_filter plugin both ask here."""
    if named is not None:
        return named
    texts = [script_command_lines(script)] if script else []
    if wrap:
        texts.append(wrap)
    return detect_model(texts, known_models()) if any(texts) else None
