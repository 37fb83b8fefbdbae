"""The cli_filter's fast entry point: `python -m msched.plugin.filter KIND < options.json > answer`.

cli_filter.lua runs this once per sbatch / srun / salloc (as the submitting user, under a hard 2 s
timeout) with Slurm's own JSON of the job's options (`slurm.json_cli_options`) on standard input. It
takes msched's one submit decision (msub's: classify the model, choose the GPU types, build the tag)
and answers on standard output with a few lines the Lua side can read without a JSON parser:

    msched-filter 1
    comment <value>          the comment to submit (tag + the user's own comment), if it changes
    constraint <value>       the constraint to submit (the user's AND msched's types), if it changes
    warning <text>           one line for the user's terminal (stderr), if something was left out
    end

Values are percent-encoded (`%`, control bytes and bytes >= 0x80 as %XX) so each stays on one line.
The `end` line is the only success signal the Lua side trusts: Lua 5.1 cannot read a child's exit
status from io.popen, and a process killed by the timeout never writes it. Anything msched's own that
fails becomes one `warning` and the job goes in unchanged; this program never writes elsewhere
(the user's stdout belongs to sbatch: `--parsable`, "Submitted batch job N").

Why not msub itself: msub owns sbatch's argv, re-execs sbatch and reads the script from stdin; here
Slurm has already parsed everything (`#SBATCH` lines, SBATCH_* variables, the command line) and hands
over the effective options, so only the decision is needed. It stays on msub's light path
(tests/test_plugin.py pins that no heavy module loads).
"""

from __future__ import annotations

import os
import sys

# Slurm 22.05 reads an unset time limit as this (SLURM-NOTES): the same as no time limit.
UNSET_TIMES = frozenset({"2982616-04:14:00", "unlimited", "infinite", ""})
COMMENT_MAX = 1024            # slurmctld refuses a longer comment (job_mgr.c, _test_strlen)
KINDS = ("sbatch", "srun", "salloc")
ENV_SETTINGS = (("MSCHED_MODEL", "model"), ("MSCHED_ITERATIONS", "iterations"), ("MSCHED_BATCH_SIZE", "batch-size"))


def encode_value(text: str) -> str:
    """One line: `%`, control bytes, space and non-ASCII bytes percent-encoded (decoded in Lua)."""
    out = []
    for byte in text.encode("utf-8", "surrogateescape"):
        if byte <= 0x20 or byte >= 0x7F or byte == 0x25:
            out.append(f"%{byte:02X}")
        else:
            out.append(chr(byte))
    return "".join(out)


def request_from_options(options: dict):
    """The effective request (msched.msub.sbatch_args.SbatchRequest) from Slurm's option JSON: keys
    are Slurm's long option names, already merged from the command line, SBATCH_* and #SBATCH."""
    from msched.msub.sbatch_args import LONG_OPTIONS, SbatchRequest

    values: dict[str, str | None] = {}
    for key, value in options.items():
        if key not in LONG_OPTIONS or not isinstance(value, str):
            continue
        if key == "time" and value.strip().lower() in UNSET_TIMES:
            continue
        values[key] = value
    return SbatchRequest(values, frozenset(values))


def _read_script(kind: str, options: dict) -> str | None:
    """sbatch's script text, when Slurm names a file (argv[0]); None for stdin, --wrap, srun, salloc."""
    argv = options.get("argv")
    if kind != "sbatch" or not isinstance(argv, list) or not argv or not isinstance(argv[0], str):
        return None
    try:
        with open(argv[0], "rb") as fh:
            return fh.read(1 << 20).decode("utf-8", "surrogateescape")
    except OSError:
        return None


