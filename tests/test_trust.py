"""Trust (issue 13 item 4), without Slurm: plain jobs keep their rank, claims are bounded by the limit.

Expected queues are worked out by hand from Slurm's rule (priority descending, then the lower job id)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from msched.policy.priorities import MAX_PRIORITY, assign_in_place
from msched.rounds.core import bounded_claim


def _queue(values: dict[str, int]) -> list[str]:
    return sorted(values, key=lambda j: (-values[j], int(j)))


def test_flat_priorities_let_nothing_pass_a_plain_job():
    """Multifactor with all weights 0: every job holds 1 and Slurm orders by job id. carol's plain job 1
    was submitted first; bob's managed jobs 2 and 3 are planned 3 before 2: 3 may pass 2 only if it can
    stay below job 1, which it cannot (priority 1 is the floor), so nothing is written."""
    assert assign_in_place(["3", "2"], {"2": 1, "3": 1}, {"1": 1}) == {"2": 1, "3": 1}
    # without a plain job above them, the managed run may spread upwards (nothing to pass)
    out = assign_in_place(["3", "2"], {"2": 1, "3": 1}, {"4": 1})
    assert _queue({**out, "4": 1}) == ["3", "2", "4"]


def test_room_between_plain_values_is_used_and_places_are_swapped_across_plain_jobs():
    """Age/fair-share priorities: plain 1 (900) and 3 (700); managed 2 (800), 4 (600), 5 (500). Managed
    places are 2nd, 4th and 5th; planned order 5, 4, 2 fills them: 5 takes the 2nd place (between 900
    and 700), 4 keeps 600, 2 goes below it. Plain jobs keep places 1 and 3."""
    plain = {"1": 900, "3": 700}
    out = assign_in_place(["5", "4", "2"], {"2": 800, "4": 600, "5": 500}, plain)
    assert _queue({**out, **plain}) == ["1", "5", "3", "4", "2"]
    assert out["4"] == 600                                       # kept: no write
    assert 700 < out["5"] < 900 and 1 <= out["2"] < 600


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(1, 5000)), min_size=1, max_size=14), st.randoms())
def test_plain_jobs_keep_their_place_and_are_never_written(jobs, rnd):
    ids = [str(i + 1) for i in range(len(jobs))]
    managed = {j: p for j, (m, p) in zip(ids, jobs, strict=True) if m}
    plain = {j: p for j, (m, p) in zip(ids, jobs, strict=True) if not m}
    order = list(managed)
    rnd.shuffle(order)
    out = assign_in_place(order, managed, plain)
    assert set(out) == set(managed) and not set(out) & set(plain)
    assert all(1 <= v <= MAX_PRIORITY for v in out.values())
    before, after = _queue({**managed, **plain}), _queue({**out, **plain})
    assert [k for k, j in enumerate(before) if j in plain] == [k for k, j in enumerate(after) if j in plain]
    if not plain:       # nothing to keep: the plan is followed exactly
        assert [j for j in after if j in managed] == order


def test_a_claim_is_bounded_by_the_time_limit():
    """A forged tag claims 1e8 iterations; the estimate is cut to fit in the 1 h limit on the fastest
    type (a100 at 0.1 s/iteration -> 36,000 iterations), and a type where that work would exceed the
    limit (titanv at 0.3 s/iteration: 10,800 s) is dropped."""
    est = {"a100": 1e8 * 0.1, "titanv": 1e8 * 0.3}
    assert bounded_claim(est, 3600.0) == {"a100": 3600.0}
    honest = {"a100": 1000.0, "titanv": 3000.0}
    assert bounded_claim(honest, 3600.0) == honest
    assert bounded_claim({"a100": 1000.0, "titanv": 5000.0}, 3600.0) == {"a100": 1000.0}
    assert bounded_claim(est, None) == est


def test_managed_first_puts_every_managed_job_above_every_plain_one():
    from msched.policy.priorities import assign_first
    plain = {"1": 9000, "3": 7000}
    out = assign_first(["5", "4", "2"], {"2": 8000, "4": 6000, "5": 5000}, plain)
    assert _queue({**out, **plain}) == ["5", "4", "2", "1", "3"]
    flat = assign_first(["3", "2"], {"2": 1, "3": 1}, {"1": 1})
    assert _queue({**flat, "1": 1}) == ["3", "2", "1"]
