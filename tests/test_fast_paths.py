"""The fast paths of the simulator and the round give the schedules the plain paths give (issue 17, item 4).

Shortcuts that keep a 20,000-job replay fast: the planner's timeline is built once per snapshot and copied
copy-on-write (`msched.policy.timeline`); the plan's construction does not look for a start on a type whose
runtime alone ends the job too late to matter (`MschedPolicy.prune_slow_types`) and keeps what depends
only on the queue across one plan's decodes (`MschedPolicy.reuse_per_queue`); the round core keeps each
job's clock-free reading while the simulator hands back the same job object, and a running job's view
while its expected end holds (`msched.rounds.core._JobMemo`, `reuse_running`); a backfill pass none of
whose jobs fits the free GPUs is skipped (`slurm_sim.simulator.Simulator._backfill`) and builds its
node profiles in one pass (`ONE_PASS_PROFILES`); the replay keeps the submit decision's memory figures
(`slurm_sim.compare.CACHE_SHAPES`). Each is checked against the plain path here: timelines on random
bookings, a snapshot read twice and at later clocks, profiles and plans on random inputs, and whole
replays with every shortcut switched off, which must start and end every job at the same time on the
same type.
"""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from msched.estimate.estimators import TagEstimator
from msched.estimate.perf_table import PerfTable
from msched.policy.snapshot import NodeState, RunningJob
from msched.policy.timeline import Timeline
from slurm_sim.cluster import parse_cluster
from slurm_sim.commands import default_truth_path
from slurm_sim.compare import Classifier, SimSetup, replay
from slurm_sim.trace import synth

TYPES = ("a100", "titanv", "k80")


# ------------------------------------------------------------------------------------- timeline
def _cluster(draw) -> tuple[list[NodeState], list[RunningJob]]:
    nodes, running = [], []
    for k in range(draw(st.integers(2, 7))):
        t = TYPES[draw(st.integers(0, len(TYPES) - 1))]
        gpus = draw(st.sampled_from((1, 2, 4)))
        free = draw(st.integers(0, gpus))
        nodes.append(NodeState(f"n{k}", t, gpus, free))
        busy = gpus - free
        while busy:               # one or more jobs; some GPUs may stay busy with no job to explain them
            g = draw(st.integers(1, busy))
            if draw(st.integers(0, 5)) == 0:
                break
            running.append(RunningJob(f"r{k}.{busy}", t, g, float(draw(st.integers(-100, 5000))), (f"n{k}",)))
            busy -= g
    return nodes, running


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_a_built_timeline_holds_each_gpu_free_time_in_order(data):
    """`Timeline._build` sorts only nodes with unexplained busy GPUs (the running jobs are taken in
    order of their ends): every node's free times are sorted and are its free GPUs at now, each running
    job's GPUs at its end (now if past) and the unexplained ones an hour from now."""
    nodes, running = _cluster(data.draw)
    now = 100.0
    tl = Timeline(now, list(nodes), list(running))
    for node, free in zip(nodes, tl.free, strict=True):
        ends = [max(now, r.est_end) for r in running if r.nodes == (node.name,) for _ in range(r.num_gpus)]
        rest = node.gpus - node.gpus_free - len(ends)
        assert free == sorted([now] * node.gpus_free + ends + [now + 3600.0] * rest)


@settings(max_examples=150, deadline=None)
@given(st.data(), st.booleans())
def test_a_base_timeline_moved_to_a_later_clock_equals_a_fresh_build(data, shift_fast):
    """`timeline._shifted` (SHIFT_BASE): a round's base timeline derived from the last round's, with only
    the nodes whose free GPUs or jobs changed rebuilt and the others moved to the new clock, holds the
    free times a fresh build gives, round after round: jobs end and start (some as new objects equal to
    the old), GPUs go busy with no job to explain them, the clock stands still or jumps past ends, now
    and then a job on two nodes (built anew then). A node's unchanged list is the last base's own
    (`SHARE_LISTS`): booking a copy of either base changes neither. With `SHIFT_FAST` (the per-node job
    lists patched, the changed nodes found at C speed) and without."""
    import msched.policy.timeline as timeline

    timeline.SHIFT_FAST = shift_fast
    try:
        _base_moved(data, timeline)
    finally:
        timeline.SHIFT_FAST = True


def _base_moved(data, timeline) -> None:  # noqa: ANN001

    draw = data.draw
    nodes, running = _cluster(draw)
    now = 100.0
    timeline._BASE.clear()
    for step in range(draw(st.integers(1, 6))):
        shared = Timeline(now, tuple(nodes), tuple(running))
        fresh = Timeline(now, list(nodes), list(running))
        assert shared.free == fresh.free and shared.free_at() == fresh.free_at()
        for t in TYPES:
            for g in (1, 2, 4, 8):
                assert shared.start_time(t, g) == fresh.start_time(t, g)
        for t in TYPES:          # bookings on a copy leave its base and a base that shares its lists alone
            p = shared.place(t, 1)
            if p is not None:
                shared.commit(p, p.start + 500.0)
        assert Timeline(now, tuple(nodes), tuple(running)).free == fresh.free
        now += draw(st.sampled_from((0.0, 1.0, 60.0, 3000.0)))
        kept = []
        for r in running:
            fate = draw(st.integers(0, 5))
            if fate == 0 and len(r.nodes) == 1:                  # ends: its GPUs free
                k = next(k for k, n in enumerate(nodes) if n.name == r.nodes[0])
                n = nodes[k]
                nodes[k] = NodeState(n.name, n.gpu_type, n.gpus, min(n.gpus, n.gpus_free + r.num_gpus))
            else:
                kept.append(dataclasses.replace(r) if fate == 1 else r)
        running = kept
        for k, n in enumerate(nodes):
            if n.gpus_free and draw(st.booleans()):
                g = draw(st.integers(1, n.gpus_free))
                if draw(st.integers(0, 4)):
                    running.append(RunningJob(f"s{step}.{k}", n.gpu_type, g, now + draw(st.integers(0, 5000)),
                                              (n.name,)))
                nodes[k] = NodeState(n.name, n.gpu_type, n.gpus, n.gpus_free - g)   # some with no job
        if len(nodes) > 1 and draw(st.integers(0, 9)) == 0:
            running.append(RunningJob("wide", nodes[0].gpu_type, 1, now + 10.0, (nodes[0].name, nodes[1].name)))


