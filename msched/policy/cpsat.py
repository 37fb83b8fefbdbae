"""A CP-SAT model of a round's head: one optional interval per job and GPU type, a cumulative per type.

Used two ways (issue 17):
- by the optimizing planner (msched.policy.planner) for a small head of the queue: warm-started with the
  best plan the local search found (a solution hint), limited by CP-SAT's *deterministic* time on one
  worker (so the same snapshot gives the same plan on any machine, however loaded) with a wall-clock
  limit only as a safety net. The schedule it returns is not used as it is: its start order and types
  become an order and fixed types for the planner's decoder (what Slurm will do with them), and that
  decoded plan competes with the others on the planner's objective.
- by bench/bench_planner.py as the exact optimum or proven bound (no limit, several workers).

The model pools each type's GPUs (a cumulative of the type's GPU count): exact for one-GPU nodes, a
relaxation when jobs must fit on one node (the decoder then places them on real nodes). What the head
does not own is fixed: each GPU busy until the time the planner's timeline frees it (running jobs, GPUs
no job explains), and the bookings the caller passes (plain and starving pending jobs as the greedy plan
placed them). Times are integer seconds from the snapshot's `now`.

Objectives: "makespan" (the last end, fixed bookings included), "jct" (the sum of the head's ends), and
for "balanced" the caller solves "makespan" first and then "jct" under `makespan_cap`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

OBJECTIVES = ("makespan", "jct")


@dataclass(frozen=True)
class CpJob:
    job_id: str
    gpus: int
    runtime: Mapping[str, int]          # seconds on each type the job may use (integers)


@dataclass(frozen=True)
class CpBusy:
    """GPUs of a type held over [start, end) by something the model does not move."""

    gpu_type: str
    gpus: int
    start: int
    end: int


@dataclass
class CpResult:
    status: str                          # "optimal", "feasible" (a schedule, not proven), "none"
    starts: dict[str, int] = field(default_factory=dict)
    types: dict[str, str] = field(default_factory=dict)
    objective: float = math.nan          # the objective's value of the schedule found
    bound: float = math.nan              # CP-SAT's best proven bound on the objective
    deterministic_s: float = 0.0         # CP-SAT's deterministic time used (machine independent)
    wall_s: float = 0.0
    hit_wall_limit: bool = False         # the wall-clock safety net stopped it (the result may vary by machine)

    @property
    def found(self) -> bool:
        return self.status in ("optimal", "feasible")

    def order(self) -> list[str]:
        """The jobs by start in the schedule (then end, then id): the order the decoder is given."""
        return sorted(self.starts, key=lambda j: (self.starts[j], j))


def solve(jobs: Sequence[CpJob], capacity: Mapping[str, int], busy: Sequence[CpBusy] = (), *,
          objective: str = "makespan", hint: Mapping[str, tuple[str, int]] | None = None,
          makespan_cap: int | None = None, deterministic_s: float | None = None, max_s: float | None = None,
          workers: int = 1, seed: int = 0) -> CpResult:
    """Schedule `jobs` (all released at 0) on per-type GPU pools `capacity` around the fixed `busy`
    bookings. `hint`: job -> (type, start) of a known schedule (a warm start). `makespan_cap`: the last
    end may not exceed it (for objective "jct"). `deterministic_s`: CP-SAT's deterministic time limit (the
    work budget); `max_s`: its wall-clock limit (the safety net). `workers=1` makes the search
    reproducible."""
    from ortools.sat.python import cp_model

    if objective not in OBJECTIVES:
        raise ValueError(f"unknown objective {objective!r}; choose one of {', '.join(OBJECTIVES)}")
    t0 = time.perf_counter()
    floor = max((b.end for b in busy), default=0)
    horizon = floor + sum(max(j.runtime.values()) for j in jobs if j.runtime) + 1
    m = cp_model.CpModel()
    end = m.NewIntVar(0, horizon, "makespan")
    m.Add(end >= floor)
    if makespan_cap is not None:
        m.Add(end <= max(int(makespan_cap), floor))
    per_type: dict[str, tuple[list, list]] = {t: ([], []) for t in capacity}
    energy: dict[str, list] = {t: [] for t in capacity}
    for b in busy:
        if b.gpu_type in per_type and b.end > b.start:
            per_type[b.gpu_type][0].append(m.NewIntervalVar(b.start, b.end - b.start, b.end, ""))
            per_type[b.gpu_type][1].append(min(b.gpus, capacity[b.gpu_type]))
            energy[b.gpu_type].append(b.gpus * (b.end - b.start))
    choice: dict[str, list[tuple[str, object, object]]] = {}
    ends = []
    for j in jobs:
        opts = []
        job_end = m.NewIntVar(0, horizon, f"e_{j.job_id}")
        for t, p in sorted(j.runtime.items()):
            if t not in capacity or j.gpus > capacity[t]:
                continue
            p = int(p)
            lit = m.NewBoolVar(f"{j.job_id}@{t}")
            s = m.NewIntVar(0, horizon - p, f"s_{j.job_id}_{t}")
            iv = m.NewOptionalFixedSizeIntervalVar(s, p, lit, f"i_{j.job_id}_{t}")
            m.Add(job_end == s + p).OnlyEnforceIf(lit)
            per_type[t][0].append(iv)
            per_type[t][1].append(j.gpus)
            energy[t].append(j.gpus * p * lit)
            opts.append((t, lit, s))
            if hint and j.job_id in hint:
                m.AddHint(lit, hint[j.job_id][0] == t)
                if hint[j.job_id][0] == t:
                    m.AddHint(s, int(hint[j.job_id][1]))
        if not opts:
            raise ValueError(f"job {j.job_id} fits no type of the pools ({', '.join(sorted(capacity))})")
        m.AddExactlyOne(lit for _, lit, _ in opts)
        m.Add(end >= job_end)
        choice[j.job_id] = opts
        ends.append(job_end)
    for t, (ivs, dem) in per_type.items():
        if ivs:
            m.AddCumulative(ivs, dem, capacity[t])
            m.Add(sum(energy[t]) <= capacity[t] * end)        # redundant: the type's work fits before the end
    m.Minimize(end if objective == "makespan" else sum(ends))
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = max(1, int(workers))
    solver.parameters.random_seed = seed
    if deterministic_s is not None:
        solver.parameters.max_deterministic_time = float(deterministic_s)
    if max_s is not None:
        solver.parameters.max_time_in_seconds = max(1e-3, float(max_s))
    status = solver.Solve(m)
    res = CpResult("none", bound=float(solver.BestObjectiveBound()), deterministic_s=solver.deterministic_time,
                   wall_s=time.perf_counter() - t0)
    # the wall limit stopped it when the search was not finished (nothing proven: no optimum, no proof of
    # infeasibility) and the deterministic budget was not spent: no other limit is set. (Not read from the
    # wall time: CP-SAT's own clock starts after the model is loaded, so on a tiny limit it can stop
    # short of it; that made the time-box tests fail now and then.)
    res.hit_wall_limit = (status in (cp_model.FEASIBLE, cp_model.UNKNOWN) and max_s is not None
                          and (deterministic_s is None or solver.deterministic_time < 0.99 * deterministic_s))
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return res
    res.status = "optimal" if status == cp_model.OPTIMAL else "feasible"
    res.objective = float(solver.ObjectiveValue())
    for jid, opts in choice.items():
        for t, lit, s in opts:
            if solver.Value(lit):
                res.types[jid] = t
                res.starts[jid] = int(solver.Value(s))
    return res


def assignment_makespan(jobs: Sequence[CpJob], machines: Sequence[str], *, max_s: float | None = None,
                        workers: int = 2, hint: Mapping[str, tuple[str, int]] | None = None) -> CpResult:
    """The exact optimum of a static batch of one-GPU jobs on one-GPU machines (`machines`: each one's
    GPU type): with every job released at 0 and nothing else booked, the makespan is the largest machine
    load, so only the assignment matters (unrelated parallel machines, R||Cmax). Far stronger bounds than
    the interval model on the same instance (bench_planner's reference). `starts` sequences each
    machine's jobs back to back, so the result decodes like `solve`'s."""
    from ortools.sat.python import cp_model

    if any(j.gpus != 1 for j in jobs):
        raise ValueError("assignment_makespan takes one-GPU jobs only")
    t0 = time.perf_counter()
    m = cp_model.CpModel()
    horizon = sum(max(j.runtime.values()) for j in jobs) + 1
    end = m.NewIntVar(0, horizon, "makespan")
    x: dict[tuple[str, int], object] = {}
    for j in jobs:
        lits = []
        for k, t in enumerate(machines):
            if t in j.runtime:
                x[j.job_id, k] = m.NewBoolVar(f"{j.job_id}@{k}")
                lits.append(x[j.job_id, k])
        if not lits:
            raise ValueError(f"job {j.job_id} fits no machine")
        m.AddExactlyOne(lits)
    loads = []
    for k, t in enumerate(machines):
        load = sum(int(j.runtime[t]) * x[j.job_id, k] for j in jobs if (j.job_id, k) in x)
        lv = m.NewIntVar(0, horizon, f"load{k}")
        m.Add(lv == load)
        m.Add(lv <= end)
        loads.append(lv)
    for k in range(1, len(machines)):                  # machines of a type are interchangeable
        if machines[k] == machines[k - 1]:
            m.Add(loads[k - 1] >= loads[k])
    if hint:
        seen: dict[str, int] = {}
        for jid, (t, _) in sorted(hint.items(), key=lambda kv: kv[1][1]):
            ks = [k for k, mt in enumerate(machines) if mt == t]
            if ks:
                k = ks[seen.get(t, 0) % len(ks)]
                seen[t] = seen.get(t, 0) + 1
                if (jid, k) in x:
                    m.AddHint(x[jid, k], 1)
    m.Minimize(end)
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = max(1, int(workers))
    if max_s is not None:
        solver.parameters.max_time_in_seconds = float(max_s)
    status = solver.Solve(m)
    res = CpResult("none", bound=float(solver.BestObjectiveBound()), deterministic_s=solver.deterministic_time,
                   wall_s=time.perf_counter() - t0)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return res
    res.status = "optimal" if status == cp_model.OPTIMAL else "feasible"
    res.objective = float(solver.ObjectiveValue())
    clock = [0] * len(machines)
    for j in jobs:
        for k, t in enumerate(machines):
            if (j.job_id, k) in x and solver.Value(x[j.job_id, k]):
                res.types[j.job_id], res.starts[j.job_id] = t, clock[k]
                clock[k] += int(j.runtime[t])
    return res
