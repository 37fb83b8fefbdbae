"""sbatch's command line and `#SBATCH` directives, read the way sbatch 22.05 reads them.

msub must know what the user asked sbatch for (GPUs, constraint, comment, time, ...) without changing
a byte of what reaches sbatch, so this module only *reads*: every option keeps the argv span it came
from, and msub adds its own options next to the user's instead of rewriting them.

The rules below were checked against the real sbatch 22.05.8 (every long option probed with
`sbatch --opt` / `sbatch --opt=x`, every short letter with `sbatch -X`):
- GNU getopt_long in "+" mode: options stop at the first non-option word (the script) or `--`; what
  follows is the script's own argv. Long options may be abbreviated to any unambiguous prefix
  (`--part=gpu`), an exact name wins over longer ones (`--gpus` vs `--gpus-per-node`).
- A required argument is `--opt=value` or the next word (whatever it looks like); an optional one only
  `--opt=value` (long) or `-kvalue` (short). Short flags cluster (`-HQ`), `-pgpu` attaches the value.
- `#SBATCH` lines count only until the first line that is not blank and not a comment; each line is
  split into words like sbatch's own `_get_argument`: whitespace separates, '…' and "…" quote,
  backslash escapes, an unquoted `#` ends the line.
- Precedence: the command line over `SBATCH_*` environment variables over `#SBATCH` lines; for the
  same option the last occurrence wins.
"""

from __future__ import annotations

import os

from msched.util.record import record

MappingProxyType = type(type.__dict__)   # types.MappingProxyType, as types.py defines it
TYPE_CHECKING = False       # typing.TYPE_CHECKING without importing typing
if TYPE_CHECKING:           # for annotations only: importing collections.abc costs msub ~1 ms (predict14)
    from collections.abc import Iterable, Mapping, Sequence

NONE, REQUIRED, OPTIONAL = "none", "required", "optional"

# Every long option of sbatch 22.05.8 and whether it takes an argument (probed, see module doc).
LONG_OPTIONS: dict[str, str] = {
    "account": REQUIRED, "acctg-freq": REQUIRED, "array": REQUIRED, "batch": REQUIRED, "bb": REQUIRED,
    "bbf": REQUIRED, "begin": REQUIRED, "chdir": REQUIRED, "cluster": REQUIRED,
    "cluster-constraint": REQUIRED, "clusters": REQUIRED, "comment": REQUIRED, "constraint": REQUIRED,
    "container": REQUIRED, "context": REQUIRED, "contiguous": NONE, "core-spec": REQUIRED,
    "cores-per-socket": REQUIRED, "cpu-freq": REQUIRED, "cpus-per-gpu": REQUIRED,
    "cpus-per-task": REQUIRED, "deadline": REQUIRED, "delay-boot": REQUIRED, "dependency": REQUIRED,
    "distribution": REQUIRED, "error": REQUIRED, "exclude": REQUIRED, "exclusive": OPTIONAL,
    "export": REQUIRED, "export-file": REQUIRED, "extra-node-info": REQUIRED, "get-user-env": OPTIONAL,
    "gid": REQUIRED, "gpu-bind": REQUIRED, "gpu-freq": REQUIRED, "gpus": REQUIRED,
    "gpus-per-node": REQUIRED, "gpus-per-socket": REQUIRED, "gpus-per-task": REQUIRED, "gres": REQUIRED,
    "gres-flags": REQUIRED, "help": NONE, "hint": REQUIRED, "hold": NONE, "ignore-pbs": NONE,
    "input": REQUIRED, "job-name": REQUIRED, "kill-on-invalid-dep": REQUIRED, "licenses": REQUIRED,
    "mail-type": REQUIRED, "mail-user": REQUIRED, "mcs-label": REQUIRED, "mem": REQUIRED,
    "mem-bind": REQUIRED, "mem-per-cpu": REQUIRED, "mem-per-gpu": REQUIRED, "mincpus": REQUIRED,
    "network": REQUIRED, "nice": OPTIONAL, "no-kill": OPTIONAL, "no-requeue": NONE, "nodefile": REQUIRED,
    "nodelist": REQUIRED, "nodes": REQUIRED, "ntasks": REQUIRED, "ntasks-per-core": REQUIRED,
    "ntasks-per-gpu": REQUIRED, "ntasks-per-node": REQUIRED, "ntasks-per-socket": REQUIRED,
    "ntasks-per-tres": REQUIRED, "open-mode": REQUIRED, "output": REQUIRED, "overcommit": NONE,
    "oversubscribe": NONE, "parsable": NONE, "partition": REQUIRED, "power": REQUIRED, "prefer": REQUIRED,
    "priority": REQUIRED, "profile": REQUIRED, "propagate": OPTIONAL, "qos": REQUIRED, "quiet": NONE,
    "reboot": NONE, "requeue": NONE, "reservation": REQUIRED, "signal": REQUIRED,
    "sockets-per-node": REQUIRED, "spread-job": NONE, "switches": REQUIRED, "tasks-per-node": REQUIRED,
    "test-only": NONE, "thread-spec": REQUIRED, "threads-per-core": REQUIRED, "time": REQUIRED,
    "time-min": REQUIRED, "tmp": REQUIRED, "uid": REQUIRED, "usage": NONE, "use-min-nodes": NONE,
    "verbose": NONE, "version": NONE, "wait": NONE, "wait-all-nodes": REQUIRED, "wckey": REQUIRED,
    "wrap": REQUIRED,
}

