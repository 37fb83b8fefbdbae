"""The planner's model of the cluster: when each GPU of each node frees up.

A job runs on one node, or on whole nodes of one type (DESIGN, trace format). The model keeps, per node,
the sorted free times of its GPUs, and per (GPU type, GPU count) a lazy heap of "the time this node could
start a job of that many GPUs" (its g-th earliest GPU), so finding the earliest start of a g-GPU job on a
type is a heap peek instead of a scan over every node. That is what keeps a 10,000-job plan well under a
second. Jobs wider than a node of their type take whole nodes (ceil(g / GPUs per node) of them): those are
rare and found by a scan.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import math
import operator
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from msched.policy.snapshot import NodeState, RunningJob

# `start_time`'s cache (`_top[type][GPUs]`) holds no answer for a (type, GPU count); a cached None means the type
# never fits. The hot paths that read the cache directly (simulate, construct) test against this one object.
NOT_CACHED = object()


@dataclass(frozen=True)
class Placement:
    gpu_type: str
    start: float
    nodes: tuple[int, ...]          # node indices in the timeline
    per_node: int                   # GPUs taken on each node


class Timeline:
    """GPU free times per node; `earliest` finds a start, `commit` books it.

    Built from a snapshot's nodes and running jobs, which many plans of one round share (the planner's
    construction, each decode of its search, settle's evaluations): the cluster part is built once per
    (now, nodes, running) and every further `Timeline(...)` of the same tuples starts as a copy of it
    (`_shared_base`). Copies are copy-on-write: a node's free list is copied when a copy first books it,
    and the per-(type, GPU count) heaps come from the pristine timeline it was copied from plus the nodes
    booked since, so a decode that books a few nodes costs about what it books, not the whole cluster."""

    scan_dirty = True     # a copy's start on a type it booked: the origin's sorted keys and the booked nodes
                          # (`_scan`) instead of a heap copied from the origin; off: the heap
                          # (tests/test_fast_paths.py)
    free_at_from_starts = True   # `free_at` from start_time(type, 1) (off: a pass over every node)
    sorted_pristine = True   # a pristine timeline's start from its sorted heap keys (`_sorted_entries`, which
                             # its copies' `_scan` reads anyway) instead of a heap built for it too; off: the heap
    scan_dirty_max: int | None = 16   # `scan_dirty` only while the copy has booked at most this many nodes of the
                             # type; past it the heap (copied once from the origin's, kept by `commit`): a scan
                             # reads every booked node, so a decode that books thousands (the tail of a 10,000-job
                             # queue) went quadratic. None: scan however many (tests/test_fast_paths.py)

    def __init__(self, now: float, nodes: Iterable[NodeState], running: Iterable[RunningJob] = (),
                 unknown_busy_s: float = 3600.0):
        if isinstance(nodes, tuple) and isinstance(running, tuple):
            self._copy_of(_shared_base(now, nodes, running, unknown_busy_s))
        else:
            self._build(now, nodes, running, unknown_busy_s)

    def _build(self, now: float, nodes: Iterable[NodeState], running: Iterable[RunningJob],
               unknown_busy_s: float) -> None:
        self.now = now
        names: list[str] = []
        types: list[str] = []
        free: list[list[float]] = []
        self.names, self.types, self.free = names, types, free
        by_type: dict[str, list[int]] = {}
        index: dict[str, int] = {}
        busy: list[int] = []
        for n in nodes:
            g, t = n.gpus, n.gpu_type
            if g <= 0 or not t:
                continue
            i = len(names)
            index[n.name] = i
            names.append(n.name)
            types.append(t)
            f = n.gpus_free
            f = 0 if f < 0 else g if f > g else f          # GPUs free now, within [0, gpus]
            free.append([now] * f)
            busy.append(g - f)
            idx = by_type.get(t)
            if idx is None:
                by_type[t] = [i]
            else:
                idx.append(i)
        self.by_type = by_type
        # Running jobs hold GPUs until their estimated end; spread over the nodes they hold (or, when the
        # node list is unknown, over the type's nodes that still have unexplained busy GPUs). Taken in
        # order of end, so each node's free times stay sorted; only nodes with unexplained busy GPUs
        # (booked an hour from now) need a sort afterwards.
        for job in sorted(running, key=_est_end):
            end = max(now, job.est_end)
            where = [index[n] for n in job.nodes if n in index]
            if not where:
                where = [i for i in by_type.get(job.gpu_type, ()) if busy[i] > 0]
            left = job.num_gpus
            if len(where) == 1:
                i = where[0]
                take = min(busy[i], left)
                free[i].extend([end] * take)
                busy[i] -= take
                continue
            for k, i in enumerate(where):
                take = min(busy[i], math.ceil(left / max(1, len(where) - k)) if job.nodes else left)
                free[i].extend([end] * take)
                busy[i] -= take
                left -= take
                if left <= 0:
                    break
        for i, b in enumerate(busy):       # busy GPUs no running job explains (another partition, ...)
            if b:
                free[i].extend([now + unknown_busy_s] * b)
                free[i].sort()
        size = self.size = [len(f) for f in free]
        self.max_node = {t: max(size[i] for i in idx) for t, idx in by_type.items()}
        self.version = [0] * len(free)
        self._heaps: dict[tuple[str, int], list[tuple[float, int, int, int]]] = {}
        self._heaps_of: dict[str, dict[int, list[tuple[float, int, int, int]]]] = defaultdict(dict)
        # start_time cache per type: {g: (start, node) or None}, cleared for a type when it is booked
        self._top: dict[str, dict[int, tuple[float, int] | None]] = defaultdict(dict)
        self._owned: set[int] = set(range(len(free)))     # nodes whose free list no copy shares
        self._pristine = True                               # nothing booked since it was built or copied
        self._origin: Timeline | None = None                # pristine timeline this one was copied from
        self._dirty: dict[str, set[int]] = {}               # per type, nodes booked since that copy
        self._scanned: dict[tuple[str, int], tuple] = {}     # `_scan`'s (dirty, its size, origin part) per (type, GPUs)

    def _copy_of(self, src: Timeline) -> None:
        self.now, self.names, self.types = src.now, src.names, src.types
        self.by_type, self.size, self.max_node = src.by_type, src.size, src.max_node   # never changed
        self.free = list(src.free)                 # the lists themselves are shared until booked
        src._owned = set()
        self._owned = set()
        self.version = list(src.version)
        self._heaps = {}
        self._heaps_of = defaultdict(dict)
        self._top = defaultdict(dict, {t: dict(d) for t, d in src._top.items()})
        self._pristine = True
        self._scanned = {}
        if src._pristine:                      # heaps come from src when first asked for
            self._origin, self._dirty = src, {}
        elif src._origin is not None and src._origin._pristine:
            self._origin, self._dirty = src._origin, {t: set(v) for t, v in src._dirty.items()}
        else:                                  # no pristine origin: src's own heaps, copied
            self._origin, self._dirty = None, {}
            for (t, g), h in src._heaps.items():
                self._heaps[(t, g)] = self._heaps_of[t][g] = list(h)

    def copy(self) -> Timeline:
        """The same bookings: each decode of the optimizing planner starts from the cluster as it is
        (copy-on-write, see the class)."""
        t = Timeline.__new__(Timeline)
        t._copy_of(self)
        return t

    # ----------------------------------------------------------------- queries
    def gpu_types(self) -> list[str]:
        return sorted(self.by_type)

    def fits(self, gpu_type: str, num_gpus: int) -> bool:
        """Could this type ever run a job this wide (on one node or on whole nodes)?"""
        idx = self.by_type.get(gpu_type)
        if not idx:
            return False
        g = max(1, num_gpus)
        if g <= self.max_node[gpu_type]:
            return True
        return sum(self.size[i] for i in idx) >= g

    def _heap(self, gpu_type: str, g: int) -> list[tuple[float, int, int, int]]:
        key = (gpu_type, g)
        h = self._heaps.get(key)
        if h is None:
            origin = self._origin
            if origin is not None and origin._pristine:
                # the origin's heap (its free lists are this one's except where booked since) + those nodes
                h = list(origin._heaps.get(key) or origin._heap(gpu_type, g))
                size = self.size
                for i in self._dirty.get(gpu_type, ()):
                    if size[i] >= g:
                        heapq.heappush(h, self._entry(i, g))
            else:
                h = [self._entry(i, g) for i in self.by_type[gpu_type] if self.size[i] >= g]
                heapq.heapify(h)
            self._heaps[key] = h
            self._heaps_of[gpu_type][g] = h
            self._scanned.pop(key, None)           # the heap answers from now on (`_start`)
        return h

    def _entry(self, i: int, g: int) -> tuple[float, int, int, int]:
        """Heap key: when g GPUs of node i are free; among equal times the best fit (the node with the
        fewest GPUs free by then, so whole nodes stay whole for wide jobs)."""
        f = self.free[i]
        t = f[g - 1]
        return (t, bisect.bisect_right(f, t), self.version[i], i)

    def start_time(self, gpu_type: str, num_gpus: int) -> float | None:
        """Just the earliest start of `earliest` (the planner's hot path: cached until the type changes)."""
        g = num_gpus if num_gpus > 1 else 1
        top = self._top[gpu_type]
        value = top.get(g, NOT_CACHED)
        if value is NOT_CACHED:
            kept = self._scanned.get((gpu_type, g))
            if kept is not None and len(kept[0]) == kept[1] and self._origin._pristine:
                value = self._scan(kept[0], kept[2], g)      # no new node of the type booked since: `_start`
            else:
                value = self._start(gpu_type, g)
            top[g] = value
        return None if value is None else value[0]

    def _start(self, gpu_type: str, g: int) -> tuple[float, int] | None:
        """`start_time`'s (start, node) when its cache does not hold it (node -1: on whole nodes)."""
        mx = self.max_node.get(gpu_type)
        if mx is None:
            return None
        if g > mx:
            p = self.earliest(gpu_type, g)
            return None if p is None else (p.start, -1)
        h = self._heaps.get((gpu_type, g))
        origin = self._origin
        if h is None and origin is not None and origin._pristine:
            dirty = self._dirty.get(gpu_type)
            if not dirty:
                # nothing of this type booked since the copy: the origin's answer (and its cache) is this one's
                origin.start_time(gpu_type, g)
                return origin._top[gpu_type][g]
            cap = Timeline.scan_dirty_max
            if Timeline.scan_dirty and (cap is None or len(dirty) <= cap):
                first = None          # the origin's smallest key among the nodes this copy has not booked
                for e in origin._sorted_entries(gpu_type, g):
                    if e[3] not in dirty:
                        first = e
                        break
                self._scanned[(gpu_type, g)] = (dirty, len(dirty), first)
                return self._scan(dirty, first, g)
        if h is None and self._pristine and Timeline.sorted_pristine:
            # nothing booked: every node's key is current, and the smallest is the heap's top
            keys = self._sorted_entries(gpu_type, g)
            return (keys[0][0], keys[0][3]) if keys else None
        if h is None:
            h = self._heap(gpu_type, g)
        ver = self.version
        while h and h[0][2] != ver[h[0][3]]:
            heapq.heappop(h)
        return (h[0][0], h[0][3]) if h else None

    def _scan(self, dirty: set[int], first: tuple | None, g: int) -> tuple[float, int] | None:
        """`start_time`'s answer without a heap (`scan_dirty`): the smallest heap key (`_entry`) among the
        origin's nodes this copy has not booked (`first`: their keys are the origin's, the same free list
        and version) and the booked ones (`dirty`, a handful in a decode: their keys now). What a heap of
        this copy would give, without copying the origin's heap and pushing every booking into it.
        `first` is kept per (type, GPU count) while the copy books no other node of the type (`_scanned`:
        the booked nodes only grow, and the origin is pristine, so the same count is the same set)."""
        best = first
        size, free, ver = self.size, self.free, self.version
        for i in dirty:
            if size[i] >= g:
                f = free[i]
                t = f[g - 1]
                if best is not None and t > best[0]:
                    continue                     # a later start: its key is larger whatever follows
                e = (t, bisect.bisect_right(f, t), ver[i], i)
                if best is None or e < best:
                    best = e
        return None if best is None else (best[0], best[3])

    def _sorted_entries(self, gpu_type: str, g: int) -> list[tuple[float, int, int, int]]:
        """A pristine timeline's heap keys of the type's nodes that hold g GPUs, sorted; kept on the
        pristine timeline it was copied from when it holds no booking of its own (the same free lists and
        versions), while that one is pristine."""
        root = self
        while root._origin is not None and root._origin._pristine and not root._dirty:
            root = root._origin                  # a copy that booked nothing since its origin: its origin's keys
        kept = root.__dict__.setdefault("_sorted", {})
        out = kept.get((gpu_type, g))
        if out is None:
            size = root.size
            out = kept[(gpu_type, g)] = sorted(root._entry(i, g) for i in root.by_type[gpu_type] if size[i] >= g)
        return out

    def place(self, gpu_type: str, num_gpus: int) -> Placement | None:
        """`earliest` without a lower bound, from the start_time cache where it can."""
        g = num_gpus if num_gpus > 1 else 1
        if self.start_time(gpu_type, g) is None:
            return None
        start, node = self._top[gpu_type][g]
        if node >= 0:
            return Placement(gpu_type, start, (node,), g)
        return self.earliest(gpu_type, g)

    def earliest(self, gpu_type: str, num_gpus: int, not_before: float | None = None) -> Placement | None:
        """Where and when a job of `num_gpus` could start on this type at the earliest; None if it never fits."""
        lb = self.now if not_before is None else max(self.now, not_before)
        if gpu_type not in self.by_type:
            return None
        g = max(1, num_gpus)
        if g <= self.max_node[gpu_type]:
            h = self._heap(gpu_type, g)
            while h and h[0][2] != self.version[h[0][3]]:
                heapq.heappop(h)
            if not h:
                return None
            t, _, _, i = h[0]
            return Placement(gpu_type, max(t, lb), (i,), g)
        # whole nodes: k nodes with per_node GPUs each
        per_node = self.max_node[gpu_type]
        k = math.ceil(g / per_node)
        per_node = math.ceil(g / k)
        ready = [(self.free[i][per_node - 1], i) for i in self.by_type[gpu_type] if self.size[i] >= per_node]
        if len(ready) < k:
            return None
        chosen = heapq.nsmallest(k, ready)
        return Placement(gpu_type, max(chosen[-1][0], lb), tuple(i for _, i in chosen), per_node)

    def commit(self, placement: Placement, end: float) -> None:
        """Book the placement's GPUs from its start until `end`."""
        self.book(placement.gpu_type, placement.nodes, placement.per_node, end)

    def book(self, gpu_type: str, nodes: tuple[int, ...], per_node: int, end: float) -> None:
        """`per_node` GPUs of each of `nodes` (of `gpu_type`) busy until `end`: a placement's booking
        (`commit`), or the one a one-node job's cached start names (`start_time` keeps (start, node) in
        `_top[type][GPUs]`: `commit(place(...))` books that node; simulate's and construct's one-node paths
        book it without building the placement), or a journal's (construct's `resume`)."""
        self._top[gpu_type].clear()
        self._pristine = False
        if self._origin is not None:
            dirty = self._dirty.get(gpu_type)
            if dirty is None:
                dirty = self._dirty[gpu_type] = set()
        else:
            dirty = None
        free, owned, version = self.free, self._owned, self.version
        heaps = self._heaps_of.get(gpu_type)       # a node's heaps are its type's
        for i in nodes:
            f = free[i]
            if i not in owned:                   # shared with a copy: copy it first
                f = free[i] = list(f)
                owned.add(i)
            if dirty is not None:
                dirty.add(i)
            del f[:per_node]                     # the earliest-free GPUs of the node are the ones taken
            if per_node == 1:
                bisect.insort(f, end)
            else:                                # as many insorts of `end`: after the times <= end
                k = bisect.bisect_right(f, end)
                f[k:k] = [end] * per_node
            version[i] += 1
            if heaps:
                size = self.size[i]
                for g, h in heaps.items():
                    if g <= size:
                        heapq.heappush(h, self._entry(i, g))

    def free_at(self) -> dict[str, float]:
        """Per type, the earliest time one GPU is free after everything booked so far: the earliest start
        of a one-GPU job (`start_time`, from the cache and the origin's keys on a copy; `free_at_from_starts`
        off: every node's first free time read)."""
        if Timeline.free_at_from_starts:
            out = {}
            for t in self.by_type:
                s0 = self.start_time(t, 1)
                if s0 is not None:
                    out[t] = s0
            return out
        return {t: min(self.free[i][0] for i in idx if self.size[i]) for t, idx in self.by_type.items()
                if any(self.size[i] for i in idx)}

    def last_end(self) -> float:
        return max((f[-1] for f in self.free if f), default=self.now)


def _est_end(job: RunningJob) -> float:
    return job.est_end


_BASE: list = []        # [(nodes, running, now, unknown_busy_s, pristine Timeline)]: the last one built
SHIFT_BASE = True       # a new base derived from the last one (`_shifted`); off: built anew (tests/test_fast_paths.py)
SHIFT_FAST = True       # `_shifted` patches per-node job lists and finds changed nodes at C speed; off: a pass over
                        # every running job and node in Python (tests/test_fast_paths.py)
SHARE_LISTS = True      # `_shifted` keeps the last base's list of a node whose free times did not change (off: a copy)


def _shared_base(now: float, nodes: tuple, running: tuple, unknown_busy_s: float) -> Timeline:
    """The pristine timeline of these exact tuples (identity: a snapshot's are immutable), built once; a
    later snapshot's is derived from the last one where it can (`_shifted`: the next round of the
    simulator changes a few nodes and moves the clock)."""
    if _BASE:
        n, r, t, u, base = _BASE[0]
        if n is nodes and r is running and t == now and u == unknown_busy_s and base._pristine:
            return base
        if SHIFT_BASE and u == unknown_busy_s and now >= t:
            shifted = _shifted(base, n, r, now, nodes, running, unknown_busy_s)
            if shifted is not None:
                _BASE[:] = [(nodes, running, now, unknown_busy_s, shifted)]
                return shifted
    base = Timeline.__new__(Timeline)
    base._build(now, nodes, running, unknown_busy_s)
    _BASE[:] = [(nodes, running, now, unknown_busy_s, base)]
    return base


def _single_node(job: RunningJob, index: dict[str, int]) -> int | None:
    """The one node a running job holds, as `_build` spreads it (None: several, or none it knows)."""
    where = [index[n] for n in job.nodes if n in index]
    return where[0] if len(where) == 1 else None


def _node_free(now: float, node: NodeState, jobs: list[RunningJob], unknown_busy_s: float) -> tuple[list[float], int]:
    """One node's sorted free times as `_build` makes them when every job it holds runs on it alone: its
    free GPUs at now, its running jobs' GPUs at their ends (earliest end first, while busy GPUs are left
    to explain), the rest an hour from now; and that rest's count."""
    g = node.gpus
    f = node.gpus_free
    f = 0 if f < 0 else g if f > g else f
    busy = g - f
    out = [now] * f
    for job in sorted(jobs, key=_est_end):
        take = min(busy, job.num_gpus)
        out.extend([max(now, job.est_end)] * take)
        busy -= take
    if busy:
        out.extend([now + unknown_busy_s] * busy)
    out.sort()
    return out, busy


def _increments(base: Timeline, nodes: tuple, running: tuple, unknown_busy_s: float) -> tuple | None:
    """What `_shifted` needs of a base built from (nodes, running): per running job (by identity) its node,
    per node its count of unexplained busy GPUs; None where `_build` did something else (a node skipped,
    a job on several nodes or on none it knows, a name twice)."""
    inc = getattr(base, "_inc", None)
    if inc is not None:
        return inc or None                  # () : already found not to apply to this base
    base._inc = ()
    if len(base.names) != len(nodes) or len(set(base.names)) != len(nodes):
        return None
    index = {name: i for i, name in enumerate(base.names)}
    on: dict[int, tuple[RunningJob, int]] = {}
    jobs: list[list[RunningJob]] = [[] for _ in nodes]
    for job in running:
        i = _single_node(job, index)
        if i is None or id(job) in on:
            return None
        on[id(job)] = (job, i)
        jobs[i].append(job)
    rest = [_node_free(base.now, nodes[i], jobs[i], unknown_busy_s)[1] for i in range(len(nodes))]
    base._inc = (index, on, rest, jobs)
    return base._inc


def _shifted(prev: Timeline, prev_nodes: tuple, prev_running: tuple, now: float, nodes: tuple, running: tuple,
             unknown_busy_s: float) -> Timeline | None:
    """The base timeline of (now, nodes, running) derived from `prev` (a base of an earlier clock): the same
    free lists as `_build` gives (tests/test_fast_paths.py), with only the nodes whose free GPUs or jobs
    changed (or that hold GPUs no job explains, booked from the clock) rebuilt, and every other node's
    list moved to the new clock (its times before now become now). None where it cannot tell (the node
    list changed in anything but free GPUs; a job on several nodes): `_build` then."""
    if len(nodes) != len(prev_nodes):
        return None
    inc = _increments(prev, prev_nodes, prev_running, unknown_busy_s)
    if inc is None:
        return None
    index, on, rest, on_node = inc
    fast = SHIFT_FAST
    if fast:
        changed = set(itertools.compress(range(len(rest)), rest))
        differ = itertools.compress(range(len(nodes)), map(operator.is_not, prev_nodes, nodes))
    else:
        changed = {i for i, r in enumerate(rest) if r}
        differ = (i for i, same in enumerate(map(operator.is_, prev_nodes, nodes)) if not same)
    for i in differ:
        a, b = prev_nodes[i], nodes[i]
        if a.name != b.name or a.gpu_type != b.gpu_type or a.gpus != b.gpus:
            return None
        if a.gpus_free != b.gpus_free:
            changed.add(i)
    # `on` holds every job it names, so no new object can have the id of one of them: ids tell them apart
    ids = set(map(id, running))
    if len(ids) != len(running):
        return None                                  # the same job object twice
    keys = on.keys()
    ended = keys - ids
    started = ids - keys
    new_on = on
    if ended or started:
        new_on = dict(on)
        for k in ended:
            changed.add(new_on.pop(k)[1])
        for job in running:
            k = id(job)
            if k in started:
                i = _single_node(job, index)
                if i is None:
                    return None
                new_on[k] = (job, i)
                changed.add(i)
    new_rest = list(rest)
    share = SHARE_LISTS
    if fast:
        # per node the jobs it holds, patched where jobs ended or started (the lists of the nodes they were
        # on copied first: the last base's stay as they are); every other node's list is the last base's,
        # moved to the clock where its first GPU frees before now
        new_on_node = list(on_node)
        if ended or started:
            fresh: set[int] = set()
            for k in ended:
                job, i = on[k]
                if i not in fresh:
                    new_on_node[i] = list(new_on_node[i])
                    fresh.add(i)
                held = new_on_node[i]
                del held[next(n for n, x in enumerate(held) if x is job)]
            for k in started:
                job, i = new_on[k]
                if i not in fresh:
                    new_on_node[i] = list(new_on_node[i])
                    fresh.add(i)
                new_on_node[i].append(job)
        free = list(prev.free) if share else [list(f) for f in prev.free]
        for i in [i for i, f in enumerate(free) if f and f[0] < now]:
            if i not in changed:
                f = free[i]
                k = bisect.bisect_left(f, now)
                free[i] = [now] * k + f[k:]
        for i in changed:
            free[i], new_rest[i] = _node_free(now, nodes[i], new_on_node[i], unknown_busy_s)
    else:
        jobs: dict[int, list[RunningJob]] = {i: [] for i in changed}
        if changed:
            for job, i in new_on.values():
                if i in changed:
                    jobs[i].append(job)
        free = []
        for i, f in enumerate(prev.free):
            if i in changed:
                f, new_rest[i] = _node_free(now, nodes[i], jobs[i], unknown_busy_s)
            elif f and f[0] < now:
                k = bisect.bisect_left(f, now)
                f = [now] * k + f[k:]
            elif not share:
                f = list(f)
            free.append(f)
        new_on_node = [[] for _ in nodes]
        for job, i in new_on.values():
            new_on_node[i].append(job)
    t = Timeline.__new__(Timeline)
    t.now, t.names, t.types, t.by_type, t.size, t.max_node = now, prev.names, prev.types, prev.by_type, prev.size, \
        prev.max_node
    t.free = free
    t.version = [0] * len(free)
    t._heaps = {}
    t._heaps_of = defaultdict(dict)
    t._top = defaultdict(dict)
    # a node's list unchanged since `prev` is `prev`'s own (`SHARE_LISTS`): neither timeline owns it, so a
    # booking on either copies it first (bases are only ever copied, never booked: `_shared_base`)
    t._owned = set() if share else set(range(len(free)))
    if share:
        prev._owned = set()
    t._pristine = True
    t._origin = None
    t._dirty = {}
    t._scanned = {}
    t._inc = (index, new_on, new_rest, new_on_node)
    return t