@st.composite
def bookings(draw):
    nodes, running = _cluster(draw)
    ops = draw(st.lists(st.tuples(st.sampled_from(TYPES), st.sampled_from((1, 2, 3, 4, 8)),
                                  st.integers(1, 400), st.booleans()), min_size=1, max_size=25))
    return nodes, running, ops


def _book(tl: Timeline, gpu_type: str, gpus: int, length: int) -> tuple:
    """Book one job at its earliest start on the type; what the planner saw on the way."""
    seen = (tl.start_time(gpu_type, gpus), tl.fits(gpu_type, gpus))
    p = tl.place(gpu_type, gpus)
    if p is None:
        return seen + (None,)
    tl.commit(p, p.start + length)
    return seen + (p,)


@settings(max_examples=150, deadline=None)
@given(bookings())
def test_copied_timelines_book_and_answer_as_a_fresh_build(case):
    """A timeline built from lists (never shared) and one from the snapshot's tuples (a copy of the shared
    base), copied again at random points, answer every query the same way; and booking a copy never
    changes what it was copied from."""
    nodes, running, ops = case
    plain = Timeline(0.0, list(nodes), list(running))          # lists: built, not shared
    fast = Timeline(0.0, tuple(nodes), tuple(running))
    parent_free = None
    parent = None
    for t, g, length, copy_here in ops:
        if copy_here:
            parent, fast = fast, fast.copy()
            parent_free = [list(f) for f in parent.free]
        assert _book(plain, t, g, length) == _book(fast, t, g, length)
        assert plain.free == fast.free and plain.free_at() == fast.free_at()
        if parent is not None:
            assert parent.free == parent_free                    # the copy booked its own lists
    for t in TYPES:
        for g in (1, 2, 4):
            assert plain.earliest(t, g, 50.0) == fast.earliest(t, g, 50.0)
    again = Timeline(0.0, tuple(nodes), tuple(running))          # the shared base is untouched by bookings
    fresh = Timeline(0.0, list(nodes), list(running))
    assert again.free == fresh.free and again.free_at() == fresh.free_at()


@settings(max_examples=150, deadline=None)
@given(bookings(), st.sampled_from((None, 0, 1, 2, 3)))
def test_a_copy_finds_starts_on_booked_types_without_a_heap_as_with_one(case, scan_max):
    """`Timeline.scan_dirty`: a copy's start on a type it booked, from its origin's sorted keys and the
    nodes it booked, is the heap's answer (start and node, so the same placement), copy after copy; and
    so is the mix of both (`scan_dirty_max`: the scan while a copy has booked at most that many nodes of
    the type, the heap past it)."""
    nodes, running, ops = case

    def run(scan: bool) -> list:
        Timeline.scan_dirty = scan
        Timeline.scan_dirty_max = scan_max
        try:
            tl = Timeline(0.0, tuple(nodes), tuple(running))
            seen = []
            for t, g, length, copy_here in ops:
                if copy_here:
                    tl = tl.copy()
                seen.append(_book(tl, t, g, length))
                seen.append([(u, k, tl.start_time(u, k), tl.place(u, k)) for u in TYPES for k in (1, 2, 4)])
            return seen + [tl.free]
        finally:
            Timeline.scan_dirty = True
            Timeline.scan_dirty_max = default_max

    default_max = Timeline.scan_dirty_max
    assert run(True) == run(False)


@settings(max_examples=150, deadline=None)
@given(bookings(), st.booleans())
def test_a_pristine_timeline_finds_starts_from_its_sorted_keys_as_from_a_heap(case, shared):
    """`Timeline.sorted_pristine`: a timeline with nothing booked since it was built or copied (the round's
    base, a copy of a booked copy, a copy of a list-built timeline whose heaps it copies) answers a start
    from its sorted heap keys as its heap does (start and node, so the same placement), before and
    between bookings."""
    nodes, running, ops = case

    def run(fast: bool) -> list:
        Timeline.sorted_pristine = fast
        try:
            tl = Timeline(0.0, tuple(nodes), tuple(running)) if shared else Timeline(0.0, list(nodes), list(running))
            seen = []
            for t, g, length, copy_here in ops:
                if copy_here:
                    tl = tl.copy()
                    seen.append([(u, k, tl.start_time(u, k), tl.place(u, k)) for u in TYPES for k in (1, 2, 4, 8)])
                seen.append(_book(tl, t, g, length))
            return seen + [tl.free]
        finally:
            Timeline.sorted_pristine = True

    assert run(True) == run(False)


@settings(max_examples=150, deadline=None)
@given(bookings())
def test_free_times_from_the_start_cache_equal_a_pass_over_the_nodes(case):
    """`Timeline.free_at_from_starts`: each type's first free GPU, read as a one-GPU job's earliest start,
    is the earliest first free time over the type's nodes, on built timelines and on copies, booking
    after booking."""
    nodes, running, ops = case
    for tl in (Timeline(0.0, list(nodes), list(running)), Timeline(0.0, tuple(nodes), tuple(running))):
        for t, g, length, copy_here in ops:
            if copy_here:
                tl = tl.copy()
            _book(tl, t, g, length)
            fast = tl.free_at()
            Timeline.free_at_from_starts = False
            try:
                assert fast == tl.free_at() and list(fast) == list(tl.free_at())
            finally:
                Timeline.free_at_from_starts = True