# Short letters -> long name (sbatch 22.05.8; -k takes an optional attached argument).
SHORT_OPTIONS: dict[str, str] = {
    "a": "array", "A": "account", "b": "begin", "B": "extra-node-info", "c": "cpus-per-task",
    "C": "constraint", "d": "dependency", "D": "chdir", "e": "error", "F": "nodefile", "G": "gpus",
    "h": "help", "H": "hold", "i": "input", "J": "job-name", "k": "no-kill", "L": "licenses",
    "m": "distribution", "M": "clusters", "n": "ntasks", "N": "nodes", "o": "output", "O": "overcommit",
    "p": "partition", "q": "qos", "Q": "quiet", "s": "oversubscribe", "S": "core-spec", "t": "time",
    "v": "verbose", "V": "version", "w": "nodelist", "W": "wait", "x": "exclude",
}

# sbatch reads these input environment variables (man sbatch, INPUT ENVIRONMENT VARIABLES); only the
# ones msched looks at are listed. They override #SBATCH lines; the command line overrides them.
ENV_OPTIONS: dict[str, str] = {
    "SBATCH_ARRAY_INX": "array", "SBATCH_CONSTRAINT": "constraint", "SBATCH_GPUS": "gpus",
    "SBATCH_GPUS_PER_NODE": "gpus-per-node", "SBATCH_GPUS_PER_TASK": "gpus-per-task",
    "SBATCH_GRES": "gres", "SBATCH_JOB_NAME": "job-name", "SBATCH_PARTITION": "partition",
    "SBATCH_TIMELIMIT": "time", "SBATCH_WAIT": "wait",
}

DIRECTIVE = "#SBATCH"


class SbatchArgsError(ValueError):
    """sbatch itself would reject this command line (unknown option, missing argument)."""


@record
class Option:
    """One option occurrence: its canonical long name, value, and where it came from.

    `start`/`end` index the argv words it used (end exclusive), so a caller can drop or keep it exactly.
    """

    name: str
    value: str | None
    source: str = "cli"          # "cli", "env" or "script"
    start: int = 0
    end: int = 0


@record
class CommandLine:
    """An argv split the way sbatch splits it."""

    argv: tuple[str, ...]
    options: tuple[Option, ...]
    options_end: int                 # index of the first word after the options (`--` included in options)
    script_index: int | None         # index of the script word, None when there is none (stdin / --wrap)
    unknown: tuple[str, ...] = ()    # words sbatch would reject (left for sbatch to report)

    @property
    def script(self) -> str | None:
        return None if self.script_index is None else self.argv[self.script_index]

    @property
    def script_args(self) -> tuple[str, ...]:
        return () if self.script_index is None else self.argv[self.script_index + 1:]

    @property
    def option_words(self) -> tuple[str, ...]:
        return self.argv[: self.options_end]

    @property
    def is_hetjob(self) -> bool:
        """sbatch's `opts : opts script` heterogeneous-job form (msched leaves such jobs alone)."""
        return self.script == ":"


def _match_long(word: str, table: Mapping[str, str], exact_only: Iterable[str] = ()) -> str | None:
    """getopt_long's lookup: an exact name, else the one name this is an unambiguous prefix of."""
    if word in table:
        return word
    exact_only = set(exact_only)
    hits = [n for n in table if n.startswith(word) and n not in exact_only]
    return hits[0] if len(hits) == 1 else None


