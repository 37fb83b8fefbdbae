"""One `msched reorder` round in this process, as cron runs it, taken apart: where its time goes and what
Slurm's own commands cost beside it (issue 21, fifth pass).

    python bench/round_phases.py STATE_DIR NAME [BUDGET]      # prints one JSON line
    ROUND_PHASES_PROFILE=FILE python bench/round_phases.py ...  # and a CPU-time cProfile of the round in FILE
    python bench/round_phases.py --stacks FILE...   # py-spy's collapsed stacks (bench_reorder --profile) by phase

Run it in a fresh process with `python -X importtime` (bench_reorder.py --own-process does): the import
time is then Python's own measure (the sum of every module's self time on stderr), whatever the round
imports and when (a light round never imports the planning core).

Phases (wall seconds, measured by wrapping the functions a round calls; `round_s` is the whole round):
- digest: the light round's `squeue -O` + sinfo and their hashing (`CliClient.queue_digest`);
- squeue: `squeue --json` read and parsed (`CliClient._queue`), sinfo (`nodes`), finished jobs;
- snapshot: `build_snapshot`; planner: `policy.plan`; settle: `msched.rounds.settle.settle`;
- writes: `update_jobs` (one squeue and the scontrol batches);
- store: the database's share (`RoundOutcome.db_seconds`: checks, ingest, record, prune); `store: ingest`, the light
  store's ingestion alone.
Beside them: this process's CPU (user + system) and peak RSS, and the Slurm commands' (every child
process the round waited for: squeue, sinfo, scontrol): their CPU and the largest one's peak RSS
(`getrusage(RUSAGE_CHILDREN)`), with the CPU of the children of each phase.
"""

from __future__ import annotations

import functools
import json
import os
import resource
import sys
import time
from pathlib import Path

_T0 = time.perf_counter()
_CPU0 = time.process_time()


def _children() -> tuple[float, float]:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime, ru.ru_maxrss / 1024


