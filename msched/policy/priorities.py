"""Writing a planned order as Slurm priorities with as few `scontrol update` calls as possible.

Slurm starts jobs by priority (highest first), so a plan is an order; what we write is priority values.
The rule (issue 6: "a permutation of the values the managed jobs already hold, spaced so one insertion
moves few jobs"):

1. Keep: the longest subsequence of the planned order whose current priorities are already strictly
   decreasing (a longest increasing subsequence, O(n log n)). Those jobs keep their values: no update.
2. Re-value the others, run by run. A run of r moved jobs between two kept neighbours holding `hi` and
   `lo` gets r distinct values strictly between them, descending:
   a. where (lo, hi) has room for gaps of at least MIN_GAP: evenly spaced integers inside it
      (`lo + (hi-lo)*(r-i)/(r+1)`), leaving room on both sides for later insertions; at the top (no kept
      job above) `lo + SPACING*(r-i)`, at the bottom (none below) `hi - SPACING*(i+1)`; never above
      MAX_PRIORITY (Slurm reserves the two highest 32-bit values) nor below 1 (0 holds a job);
   b. where it is tight: the moved jobs' own current values that fall in (lo, hi), evenly picked (a
      permutation of what the managed jobs held, as far as it goes); else any distinct integers left;
   c. no room (adjacent integers, e.g. priority/basic's one-less-per-job values): the kept job below the
      run joins it (and the next, ...) until the widened run fits; at worst it reaches the bottom of the
      queue, where SPACING-apart values always fit. So the first round on tightly packed values rewrites
      from the first moved job down and leaves SPACING gaps; later rounds then move only the moved jobs.
3. Re-space everything SPACING apart from the highest held value (raised to 1 + SPACING*(n-1) when it
   is lower, as with multifactor's all-equal low values) down when even the bottom has no
   room (values near 1), or when more than half the jobs move anyway and most of the resulting values
   are packed tighter than MIN_GAP (a first round on priority/basic's values): one round pays about n
   writes once, instead of every later round paying for the lack of room.

Unmanaged jobs are never written; a managed job moved by step 2 lands between its kept neighbours, so its
standing against unmanaged jobs is that of the values around it. Priorities are always >= 1.
"""

from __future__ import annotations

import bisect
import functools
from collections.abc import Callable, Iterable, Mapping, Sequence

SPACING = 1000
MIN_GAP = 2                        # below this spacing, reuse freed values instead of new ones
MAX_PRIORITY = 2**32 - 3          # Slurm reserves 0xffffffff (INFINITE) and 0xfffffffe (NO_VAL)


def _longest_run(order: Sequence[str], keys: Sequence[float | None], strict: bool) -> set[str]:
    """The jobs of the longest subsequence of `order` whose keys increase (strictly, or never decrease),
    skipping jobs whose key is None (patience sorting, O(n log n))."""
    tails: list[float] = []        # tails[k] = smallest key ending a run of length k+1
    tail_idx: list[int] = []
    parent: list[int] = [-1] * len(order)
    place = bisect.bisect_left if strict else bisect.bisect_right
    for pos, key in enumerate(keys):
        if key is None:
            continue
        k = place(tails, key)
        if k == len(tails):
            tails.append(key)
            tail_idx.append(pos)
        else:
            tails[k] = key
            tail_idx[k] = pos
        parent[pos] = tail_idx[k - 1] if k > 0 else -1
    out: set[str] = set()
    pos = tail_idx[-1] if tail_idx else -1
    while pos >= 0:
        out.add(order[pos])
        pos = parent[pos]
    return out


def _kept(order: Sequence[str], current: Mapping[str, int]) -> set[str]:
    """Longest subsequence of `order` with strictly decreasing current priority."""
    return _longest_run(order, [-current[job] for job in order], strict=True)