def parse_command_line(
    argv: Sequence[str], extra: Mapping[str, str] | None = None, *, source: str = "cli",
    stop_at_positional: bool = True,
) -> CommandLine:
    """Split argv into sbatch options, the script word and the script's own arguments.

    `extra` adds long options (name -> NONE/REQUIRED/OPTIONAL) that are matched by exact name only
    (msub's own `--model` etc.), so they never steal an abbreviation from sbatch. Unknown options are
    collected in `unknown` rather than raised: msub hands them to sbatch, which reports them its way.
    Raises SbatchArgsError only for a required argument missing at the end of argv.
    """
    argv = tuple(argv)
    table = dict(LONG_OPTIONS)
    extra = dict(extra or {})
    table.update(extra)
    options: list[Option] = []
    unknown: list[str] = []
    i = 0
    script_index: int | None = None
    while i < len(argv):
        word = argv[i]
        if word == "--":
            i += 1
            if i < len(argv):
                script_index = i
            break
        if word.startswith("--"):
            body = word[2:]
            name, eq, value = body.partition("=")
            full = _match_long(name, table, exact_only=extra)
            if full is None:
                unknown.append(word)
                i += 1
                continue
            kind = table[full]
            if eq:
                if kind == NONE:
                    unknown.append(word)
                    i += 1
                    continue
                options.append(Option(full, value, source, i, i + 1))
                i += 1
            elif kind == REQUIRED:
                if i + 1 >= len(argv):
                    raise SbatchArgsError(f"option '--{full}' requires an argument")
                options.append(Option(full, argv[i + 1], source, i, i + 2))
                i += 2
            else:
                options.append(Option(full, None, source, i, i + 1))
                i += 1
            continue
        if word.startswith("-") and len(word) > 1:
            start = i
            j = 1
            consumed_next = False
            while j < len(word):
                letter = word[j]
                full = SHORT_OPTIONS.get(letter)
                if full is None:
                    unknown.append(f"-{letter}")
                    j += 1
                    continue
                kind = LONG_OPTIONS[full]
                rest = word[j + 1:]
                if kind == NONE:
                    options.append(Option(full, None, source, start, i + 1))
                    j += 1
                    continue
                if rest:
                    options.append(Option(full, rest, source, start, i + 1))
                elif kind == REQUIRED:
                    if i + 1 >= len(argv):
                        raise SbatchArgsError(f"option requires an argument -- '{letter}'")
                    options.append(Option(full, argv[i + 1], source, start, i + 2))
                    consumed_next = True
                else:
                    options.append(Option(full, None, source, start, i + 1))
                break
            i += 2 if consumed_next else 1
            continue
        # first non-option word: the script ("+" mode)
        if stop_at_positional:
            script_index = i
            break
        i += 1
    options_end = script_index if script_index is not None else len(argv)
    return CommandLine(argv, tuple(options), options_end, script_index, tuple(unknown))


# --------------------------------------------------------------------------- #SBATCH directives
def split_directive(text: str) -> list[str]:
    """Words of one `#SBATCH` line's remainder, as sbatch's own reader splits them.

    Whitespace ends a word unless quoted (it is tested before a pending backslash, so `a\\ b` is two
    words, as in sbatch); a backslash keeps the next character literally (`\\"`); an unquoted `#`
    ends the line.
    """
    words: list[str] = []
    i, n = 0, len(text)
    while i < n:
        while i < n and text[i].isspace():
            i += 1
        if i >= n:
            break
        buf: list[str] = []
        quote: str | None = None
        escape = False
        comment = False
        while i < n and (quote or not text[i].isspace()):
            ch = text[i]
            i += 1
            if escape:
                escape = False
                buf.append(ch)
            elif ch == "\\":
                escape = True
            elif quote:
                if ch == quote:
                    quote = None
                else:
                    buf.append(ch)
            elif ch in "\"'":
                quote = ch
            elif ch == "#":
                comment = True
                break
            else:
                buf.append(ch)
        if buf:
            words.append("".join(buf))
        if comment:
            break
    return words


def is_command_line(line: str) -> bool:
    """sbatch stops reading directives at the first line with something before any `#`."""
    before = line.split("#", 1)[0]
    return bool(before.strip())


