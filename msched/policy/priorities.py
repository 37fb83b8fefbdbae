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
from collections.abc import Mapping, Sequence

SPACING = 1000
MIN_GAP = 2                        # below this spacing, reuse freed values instead of new ones
MAX_PRIORITY = 2**32 - 3          # Slurm reserves 0xffffffff (INFINITE) and 0xfffffffe (NO_VAL)


def _kept(order: Sequence[str], current: Mapping[str, int]) -> set[str]:
    """Longest subsequence of `order` with strictly decreasing current priority (patience sorting)."""
    tails: list[int] = []          # tails[k] = smallest -priority ending an increasing run of length k+1
    tail_idx: list[int] = []
    parent: list[int] = [-1] * len(order)
    for pos, job in enumerate(order):
        key = -current[job]
        k = bisect.bisect_left(tails, key)
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
    """New priority for every job of `order` (highest first), changing as few current values as it can."""
    n = len(order)
    if not n:
        return {}
    kept_set = _kept(order, current)
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