# ------------------------------------------------------------------------------------- snapshot
def test_a_snapshot_read_again_from_the_same_job_objects_equals_a_fresh_read():
    """The round core's per-job memo: the second read of the same SlurmJob objects (memo hits), a read of
    equal but new objects (misses) and the first read give the same snapshot and views, and a job the
    simulator changed (a new view object) is read anew."""
    from msched.rounds.core import build_snapshot
    from msched.slurm.base import JobRequest
    from msched.tag import JobTag, with_tag
    from slurm_sim.client import SimClient

    truth = PerfTable.load(default_truth_path())
    model = sorted(truth.models())[0]
    c = SimClient.from_spec("a100:2x1,titanv:2x1", truth=truth)
    tag = with_tag(JobTag(model=model, ref=model, iters=20_000, bs=12), None)
    for k in range(5):
        c.submit(JobRequest(name=f"j{k}", num_gpus=1 + k % 2, comment=tag, time_limit_s=86_400.0,
                            extra={"model": model, "iterations": 20_000, "batch_size": 12}))
    c.advance(10.0)
    est = TagEstimator(truth)
    jobs, nodes = c.jobs(), c.nodes()
    first = build_snapshot(jobs, nodes, est, c.now())
    again = build_snapshot(jobs, nodes, est, c.now())
    fresh = build_snapshot([dataclasses.replace(j) for j in jobs], nodes, est, c.now())
    assert first == again == fresh
    assert first[0].running and first[0].pending
    # a later clock: running jobs' views kept (`_JobMemo.reuse_running`) while their ends hold, equal to
    # a read with the memo off, also once the clock has passed an end (overdue revision) and the limit
    import msched.rounds.core as core

    ends = sorted(r.est_end for r in first[0].running)
    for later in (c.now() + 1.0, ends[0], ends[0] + 1.0, ends[-1] + 5_000.0, c.now() + 90_000.0):
        kept = build_snapshot(jobs, nodes, est, later)
        core._JobMemo.reuse_running = False
        try:
            anew = build_snapshot(jobs, nodes, est, later)
        finally:
            core._JobMemo.reuse_running = True
        assert kept == anew, later
    build_snapshot(jobs, nodes, est, c.now())
    reread = build_snapshot(jobs, nodes, est, c.now() + 1.0)[0]
    assert all(a is b for a, b in zip(build_snapshot(jobs, nodes, est, c.now() + 2.0)[0].running, reread.running,
                                      strict=True))
    # the node memo (`_NodeMemo.keep`): nodes read from the same objects, from changed ones (a job started,
    # a node's features or partitions changed) and with the memo off give the same snapshot
    core._NodeMemo.keep = False
    try:
        unkept = build_snapshot(jobs, nodes, est, c.now())
    finally:
        core._NodeMemo.keep = True
    assert unkept == first
    moved = [dataclasses.replace(nodes[0], gpus_alloc=0), dataclasses.replace(nodes[1], features=("x",)),
             *nodes[2:]]
    moved[-1] = dataclasses.replace(moved[-1], partitions=("other",))
    freed = [dataclasses.replace(nodes[0], gpus_alloc=0), *nodes[1:]]        # free GPUs only: the partial path
    for changed_nodes in (moved, freed, nodes, freed):
        kept_read = build_snapshot(jobs, changed_nodes, est, c.now())
        core._NodeMemo.keep = False
        try:
            assert build_snapshot(jobs, changed_nodes, est, c.now()) == kept_read
        finally:
            core._NodeMemo.keep = True
        assert (kept_read[0].nodes != first[0].nodes) == (changed_nodes is not nodes)
    pending = first[0].pending[0].job_id
    c.set_priority(pending, 7)
    changed = build_snapshot(c.jobs(), nodes, est, c.now())[0]
    assert {p.job_id: p.priority for p in changed.pending}[pending] == 7


# ------------------------------------------------------------------------------------- backfill profiles
@settings(max_examples=200, deadline=None)
@given(st.integers(0, 8), st.lists(st.tuples(st.integers(0, 6), st.sampled_from((1, 2, 4))), max_size=12))
def test_a_profile_built_in_one_pass_equals_one_built_job_by_job(free, ends):
    """`_Profile.from_frees` (ONE_PASS_PROFILES) gives the step function that one `add(end, inf, gpus)`
    per running job gives, in any order, with ends at now, before it (clamped) and shared by jobs."""
    from slurm_sim.simulator import _Profile

    now = 3.0
    ends = [(float(e), g) for e, g in ends]
    by_job = _Profile(now, free)
    for end, g in ends:
        by_job.add(max(now, end), float("inf"), g)
    one = _Profile.from_frees(now, free, [(max(now, e), g) for e, g in ends])
    assert (one.times, one.free) == (by_job.times, by_job.free)
    assert one.times == sorted(set(one.times)) and one.times[0] == now


# ------------------------------------------------------------------------------------- plans
@st.composite
def queues(draw):
    """A cluster with running jobs and a queue: managed jobs (some pinned or starving, shapes of 1-8
    GPUs, estimates on some types) and unmanaged ones among them."""
    from msched.policy.snapshot import ClusterSnapshot, PendingJob

    nodes, running = _cluster(draw)
    pending = []
    for k in range(draw(st.integers(1, 14))):
        managed = draw(st.booleans()) or k % 3 == 0
        est = {t: float(draw(st.integers(30, 900))) for t in TYPES if draw(st.booleans())} if managed else {}
        pinned = draw(st.sampled_from((None, None, None, "a100"))) if managed else None
        pending.append(PendingJob(str(100 + k), float(draw(st.integers(0, 5)) * 100), draw(st.sampled_from((1, 1, 2, 4, 8))),
                                  draw(st.integers(1, 50)), est, allowed_types=(pinned,) if pinned else (),
                                  pinned_type=pinned, time_limit_s=float(draw(st.sampled_from((600, 3600)))),
                                  managed=managed))
    return ClusterSnapshot(draw(st.sampled_from((500.0, 90_000.0))), tuple(nodes), tuple(running), tuple(pending),
                           86_400.0)


@settings(max_examples=150, deadline=None)
@given(queues(), st.sampled_from((None, 600.0)))
def test_the_snapshot_simple_bound_summed_directly_equals_the_instance_path(snap, default_runtime_s):
    """`msched.policy.bound.SIMPLE_FAST`: the planner's simple bound of a snapshot, summed without building
    the instance's objects, is the bound `simple_bound` gives of that instance (to the last bit)."""
    import msched.policy.bound as bound

    fast = bound.snapshot_simple_bound(snap, default_runtime_s)
    bound.SIMPLE_FAST = False
    try:
        plain = bound.snapshot_simple_bound(snap, default_runtime_s)
    finally:
        bound.SIMPLE_FAST = True
    assert fast == plain


