"""What a submission says about msched: its `#MSCHED` lines and msub's options, and the model its
command lines name.

msub's own settings (`--model`, `--iterations`, `--batch-size`) come from msub's options and from
`#MSCHED` lines; when neither names the model, it is looked for in the script's command lines and in
`--wrap` (`--arch resnet50`, `-a vgg16`, `torchvision.models.densenet121`, `path/file.py:factory`).
Light path: no dataclasses, pathlib or typing (see msched.util.record).
"""

from __future__ import annotations

import os
import re

from msched.msub.sbatch_args import is_command_line, split_directive
from msched.util.record import record

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



_CANDIDATE_PATTERNS = (
    # a `path/file.py:factory` first: the plain word pattern alone would stop before `:factory`
    re.compile(r"(?:^|\s)--(?:arch|model|model[-_]name|arch[-_]name|network|net)(?:=|\s+)[\"']?"
               r"([\w.\-/~]+\.py:\w+|[\w.\-/]+)"),
    re.compile(r"(?:^|\s)-a(?:=|\s+)?[\"']?([A-Za-z_][\w.]*)"),
    re.compile(r"torchvision\.models\.([A-Za-z_]\w*)"),
    re.compile(r"(?<![\w.])models\.([A-Za-z_]\w*)\s*\("),
    re.compile(r"get_model\(\s*[\"']([A-Za-z_]\w*)[\"']"),
)


def detect_model(texts: list[str], known: set[str]) -> str | None:
    """The first model named on a command line that is a known torchvision model (or an existing
    `file.py:factory`); words that merely look like one (`-a all`, `--model big`) are ignored."""
    for text in texts:
        for line in text.splitlines():
            stripped = line.strip()
            if not stripped or stripped.startswith("#"):
                continue
            for pat in _CANDIDATE_PATTERNS:
                for m in pat.finditer(line):
                    cand = m.group(1).strip("\"'")
                    if cand in known:
                        return cand
                    lowered = cand.lower()
                    if lowered in known:
                        return lowered
                    if re.fullmatch(r"[^:\s]+\.py:\w+", cand) and os.path.isfile(cand.split(":")[0]):
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
