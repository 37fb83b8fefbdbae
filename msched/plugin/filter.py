"""The cli_filter's fast entry point: `python -m msched.plugin.filter KIND < options.json > answer`.

cli_filter.lua runs this once per sbatch / srun / salloc (as the submitting user, under a hard 2 s
timeout) with Slurm's own JSON of the job's options (`slurm.json_cli_options`) on standard input. It
takes msched's one submit decision (msub's: classify the model, choose the GPU types, build the tag)
and answers on standard output with a few lines the Lua side can read without a JSON parser:

    msched-filter 1
    comment <value>          the comment to submit (tag + the user's own comment), if it changes
    constraint <value>       the constraint to submit (the user's AND msched's types), if it changes
    partition <value>        the partitions of msched's types (a site with config type_lever=partition)
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

from msched.msub.spawn import SLURM_COMMENT_MAX_BYTES as COMMENT_MAX  # slurmctld refuses longer comments

# Slurm 22.05 reads an unset time limit as this (SLURM-NOTES): the same as no time limit.
UNSET_TIMES = frozenset({"2982616-04:14:00", "unlimited", "infinite", ""})
KINDS = ("sbatch", "srun", "salloc")


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
    """({"comment": ..., "constraint": ...} to change, warnings) for one submission, as msub decides it
    (msched.msub.main.build_submission): the tag and msched's GPU types for a job whose model is found;
    for a GPU job msched cannot place, msub's record of why (`msched jobs` shows it to the owner).
    Never raises for msched's own trouble: it becomes a warning and a job submitted as typed."""
    from msched.msub.decide import lever_options, plan_tag_and_types
    from msched.msub.directives import env_settings, find_model, msched_directives, settings_from_words
    from msched.msub.main import _load_config
    from msched.tag import parse_comment, short_why, with_tag
    from msched.util.text import one_line

    environ = os.environ if environ is None else environ
    req = request_from_options(options)
    if len((req.comment or "").encode("utf-8", "surrogateescape")) > COMMENT_MAX:
        return {}, []                      # slurmctld refuses the user's own comment, in its own words
    script = _read_script(kind, options)
    directive_pairs = msched_directives(script)[0] if script else []
    # precedence, lowest first: the environment, then the script's #MSCHED lines (msub's order)
    settings = settings_from_words(env_settings(environ) + directive_pairs)
    warnings = list(settings.problems)
    user_comment = parse_comment(req.comment)[1]       # a copied old tag (or msub's reason) is replaced

    spec = find_model(settings.model, script, req.wrap)
    if spec is None:
        return untagged_changes(req, "no model named"), warnings
    try:
        config, config_problem = _load_config()
        if config_problem:
            raise RuntimeError(config_problem)
        tag, types, _pinned = plan_tag_and_types(spec, settings, req, config, str(config.sbatch), warnings,
                                                 script=script)
    except Exception as exc:  # noqa: BLE001 - msched's trouble never blocks a job
        reason = one_line(exc)
        warnings.append(f"{reason}; submitting untagged")
        return untagged_changes(req, reason, gpu_jobs_only=False), warnings   # a named model: say why, as msub does

    known = _types_the_cluster_has(types, config)
    steer = lever_options(req, known, config)           # --constraint, or --partition (config type_lever)
    if known != types and not steer:
        tag = tag._replace(added="", why=short_why("msched's GPU types are not node features of this cluster"))
    elif types and not steer:
        tag = tag._replace(added="", why="the job's own request cannot take msched's GPU types")
    comment = with_tag(tag, user_comment)
    if not fits(comment):
        warnings.append(f"the job's comment leaves no room for msched's tag (Slurm keeps at most {COMMENT_MAX} "
                        "bytes); submitting untagged")
        return {}, warnings
    changes = {"comment": comment}
    for option in steer:
        name, _, value = option[2:].partition("=")
        changes[name] = value
    return changes, warnings


def untagged_changes(req, why: str, gpu_jobs_only: bool = True) -> dict[str, str]:  # noqa: ANN001 - an SbatchRequest
    """For a job msched leaves untagged (a GPU job, unless `gpu_jobs_only` is False: msub records why a
    named model failed for any job): msub's record of why at the start of its comment (the user's own
    comment kept after it, an old tag or record replaced), when it fits; else no change."""
    from msched.msub.gpu_request import gpu_request
    from msched.tag import parse_comment, untagged_record

    if (gpu_jobs_only and gpu_request(req) is None) or not fits(req.comment or ""):
        return {}
    comment = with_user(untagged_record(why), parse_comment(req.comment)[1])
    return {"comment": comment} if fits(comment) else {}