@settings(max_examples=150, deadline=None)
@given(queues(), st.booleans(), st.integers(-200, 9000))
def test_the_running_jobs_term_is_never_above_the_simple_bound(snap, ghost, ghost_end):
    """`snapshot_running_bound`, which the planner's `_cpsat_worth_it` tries before the simple bound
    (`RUNNING_BOUND_FIRST`), is a lower value of the same bound: at most the simple bound (both of its paths),
    never before now, and the latest running end on a type with GPUs; a running job on a type the nodes do not
    have (`ghost`) counts in neither."""
    import msched.policy.bound as bound

    if ghost:
        snap = dataclasses.replace(snap, running=(*snap.running, RunningJob("g1", "p100", 2, float(ghost_end), ())))
    running = bound.snapshot_running_bound(snap)
    simple = bound.snapshot_simple_bound(snap)
    bound.SIMPLE_FAST = False
    try:
        assert running <= bound.snapshot_simple_bound(snap) and running <= simple
    finally:
        bound.SIMPLE_FAST = True
    ends = [r.est_end for r in snap.running if r.gpu_type in TYPES and r.num_gpus > 0]
    assert running == max([snap.now, *ends])


@settings(max_examples=60, deadline=None)
@given(queues(), st.sampled_from(("balanced", "makespan")), st.sampled_from((0, 8)))
def test_plans_with_the_running_term_tried_first_equal_plans_without(snap, objective, min_jobs):
    """The optimizing planner with `RUNNING_BOUND_FIRST` off (the simple bound every time `_cpsat_worth_it`
    asks) gives the same plan; `min_jobs` 0 lets every head of 1-14 jobs reach the question."""
    import msched.policy.planner as planner
    from msched.policy import get_policy

    opts = {"planner": "optimize", "objective": objective, "time_box_s": 1e6}
    saved = planner.CPSAT_MIN_JOBS
    planner.CPSAT_MIN_JOBS = min_jobs
    try:
        fast = get_policy("msched", **opts).plan(snap)
        planner.RUNNING_BOUND_FIRST = False
        try:
            plain = get_policy("msched", **opts).plan(snap)
        finally:
            planner.RUNNING_BOUND_FIRST = True
    finally:
        planner.CPSAT_MIN_JOBS = saved
    assert _decisions(fast) == _decisions(plain)
    assert fast.est_makespan_end == plain.est_makespan_end and fast.free_time == plain.free_time


def _decisions(plan) -> list:
    return [(d.job_id, d.priority, d.gpu_types, d.est_start, d.est_end) for d in plan.decisions]


@settings(max_examples=60, deadline=None)
@given(queues(), st.sampled_from(("greedy", "optimize")), st.sampled_from(("balanced", "makespan", "jct")))
def test_plans_with_the_per_queue_memo_equal_plans_without(snap, planner, objective):
    """The msched policy's per-queue memo (`reuse_per_queue`: construct's sorts and each job's
    candidates kept across one plan's decodes, the candidates looked at fastest first: `FASTEST_FIRST`)
    gives the plan that recomputing them in the order given gives: random snapshots with unmanaged,
    pinned and starving jobs, every planner and objective."""
    from msched.policy import get_policy
    from msched.policy.msched import MschedPolicy

    opts = {"planner": planner, "objective": objective, "time_box_s": 1e6}
    fast = get_policy("msched", **opts).plan(snap)
    off = get_policy("msched", **opts)
    off.reuse_per_queue = False
    plain = off.plan(snap)
    assert _decisions(fast) == _decisions(plain)
    assert fast.est_makespan_end == plain.est_makespan_end and fast.free_time == plain.free_time
    assert MschedPolicy.reuse_per_queue


@settings(max_examples=40, deadline=None)
@given(st.data(), st.sampled_from(("greedy", "optimize")), st.sampled_from(("balanced", "makespan", "jct")),
       st.sampled_from((2, 200)))
def test_plans_sharing_entries_across_queues_and_rounds_equal_plans_computing_their_own(data, planner, objective,
                                                                                     head_jobs):
    """`msched.policy.msched.SHARE_ENTRIES`: one policy's per-queue memos share each job's candidates and
    decode entry with every queue of the same context (the search's head, the whole queue, the tail after
    a head of 2 jobs, the next rounds); round after round (jobs kept as the same objects, replaced by
    equal or changed ones, gone, new; the clock moving jobs in and out of starvation; node shapes
    changing now and then) the plans equal those of a fresh policy per round that computes its own."""
    import msched.policy.msched as msched_policy
    from msched.policy import get_policy

    draw = data.draw
    opts = {"planner": planner, "objective": objective, "time_box_s": 1e6, "head_jobs": head_jobs}
    shared = get_policy("msched", **opts)
    snap = draw(queues())
    for step in range(draw(st.integers(1, 5))):
        fast = shared.plan(snap)
        msched_policy.SHARE_ENTRIES = False
        try:
            plain = get_policy("msched", **opts).plan(snap)
        finally:
            msched_policy.SHARE_ENTRIES = True
        assert _decisions(fast) == _decisions(plain), step
        assert fast.est_makespan_end == plain.est_makespan_end and fast.free_time == plain.free_time
        pending = []
        for j in snap.pending:
            fate = draw(st.integers(0, 5))
            if fate == 0:
                continue                                              # started or cancelled
            if fate == 1:
                j = dataclasses.replace(j, priority=j.priority + 1)   # rewritten: a new object
            elif fate == 2 and j.managed:
                j = dataclasses.replace(j, est_runtime_s={t: v * 2 for t, v in j.est_runtime_s.items()})
            pending.append(j)
        extra = draw(queues())
        pending += [dataclasses.replace(j, job_id=f"{step}.{j.job_id}") for j in extra.pending[:draw(st.integers(0, 3))]]
        nodes = snap.nodes
        if draw(st.integers(0, 3)) == 0:
            nodes = extra.nodes                                       # other shapes
        snap = dataclasses.replace(snap, now=draw(st.sampled_from((snap.now, snap.now + 60.0, 90_000.0))),
                                   nodes=nodes, running=extra.running if nodes is extra.nodes else snap.running,
                                   pending=tuple(pending or extra.pending))


