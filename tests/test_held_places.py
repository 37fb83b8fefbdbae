"""`HeldPlaces`: `assign_in_place` prepared once for settle's several orders (issue 21, fourteenth pass).

Checked against Slurm's rule written out here (the queue sorted by priority descending, then the lower job
id): the gap count that replaced sorting the queue again answers as the sort does, a run that holds its
places in Slurm's order keeps its values (the shortcut past `_run_values`), and one prepared instance
serving several orders in a row answers each as a fresh one does, with every plain job in its place."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from msched.policy.priorities import (
    MAX_PRIORITY,
    HeldPlaces,
    _run_values,
    assign_keeping_plain,
    keeping_plain,
)


def _queue(values: dict[str, int]) -> list[str]:
    return sorted(values, key=lambda j: (-values[j], int(j)))


def _plain_places(values: dict[str, int], plain: dict[str, int]) -> list[tuple[int, str]]:
    return [(k, j) for k, j in enumerate(_queue({**values, **plain})) if j in plain]


@st.composite
def _queues(draw) -> tuple[dict[str, int], dict[str, int]]:
    top = draw(st.sampled_from([12, 5000]))          # tight values with ties, or room between them
    kinds = draw(st.lists(st.tuples(st.booleans(), st.integers(1, top)), min_size=1, max_size=16))
    ids = [str(k + 1) for k in range(len(kinds))]
    managed = {j: p for j, (m, p) in zip(ids, kinds, strict=True) if m}
    plain = {j: p for j, (m, p) in zip(ids, kinds, strict=True) if not m}
    return managed, plain


@settings(max_examples=400, deadline=None)
@given(_queues(), st.data())
def test_the_gap_count_answers_as_sorting_the_queue_again(queues, data):
    """Managed jobs given new values (some crossing plain jobs, some swapping across one in both
    directions, which keeps every plain rank; ties broken by the job id) are judged as the sort judges them."""
    managed, plain = queues
    places = HeldPlaces(managed, managed, plain)
    new = {j: data.draw(st.sampled_from([v, data.draw(st.integers(1, 12)), v + data.draw(st.integers(-3, 3))]))
           for j, v in managed.items()}
    assert places.plain_ranks_kept(new) == (_plain_places(new, plain) == _plain_places(managed, plain))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(1, 50), min_size=1, max_size=12, unique=True), st.one_of(st.none(), st.integers(51, 60)),
       st.one_of(st.none(), st.integers(0, 1)))
def test_a_run_in_its_slurm_order_keeps_its_values(values, hi, lo):
    """The shortcut: a run whose planned jobs are its holders in Slurm's order is what `_run_values`
    answers for it, every value kept."""
    current = {str(k): v for k, v in enumerate(sorted(values, reverse=True))}
    holders = list(current)                                   # Slurm's order: priority descending
    rank = {j: k for k, j in enumerate(holders)}
    assert _run_values(holders, current, hi, lo, rank, set(holders)) == current


@settings(max_examples=300, deadline=None)
@given(_queues(), st.randoms())
def test_one_prepared_instance_answers_every_order_as_a_fresh_one(queues, rnd):
    managed, plain = queues
    held = dict(managed)
    assign = keeping_plain(managed, managed, plain)
    for _ in range(4):
        order = list(managed)
        rnd.shuffle(order)
        out = assign(order)
        assert out == assign_keeping_plain(order, managed, plain)
        assert set(out) == set(managed) and all(1 <= v <= MAX_PRIORITY for v in out.values())
        assert _plain_places(out, plain) == _plain_places(managed, plain)
    assert managed == held                                    # nothing written into the values it was given


def test_an_order_of_other_jobs_is_refused():
    assign = keeping_plain(["1", "2"], {"1": 5, "2": 4}, {"3": 1})
    for order in (["1"], ["1", "2", "2"], ["1", "4"]):
        try:
            assign(order)
        except ValueError:
            continue
        raise AssertionError(f"{order} was taken")
