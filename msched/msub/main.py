"""`msub`: sbatch with msched in front of it.

    msub [--model SPEC] [--iterations N] [--batch-size B] [--msched-dry-run] [sbatch options] [script [args]]

A researcher types `msub` wherever they typed `sbatch` (or the site installs it *as* `sbatch`): every
option and `#SBATCH` line keeps its meaning and reaches the real sbatch as written; output and exit
code are sbatch's own. msub only
- removes its own options and `#MSCHED --model=... --iterations=... --batch-size=...` lines,
- finds the model (--model, an #MSCHED line, or the script's command lines), classifies it,
- puts the tag (msched.tag) at the start of the job's comment, the user's comment kept after it,
- for a GPU request without a GPU type, adds a `--constraint` naming the GPU types near the best for
  this job that its nodes can hold (the one submit decision, `msched.policy.choice.decide_submit`, which
  the simulator replays too), ANDed with the user's.

Why it is built this way:
- msub never opens the database and never talks to the reorderer: a submission cannot be lost to a
  locked database, and users need no write access to it. Slurm carries the tag to the reorderer.
- msched's own trouble never blocks a job: any failure (unknown model, profile error, missing table,
  bad config) is one `msub: warning:` line and the job goes in exactly as sbatch would have taken it.
- msub's options are added *after* the user's (sbatch takes the last occurrence), so the user's argv
  reaches sbatch word for word; the real sbatch comes from the site config as an absolute path, never
  from PATH, so msub can itself be installed as `sbatch`.
- The hot path (a torchvision model) imports no torch, numpy, scikit-learn, SQLAlchemy or rich, and
  none of msched's planner: only the modules that `tests/test_msub_light_path.py` lists, which use
  records instead of dataclasses and os.path instead of pathlib (`msched.util.record` says why). Only a
  user's own model file is profiled, in a subprocess of this (the user's own) process.
"""

from __future__ import annotations

import os
import re
import sys

from msched.msub.sbatch_args import (
    NONE,
    REQUIRED,
    SbatchArgsError,
    SbatchRequest,
    effective_request,
    env_options,
    is_command_line,
    parse_command_line,
    parse_script_options,
    split_directive,
)
from msched.util.record import record

PROG = "msub"
MSUB_OPTIONS = {"model": REQUIRED, "iterations": REQUIRED, "batch-size": REQUIRED, "msched-dry-run": NONE}
MSCHED_DIRECTIVE = "#MSCHED"
PASS_THROUGH = {"help", "usage", "version"}          # answered by sbatch alone
INVALID_FEATURE = b"Invalid feature specification"

MSUB_HELP = """
msched options (msub only; removed before sbatch sees the command line):
      --model=SPEC            model the job trains: a torchvision name or path/to/file.py:factory
      --iterations=N          training iterations (the job's work, for runtime estimates)
      --batch-size=B          per-GPU batch size
      --msched-dry-run        print the sbatch command (and script changes) instead of submitting
  In the script: #MSCHED --model=resnet50 --iterations=20000 --batch-size=64
"""


class MsubUsageError(Exception):
    """A malformed msub-only option; sbatch never sees it."""