@settings(max_examples=60, deadline=None)
@given(queues(), st.sampled_from(("balanced", "makespan", "jct")), st.sampled_from((0.0, 0.1)),
       st.sampled_from((0.0, 0.5)))
def test_search_decodes_resumed_from_the_moved_plans_prefix_equal_whole_decodes(snap, objective, affinity,
                                                                                wait_weight):
    """`msched.policy.planner.PREFIX_RESUME`: each candidate of the optimizing planner's local search books
    the prefix it shares with the plan it was moved from as that plan's decode booked it (its journal) and
    decodes the rest; the plan and every score it searched equal those of decoding every candidate whole:
    random snapshots with unmanaged, pinned and starving jobs, every objective, with and without the
    affinity rule and planned-wait weight."""
    import msched.policy.planner as planner

    opts = {"planner": "optimize", "objective": objective, "time_box_s": 1e6, "affinity": affinity,
            "wait_weight": wait_weight}
    _same_plans_with_the_switch_off(snap, opts, planner, "PREFIX_RESUME")


def _same_plans_with_the_switch_off(snap, opts: dict, module, switch: str) -> None:  # noqa: ANN001
    """A fresh msched policy's plan of `snap` with `module.switch` on equals one with it off: its decisions,
    makespan end, free times and what its search recorded (time aside)."""
    from msched.policy import get_policy

    fast_policy = get_policy("msched", **opts)
    fast = fast_policy.plan(snap)
    setattr(module, switch, False)
    try:
        plain_policy = get_policy("msched", **opts)
        plain = plain_policy.plan(snap)
    finally:
        setattr(module, switch, True)
    assert _decisions(fast) == _decisions(plain)
    assert fast.est_makespan_end == plain.est_makespan_end and fast.free_time == plain.free_time
    # time aside: its wall seconds, and CP-SAT's own count of deterministic time, a float sum that two solves
    # of the same model have reported one unit in the last place apart (5.686879999999997e-05 against ...98e-05)
    fast_search = dict(getattr(fast_policy, "last_search", {}))
    plain_search = dict(getattr(plain_policy, "last_search", {}))
    for record in (fast_search, plain_search):
        record.pop("seconds", None)
    work = "cpsat_deterministic_s"
    assert fast_search.pop(work, 0.0) == pytest.approx(plain_search.pop(work, 0.0), rel=1e-9, abs=1e-12)
    assert fast_search == plain_search


@settings(max_examples=80, deadline=None)
@given(queues(), st.booleans(), st.randoms(use_true_random=False))
def test_the_list_schedule_with_the_one_node_shortcut_equals_it_without(snap, backfill, rng):
    """`simulate` (settle's model of what Slurm does with a queue) reading one-node starts from the
    timeline's cached earliest start (`base.ONE_NODE_FAST_PATH`) places every job where `earliest` does:
    random queues, priorities and held types, with and without backfill, 1-8 GPU jobs on 1-4 GPU nodes
    (wider jobs take whole nodes, the path without the shortcut)."""
    import msched.policy.base as base
    from msched.rounds.settle import evaluate

    prio = {j.job_id: rng.randrange(1, 100) for j in snap.pending}
    held = {j.job_id: tuple(rng.sample(TYPES, rng.randrange(1, 3))) for j in snap.pending if rng.random() < 0.5}
    fast = evaluate(snap, prio, held, backfill=backfill)
    base.ONE_NODE_FAST_PATH = False
    try:
        plain = evaluate(snap, prio, held, backfill=backfill)
    finally:
        base.ONE_NODE_FAST_PATH = True
    assert fast.placed == plain.placed and fast.makespan_end == plain.makespan_end
    assert fast.timeline.free == plain.timeline.free


@settings(max_examples=60, deadline=None)
@given(queues(), st.sampled_from(("greedy", "optimize")), st.sampled_from(("balanced", "makespan", "jct")),
       st.sampled_from((0.0, 0.1)))
def test_plans_booking_the_node_a_start_named_equal_plans_committing_placements(snap, planner, objective, affinity):
    """`msched.policy.msched.ONE_NODE_BOOKING`: construct books a one-node job on the node its chosen
    type's cached start names (`Timeline.book`) and journals that booking, instead of building a
    placement and committing it; the plan, every score the search compared (its decodes resumed from
    those journals) and the free times equal those of the placements: random snapshots with unmanaged,
    pinned and starving jobs, jobs wider than a node (whole nodes, the placement's path), every planner
    and objective, with and without the affinity rule."""
    import msched.policy.msched as msched_policy

    opts = {"planner": planner, "objective": objective, "time_box_s": 1e6, "affinity": affinity}
    _same_plans_with_the_switch_off(snap, opts, msched_policy, "ONE_NODE_BOOKING")


@settings(max_examples=100, deadline=None)
@given(queues(), st.randoms(use_true_random=False), st.integers(0, 2))
def test_the_kept_merge_pattern_fills_the_places_as_the_merge_does(snap, rng, extra):
    """`msched.policy.msched.KEEP_PLACES`: the per-queue memo's construct order (the unmanaged jobs in Slurm's
    order with the managed places among them by submit time, a kept pattern filled in one pass) equals
    `construct_order`'s merge for any order of the managed jobs, an order longer than the places (its
    first ones taken) and, asked again, the same answer; random queues with unmanaged jobs, ties of
    submit times included."""
    from msched.policy.msched import MschedPolicy, _QueueMemo, construct_order

    managed = [j for j in snap.pending if j.managed]
    memo = _QueueMemo(MschedPolicy(), snap, set())
    for _ in range(3):
        order = rng.sample(managed, len(managed)) + rng.sample(managed, min(extra, len(managed)))
        assert memo.construct_order(order) == construct_order(snap.pending, order)


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(TYPES), st.floats(allow_nan=False), st.floats(allow_nan=False))
def test_a_placement_entered_field_by_field_is_the_dataclass_instance(gpu_type, start, end):
    """`msched.policy.base.placed_at` (simulate's and construct's `Placed`, without the frozen __init__):
    equal to `Placed(...)`, hashed, shown and pickled alike, and still frozen."""
    import pickle

    from msched.policy.base import Placed, placed_at

    fast, plain = placed_at(gpu_type, start, end), Placed(gpu_type, start, end)
    assert type(fast) is Placed and fast == plain and hash(fast) == hash(plain) and repr(fast) == repr(plain)
    assert pickle.loads(pickle.dumps(fast)) == plain and dataclasses.astuple(fast) == (gpu_type, start, end)
    with pytest.raises(dataclasses.FrozenInstanceError):
        fast.start = 0.0