def directive_words(script: str) -> list[str]:
    """All words of the script's `#SBATCH` lines, in order, up to the first command line."""
    words: list[str] = []
    for line in script.splitlines():
        if line.startswith(DIRECTIVE):
            words.extend(split_directive(line[len(DIRECTIVE):]))
        elif is_command_line(line):
            break
    return words


def parse_script_options(script: str) -> tuple[Option, ...]:
    """Options of the `#SBATCH` lines (sbatch rejects the script if a word there is no option)."""
    words = directive_words(script)
    try:
        return parse_command_line(words, source="script").options
    except SbatchArgsError:
        return ()


def invalid_directive(script: str) -> str | None:
    """The first `#SBATCH` word sbatch would reject ("Invalid directive found in batch script")."""
    words = directive_words(script)
    try:
        cmd = parse_command_line(words, source="script")
    except SbatchArgsError as exc:
        return str(exc)
    if cmd.script is not None:
        return cmd.script
    return cmd.unknown[0] if cmd.unknown else None


def env_options(environ: Mapping[str, str] | None = None) -> tuple[Option, ...]:
    env = os.environ if environ is None else environ
    return tuple(Option(name, env[var], "env") for var, name in ENV_OPTIONS.items() if var in env and env[var] != "")


# --------------------------------------------------------------------------- the effective request
_TIME_UNLIMITED = {"unlimited", "infinite", "-1"}


def parse_time_limit(text: str) -> float | None:
    """Slurm time syntax -> seconds: M, M:S, H:M:S, D-H, D-H:M, D-H:M:S; None for unlimited/invalid."""
    s = text.strip().lower()
    if not s or s in _TIME_UNLIMITED:
        return None
    # `(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?` in string methods (compiling it cost msub ~0.1 ms;
    # str.isdecimal is exactly `re`'s `\d`)
    head, dash, rest = s.partition("-")
    days = head if dash else None
    parts = (rest if dash else s).split(":")
    if len(parts) > 3 or (days is not None and not days.isdecimal()) or not all(p.isdecimal() for p in parts):
        return None
    a, b, c = (*parts, None, None)[:3]
    if days is not None:
        # D-H, D-H:M, D-H:M:S
        h, mi, se = int(a), int(b or 0), int(c or 0)
        return float(((int(days) * 24 + h) * 60 + mi) * 60 + se)
    if c is not None:
        return float((int(a) * 60 + int(b)) * 60 + int(c))
    if b is not None:
        return float(int(a) * 60 + int(b))
    return float(int(a) * 60)


def _first_int(text: str | None) -> int | None:
    if not text:
        return None
    digits = text.lstrip()              # `re.match(r"\s*(\d+)", text)` in string methods
    end = 0
    while end < len(digits) and digits[end].isdecimal():
        end += 1
    return int(digits[:end]) if end else None


@record
class SbatchRequest:
    """What sbatch will be asked for, after precedence (command line > environment > #SBATCH)."""

    values: Mapping[str, str | None] = MappingProxyType({})          # last value per long name
    present: frozenset[str] = frozenset()                             # options given at all

    def get(self, name: str) -> str | None:
        return self.values.get(name)

    def has(self, name: str) -> bool:
        return name in self.present

    @property
    def partition(self) -> str | None:
        return self.get("partition")

    @property
    def job_name(self) -> str | None:
        return self.get("job-name")

    @property
    def comment(self) -> str | None:
        return self.get("comment")

    @property
    def constraint(self) -> str | None:
        return self.get("constraint")

    @property
    def wrap(self) -> str | None:
        return self.get("wrap")

    @property
    def parsable(self) -> bool:
        return self.has("parsable")

    @property
    def array(self) -> str | None:
        return self.get("array")

    @property
    def time_limit_s(self) -> float | None:
        t = self.get("time")
        return parse_time_limit(t) if t else None

    @property
    def nodes(self) -> int:
        return _first_int(self.get("nodes")) or 1

    @property
    def ntasks(self) -> int | None:
        return _first_int(self.get("ntasks"))

    @property
    def ntasks_per_node(self) -> int | None:
        return _first_int(self.get("ntasks-per-node") or self.get("tasks-per-node"))


def effective_request(
    cli: Iterable[Option], script: Iterable[Option] = (), env: Iterable[Option] = (),
) -> SbatchRequest:
    values: dict[str, str | None] = {}
    present: set[str] = set()
    for group in (script, env, cli):          # later groups override earlier ones
        for opt in group:
            values[opt.name] = opt.value
            present.add(opt.name)
    return SbatchRequest(values, frozenset(present))