class Phases:
    """Wall seconds and children's CPU seconds per phase, accumulated over the calls wrapped."""

    def __init__(self) -> None:
        self.wall: dict[str, float] = {}
        self.cpu: dict[str, float] = {}             # this process's CPU (user + system) in the phase
        self.child_cpu: dict[str, float] = {}
        self.calls: dict[str, int] = {}

    def wrap(self, owner: object, attr: str, phase: str) -> None:
        fn = getattr(owner, attr)

        @functools.wraps(fn)
        def timed(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
            c0 = _children()[0]
            t0, p0 = time.perf_counter(), time.process_time()
            try:
                return fn(*args, **kwargs)
            finally:
                self.wall[phase] = self.wall.get(phase, 0.0) + time.perf_counter() - t0
                self.cpu[phase] = self.cpu.get(phase, 0.0) + time.process_time() - p0
                self.child_cpu[phase] = self.child_cpu.get(phase, 0.0) + _children()[0] - c0
                self.calls[phase] = self.calls.get(phase, 0) + 1

        setattr(owner, attr, timed)


class Capture:
    """With ROUND_PHASES_CAPTURE=DIR: each planned round's planner and settle calls pickled into DIR
    (`call-<ns>.pkl`): the policy as it was before its `plan` (its class and attributes, pickled then:
    plan fills its caches), and
    after settle one pickle of the snapshot, the policy's plan, the incumbent, settle's keywords and what
    settle returned (one pickle, so that the plan and settle share the snapshot's objects as in the
    round). bench/replay_rounds.py replays them in one process, timing each tree's planner and settle on
    the same inputs and checking that they give the same plans."""

    def __init__(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.folder = folder
        self.policy: bytes | None = None

    def wrap_plan(self, policy: object) -> None:
        import pickle

        fn = policy.plan

        def plan(snapshot):  # noqa: ANN001, ANN202
            state = {k: v for k, v in vars(policy).items() if k != "plan"}     # not the wrappers
            self.policy = pickle.dumps((type(policy), state), protocol=pickle.HIGHEST_PROTOCOL)
            return fn(snapshot)

        policy.plan = plan

    def wrap(self, module: object) -> None:
        import pickle

        fn = module.settle

        def settle(snapshot, plan, incumbent, **how):  # noqa: ANN001, ANN003, ANN202
            out = fn(snapshot, plan, incumbent, **how)
            if self.policy is not None:
                call = {"policy": self.policy, "snapshot": snapshot, "plan": plan, "incumbent": incumbent,
                        "how": how, "held": out[0], "report": out[1]}
                path = self.folder / f"call-{time.time_ns()}.pkl"
                path.write_bytes(pickle.dumps(call, protocol=pickle.HIGHEST_PROTOCOL))
            return out

        module.settle = settle


def _wrap_planning_core(phases: Phases) -> None:
    """Wrap the planning core's phases once the round imports it (a light round never does): a hook on
    the import of msched.rounds.core, so that this helper does not import it itself (and, with
    ROUND_PHASES_CAPTURE set, capture its calls: `Capture`)."""
    import importlib.machinery

    folder = os.environ.get("ROUND_PHASES_CAPTURE")
    capture = Capture(Path(folder)) if folder else None

    class Hook:     # a meta path finder (not importlib.abc's: importing it costs ~50 ms, importlib.resources)
        def find_spec(self, name, path, target=None):  # noqa: ANN001, ANN201
            if name != "msched.rounds.core":
                return None
            sys.meta_path.remove(self)
            spec = importlib.machinery.PathFinder.find_spec(name, path)
            loader = spec.loader
            exec_module = loader.exec_module

            def exec_and_wrap(module):  # noqa: ANN001, ANN202
                exec_module(module)
                if capture is not None:
                    capture.wrap(module)
                phases.wrap(module, "build_snapshot", "snapshot")
                phases.wrap(module, "settle", "settle")
                for attr in ("diff_plan", "deferred", "packing_round", "within_budget", "incumbent_after"):
                    phases.wrap(module, attr, "diff")
                plan_of = {}

                def run_round(client, policy, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
                    if id(policy) not in plan_of:
                        if capture is not None:
                            capture.wrap_plan(policy)
                        phases.wrap(policy, "plan", "planner")     # the instance: its own plan only
                        plan_of[id(policy)] = True
                    return original(client, policy, *args, **kwargs)

                original = module.run_round
                module.run_round = run_round

            loader.exec_module = exec_and_wrap
            return spec

    sys.meta_path.insert(0, Hook())


def measure(state: Path, name: str, write_budget: int | None = None, tight: bool = True) -> dict:
    """One round of the bench's site `name` under `state` (bench_reorder.site), taken apart."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    import msched.cli

    if hasattr(msched.cli, "one_round_process"):     # as `msched reorder` runs its one round in this tree
        msched.cli.one_round_process()
    phases = Phases()
    _wrap_planning_core(phases)
    from msched.commands.reorder_run import _round_store
    from msched.rounds.reorder import Reorderer
    from msched.slurm.cli import CliClient

    import_cpu = time.process_time() - _CPU0
    import_wall = time.perf_counter() - _T0
    import msched.slurm.cli.client as cli_module

    if hasattr(cli_module, "digest_lines"):     # the digest's lines, made when a round records its digest
        phases.wrap(cli_module, "digest_lines", "digest lines")
    for attr, phase in (("queue_digest", "digest"), ("_queue", "squeue"), ("nodes", "sinfo"),
                        ("finished_jobs", "finished"), ("update_jobs", "writes"), ("scheduler", "scheduler"),
                        ("read_digest", "read digest")):
        if hasattr(CliClient, attr):
            phases.wrap(CliClient, attr, phase)
    # the store's part (`store` below is its wall, RoundOutcome.db_seconds), in CPU: opening SQLAlchemy,
    # the incumbent, recording (completions included) and pruning; the state key is hashed beside it
    for attr, phase in (("_full_store", "store: open"), ("_incumbent", "store: incumbent"),
                        ("_record", "store: record"), ("_prune", "store: prune"), ("_state_key", "state key"),
                        ("_light_round", "light check")):
        if hasattr(Reorderer, attr):
            phases.wrap(Reorderer, attr, phase)
    from msched.store.light import LightStore

    phases.wrap(LightStore, "ingest", "store: ingest")      # the new jobs' rows (light store: event rounds)
    cfg = _site(state, name, write_budget)._replace(tight_queue=tight)
    store = _round_store(cfg)           # as `msched reorder` opens it: the light view where it can
    w0, c0 = time.perf_counter(), time.process_time()
    client = CliClient(cfg)
    profile_to = os.environ.get("ROUND_PHASES_PROFILE")
    if profile_to:          # a CPU-time profile of the round (cProfile's timer: this process's CPU)
        import cProfile

        prof = cProfile.Profile(time.process_time)
        out = prof.runcall(Reorderer(cfg, client, store, publish=False).round)
        prof.dump_stats(profile_to)
    else:
        out = Reorderer(cfg, client, store, publish=False).round()
    round_s, round_cpu = time.perf_counter() - w0, time.process_time() - c0
    store.dispose()
    r = out.result
    m: dict = {"round_s": round_s, "round_cpu_s": round_cpu, "unchanged": r is None, "light": out.light,
               "queue_read": client.last_read, "read_because": getattr(out, "read_because", ""), "sqlalchemy_loaded": "sqlalchemy" in sys.modules,
               "setup_wall_s": import_wall, "setup_cpu_s": import_cpu}
    if r is None:
        m.update(pending=out.pending, update_calls=0, plan_s=0.0, moved=0, kept=0, held_back=0)
    else:
        st = r.settle
        m.update(pending=len(r.snapshot.pending), update_calls=r.update_calls, plan_s=r.plan_seconds,
                 est_makespan_s=r.plan.est_makespan_end - r.time, moved=st.moved, kept=st.kept,
                 held_back=st.held_back, buys=st.buys(), replanned_head=getattr(st, "head", None))
    phases.wall["store"] = out.db_seconds
    ru = resource.getrusage(resource.RUSAGE_SELF)
    child_cpu, child_rss = _children()
    m.update(cpu_s=ru.ru_utime + ru.ru_stime, peak_rss_mb=_own_peak_mb(ru.ru_maxrss / 1024),
             peak_rss_rusage_mb=ru.ru_maxrss / 1024, slurm_cpu_s=child_cpu,
             slurm_peak_rss_mb=child_rss, phases={k: round(v, 4) for k, v in phases.wall.items()},
             phase_cpu={k: round(v, 4) for k, v in phases.cpu.items()},
             phase_slurm_cpu={k: round(v, 4) for k, v in phases.child_cpu.items()}, phase_calls=phases.calls,
             modules=len(sys.modules), msched_dir=str(Path(sys.modules["msched"].__file__).parent.parent),
             planning_core_loaded=any(k.startswith(("msched.policy", "msched.rounds.core")) for k in sys.modules))
    return m


def _own_peak_mb(fallback: float) -> float:
    """This process's own peak RSS: VmHWM (the high-water mark of its memory since its exec). Not
    getrusage's ru_maxrss: Linux carries that over from the parent at fork, so a round started by
    bench_reorder.py (itself ~200 MB after submitting 10,000 jobs) reported the parent's peak (a light
    round showed 139 MB; ninth pass)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except (OSError, ValueError, IndexError):
        pass
    return fallback


def _site(state: Path, name: str, write_budget: int | None):  # noqa: ANN202 - bench_reorder's site config
    from msched.config import DATA_DIR, Config

    settings = {} if write_budget is None else {"write_budget": write_budget}
    return Config(state_dir=state / name, performance=str(Path(DATA_DIR) / "gpu_performance.csv"),
                  cluster_name=f"bench-{name}", backend="cli", **settings)


def import_seconds(stderr: str) -> float:
    """The total of `-X importtime`'s self times (microseconds per module) on `stderr`, in seconds."""
    total = 0
    for line in stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            head = line.split("|")[0].removeprefix("import time:").strip()
            if head.isdigit():
                total += int(head)
    return total / 1e6


def read_once(how: str) -> dict:
    """One queue read (`CliClient._queue`, tight or --json) in this process: its wall and CPU, squeue's
    CPU and peak RSS (this process's only child), this process's peak RSS, and a digest of the jobs."""
    import hashlib

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from msched.config import Config
    from msched.slurm.cli import CliClient

    client = CliClient(Config(backend="cli", tight_queue=how == "tight"))
    client._node_types = {n.name: n.gpu_type for n in client.nodes()}
    c_before = _children()[0]
    w0, c0 = time.perf_counter(), time.process_time()
    jobs = client._queue()
    wall, cpu = time.perf_counter() - w0, time.process_time() - c0
    child_cpu, child_rss = _children()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    if client.last_read == "tight":       # the bytes squeue printed (read again, after the measure)
        from msched.slurm.cli.tight import tight_format

        size = len(client._raw(["squeue", "-h", "-t", "all", "-O", tight_format()], client._env()).stdout)
    else:
        size = len(client._run_bytes(["squeue", "--json"]))
    return {"read": client.last_read, "jobs": len(jobs), "wall_s": wall, "cpu_s": cpu,
            "slurm_cpu_s": child_cpu - c_before, "slurm_peak_rss_mb": child_rss,
            "peak_rss_mb": peak, "bytes": size,
            "digest": hashlib.sha256(repr(jobs).encode()).hexdigest()}


# py-spy's collapsed stacks (bench_reorder --profile) summed by phase: a sample counts for the first
# (outermost) of these functions on its stack, else for "imports" when the stack is importing, else "other"
STACK_PHASES: tuple[tuple[str, str], ...] = (
    ("queue_digest (", "digest"), ("scheduler (", "scheduler"), ("_tight_queue (", "squeue"),
    ("parse_squeue (", "squeue"), ("finished_jobs (", "finished"), ("nodes (", "sinfo"),
    ("build_snapshot (", "snapshot"), ("plan (", "planner"), ("settle (", "settle"),
    ("update_jobs (", "writes"), ("check_integrity (", "store"), ("_full_store (", "store"),
    ("ingest_jobs (", "store"), ("_incumbent (", "store"), ("_record (", "store"), ("_prune (", "store"),
    ("_state_key (", "state key"), ("diff_plan (", "diff"), ("deferred (", "diff"),
    ("packing_round (", "packing"), ("incumbent_after (", "diff"), ("_find_and_load (", "imports"),
)


def stacks_by_phase(path: Path, top: int = 25) -> dict:
    """{"phases": {phase: samples}, "self": [(function, samples)]} of a py-spy raw (collapsed) file."""
    phases: dict[str, int] = {}
    own: dict[str, int] = {}
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        n = int(count)
        total += n
        frames = stack.split(";")
        # py-spy names a method Class.method: match the function's own name
        names = [f.split(" (", 1)[0].rsplit(".", 1)[-1] + " (" for f in frames]
        phase = next((ph for f in names for key, ph in STACK_PHASES if f == key), "other")
        phases[phase] = phases.get(phase, 0) + n
        leaf = frames[-1] if frames else "?"
        own[leaf] = own.get(leaf, 0) + n
    return {"samples": total, "phases": dict(sorted(phases.items(), key=lambda kv: -kv[1])),
            "self": sorted(own.items(), key=lambda kv: -kv[1])[:top]}


if __name__ == "__main__":
    if sys.argv[1] == "--stacks":
        for f in sys.argv[2:]:
            print(f, json.dumps(stacks_by_phase(Path(f)), indent=1))
        sys.exit(0)
    if sys.argv[1] == "--read":
        print(json.dumps(read_once(sys.argv[2])))
        sys.exit(0)
    budget = int(sys.argv[3]) if len(sys.argv) > 3 and int(sys.argv[3]) else None
    tight = len(sys.argv) <= 4 or sys.argv[4] != "json"
    print(json.dumps(measure(Path(sys.argv[1]), sys.argv[2], budget, tight)), flush=True)
    import msched.cli

    if hasattr(msched.cli, "_exit_now"):      # as `msched reorder` ends in this tree: no interpreter teardown
        msched.cli._exit_now(0)