def _kept_with_room(order: Sequence[str], current: Mapping[str, int]) -> set[str]:
    """The most jobs of `order` that can keep their values with room left for every other job: kept jobs
    at planned positions i < j need `current[i] - current[j] >= j - i` (the j-i-1 jobs between them get
    distinct integers strictly between), the first job at i needs i values above it (up to MAX_PRIORITY),
    the last one at j needs n-1-j values >= 1 below it. A longest non-increasing run of
    `current + position` among the jobs that pass the bounds.

    Plain `_kept` (strictly decreasing values) keeps more on tightly packed values (priority/basic's
    one-less-per-job, and the values a busy queue's insertions leave), and then a moved job that must go
    between two adjacent kept values pushes the kept jobs below it one by one (measured in the online
    simulator: one arrival rewrote up to 8 unmoved jobs' priorities). Here such a job takes the place
    of at most the jobs it displaces, so an insertion costs its own write where room allows."""
    n = len(order)
    keys: list[float | None] = []
    for pos, job in enumerate(order):
        v = current[job]
        room = MAX_PRIORITY - v >= pos and v - 1 >= n - 1 - pos   # else it cannot keep its value
        keys.append(-(v + pos) if room else None)
    return _longest_run(order, keys, strict=False)


def _spread(values: list[int], r: int) -> list[int]:
    """r of the (descending) values, evenly spread."""
    if len(values) == r:
        return values
    step = len(values) / r
    return [values[int(i * step + step / 2)] for i in range(r)]


def _fill_run(r: int, hi: int | None, lo: int | None, pool: list[int]) -> list[int] | None:
    """r descending values strictly inside (lo, hi), or None when there is no room.
    `pool` is the ascending list of distinct values freed by moved jobs."""
    top = MAX_PRIORITY + 1 if hi is None else hi
    room = top - SPACING * r >= 1 if lo is None else (top - lo) // (r + 1) >= MIN_GAP
    if room:                                                       # room to spare: spaced values
        return _spaced(r, hi, lo, top)
    a = 0 if lo is None else bisect.bisect_right(pool, lo)
    b = len(pool) if hi is None else bisect.bisect_left(pool, hi)
    if b - a >= r:                                                 # tight: the freed values
        return _spread(pool[a:b][::-1], r)
    return _spaced(r, hi, lo, top)


