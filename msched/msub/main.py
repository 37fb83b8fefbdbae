"""`msub`: sbatch with msched in front of it.

    msub [--model SPEC] [--iterations N] [--batch-size B] [--pack | --no-pack] [--msched-dry-run] [sbatch options] [script [args]]

A researcher types `msub` wherever they typed `sbatch` (or the site installs it *as* `sbatch`): every
option and `#SBATCH` line keeps its meaning and reaches the real sbatch as written; output and exit
code are sbatch's own. msub only
- removes its own options (the script, `#MSCHED` lines included, goes to sbatch by its path, untouched),
- finds the model (--model, an `#MSCHED --model=... --iterations=... --batch-size=...` line, the
  MSCHED_MODEL/MSCHED_ITERATIONS/MSCHED_BATCH_SIZE environment, or the script's command lines),
  classifies it (msched.msub.directives, msched.msub.decide),
- puts the tag (msched.tag) at the start of the job's comment, the user's comment kept after it,
  when the whole fits Slurm's comment limit,
- for a GPU request without a GPU type, adds a `--constraint` naming the GPU types near the best for
  this job (the policy's submit-time choice), ANDed with the user's,
- records why in the tag's `why` field when it adds no constraint, or, in an untagged record, why a
  GPU job went untagged, so that its owner sees it later in `msched jobs`,
- resubmits without its additions when Slurm refuses them (msched.msub.spawn.REFUSALS), warning once.

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

import gc
import os
import sys

from msched.msub.decide import plan_tag_and_types
from msched.msub.directives import (
    env_settings,
    find_model,
    msched_directives,
    settings_from_words,
)
from msched.msub.sbatch_args import (
    NONE,
    REQUIRED,
    SbatchArgsError,
    effective_request,
    env_options,
    parse_command_line,
    parse_script_options,
)
from msched.msub.spawn import PROG, SLURM_COMMENT_MAX_BYTES, Fallback, Submission, run_sbatch, warn
from msched.util.text import one_line

MSUB_OPTIONS = {"model": REQUIRED, "iterations": REQUIRED, "batch-size": REQUIRED, "msched-dry-run": NONE,
                "pack": NONE, "no-pack": NONE}
PASS_THROUGH = {"help", "usage", "version"}          # answered by sbatch alone

MSUB_HELP = """
msched options (msub only; removed before sbatch sees the command line):
      --model=SPEC            model the job trains: a torchvision name or path/to/file.py:factory
      --iterations=N          training iterations (the job's work, for runtime estimates)
      --batch-size=B          per-GPU batch size
      --pack                  may share a GPU (gres/shard) with a job msched predicts it pairs well with
      --no-pack               never share a GPU, whatever the site's default for the partition
      --msched-dry-run        print the sbatch command (and its fallbacks) instead of submitting
  In the script: #MSCHED --model=resnet50 --iterations=20000 --batch-size=64 [--pack | --no-pack]
  In the environment: MSCHED_MODEL, MSCHED_ITERATIONS, MSCHED_BATCH_SIZE (options and #MSCHED lines win)
"""


class MsubUsageError(Exception):
    """A malformed msub-only option; sbatch never sees it."""


# --------------------------------------------------------------------------- the plan for one submission
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


# --------------------------------------------------------------------------- building sbatch's argv
def _insert_options(argv_words: list[str], at: int, extra: list[str]) -> list[str]:
    return argv_words[:at] + extra + argv_words[at:]


def build_submission(argv: list[str], stdin_reader=None, environ=None) -> tuple[Submission, list[str]]:
    """Decide what to run for msub's argv. Returns (submission, warnings). Raises MsubUsageError.

    The user's script is submitted by its path, untouched (`#MSCHED` lines are comments to the
    shell), so `scontrol show job` shows it as the job's Command; msched's additions are options
    placed before it. Every submission msched changed carries fallbacks down to the job exactly as
    typed, for the refusals that name what msched added (msched.msub.spawn.REFUSALS).
    """
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
    directive_pairs, _ = msched_directives(script) if script else ([], False)
    # precedence, lowest first: the environment, the script's #MSCHED lines, msub's options
    settings = settings_from_words(env_settings(environ) + directive_pairs + cli_pairs, dry_run=dry_run)
    warnings.extend(settings.problems)

    from msched.msub.decide import lever_options
    from msched.msub.gpu_request import gpu_request
    from msched.tag import parse_comment, short_why, untagged_record, with_tag

    user_comment = parse_comment(req.comment)[1]       # a copied old tag (or msub's reason) is replaced
    try:
        spec = find_model(settings.model, script, req.wrap)
        if spec is None:
            if gpu_request(req) is None:
                return plain, warnings                    # no model, no GPUs: nothing for msched to say
            # a GPU job msched cannot place: its owner can read why later (`msched jobs`)
            return _with_comment(plain, untagged_record("no model named"), user_comment, options_end,
                                 "submitted as typed"), warnings
        if config_problem:
            raise RuntimeError(config_problem)
        tag, types, _pinned = plan_tag_and_types(spec, settings, req, config, sbatch, warnings, script=script,
                                                 packing=True)
    except Exception as exc:  # noqa: BLE001 - msched's trouble never blocks a job
        reason = one_line(exc)
        warnings.append(f"{reason}; submitting as a plain sbatch job")
        return _with_comment(plain, untagged_record(reason), user_comment, options_end, "submitted as typed"), \
            warnings

    if tag.pack is not None:                          # a shard job (msched.msub.packing)
        from msched.msub.packing import pack_options
        steer = pack_options(req, config) + lever_options(req, types, config)
    else:
        steer = lever_options(req, types, config)      # --constraint, or --partition (config type_lever)
    if types and not steer:
        # the user's request cannot be extended: leave it alone
        tag = tag._replace(added="", why="the job's own request cannot take msched's GPU types")
    comment = with_tag(tag, user_comment)
    if len(comment.encode("utf-8", "surrogateescape")) > SLURM_COMMENT_MAX_BYTES:
        warnings.append(f"the job's comment leaves no room for msched's tag (Slurm keeps at most "
                        f"{SLURM_COMMENT_MAX_BYTES} bytes); submitting as a plain sbatch job")
        return plain, warnings
    at = _option_insert_point(kept, options_end)
    extra = [f"--comment={comment}", *steer]
    fallbacks = []
    if steer:
        refused = "sbatch refused the shard request" if tag.pack is not None else \
            "sbatch refused msched's GPU-type constraint"
        no_types = tag._replace(added="", pack=None, why=short_why(refused))
        fallbacks.append(Fallback(_insert_options([sbatch, *kept], at + 1, [f"--comment={with_tag(no_types, user_comment)}"]),
                                  ("constraint",), "submitted without msched's GPU-type constraint"))
    fallbacks.append(Fallback([sbatch, *kept], ("constraint", "comment"), "submitted as typed"))
    return plain._replace(argv=_insert_options([sbatch, *kept], at + 1, extra), added=tuple(extra), managed=True,
                          fallbacks=tuple(fallbacks)), warnings


def _with_comment(plain: Submission, head: str, user_comment: str, options_end: int, warning: str) -> Submission:
    """PLAIN with msub's untagged record (HEAD) at the start of the job's comment, when it fits, and the
    submission as typed for a refusal."""
    comment = f"{head} {user_comment}" if user_comment else head
    if len(comment.encode("utf-8", "surrogateescape")) > SLURM_COMMENT_MAX_BYTES:
        return plain
    at = _option_insert_point(plain.argv[1:], options_end) + 1
    return plain._replace(argv=_insert_options(plain.argv, at, [f"--comment={comment}"]),
                          added=(f"--comment={comment}",),
                          fallbacks=(Fallback(list(plain.argv), ("comment",), warning),))


def _option_insert_point(words: list[str], options_end: int) -> int:
    """Before the script, and before a `--` that ends the options."""
    if options_end > 0 and options_end <= len(words) and words[options_end - 1] == "--":
        return options_end - 1
    return min(options_end, len(words))


def dry_run_report(sub: Submission) -> str:
    import shlex

    lines = ["sbatch command: " + shlex.join(sub.argv)]
    if sub.stdin_data is not None:
        lines.append("(script read from standard input, submitted unchanged)")
    for f in sub.fallbacks:
        lines.append(f"if sbatch refuses the {' or '.join(f.drops)} msched added: " + shlex.join(f.argv))
    return "\n".join(lines)


def main(argv: list[str] | None = None, *, allow_exec: bool = True) -> int:
    if allow_exec:
        # msub's own process (see _end_process): it lives for one decision and leaves no garbage cycles
        # worth collecting; the collector's passes over what the decision allocates (the shipped tables,
        # the modules it imports) cost ~1 ms of CPU (bench_msub; BENCHMARKS, predict14)
        gc.disable()
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
    rc = run_sbatch(sub, allow_exec=allow_exec)
    if allow_exec:
        _end_process(rc)
    return rc


def _end_process(rc: int) -> None:
    """End msub's own process with sbatch's exit code RC, now that sbatch has finished, without the
    interpreter's teardown: freeing ~90 modules' objects costs ~5 ms of CPU (bench_msub, BENCHMARKS
    predict13), ~5% of msub's budget on an idle machine and several times that in wall time on a loaded
    one. `allow_exec` already means "this is msub's own process" (sbatch may replace it). Nothing is
    skipped that msub needs: its output is flushed here (sbatch wrote its own directly), and the fast
    way is taken only when no exit hook is registered and no thread was ever started (neither happens
    on msub's path); otherwise, and when a flush fails, the interpreter ends as usual and says so."""
    import atexit

    if "threading" in sys.modules or getattr(atexit, "_ncallbacks", lambda: 1)() != 0:
        return
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):
        return
    os._exit(rc)


if __name__ == "__main__":
    sys.exit(main())