def warn(message: str) -> None:
    print(f"{PROG}: warning: {message}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- msched's own settings
@record
class MschedSettings:
    model: str | None = None
    iterations: int | None = None
    batch_size: int | None = None
    dry_run: bool = False
    problems: tuple[str, ...] = ()


_MSCHED_KEYS = {"model": "model", "iterations": "iterations", "iters": "iterations", "batch-size": "batch_size",
                "batch_size": "batch_size"}


def _positive_int(key: str, raw: str | None, problems: list[str]) -> int | None:
    try:
        value = int(str(raw))
    except ValueError:
        problems.append(f"--{key} must be a positive integer, not {raw!r}; ignored")
        return None
    if value <= 0:
        problems.append(f"--{key} must be a positive integer, not {raw!r}; ignored")
        return None
    return value


def settings_from_words(pairs: list[tuple[str, str | None]], dry_run: bool = False) -> MschedSettings:
    """Settings from (key, value) pairs, later pairs winning; bad values become warnings."""
    problems: list[str] = []
    values: dict[str, object] = {}
    for key, raw in pairs:
        field_name = _MSCHED_KEYS.get(key)
        if field_name is None:
            problems.append(f"unknown #MSCHED option --{key}; valid: --model, --iterations, --batch-size")
            continue
        if raw is None or raw == "":
            problems.append(f"--{key} needs a value")
            continue
        if field_name == "model":
            values["model"] = raw
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
            if not eq and i + 1 < len(words) and not words[i + 1].startswith("-"):
                value = words[i + 1]
                i += 1
            pairs.append((key, value if (eq or value) else None))
            i += 1
    return pairs, found


def strip_msched_lines(script: str) -> str:
    """The script without its `#MSCHED` lines (everything else byte for byte)."""
    lines = script.splitlines(keepends=True)
    return "".join(line for line in lines if not line.startswith(MSCHED_DIRECTIVE))


# --------------------------------------------------------------------------- model detection
_CANDIDATE_PATTERNS = (
    re.compile(r"(?:^|\s)--(?:arch|model|model[-_]name|arch[-_]name|network|net)(?:=|\s+)[\"']?([\w.\-/]+(?:\.py:\w+)?)"),
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


# --------------------------------------------------------------------------- the plan for one submission
@record
class Submission:
    """What msub will run: sbatch's argv and, where needed, the script bytes to feed on stdin."""

    argv: list[str]
    stdin_data: bytes | None = None        # None = inherit stdin (sbatch reads the script file itself)
    added: tuple[str, ...] = ()
    original_script: str | None = None
    edited_script: str | None = None
    managed: bool = False
    fallback_argv: list[str] | None = None  # the same submission without msched's constraint
    dry_run: bool = False
    help: bool = False


def _sbatch_path(config) -> str:
    """The real sbatch from the config: absolute, and not msub itself (msub may be installed as sbatch)."""
    path = str(config.sbatch)
    if not os.path.isabs(path):
        raise MsubUsageError(f"config key sbatch must be an absolute path, not {path!r}")
    me = os.path.realpath(sys.argv[0]) if sys.argv and sys.argv[0] else None
    try:
        same = me is not None and os.path.realpath(path) == me
        if not same:
            with open(path, "rb") as fh:          # another copy of msub's launcher would loop forever
                same = fh.read(2) == b"#!" and b"msched.msub.main" in fh.read(1024)
    except OSError:
        same = False                              # a missing sbatch: running it reports the error
    if same:
        raise MsubUsageError(f"config key sbatch ({path}) points at msub itself; set it to the real sbatch")
    return path


def _load_config():
    """The site config; a broken one still yields the real sbatch's path where it can be read."""
    from msched.config import Config, ConfigError, load_config
    try:
        return load_config(cached=True), None
    except ConfigError as exc:
        fallback = Config()
        try:
            import tomllib

            from msched.config import config_path
            with open(config_path(), encoding="utf-8") as fh:
                data = tomllib.loads(fh.read())
            if isinstance(data.get("sbatch"), str):
                fallback = Config(sbatch=data["sbatch"])
        except Exception:  # noqa: BLE001 - the config is already known to be broken
            pass
        return fallback, str(exc)


def known_models() -> set[str]:
    """Names msub accepts when it finds a model on a command line: the shipped torchvision table's."""
    from msched.models.shipped import model_names

    try:
        return set(model_names())
    except Exception:  # noqa: BLE001 - no shipped table: nothing is recognised, the job stays plain
        return set()


def reference_rows(path, models):  # noqa: ANN001, ANN201 - a PerfTable
    """The performance table restricted to a few models: msub needs only the rows that may estimate
    this job, and filtering lines before parsing keeps a large site table off the submission's
    critical path."""
    import csv

    from msched.estimate.perf_table import PerfTable, PerfTableError, _parse_rows

    prefixes = tuple(p for m in dict.fromkeys(m for m in models if m) for p in (f"{m},", f'"{m}",'))
    try:
        with open(path, newline="") as fh:
            header = fh.readline()
            lines = [header] + [ln for ln in fh if ln.startswith(prefixes)]
    except OSError as exc:
        raise PerfTableError(f"cannot read performance table {path}: {exc.strerror}") from exc
    return PerfTable(_parse_rows(csv.DictReader(lines), str(path)))


def plan_tag_and_types(spec: str, settings: MschedSettings, req: SbatchRequest, config, sbatch: str):
    """Classify the model and make the submit decision: (JobTag, types to add, pinned types).

    The decision itself is `msched.policy.choice.decide_submit`, the one the simulator replays.
    Every exception raised here means "submit as a plain job with a warning".
    """
    from msched import __version__
    from msched.estimate.estimators import TagEstimator
    from msched.models.classify import classify
    from msched.msub.cluster_view import cluster_nodes, queue_load, read_free_time
    from msched.msub.gpu_request import gpu_request, pinned_types
    from msched.policy.choice import ClusterView, SubmitJob, decide_submit, reference_fields
    from msched.policy.feasibility import node_sizes
    from msched.tag import JobTag

    if ".py:" not in spec and spec not in known_models():
        # not a shipped torchvision name: say so now rather than start torch to find out
        import difflib
        close = difflib.get_close_matches(spec, sorted(known_models()), n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else "; use a torchvision name or path/to/file.py:factory"
        raise ValueError(f"unknown model {spec!r}{hint}")
    cls = classify(spec, config=config)
    fields = reference_fields(cls)
    perf = reference_rows(config.performance, [spec, fields["pref"], fields["ref"]])
    gpus = gpu_request(req, config.canonical_gpu_type)
    free_at, fresh = read_free_time(config)
    table_types = set(perf.gpu_types()) | set(config.gpu_aliases.values()) | set(free_at)
    nodes = cluster_nodes(config, sbatch, table_types) if gpus is not None else []
    known_types = table_types | {n[1] for n in nodes}
    pinned = pinned_types(req, gpus, known_types, config.canonical_gpu_type)
    tag = JobTag(model=spec, iters=settings.iterations, bs=settings.batch_size, pinned="|".join(pinned),
                 ver=__version__, **fields)
    if gpus is None or pinned:
        return tag, (), pinned
    sizes = None
    if nodes:      # the nodes the user's own constraint and partitions reach (it names no GPU type here)
        sizes = node_sizes([n[1:] for n in nodes], constraint=req.constraint or "",
                           partitions=(req.partition or "").split(","))
    free_gpus = pending = None
    if nodes and not fresh:
        free_gpus, pending = queue_load(config, sbatch, nodes)
    view = ClusterView(node_gpus=sizes, free_at=free_at or None, fresh=fresh, free_gpus=free_gpus,
                       pending_gpus=pending)
    per_node_fixed = any(o in ("gres", "gpus-per-node", "gpus-per-socket") for o in gpus.options)
    job = SubmitJob(num_gpus=gpus.total, gpus_per_node=gpus.per_node if per_node_fixed else None,
                    num_nodes=max(1, req.nodes), time_limit_s=req.time_limit_s)
    decision = decide_submit(tag, job, view, TagEstimator(perf), slack=config.constraint_slack)
    return decision.tag, decision.types, pinned


# --------------------------------------------------------------------------- building sbatch's argv
def _insert_options(argv_words: list[str], at: int, extra: list[str]) -> list[str]:
    return argv_words[:at] + extra + argv_words[at:]


def build_submission(argv: list[str], stdin_reader=None, environ=None) -> tuple[Submission, list[str]]:
    """Decide what to run for msub's argv. Returns (submission, warnings). Raises MsubUsageError."""
    warnings: list[str] = []
    config, config_problem = _load_config()
    sbatch = _sbatch_path(config)
    try:
        cmd = parse_command_line(argv, MSUB_OPTIONS)
    except SbatchArgsError as exc:
        if any(w in ("--model", "--iterations", "--batch-size") for w in argv[-1:]):
            raise MsubUsageError(str(exc)) from None
        return Submission([sbatch, *argv]), warnings       # let sbatch say what is wrong

    ours = [o for o in cmd.options if o.name in MSUB_OPTIONS]
    dropped = {i for o in ours for i in range(o.start, o.end)}
    kept = [w for i, w in enumerate(argv) if i not in dropped]
    options_end = cmd.options_end - sum(1 for i in dropped if i < cmd.options_end)
    sb_options = [o for o in cmd.options if o.name not in MSUB_OPTIONS]
    dry_run = any(o.name == "msched-dry-run" for o in ours)
    cli_pairs = [(o.name, o.value) for o in ours if o.name != "msched-dry-run"]
    plain = Submission([sbatch, *kept], dry_run=dry_run)

    if any(o.name in PASS_THROUGH for o in sb_options) or cmd.is_hetjob:
        return plain._replace(help=any(o.name == "help" for o in sb_options)), warnings

    # the script: a file, standard input, or none (--wrap)
    script_bytes: bytes | None = None
    req_cli_wrap = next((o.value for o in reversed(sb_options) if o.name == "wrap"), None)
    if cmd.script is not None:
        try:
            with open(cmd.script, "rb") as fh:
                script_bytes = fh.read()
        except OSError:
            return plain, warnings                       # sbatch reports the missing script its way
    elif req_cli_wrap is None:
        reader = stdin_reader or (lambda: sys.stdin.buffer.read())
        script_bytes = reader()
        plain = plain._replace(stdin_data=script_bytes)
    script = script_bytes.decode("utf-8", "surrogateescape") if script_bytes is not None else None

    req = effective_request(sb_options, parse_script_options(script) if script else (), env_options(environ))
    directive_pairs, has_directives = msched_directives(script) if script else ([], False)
    settings = settings_from_words(directive_pairs + cli_pairs, dry_run=dry_run)
    warnings.extend(settings.problems)

    submission = plain._replace(original_script=script)
    try:
        spec = settings.model
        if spec is None:
            texts = [script_command_lines(script)] if script else []
            if req.wrap:
                texts.append(req.wrap)
            if any(texts):
                spec = detect_model(texts, known_models())
        if spec is None:
            return submission, warnings                   # unmanaged: untouched
        if config_problem:
            raise RuntimeError(config_problem)
        tag, types, _pinned = plan_tag_and_types(spec, settings, req, config, sbatch)
    except Exception as exc:  # noqa: BLE001 - msched's trouble never blocks a job
        warnings.append(f"{_one_line(exc)}; submitting as a plain sbatch job")
        return submission, warnings

    from msched.msub.gpu_request import add_types
    from msched.tag import parse_comment, with_tag

    new_constraint = add_types(req.constraint, types, multi_node=req.nodes > 1) if types else None
    if types and new_constraint is None:
        tag = tag._replace(added="")      # the user's expression cannot be extended: leave it alone
    user_comment = parse_comment(req.comment)[1]       # a copied old tag is replaced, not stacked
    comment = f"--comment={with_tag(tag, user_comment)}"
    constraint = [f"--constraint={new_constraint}"] if new_constraint else []
    name = []
    new_argv = kept
    stdin_data = submission.stdin_data
    edited = None
    if has_directives and script is not None:
        edited = strip_msched_lines(script)
        stdin_data = edited.encode("utf-8", "surrogateescape")
        if cmd.script is not None:
            # feed the edited script on stdin; keep the script's arguments and its default job name
            if req.job_name is None:
                name = [f"--job-name={os.path.basename(cmd.script)}"]
            rest = kept[options_end + 1:]
            new_argv = kept[:options_end] + (["/dev/stdin", *rest] if rest else [])
    at = _option_insert_point(new_argv, options_end)
    extra = [comment, *constraint, *name]
    fallback = None
    if constraint:
        plain_comment = f"--comment={with_tag(tag._replace(added=''), user_comment)}"
        fallback = [sbatch, *_insert_options(new_argv, at, [plain_comment, *name])]
    return Submission(
        argv=[sbatch, *_insert_options(new_argv, at, extra)], stdin_data=stdin_data, added=tuple(extra),
        original_script=script, edited_script=edited, managed=True, fallback_argv=fallback, dry_run=dry_run,
    ), warnings


def _option_insert_point(words: list[str], options_end: int) -> int:
    """Before the script, and before a `--` that ends the options."""
    if options_end > 0 and options_end <= len(words) and words[options_end - 1] == "--":
        return options_end - 1
    return min(options_end, len(words))


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


# --------------------------------------------------------------------------- running sbatch
def run_sbatch(sub: Submission, *, allow_exec: bool = True) -> int:
    """Run the real sbatch; its stdout, stderr and exit code become msub's.

    Without script bytes to feed, msub *becomes* sbatch (exec): signals, `--wait` and the terminal
    behave exactly as with sbatch. Output is captured only when msched added a constraint, to fall back
    without it if the cluster rejects the feature names (then sbatch's output is replayed verbatim).
    """
    argv = sub.argv
    capture = sub.fallback_argv is not None and not any(w in ("--wait", "-W") for w in argv)
    sys.stdout.flush()
    sys.stderr.flush()
    if allow_exec and sub.stdin_data is None and not capture:
        try:
            os.execv(argv[0], argv)
        except OSError as exc:
            print(f"{PROG}: error: cannot run sbatch {argv[0]}: {exc.strerror}", file=sys.stderr)
            return 127
    try:
        status, out, err = spawn_and_wait(argv, sub.stdin_data, capture)
    except OSError as exc:
        print(f"{PROG}: error: cannot run sbatch {argv[0]}: {exc.strerror}", file=sys.stderr)
        return 127
    if capture:
        if status != 0 and INVALID_FEATURE in err and b"Submitted batch job" not in out:
            # a GPU type msched named is no node feature here: the job goes in without msched's constraint
            warn("the cluster rejected msched's GPU-type constraint; submitting without it")
            return run_sbatch(sub._replace(argv=sub.fallback_argv, fallback_argv=None), allow_exec=allow_exec)
        sys.stdout.buffer.write(out)
        sys.stdout.flush()
        sys.stderr.buffer.write(err)
        sys.stderr.flush()
    return status


def spawn_and_wait(argv: list[str], stdin_data: bytes | None, capture: bool) -> tuple[int, bytes, bytes]:
    """Run argv to its end: (exit status as a shell reports it, stdout, stderr; b"" when not captured).

    `os.posix_spawn` rather than `subprocess`: importing subprocess (threading, selectors, signal) costs
    ~10 ms of msub's budget. Captured output goes to anonymous in-memory files rather than pipes: sbatch
    prints a line or two, and a file, unlike a pipe, never fills up while the script is being written
    to its standard input. A SIGINT reaches sbatch too (same process group); msub keeps waiting, so
    sbatch decides what an interrupt means, as it would alone.
    """
    own: list[int] = []                        # descriptors to close here, whatever happens
    actions: list[tuple] = []
    try:
        if stdin_data is not None:
            read_end, write_end = os.pipe()
            own += [read_end, write_end]
            actions.append((os.POSIX_SPAWN_DUP2, read_end, 0))
        outputs = [_scratch_file(), _scratch_file()] if capture else []
        own += outputs
        if capture:
            actions += [(os.POSIX_SPAWN_DUP2, outputs[0], 1), (os.POSIX_SPAWN_DUP2, outputs[1], 2)]
        pid = os.posix_spawn(argv[0], argv, os.environ, file_actions=actions)
        if stdin_data is not None:
            os.close(read_end)
            own.remove(read_end)
            try:
                _write_all(write_end, stdin_data)
            except BrokenPipeError:
                pass                           # sbatch exited without reading; its status says why
            os.close(write_end)
            own.remove(write_end)
        while True:
            try:
                _, wait_status = os.waitpid(pid, 0)
                break
            except KeyboardInterrupt:
                continue
        code = os.waitstatus_to_exitcode(wait_status)
        out, err = [_read_from_start(fd) for fd in outputs] if capture else [b"", b""]
        return (code if code >= 0 else 128 - code), out, err
    finally:
        for fd in own:
            os.close(fd)


def _scratch_file() -> int:
    if hasattr(os, "memfd_create"):
        return os.memfd_create("msub-sbatch-output")
    import tempfile

    fd, path = tempfile.mkstemp(prefix="msub-")
    os.unlink(path)
    return fd


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _read_from_start(fd: int) -> bytes:
    os.lseek(fd, 0, os.SEEK_SET)
    chunks = []
    while chunk := os.read(fd, 1 << 16):
        chunks.append(chunk)
    return b"".join(chunks)


def dry_run_report(sub: Submission) -> str:
    import shlex

    lines = ["sbatch command: " + shlex.join(sub.argv)]
    if sub.edited_script is not None and sub.original_script is not None:
        import difflib
        diff = difflib.unified_diff(
            sub.original_script.splitlines(keepends=True), sub.edited_script.splitlines(keepends=True),
            "script", "script (as submitted)",
        )
        lines.append("".join(diff).rstrip("\n"))
    elif sub.stdin_data is not None:
        lines.append("(script read from standard input, submitted unchanged)")
    return "\n".join(lines)


def main(argv: list[str] | None = None, *, allow_exec: bool = True) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        sub, warnings = build_submission(argv)
    except MsubUsageError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 1
    for w in warnings:
        warn(w)
    if sub.dry_run:
        print(dry_run_report(sub))
        return 0
    if sub.help:
        sub = sub._replace(stdin_data=b"")       # run (not exec) sbatch, then add msub's own options
        rc = run_sbatch(sub, allow_exec=False)
        print(MSUB_HELP.rstrip())
        return rc
    return run_sbatch(sub, allow_exec=allow_exec)


if __name__ == "__main__":
    sys.exit(main())