def decide(kind: str, options: dict, environ=None) -> tuple[dict[str, str], list[str]]:
    """({"comment": ..., "constraint": ...} to change, warnings) for one submission. Never raises for
    msched's own trouble: it becomes a warning and no change."""
    from msched.msub.decide import plan_tag_and_types
    from msched.msub.directives import find_model, msched_directives, settings_from_words
    from msched.msub.main import _load_config
    from msched.util.text import one_line

    environ = os.environ if environ is None else environ
    req = request_from_options(options)
    script = _read_script(kind, options)
    env_pairs = [(key, environ[var]) for var, key in ENV_SETTINGS if environ.get(var)]
    directive_pairs = msched_directives(script)[0] if script else []
    settings = settings_from_words(env_pairs + directive_pairs)
    warnings = list(settings.problems)
    spec = find_model(settings.model, script, req.wrap)
    if spec is None:
        return {}, warnings                           # not a training job msched knows: untouched
    try:
        config, config_problem = _load_config()
        if config_problem:
            raise RuntimeError(config_problem)
        tag, types, _pinned = plan_tag_and_types(spec, settings, req, config, str(config.sbatch))
    except Exception as exc:  # noqa: BLE001 - msched's trouble never blocks a job
        warnings.append(f"{one_line(exc)}; submitting untagged")
        return {}, warnings

    from msched.msub.gpu_request import add_types
    from msched.tag import parse_comment, with_tag

    changes: dict[str, str] = {}
    if types and not _cluster_types_known(config):
        # msub retries without its constraint when the cluster rejects a feature name; a filter cannot,
        # so it names GPU types only when it knows the cluster's (published by the reorderer, or sinfo)
        types, tag = (), tag._replace(added="")
    new_constraint = add_types(req.constraint, types, multi_node=req.nodes > 1) if types else None
    if types and new_constraint is None:
        tag = tag._replace(added="")      # the user's expression cannot be extended: leave it alone
    comment = with_tag(tag, parse_comment(req.comment)[1])   # a copied old tag is replaced, not stacked
    if len((req.comment or "").encode("utf-8", "surrogateescape")) > COMMENT_MAX:
        return {}, warnings                # slurmctld refuses the user's own comment, in its own words
    if len(comment.encode("utf-8", "surrogateescape")) > COMMENT_MAX:
        warnings.append(f"the comment with msched's tag would be longer than Slurm's {COMMENT_MAX} "
                        "characters; submitting untagged")
        return {}, warnings
    changes["comment"] = comment
    if new_constraint:
        changes["constraint"] = new_constraint
    return changes, warnings


def _cluster_types_known(config) -> bool:
    from msched.msub.cluster_view import cluster_nodes, read_free_time

    return bool(read_free_time(config)[0] or any(n[1] for n in cluster_nodes(config, str(config.sbatch), set())))


class DeadlinePassed(BaseException):
    """msched's decision ran past DEADLINE_S; its child processes were killed. A BaseException, so no
    handler meant for msched's own errors swallows it on the way out."""


DEADLINE_S = 1.6              # below the Lua side's hard 2 s, so the answer still says why


def _kill_children() -> None:
    """SIGKILL every child process (and its process group: the profiler runs a user's model file in a
    session of its own), so nothing of this submission outlives it. Linux's /proc lists children."""
    import signal

    me = os.getpid()
    try:
        tasks = os.listdir(f"/proc/{me}/task")
    except OSError:
        return
    for tid in tasks:
        try:
            with open(f"/proc/{me}/task/{tid}/children", encoding="ascii") as fh:
                pids = [int(p) for p in fh.read().split()]
        except (OSError, ValueError):
            continue
        for pid in pids:
            for kill in (os.killpg, os.kill):
                try:
                    kill(pid, signal.SIGKILL)
                except OSError:
                    pass


def _on_deadline(signum, frame):  # noqa: ANN001 - a signal handler's signature
    _kill_children()
    raise DeadlinePassed(f"msched's decision took longer than {DEADLINE_S:g} s")


def answer_lines(changes: dict[str, str], warnings: list[str]) -> str:
    lines = ["msched-filter 1"]
    lines += [f"{key} {encode_value(value)}" for key, value in changes.items()]
    lines += [f"warning {encode_value(w)}" for w in warnings[:1]]     # one line on the user's terminal
    lines.append("end")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    kind = argv[0] if argv else "sbatch"
    import signal

    signal.signal(signal.SIGALRM, _on_deadline)
    signal.setitimer(signal.ITIMER_REAL, DEADLINE_S)
    try:
        import json

        options = json.loads(sys.stdin.buffer.read() or b"{}")
        if not isinstance(options, dict):
            raise ValueError("the options are not a JSON object")
        if kind not in KINDS:
            raise ValueError(f"unknown client {kind!r}; valid: {', '.join(KINDS)}")
        changes, warnings = decide(kind, options)
    except DeadlinePassed as exc:
        changes, warnings = {}, [f"{exc}; submitting untagged"]
    except Exception as exc:  # noqa: BLE001 - a bad input is one warning, never a traceback
        changes, warnings = {}, [f"cannot read the job's options: {exc}; submitting untagged"]
    signal.setitimer(signal.ITIMER_REAL, 0)
    sys.stdout.write(answer_lines(changes, warnings))
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