@settings(max_examples=100, deadline=None)
@given(st.text(min_size=1, max_size=8), st.integers(0, 2**32), st.lists(st.sampled_from(TYPES), max_size=3),
       st.none() | st.floats(allow_nan=False), st.none() | st.floats(allow_nan=False),
       st.dictionaries(st.sampled_from(TYPES), st.floats(0, 1e9)))
def test_a_decision_entered_field_by_field_is_the_dataclass_instance(job_id, priority, types, start, end, est):
    """`msched.policy.snapshot.decision_at` (the plan's and the settled plan's decisions, without the frozen
    __init__): equal to `JobDecision(...)`, hashed (its fields hashable), shown and pickled alike, still
    frozen."""
    import pickle

    from msched.policy.snapshot import JobDecision, decision_at

    fast, plain = decision_at(job_id, priority, tuple(types), start, end, est), \
        JobDecision(job_id, priority, tuple(types), start, end, est)
    assert type(fast) is JobDecision and fast == plain and repr(fast) == repr(plain)
    assert pickle.loads(pickle.dumps(fast)) == plain and dataclasses.asdict(fast) == dataclasses.asdict(plain)
    with pytest.raises(dataclasses.FrozenInstanceError):
        fast.priority = 0


# ------------------------------------------------------------------------------------- balance_types
@st.composite
def balance_instances(draw):
    """A `balance_types` input: 1-4 types (pools of 1-8 GPUs, some busy until later), 1-40 jobs of 1, 2 or
    4 GPUs on 1-4 types each, whole-number runtimes (so that moves tie), a few jobs frozen."""
    types = [f"t{k}" for k in range(draw(st.integers(1, 4)))]
    pools = {t: sorted(float(draw(st.sampled_from((0, 0, 3, 40)))) for _ in range(draw(st.sampled_from((1, 2, 4, 8)))))
             for t in types}
    start, runtime, gpus, frozen = {}, {}, {}, set()
    for k in range(draw(st.integers(1, 40))):
        jid = f"j{k}"
        allowed = draw(st.lists(st.sampled_from(types), min_size=1, max_size=len(types), unique=True))
        runtime[jid] = {t: float(draw(st.integers(1, 60))) for t in allowed}
        gpus[jid] = draw(st.sampled_from((1, 1, 2, 4)))
        start[jid] = draw(st.sampled_from(allowed))
        if draw(st.integers(0, 9)) == 0:
            frozen.add(jid)
    return start, runtime, gpus, pools, frozen


@settings(max_examples=300, deadline=None)
@given(balance_instances(), st.sampled_from((64, 3, 1)))
def test_balance_types_pruned_and_kept_equals_every_move_placed_anew(inst, max_moves):
    """`balance_types`' incremental path (`BALANCE_FAST`: moves that cannot beat the best so far skipped
    by the other pools' ends and each changed pool's even-spread bound; a job's pool end on a type kept
    until that pool changes) makes the same moves as placing both pools of every move anew."""
    import msched.policy.planner as planner

    start, runtime, gpus, pools, frozen = inst
    fast = planner.balance_types(start, runtime, gpus, pools, frozen=frozen, max_moves=max_moves)
    planner.BALANCE_FAST = False
    try:
        plain = planner.balance_types(start, runtime, gpus, pools, frozen=frozen, max_moves=max_moves)
    finally:
        planner.BALANCE_FAST = True
    assert fast == plain


# ------------------------------------------------------------------------------------- the kept job list
_OPS = st.lists(st.tuples(st.sampled_from(("submit", "submit", "advance", "advance", "priority", "features",
                                           "hold", "release", "cancel", "begin", "other_client")),
                          st.integers(0, 40), st.integers(0, 3)), min_size=1, max_size=60)