def with_user(head: str, user_comment: str) -> str:
    return f"{head} {user_comment}" if user_comment else head


def fits(comment: str) -> bool:
    return len(comment.encode("utf-8", "surrogateescape")) <= COMMENT_MAX


def _types_the_cluster_has(types: tuple[str, ...], config) -> tuple[str, ...]:
    """The types among `types` that the cluster has: msub retries without its constraint when slurmctld
    rejects a feature name, a filter cannot, so a type is named only when the reorderer published it
    or a node carries it as a feature (the cached `sinfo` of msched.msub.cluster_view)."""
    if not types or config.type_lever != "feature":
        return types
    from msched.msub.cluster_view import cluster_nodes, read_free_time

    published = set(read_free_time(config)[0])
    features = {config.canonical_gpu_type(f) for node in cluster_nodes(config, str(config.sbatch), set(types))
                for f in node[3]}
    return tuple(t for t in types if t in published or t in features)


class DeadlinePassed(BaseException):
    """msched's decision ran past its deadline; its child processes were killed. A BaseException, so no
    handler meant for msched's own errors swallows it on the way out."""


DEADLINE_SHARE = 0.8          # of the Lua side's hard timeout, so the answer still says why
_deadline_s = 1.6             # for the default 2 s; main() reads the Lua side's timeout from its argv


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
    raise DeadlinePassed(f"msched's decision took longer than {_deadline_s:g} s")


def answer_lines(changes: dict[str, str], warnings: list[str]) -> str:
    lines = ["msched-filter 1"]
    lines += [f"{key} {encode_value(value)}" for key, value in changes.items()]
    lines += [f"warning {encode_value(w)}" for w in warnings[:1]]     # one line on the user's terminal
    lines.append("end")
    return "\n".join(lines) + "\n"


def respond(kind: str, raw: bytes, timeout_s: float) -> str:
    """The answer (answer_lines) for one submission: Slurm's option JSON `raw` from client `kind`,
    decided within DEADLINE_SHARE of the Lua side's `timeout_s`. Shared by the one-shot entry point
    (main) and the resident decider (msched.plugin.resident), so both decide the same way."""
    global _deadline_s
    _deadline_s = round(max(0.5, float(timeout_s) * DEADLINE_SHARE), 2)
    import signal

    signal.signal(signal.SIGALRM, _on_deadline)
    signal.setitimer(signal.ITIMER_REAL, _deadline_s)
    options: dict = {}
    try:
        import json

        options = json.loads(raw or b"{}")
        if not isinstance(options, dict):
            raise ValueError("the options are not a JSON object")
        if kind not in KINDS:
            raise ValueError(f"unknown client {kind!r}; valid: {', '.join(KINDS)}")
        changes, warnings = decide(kind, options)
    except DeadlinePassed as exc:
        changes, warnings = {}, [f"{exc}; submitting untagged"]
        try:
            changes = untagged_changes(request_from_options(options), str(exc))
        except Exception:  # noqa: BLE001 - the options could not be read: nothing to record
            pass
    except Exception as exc:  # noqa: BLE001 - a bad input is one warning, never a traceback
        changes, warnings = {}, [f"cannot read the job's options: {exc}; submitting untagged"]
    signal.setitimer(signal.ITIMER_REAL, 0)
    return answer_lines(changes, warnings)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    kind = argv[0] if argv else "sbatch"
    try:
        timeout_s = float(argv[1])                      # the Lua side's timeout
    except (IndexError, ValueError):
        timeout_s = _deadline_s / DEADLINE_SHARE
    sys.stdout.write(respond(kind, sys.stdin.buffer.read(), timeout_s))
    sys.stdout.flush()
    if len(argv) == 4:           # SOCKET GENERATION: stay on as the user's decider (msched.plugin.resident)
        from msched.plugin.resident import detach_and_serve

        detach_and_serve(argv[2], argv[3], timeout_s)
    return 0


if __name__ == "__main__":
    sys.exit(main())
