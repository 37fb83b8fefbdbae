"""settle's trials weighed in two processes (`SettleOptions.trial_workers = 2`, `TrialsAside`; issue 21,
fourteenth pass): the same plan and report as one process, whichever trial is taken; a child that fails
leaves the trials to this process; the child never runs the caller's code after the fork.

The event round is the simulated dev cluster's (test_settle_caches._busy_round: 600 pending, 4 running
jobs ended), with the fork's queue-size floor lowered so that a 600-job round forks."""

from __future__ import annotations

import dataclasses
import math
import os

import pytest
from test_settle_caches import _busy_round

from msched.policy.timeline import Timeline
from msched.rounds import settle as settle_mod
from msched.rounds.core import build_snapshot
from msched.rounds.settle import Evaluation, SettleOptions, TrialsAside, settle


@pytest.fixture(scope="module")
def event_round():  # noqa: ANN201 - (snapshot, plan, incumbent)
    c, policy, est, inc = _busy_round()
    snap, _views = build_snapshot(c.jobs(), c.nodes(), est, now=c.now())
    return snap, policy.plan(snap), inc


def _both(event_round, monkeypatch, accept_at: int | None, child_fails: bool = False):  # noqa: ANN001, ANN202
    """settle with one and with two processes, every trial worse than the incumbent but the
    `accept_at`-th of each settle (0: the first), which beats it; the trials weighed here: the pid that
    weighed each and the measures it was weighed on."""
    snap, plan, inc = event_round
    monkeypatch.setattr(settle_mod, "ASIDE_MIN_PENDING", 0)
    weighed: list[int] = []

    def better(held, base, now, objective, margin, cap=math.inf):  # noqa: ANN001, ANN202
        weighed.append((os.getpid(), held.makespan_end, held.mean_end))
        return len(weighed) - 1 == accept_at

    monkeypatch.setattr(settle_mod, "_better", better)
    monkeypatch.setattr(settle_mod, "_worse", lambda *a, **k: True)
    if child_fails:
        parent, real = os.getpid(), settle_mod.TrialsAside.start

        def start(sizes, evaluation_of):  # noqa: ANN001, ANN202 - the child's evaluations raise
            def failing(k):  # noqa: ANN001, ANN202
                if os.getpid() != parent:
                    raise RuntimeError("the child fails")
                return evaluation_of(k)
            return real(sizes, failing)

        monkeypatch.setattr(settle_mod.TrialsAside, "start", staticmethod(start))
    out = []
    for workers in (1, 2):
        weighed.clear()
        opts = SettleOptions(write_budget=10**6, moves_per_change=None, head_gpus=None, trial_workers=workers)
        out.append((settle(snap, plan, inc, options=opts), list(weighed)))
    return out


@pytest.mark.parametrize("accept_at", [None, 0, 1, 2, 3])
def test_two_processes_hold_the_plan_one_does(event_round, monkeypatch, accept_at):
    """None: every trial refused (the usual event round), all four weighed; 1 and 3: a trial the child
    weighed is taken, and held with this process's own evaluation of it (placements, timeline)."""
    (one, weighed_one), (two, weighed_two) = _both(event_round, monkeypatch, accept_at)
    assert one[0] == two[0] and one[1] == two[1]
    assert weighed_one == weighed_two             # the same trials, on the same measures, in the same order
    assert [pid for pid, *_ in weighed_two] == [os.getpid()] * (4 if accept_at is None else accept_at + 1)
    assert len({tuple(m) for _pid, *m in weighed_two}) == len(weighed_two)     # each trial its own plan
    assert one[1].candidates >= 8                      # four trials of the halving sequence
    if accept_at is not None:
        assert one[1].accepted and one[1].moved == one[1].candidates >> accept_at


@pytest.mark.parametrize("accept_at", [None, 1])
def test_a_failing_child_leaves_its_trials_here(event_round, monkeypatch, accept_at):
    (one, weighed_one), (two, weighed_two) = _both(event_round, monkeypatch, accept_at, child_fails=True)
    assert one[0] == two[0] and one[1] == two[1] and weighed_one == weighed_two


def test_the_child_sends_its_measures_in_order_and_runs_nothing_after_the_fork(tmp_path):
    marks = tmp_path / "marks"

    def measures(k: int) -> Evaluation:
        return Evaluation(placed={}, makespan_end=10.0 * k, mean_end=k + 0.5, timeline=Timeline(0.0, ()))

    aside = TrialsAside.start([3, 1], measures)
    with marks.open("a") as f:                          # a child that returned here would write its pid
        f.write(f"{os.getpid()}\n")
    assert aside is not None
    got = [aside.next(), aside.next(), aside.next()]
    aside.close()
    assert [(e.makespan_end, e.mean_end) for e in got[:2]] == [(30.0, 3.5), (10.0, 1.5)]
    assert got[2] is None                               # the child is done: nothing more
    assert marks.read_text().split() == [str(os.getpid())]
    assert dataclasses.replace(SettleOptions(), trial_workers=2).trial_workers == 2
    with pytest.raises(ValueError):
        SettleOptions(trial_workers=3)


def test_the_site_config_sets_the_reorderer_s_trial_workers():
    from msched.config import Config, ConfigError
    from msched.rounds.reorder import Reorderer

    assert Reorderer(Config(), client=None, store=None, publish=False).settle_options.trial_workers == 1
    assert Reorderer(Config(trial_workers=2), client=None, store=None,
                     publish=False).settle_options.trial_workers == 2
    for bad in (0, 3, True, 1.5):
        with pytest.raises(ConfigError, match="trial_workers"):
            Config(trial_workers=bad)._checked()
    assert SettleOptions().trial_workers == 1         # the simulator's rounds: one process


def test_a_child_slower_than_the_wait_is_stopped_and_its_trials_are_left_here():
    """A stuck child (a lock held at the fork, or starved of CPU) must not hold the round: past `wait_s`
    the round stops it and weighs every later trial itself, so no measure of it arrives out of step."""
    import time

    def slow_measures(k: int) -> Evaluation:
        time.sleep(30.0)
        return Evaluation(placed={}, makespan_end=10.0 * k, mean_end=k + 0.5, timeline=Timeline(0.0, ()))

    aside = TrialsAside.start([3, 1], slow_measures, wait_s=0.2)
    assert aside is not None
    assert aside.next() is None                         # waited 0.2 s, not the child's 30 s
    assert aside.closed
    with pytest.raises(ChildProcessError):              # stopped and reaped by the round
        os.waitpid(aside.pid, os.WNOHANG)
    assert aside.next() is None                         # and nothing later comes from it
    aside.close()                                       # a second close does nothing