@settings(max_examples=120, deadline=None)
@given(_OPS)
@example([("submit", 3 + k, 1) for k in range(8)] + [("advance", 20, 1)] * 8 + [("priority", 6, 0), ("advance", 20, 1)])
def test_the_kept_job_list_and_its_delta_read_equal_a_lookup_of_every_job(ops):
    """`SimClient.jobs()` keeps its list and hands the round what changed (`KEEP_JOB_LIST`), which
    `build_snapshot` reads as a delta (`KEEP_DELTA`): after any sequence of submissions, clock moves,
    scontrol updates, holds, cancellations, begin times and another client's reads, the list holds the same
    view objects in the same order as a lookup of every active job, the nodes' views are sinfo's, the
    snapshot's GPUs per type and types from the node memo (`KEEP_TOTALS`) are the ones counted, and the
    snapshot and views (and the times it changes at, in any order) equal the plain per-job read at every step, also at
    clocks past running jobs' expected ends."""
    import msched.rounds.core as core
    import slurm_sim.client as client_mod
    from msched.rounds.core import build_snapshot
    from msched.slurm.base import JobNotPending, JobRequest, SlurmError
    from msched.tag import JobTag, with_tag
    from slurm_sim.client import SimClient

    truth = PerfTable.load(default_truth_path())
    models = sorted(truth.models())[:3]
    c = SimClient.from_spec("a100:2x1,titanv:2x2", truth=truth)
    other = SimClient(c.sim)
    est = TagEstimator(truth)
    ids: list[str] = []
    clock = 0.0
    for op, k, m in ops:
        try:
            if op == "submit":
                tag = with_tag(JobTag(model=models[m % 3], ref=models[m % 3], iters=50_000 * (1 + k), bs=12), None)
                ids.append(c.submit(JobRequest(
                    name=f"j{len(ids)}", num_gpus=1 + m % 2, comment=tag if k % 5 else "",
                    time_limit_s=None if k % 7 == 0 else 600.0 * (1 + k),
                    extra={"model": models[m % 3], "iterations": 50_000 * (1 + k), "batch_size": 12})))
            elif op == "advance":
                c.advance(float(k * 20 * m))
            elif op == "other_client":
                other.jobs()
            elif ids:
                jid = ids[k % len(ids)]
                if op == "priority":
                    c.set_priority(jid, 10 + k)
                elif op == "features":
                    c.set_features(jid, ("a100", "titanv", "a100|titanv", "")[m])
                elif op == "hold":
                    c.hold(jid)
                elif op == "release":
                    c.release(jid)
                elif op == "cancel":
                    c.cancel(jid)
                elif op == "begin":
                    c.set_begin_time(jid, c.now() + 100.0 * m)
        except (JobNotPending, SlurmError):
            pass
        jobs, nodes = c.jobs(), c.nodes()
        sim = c.sim
        assert [id(j) for j in jobs] == [id(j.view if j.view is not None else sim.job_view(j))
                                         for j in sim.active.values()]
        assert [id(n) for n in nodes] == [id(sim.node_view(i)) for i in range(len(sim.node_names))]
        for later in (0.0, float(k * 311), 5_000.0 * m):
            clock = max(clock, c.now() + later)        # a round's clock never goes back
            got_changes: list[float] = []
            got = build_snapshot(jobs, nodes, est, clock, changes=got_changes)
            plain_changes: list[float] = []
            core.KEEP_DELTA = core.KEEP_TOTALS = False
            try:
                plain = build_snapshot(list(jobs), nodes, est, clock, changes=plain_changes)
            finally:
                core.KEEP_DELTA = core.KEEP_TOTALS = True
            assert got == plain and sorted(got_changes) == sorted(plain_changes)
            # the GPUs per type and the sorted types from the node memo (`KEEP_TOTALS`), as counted
            assert list(got[0].gpus_total.items()) == list(plain[0].gpus_total.items())
            assert got[0].gpu_types == plain[0].gpu_types
            jobs = c.jobs()        # the next read carries an empty delta (or what the clock changed)
    client_mod.KEEP_JOB_LIST = False
    try:
        assert c.jobs() == list(jobs)
    finally:
        client_mod.KEEP_JOB_LIST = True


# ------------------------------------------------------------------------------------- replays
def _plain_paths(monkeypatch) -> None:
    """Every shortcut off: timelines built from scratch and copied whole, every job read anew each round,
    every backfill pass run."""
    import msched.policy.base as base
    import msched.policy.bound as bound
    import msched.policy.msched as msched_policy
    import msched.policy.planner as planner
    import msched.policy.timeline as timeline
    import msched.rounds.core as core
    import slurm_sim.client as client
    import slurm_sim.compare as compare
    import slurm_sim.simulator as simulator
    from msched.policy.msched import MschedPolicy
    from slurm_sim.simulator import Simulator

    def fresh_base(now, nodes, running, unknown_busy_s):  # noqa: ANN001, ANN202
        base = Timeline.__new__(Timeline)
        base._build(now, nodes, running, unknown_busy_s)
        return base

    def whole_copy(self):  # noqa: ANN001, ANN202
        t = Timeline.__new__(Timeline)
        t._copy_of(self)
        t.free = [list(f) for f in self.free]
        t._owned = set(range(len(t.free)))
        t._origin, t._dirty, t._heaps = None, {}, {}
        t._heaps_of.clear()
        t._top.clear()
        return t

    monkeypatch.setattr(timeline, "_shared_base", fresh_base)
    monkeypatch.setattr(timeline, "SHIFT_BASE", False)
    monkeypatch.setattr(timeline, "SHARE_LISTS", False)
    monkeypatch.setattr(timeline, "SHIFT_FAST", False)
    monkeypatch.setattr(Timeline, "copy", whole_copy)
    monkeypatch.setattr(core._JobMemo, "keep_items", False)
    monkeypatch.setattr(core._NodeMemo, "keep", False)
    monkeypatch.setattr(core._JobMemo, "inline", False)
    monkeypatch.setattr(base.PossibleTypes, "keep", False)
    monkeypatch.setattr(core._JobMemo, "reuse_running", False)
    monkeypatch.setattr(Simulator, "_startable_now", lambda self, job: True)
    monkeypatch.setattr(MschedPolicy, "prune_slow_types", False)
    monkeypatch.setattr(MschedPolicy, "reuse_per_queue", False)
    monkeypatch.setattr(simulator, "ONE_PASS_PROFILES", False)
    monkeypatch.setattr(simulator, "KEPT_ENDS", False)
    monkeypatch.setattr(simulator, "LAZY_PROFILES", False)
    monkeypatch.setattr(compare, "CACHE_SHAPES", False)
    monkeypatch.setattr(compare, "KEEP_USABLE_MEMORY", False)
    monkeypatch.setattr(base, "ONE_NODE_FAST_PATH", False)
    monkeypatch.setattr(Timeline, "scan_dirty", False)
    monkeypatch.setattr(Timeline, "free_at_from_starts", False)
    monkeypatch.setattr(Timeline, "sorted_pristine", False)
    monkeypatch.setattr(core, "SKIP_SHARDLESS", False)
    monkeypatch.setattr(bound, "SIMPLE_FAST", False)
    monkeypatch.setattr(planner, "RUNNING_BOUND_FIRST", False)
    monkeypatch.setattr(simulator, "STOP_AT_NOW", False)
    monkeypatch.setattr(msched_policy, "FASTEST_FIRST", False)
    monkeypatch.setattr(msched_policy, "SHARE_ENTRIES", False)
    monkeypatch.setattr(planner, "PREFIX_RESUME", False)
    monkeypatch.setattr(planner, "BALANCE_FAST", False)
    monkeypatch.setattr(msched_policy, "ONE_NODE_BOOKING", False)
    monkeypatch.setattr(msched_policy, "KEEP_PLACES", False)
    monkeypatch.setattr(client, "KEEP_JOB_LIST", False)
    monkeypatch.setattr(core, "KEEP_DELTA", False)
    monkeypatch.setattr(core, "KEEP_TOTALS", False)


@pytest.mark.parametrize("switch", ["slurm_sim.simulator.LAZY_PROFILES", "msched.policy.timeline.SHIFT_FAST",
                                    "msched.policy.msched.SHARE_ENTRIES"])