def _spaced(r: int, hi: int | None, lo: int | None, top: int) -> list[int] | None:
    if hi is None and lo is not None and lo + SPACING * r <= MAX_PRIORITY:
        return [lo + SPACING * (r - i) for i in range(r)]
    if lo is None:
        if top - SPACING * r >= 1:
            return [top - SPACING * (i + 1) for i in range(r)]
        lo = 0
    if top - lo - 1 < r:
        return None
    vals = [lo + ((top - lo) * (r - i)) // (r + 1) for i in range(r)]
    if len(set(vals)) != r or vals[0] >= top or vals[-1] <= lo:
        return None
    return vals


def respace(order: Sequence[str], current: Mapping[str, int]) -> dict[str, int]:
    """Last resort: every job of `order` a value, highest first, SPACING apart from the highest held
    value (at least 1 + SPACING*(n-1)) down (squeezed evenly into [1, MAX_PRIORITY] if need be)."""
    n = len(order)
    top = min(MAX_PRIORITY, max(max((current[j] for j in order), default=1), 1 + SPACING * (n - 1)))
    step = SPACING if top - SPACING * (n - 1) >= 1 else max(1, (top - 1) // max(1, n - 1))
    return {job: top - step * k for k, job in enumerate(order)}


def assign_priorities(order: Sequence[str], current: Mapping[str, int]) -> dict[str, int]:
    """New priority for every job of `order` (highest first), changing as few current values as it can:
    from the longest run already in order (widened where a moved job finds no room), or from the most
    jobs that keep their values with room for the others (`_kept_with_room`), whichever writes fewer."""
    if not order:
        return {}
    plain = _assign_keeping(order, current, _kept(order, current))
    if len(plain) and changed(plain, current) <= 1:
        return plain
    roomy = _assign_keeping(order, current, _kept_with_room(order, current))
    return roomy if changed(roomy, current) < changed(plain, current) else plain


def _assign_keeping(order: Sequence[str], current: Mapping[str, int], kept_set: set[str]) -> dict[str, int]:
    n = len(order)
    kept = [j in kept_set for j in order]
    pool = sorted({current[j] for j in order if j not in kept_set})
    out: dict[str, int] = {}
    pos = 0
    while pos < n:
        if kept[pos]:
            out[order[pos]] = current[order[pos]]
            pos += 1
            continue
        end = pos
        while end < n and not kept[end]:
            end += 1
        hi = out[order[pos - 1]] if pos > 0 else None
        while True:
            lo = current[order[end]] if end < n else None
            vals = _fill_run(end - pos, hi, lo, pool)
            if vals is not None:
                break
            if end >= n:
                return respace(order, current)
            kept[end] = False           # no room: the kept job below joins the run (local widening)
            v = current[order[end]]
            k = bisect.bisect_left(pool, v)
            if k == len(pool) or pool[k] != v:
                pool.insert(k, v)
            while end < n and not kept[end]:
                end += 1
        for j, v in zip(order[pos:end], vals, strict=True):
            out[j] = v
        for v in vals:
            k = bisect.bisect_left(pool, v)
            if k < len(pool) and pool[k] == v:
                del pool[k]
        pos = end
    moved = sum(1 for j in order if out[j] != current[j])
    if moved > n // 2 and n > 2:
        vals = sorted(out.values())
        tight = sum(1 for a, b in zip(vals, vals[1:], strict=False) if b - a < MIN_GAP)
        if tight > (n - 1) // 2:
            return respace(order, current)      # most jobs move anyway: move them onto spaced values
    return out


def changed(new: Mapping[str, int], current: Mapping[str, int]) -> int:
    return sum(1 for j, v in new.items() if current.get(j) != v)


def fewest_moves(order: Sequence[str], current: Mapping[str, int]) -> int:
    """Lower bound on priority writes for this change of order: jobs minus the longest kept run."""
    return len(order) - len(_kept(order, current)) if order else 0


# ------------------------------------------------------------------ plain jobs keep their rank
@functools.lru_cache(maxsize=1 << 16)   # a round sorts the queue by it several times
def _id_key(job_id: str) -> tuple[int, str]:
    """Slurm's tie-break among equal priorities: the older (lower) job id first."""
    head = job_id.split("_")[0]
    return (int(head), job_id) if head.isdigit() else (1 << 62, job_id)


def _run_values(run: Sequence[str], current: Mapping[str, int], hi: int | None, lo: int | None,
                slurm_rank: Mapping[str, int], holders: set[str]) -> dict[str, int] | None:
    """Values for one run of managed jobs (planned order) lying between two plain jobs whose priorities
    are `hi` (above; None: no plain job above) and `lo` (below; None: none below). Only a job that holds
    one of these places now (`holders`) may keep its value: it stays exactly where it is (its place
    relative to the plain jobs is already right); a new value is
    strictly inside (lo, hi), so it can pass no plain job. None when the run cannot take the planned
    order (no room: e.g. flat priorities, where every job holds 1): then the run is left as it is."""
    r = len(run)
    mine = [j for j in run if j in holders]
    kept_set = _kept(mine, {j: -slurm_rank[j] for j in mine})    # longest part already in Slurm's order
    if len(kept_set) == r:
        return {j: current[j] for j in run}
    out: dict[str, int] = {}
    pos = 0
    while pos < r:
        if run[pos] in kept_set:
            out[run[pos]] = current[run[pos]]
            pos += 1
            continue
        end = pos
        while end < r and run[end] not in kept_set:
            end += 1
        top = out[run[pos - 1]] if pos > 0 else hi
        bottom = current[run[end]] if end < r else lo
        vals = _between(end - pos, top, bottom)
        if vals is None:
            return _between_all(run, hi, lo)
        out.update(zip(run[pos:end], vals, strict=True))
        pos = end
    return out


def _between(n: int, top: int | None, bottom: int | None) -> list[int] | None:
    """n distinct descending integers strictly inside (bottom, top) (None: unbounded), spaced."""
    upper = MAX_PRIORITY + 1 if top is None else top
    lower = 0 if bottom is None else bottom
    if upper - lower - 1 < n:
        return None
    if top is None:                                     # room above: SPACING apart, as in assign_priorities
        if lower + SPACING * n <= MAX_PRIORITY:
            return [lower + SPACING * (n - i) for i in range(n)]
    elif bottom is None and upper - SPACING * n >= 1:
        return [upper - SPACING * (i + 1) for i in range(n)]
    return [lower + ((upper - lower) * (n - i)) // (n + 1) for i in range(n)]


def _between_all(run: Sequence[str], hi: int | None, lo: int | None) -> dict[str, int] | None:
    vals = _between(len(run), hi, lo)
    return None if vals is None else dict(zip(run, vals, strict=True))


def assign_in_place(order: Sequence[str], current: Mapping[str, int], plain: Mapping[str, int],
                    ) -> dict[str, int]:
    """New priorities for the managed jobs of `order` (planned, highest first) that permute them only
    among the places they already hold in Slurm's queue: every plain (unmanaged) job keeps its rank
    (the number of jobs ahead of it), and nothing is written on a plain job.

    Slurm's queue: priority descending, then the lower job id. First try: the managed places, in that
    queue, are filled in planned order; between two plain jobs each run of managed places is written
    with `_run_values` (kept values where they already fit, new ones strictly between the plain jobs'
    values). If some run has no room for that (with flat priorities, multifactor with all weights 0,
    every job holds 1 and nothing can pass a plain job), each run is instead reordered among its own
    jobs only (a job never crosses a plain job), and a run with no room keeps its values. The result is
    checked against the rule before it is returned. Returns a value for every job of `order`."""
    return HeldPlaces(order, current, plain).assign(order)


class HeldPlaces:
    """`assign_in_place` for many planned orders of the same managed jobs against the same current and
    plain values (settle's hybrids: one round weighs 2-5 orders of ~8,000 managed jobs that differ in a
    few moved jobs). What depends only on the values is worked out once: Slurm's queue (a sort of every
    pending job), the managed jobs' ranks in it, and the runs of managed places between plain jobs. Each
    `assign` then fills the runs; a run whose planned jobs are its holders in their Slurm order keeps its
    values without a search (what `_run_values` returns for it), and the rule's check (every plain job
    keeps its rank) counts the managed jobs between consecutive plain jobs, changed values only, instead
    of sorting the queue again: a plain job's rank is its place among the plain jobs plus the managed
    jobs ahead of it, so ranks are kept exactly when every gap between plain jobs keeps its count."""

    def __init__(self, managed: Iterable[str], current: Mapping[str, int], plain: Mapping[str, int]):
        self.managed = managed_set = set(managed)
        self.current = current
        self.plain = plain
        others = [j for j in plain if j not in managed_set]
        # Slurm's queue: (-value, its id key) sorted as tuples built in one pass (the id key ends with the
        # job id itself, so no two are equal and the job is read back from it)
        keys = [(-current[j], _id_key(j)) for j in managed_set]
        keys += [(-plain[j], _id_key(j)) for j in others]
        keys.sort()
        queue = [key[1][1] for key in keys]
        self.slurm_rank = {j: k for k, j in enumerate(queue)}
        self.runs: list[tuple[list[str], int | None, int | None]] = []     # (jobs holding the places, hi, lo)
        run: list[str] = []
        hi: int | None = None
        for j in [*queue, None]:
            if j is not None and j in managed_set:
                run.append(j)
                continue
            lo = plain[j] if j is not None else None
            if run:
                self.runs.append((run, hi, lo))
                run = []
            hi = lo
        self._plain_keys = sorted((-plain[j], _id_key(j)) for j in others)

    def _gap(self, job: str, value: int) -> int:
        """How many plain jobs Slurm's queue holds ahead of a managed job with this value."""
        return bisect.bisect_left(self._plain_keys, (-value, _id_key(job)))

    def plain_ranks_kept(self, values: Mapping[str, int]) -> bool:
        """Every plain job keeps its rank with the managed jobs at `values` (a value for each)."""
        shift: dict[int, int] = {}
        current = self.current
        for j in self.managed:
            v = values[j]
            if v != current[j]:
                old, new = self._gap(j, current[j]), self._gap(j, v)
                if old != new:
                    shift[old] = shift.get(old, 0) - 1
                    shift[new] = shift.get(new, 0) + 1
        return not any(shift.values())

    def assign(self, order: Sequence[str]) -> dict[str, int]:
        """`assign_in_place(order, current, plain)`: `order` holds the managed jobs, each once."""
        if len(order) != len(self.managed) or not self.managed.issuperset(order):
            raise ValueError("the order must hold the prepared managed jobs, each once")
        current, slurm_rank = self.current, self.slurm_rank
        planned_rank: dict[str, int] | None = None

        def fill(across: bool) -> dict[str, int] | None:
            nonlocal planned_rank
            planned = iter(order)
            out: dict[str, int] = {}
            for holders, top, bottom in self.runs:
                if across:
                    jobs = [next(planned) for _ in holders]
                else:
                    if planned_rank is None:
                        planned_rank = {j: k for k, j in enumerate(order)}
                    jobs = sorted(holders, key=planned_rank.__getitem__)
                if jobs == holders:         # the holders in their Slurm order: `_run_values` keeps them all
                    for q in holders:
                        out[q] = current[q]
                    continue
                vals = _run_values(jobs, current, top, bottom, slurm_rank, set(holders))
                if vals is None:
                    if across:
                        return None
                    vals = {q: current[q] for q in holders}            # no room: the run stays as it is
                out.update(vals)
            return out

        for across in (True, False):
            out = fill(across)
            if out is not None and self.plain_ranks_kept(out):
                return out
        return {j: current[j] for j in order}


def assign_keeping_plain(order: Sequence[str], current: Mapping[str, int], plain: Mapping[str, int],
                         managed_first: bool = False) -> dict[str, int]:
    """The site's rule for writing a planned order: managed jobs permuted among the places they hold, so
    plain jobs keep their rank (`assign_in_place`), unless the site puts managed jobs above plain ones
    (`managed_first`: `assign_first`) or there are none (`assign_priorities`). The policy and the round's incumbent
    comparison (msched.rounds.settle) both write orders this way."""
    return keeping_plain(order, current, plain, managed_first)(order)


def keeping_plain(managed: Iterable[str], current: Mapping[str, int], plain: Mapping[str, int],
                  managed_first: bool = False) -> Callable[[Sequence[str]], dict[str, int]]:
    """`assign_keeping_plain` for orders of the `managed` jobs against these values, prepared once for
    several orders (settle's hybrids; `HeldPlaces`)."""
    if not plain:
        return functools.partial(assign_priorities, current=current)
    if managed_first:
        return functools.partial(assign_first, current=current, plain=plain)
    return HeldPlaces(managed, current, plain).assign


def assign_first(order: Sequence[str], current: Mapping[str, int], plain: Mapping[str, int]) -> dict[str, int]:
    """The site's opt-in `managed_first = true`: every managed job above every plain pending job, in
    planned order (values kept where they already are above the plain jobs and in order; the others
    placed SPACING apart above the highest plain value)."""
    top = max(plain.values(), default=None)
    rank = {j: k for k, j in enumerate(sorted(order, key=lambda j: (-current[j], _id_key(j))))}
    holders = {j for j in order if top is None or current[j] > top}
    vals = _run_values(list(order), current, None, top, rank, holders)
    return vals if vals is not None else respace(order, current)