def test_a_replay_with_one_of_planner15s_shortcuts_off_gives_the_same_schedule(switch, monkeypatch):
    """Each of this round's shortcuts alone (backfill's node profiles built when first looked at, the
    shifted base's patched job lists, the memos' shared entries): the optimizing planner's replay of a
    90-job trace starts and ends every job at the same time on the same type with the same writes with it
    off as on."""
    _assert_same_schedule_with_switch_off(switch, "a100:8x1,titanv:4x2,rtx2080ti:4x2", "poisson:400", monkeypatch)


@pytest.mark.parametrize("switch", ["slurm_sim.simulator.STOP_AT_NOW", "msched.policy.planner.RUNNING_BOUND_FIRST"])
def test_a_replay_with_one_of_planner16s_shortcuts_off_gives_the_same_schedule(switch, monkeypatch):
    """Each of planner16's shortcuts alone (backfill's search for a start stopped at a node that starts the
    job now; the CP-SAT question asked of the running jobs' latest end before the simple bound): the
    optimizing planner's replay starts and ends every job at the same time on the same type with the same
    writes with it off as on. The same trace as planner15's, on one-GPU and two-GPU nodes so that backfill's
    node search has several nodes per class, and with a queue long enough for CP-SAT's question."""
    _assert_same_schedule_with_switch_off(switch, "a100:1x8,titanv:2x4,rtx2080ti:4x2", "poisson:200", monkeypatch)


@pytest.mark.parametrize("switch", ["msched.policy.msched.ONE_NODE_BOOKING", "msched.policy.msched.KEEP_PLACES"])
def test_a_replay_with_one_of_settle18ps_shortcuts_off_gives_the_same_schedule(switch, monkeypatch):
    """Each of settle18p's switched shortcuts alone (construct booking the node a one-node start named; the
    per-queue merge kept as a pattern): the optimizing planner's replay starts and ends every job at the same
    time on the same type with the same writes with it off as on."""
    _assert_same_schedule_with_switch_off(switch, "a100:8x1,titanv:4x2,rtx2080ti:4x2", "poisson:400", monkeypatch)


def _assert_same_schedule_with_switch_off(switch: str, cluster_spec: str, arrival: str, monkeypatch) -> None:
    """The optimizing planner's replay of a 90-job trace of eight models on `cluster_spec` gives the same
    rounds and the same (job, type, start, end, state, writes) with the module flag `switch` off as on."""
    import importlib

    truth = PerfTable.load(default_truth_path())
    cluster = parse_cluster(cluster_spec)
    models = sorted(truth.models())[:8]
    trace = synth(90, models, truth, seed=4, arrival=arrival, max_gpus=4, cluster=cluster)
    setup = SimSetup(cluster, truth, truth, Classifier(models, truth),
                     policy_options={"planner": "optimize", "time_box_s": 1e6})
    fast = replay(trace, "msched", setup)
    module, name = switch.rsplit(".", 1)
    assert getattr(importlib.import_module(module), name) is True
    with monkeypatch.context() as m:
        m.setattr(importlib.import_module(module), name, False)
        plain = replay(trace, "msched", setup)
    assert fast.rounds == plain.rounds > 20
    assert [(o.job_id, o.gpu_type, o.start, o.end, o.state, o.writes) for o in fast.outcomes] == \
        [(o.job_id, o.gpu_type, o.start, o.end, o.state, o.writes) for o in plain.outcomes]


@pytest.mark.parametrize("planner", ["greedy", "optimize"])
def test_a_replay_with_every_shortcut_off_gives_the_same_schedule(planner, monkeypatch):
    """An online trace that keeps a queue on 24 GPUs of 3 types under sched/backfill: msched's replay with
    the fast paths and with every shortcut off start and end every job at the same time on the same type,
    with the same writes (the optimizer's time box is set out of reach: its search is then deterministic)."""
    truth = PerfTable.load(default_truth_path())
    cluster = parse_cluster("a100:8x1,titanv:4x2,rtx2080ti:4x2")
    models = sorted(truth.models())[:8]
    trace = synth(90, models, truth, seed=4, arrival="poisson:400", max_gpus=4, cluster=cluster)
    setup = SimSetup(cluster, truth, truth, Classifier(models, truth),
                     policy_options={"planner": planner, "time_box_s": 1e6})
    fast = replay(trace, "msched", setup)
    with monkeypatch.context() as m:
        _plain_paths(m)
        plain = replay(trace, "msched", setup)
    assert fast.rounds == plain.rounds > 20
    assert [(o.job_id, o.gpu_type, o.start, o.end, o.state, o.writes) for o in fast.outcomes] == \
        [(o.job_id, o.gpu_type, o.start, o.end, o.state, o.writes) for o in plain.outcomes]
    assert len({o.gpu_type for o in fast.outcomes}) == 3 and fast.metrics["mean_wait_s"] > 0


@settings(max_examples=150, deadline=None)
@given(bookings())
def test_booking_the_node_a_start_named_equals_committing_its_placement(case):
    """`Timeline.book` of the node that a one-node start names (`start_time`'s cached (start, node): simulate's
    and construct's one-node paths, without placements) leaves every node's free times and every later
    answer as `commit(place(...))` does, on copies of the shared base as on built timelines."""
    nodes, running, ops = case
    for build in (list, tuple):
        placed = Timeline(0.0, build(nodes), build(running))
        booked = Timeline(0.0, build(nodes), build(running))
        for t, g, length, copy_here in ops:
            if copy_here:
                placed, booked = placed.copy(), booked.copy()
            if not placed.fits(t, g) or g > placed.max_node[t]:
                continue                                  # wider than a node: not the one-node path
            p = placed.place(t, g)
            start = booked.start_time(t, g)
            assert start == p.start
            placed.commit(p, p.start + length)
            k = g if g > 1 else 1
            booked.book(t, (booked._top[t][k][1],), k, start + length)
            assert booked.free == placed.free and booked.version == placed.version
            assert [booked.start_time(u, k) for u in TYPES for k in (1, 2, 4)] == \
                [placed.start_time(u, k) for u in TYPES for k in (1, 2, 4)]
