"""Packing's node lever (issue 18, pack12): the round keeps a pending shard job off the nodes where a
shard job it would pair badly with runs alone (ExcNodeList), through the hold journal, and `--release`
clears it. The simulator honours ExcNodeList as Slurm does (tests/test_packing_slurm.py checks Slurm's
side on the dev cluster). Values are worked by hand from the tables each test writes."""

from __future__ import annotations

import pytest

from msched.estimate.interference import JobSpeeds
from msched.estimate.perf_table import PerfRow, PerfTable
from msched.policy.packing import ShardJob, pair_value, shard_exclusions
from msched.rounds.holds import apply_exclusions, replay
from msched.rounds.packing import exclusions
from msched.slurm.base import SlurmError, SlurmJob, SlurmNode
from msched.store.db import Store
from msched.store.holds import HoldJournal
from slurm_sim.client import SimClient
from slurm_sim.cluster import parse_cluster
from slurm_sim.packing import PairTruth, ShardRuns, with_shard_nodes
from slurm_sim.simulator import Simulator

R18 = "ResNet-18 (batch size 32)"


def _sim(nodes: int = 2) -> tuple[Simulator, ShardRuns]:
    """`nodes` v100 nodes of one GPU each, every GPU with 2 shards; ResNet-18 pairs at 0.6x each."""
    truth = PerfTable([PerfRow("resnet18", "v100", 1, 32, "float", 100.0)])
    sim = Simulator(with_shard_nodes(parse_cluster(f"v100:1x{nodes}")), truth)
    return sim, ShardRuns(PairTruth({(R18, R18, "v100"): (0.6, 0.6)})).attach(sim)


def _shard(sim: Simulator, iterations: int = 1000) -> str:
    return sim.submit(num_gpus=1, model="resnet18", iterations=iterations, batch_size=32, shards=1,
                      partition="shared")


def test_the_simulator_keeps_a_shard_job_off_its_excluded_nodes():
    sim, runs = _sim()
    a = _shard(sim)
    sim.run_until(0.0)
    home = sim.jobs[a].nodes
    b = _shard(sim)
    sim.set_exc_nodes(sim.jobs[b], sim.node_names[home[0]])
    sim.run_until(1.0)
    # b would have joined a's open shard (Slurm fills a GPU's shards first); excluded, it takes the
    # other node's GPU of its own
    assert sim.jobs[b].state == "RUNNING" and sim.jobs[b].nodes != home and runs.pairs == []
    assert sim.job_view(sim.jobs[b]).exc_nodes == sim.node_names[home[0]]
    c = _shard(sim)                                  # not excluded: joins the first open shard
    sim.run_until(2.0)
    assert sim.jobs[c].state == "RUNNING" and len(runs.pairs) == 1


def test_a_shard_job_excluded_from_every_node_waits_until_the_list_is_cleared():
    sim, _ = _sim(nodes=1)
    a = _shard(sim)
    b = _shard(sim)
    sim.set_exc_nodes(sim.jobs[b], sim.node_names[0])
    sim.run_until(0.0)
    assert sim.jobs[a].state == "RUNNING" and sim.jobs[b].state == "PENDING"
    sim.set_exc_nodes(sim.jobs[b], "")
    sim.run_until(1.0)
    assert sim.jobs[b].state == "RUNNING" and sim.jobs[b].nodes == sim.jobs[a].nodes
    with pytest.raises(SlurmError, match="Invalid node name"):
        SimClient(sim).set_exc_nodes(_shard(sim), "nosuchnode")


def _speeds(ms: float = 100.0) -> JobSpeeds:
    return JobSpeeds({"v100": ms, "k80": 3 * ms}, 32)


def test_pair_value_is_the_one_rule_of_a_pair():
    a, b = ShardJob("a", 1, _speeds(), 10.0), ShardJob("b", 1, _speeds(), 10.0)

    def predict(x, y, t):  # noqa: ANN001, ANN202, ARG001
        return 1.3

    assert pair_value(a, b, "v100", predict, 30.0) == 1.3
    assert pair_value(a, b, "v100", predict, 15.0) is None                       # 10 + 10 GB (+ margins) > 15
    assert pair_value(a, b, "v100", predict, 30.0, threshold=1.4) is None      # combined below the threshold
    assert pair_value(a, b, "v100", predict, 30.0, slower=lambda x, y, t: 0.45) is None    # one below 0.5x
    assert pair_value(a, b, "v100", predict, 30.0, slower=lambda x, y, t: None) == 1.3     # no bound known
    assert pair_value(a, b, "a100", predict, 30.0) is None                       # no estimate on the type
    assert pair_value(a, ShardJob("c", 1, None), "v100", predict, 30.0) is None  # no speeds


def _ok_unless(*bad: tuple[str, str]):  # noqa: ANN202
    """ok(a, b, type): a and b may share, unless the pair is listed (either order), and calls counted."""
    calls = []

    def ok(a, b, t):  # noqa: ANN001, ANN202
        calls.append((a.job_id, b.job_id, t))
        return (a.job_id, b.job_id) not in bad and (b.job_id, a.job_id) not in bad
    return ok, calls


def test_shard_exclusions_name_every_node_where_a_bad_partner_runs_alone():
    p, q = ShardJob("p", 10, _speeds()), ShardJob("q", 9, _speeds())
    good, bad, bad_for_q = (ShardJob(x, 0, _speeds(), running=True) for x in ("good", "bad", "bad_for_q"))
    lone = {"n1": [bad], "n2": [good], "n3": [good, bad], "n4": [bad_for_q], "k1": [bad]}
    types = {"n1": "v100", "n2": "v100", "n3": "v100", "n4": "v100", "k1": "k80"}
    ok, _ = _ok_unless(("p", "bad"), ("q", "bad"), ("q", "bad_for_q"))
    got = shard_exclusions([p, q], lone, types, ok, {"p": frozenset({"v100"}), "q": frozenset({"v100", "k80"})})
    # n3: any lone job there may be the one Slurm gives it; k1 is not a type p may land on
    assert got == {"p": ("n1", "n3"), "q": ("k1", "n1", "n3", "n4")}
    assert shard_exclusions([p], {}, types, ok) == {"p": ()}


def test_a_pending_job_is_kept_off_the_nodes_where_a_bad_partner_ahead_of_it_may_start():
    """p, q, r in start order; q must not pair with p, r must not pair with q. p may start on n1 or n2
    (n3 holds a lone job bad for it), so q is kept off n1 and n2, leaving n3; r is then kept off n3
    (where q may start) but not off n1/n2 (p is fine beside r). Beyond `head` only lone jobs count."""
    p, q, r = (ShardJob(x, 0, _speeds()) for x in "pqr")
    x = ShardJob("x", 0, _speeds(), running=True)
    types = {"n1": "v100", "n2": "v100", "n3": "v100"}
    ok, calls = _ok_unless(("p", "q"), ("q", "r"), ("p", "x"))
    assert shard_exclusions([p, q, r], {"n3": [x]}, types, ok) == {"p": ("n3",), "q": ("n1", "n2"), "r": ("n3",)}
    assert len(calls) == len(set(calls))                  # each pair and type asked once
    ok, _ = _ok_unless(("p", "q"), ("q", "r"), ("p", "x"))
    assert shard_exclusions([p, q, r], {"n3": [x]}, types, ok, head=1) == {"p": ("n3",), "q": (), "r": ()}


def _job(job_id: str, state: str, nodes: str = "", gpu: tuple[int, ...] = (), features: str = "") -> SlurmJob:
    return SlurmJob(job_id, state, partition="shared", nodes=nodes, gpu_index=gpu, shards=1, features=features,
                    start_time=1.0 if state == "RUNNING" else None)


def test_the_round_reads_the_lone_shard_jobs_from_slurms_gpu_indices():
    """Node s1 (2 GPUs, 2 shards each): x and y share GPU 0, z is alone on GPU 1; s2: w alone. Only z and
    w are partners a pending job may be given; p is kept off s1 (z is bad for it), not off s2."""
    nodes = [SlurmNode(n, "v100", 2, features=("v100", "shard"), partitions=("shared",), shards=4) for n in ("s1", "s2")]
    jobs = [_job("x", "RUNNING", "s1", (0,)), _job("y", "RUNNING", "s1", (0,)), _job("z", "RUNNING", "s1", (1,)),
            _job("w", "RUNNING", "s2", (0,)), _job("p", "PENDING", features="v100")]
    known = [ShardJob(j.job_id, 1, _speeds(), running=j.is_running) for j in jobs]
    ok, seen = _ok_unless(("p", "z"))
    assert exclusions(jobs, known, nodes, str.lower, ["v100"], ok) == {"p": ("s1",)}
    assert sorted(seen) == [("p", "w", "v100"), ("p", "z", "v100")]       # x and y hold no open shard
    # a job whose own request reaches no v100 shard node is named none of them (no write for nothing)
    known[-1] = ShardJob("p", 1, _speeds(), reach=("k80",))
    assert exclusions(jobs, known, nodes, str.lower, ["v100"], _ok_unless(("p", "z"))[0]) == {"p": ()}


def test_exclusions_go_through_the_journal_and_release_clears_them(tmp_path):
    sim, _ = _sim()
    c = SimClient(sim)
    journal = HoldJournal(Store(f"sqlite:///{tmp_path}/msched.db"))
    a = _shard(sim)
    b = _shard(sim)
    sim.set_exc_nodes(sim.jobs[b], ",".join(sim.node_names))      # keep b pending for the test
    sim.run_until(0.0)
    sim.set_exc_nodes(sim.jobs[b], "")
    calls = []

    class Watching(SimClient):
        def set_exc_nodes(self, job_id, nodes):  # noqa: ANN001, ANN202
            calls.append((nodes, [(e.job_id, e.value) for e in journal.open_entries()]))   # on disk already
            super().set_exc_nodes(job_id, nodes)
    w = Watching(sim)
    node = sim.node_names[sim.jobs[a].nodes[0]]
    sim.jobs[b].held = True                                        # stays pending whatever is written
    written, skipped = apply_exclusions(w, {b: (node,)}, c.jobs(), journal)
    assert written == {b: node} and skipped == [] and calls == [(node, [(b, node)])]
    assert c.jobs()[1].exc_nodes == node
    # the same list again: nothing written (the journal says what msched wrote; the read may not)
    assert apply_exclusions(w, {b: (node,)}, c.jobs(), journal) == ({}, []) and len(calls) == 1
    assert replay(c, journal) == [] and len(journal.open_entries()) == 1         # a round's replay keeps it
    # emptied: cleared in Slurm, the entry closed
    assert apply_exclusions(w, {b: ()}, c.jobs(), journal) == ({b: ""}, []) and journal.open_entries() == []
    assert c.jobs()[1].exc_nodes == ""
    apply_exclusions(w, {b: (node,)}, c.jobs(), journal)
    assert replay(c, journal, everything=True) == [b] and journal.open_entries() == []     # --release
    assert c.jobs()[1].exc_nodes == ""


def test_a_dry_run_writes_no_exclusion():
    sim, _ = _sim()
    c = SimClient(sim)
    b = _shard(sim)
    sim.jobs[b].held = True
    written, _ = apply_exclusions(c, {b: (sim.node_names[0],)}, c.jobs(), None, dry_run=True)
    assert written == {b: sim.node_names[0]} and c.jobs()[0].exc_nodes == "" and sim.jobs[b].writes == 0


def test_the_looser_rule_still_needs_every_running_shard_job_to_be_a_good_partner():
    """queue_share 1/2 with one bad queued partner of two: packed while the bad one is pending (the round
    keeps the two apart), refused when the bad one runs (its open shard is joined at submit, before
    any round), packed when the running one is the good one."""
    from msched.policy.packing import submit_verdict

    me, good, bad = JobSpeeds({"v100": 10.0}, 32), JobSpeeds({"v100": 20.0}, 32), JobSpeeds({"v100": 100.0}, 32)
    predict = lambda a, b, t: 0.7 if bad in (a, b) else 1.5  # noqa: E731
    queue = [(good, 1.0), (bad, 1.0)]
    kw = dict(every=True, queue_share=0.5)
    assert submit_verdict(me, 1.0, queue, "v100", predict, 16.0, **kw)[0] == 1.5
    value, why = submit_verdict(me, 1.0, queue, "v100", predict, 16.0, required=[bad], **kw)
    assert value is None and "1 running shard job(s) it may join at once not good partners" in why
    assert submit_verdict(me, 1.0, queue, "v100", predict, 16.0, required=[good], **kw)[0] == 1.5


def test_msub_packs_beside_a_bad_pending_partner_under_the_looser_rule_but_never_a_running_one(tmp_path,
                                                                                          monkeypatch):
    """msub with `pack_queue_share = 0.5` (and pack_exclude, which it needs): of two queued shard jobs one
    crawls beside the job (0.35x). Pending, it is the round's to keep apart: packed. Running (squeue's
    %t R), its open shard would be joined at submit: not packed."""
    from test_packing import _site, _submit

    import msched.msub.packing as msub_packing
    from msched.tag import JobTag

    class BadBesideTheBig:
        def own_speed(self, a, b, t):  # noqa: ANN001, ANN201, ARG002
            return 0.35 if 256 in (a.batch_size, b.batch_size) else 0.75

        slower_speed = own_speed

        def combined_throughput(self, a, b, t):  # noqa: ANN001, ANN201
            return 2 * self.own_speed(a, b, t)

        def slower_for(self, guard):  # noqa: ANN001, ANN201, ARG002
            return self.slower_speed

    args = ["--model=resnet18", "--batch-size=32", "--pack", "--gres=gpu:1", "--time=0:10:00"]
    big, small = (JobTag(model="resnet50", ref="resnet50", bs=b, pack=1.2) for b in (256, 32))
    monkeypatch.setattr(msub_packing, "load_model", BadBesideTheBig)
    _site(tmp_path, monkeypatch, "pack_exclude = true\npack_queue_share = 0.5\n")
    monkeypatch.setattr(msub_packing, "queued_partners", lambda config, sbatch: ([small, big], 0, {0}))
    argv, tag, _ = _submit(args)
    assert tag.pack is not None and "--gres=shard:1" in argv
    monkeypatch.setattr(msub_packing, "queued_partners", lambda config, sbatch: ([small, big], 0, {1}))
    argv, tag, warnings = _submit(args)
    assert tag.pack is None and any("running shard job(s) it may join at once" in w for w in warnings), warnings


def test_the_looser_share_needs_the_exclusion_lever():
    from msched.config import Config, ConfigError

    with pytest.raises(ConfigError, match="needs pack_exclude"):
        Config(pack_queue_share=0.5)._checked()
    assert Config(pack_queue_share=0.5, pack_exclude=True)._checked().pack_queue_share == 0.5


# ---------------------------------------------------------------- the job owner's own ExcNodeList (pack13)

def test_the_excluded_nodes_read_takes_squeues_lines_as_recorded_and_nothing_else():
    """tests/data/slurm/squeue_excnodes.txt: `squeue -h -t PD -j 1,2,3,4,77 -o "%i %x"` on the dev cluster
    (job 1 submitted with -x n1,n2,n3, job 2 updated to ExcNodeList=n4,n2, job 3 -x n1, job 4 none; 77 is
    no job). Slurm compresses the lists; the read expands them."""
    from pathlib import Path

    from msched.slurm.cli.parsers import parse_excluded

    out = (Path(__file__).parent / "data" / "slurm" / "squeue_excnodes.txt").read_text()
    assert parse_excluded(out, ["1", "2", "3", "4", "77"]) == {
        "1": ("n1", "n2", "n3"), "2": ("n2", "n4"), "3": ("n1",), "4": ()}
    assert parse_excluded(out, ["2"]) == {"2": ("n2", "n4")}                 # only the ids asked for


def test_the_excluded_nodes_read_leaves_out_what_is_not_its_documented_form():
    from msched.slurm.cli.parsers import MAX_LISTED, hostlist_names, parse_excluded

    lines = "\n".join([
        "5 n1", "5 n2",                      # printed twice: neither is believed
        "6 n1 n2",                           # a space inside the list
        "7_3 n1",                            # a job array's element
        "8 n[1-99999999]",                   # more names than any cluster: never expanded
        "9 n[3-1]",                          # not a range
        "10 gpu[01-03],cpu7",
        " 11 n1", "12 n1 ",
    ])
    assert parse_excluded(lines, [str(i) for i in range(5, 13)] + ["7_3"]) == {"10": ("cpu7", "gpu01", "gpu02", "gpu03")}
    assert hostlist_names(f"n[1-{MAX_LISTED}]") is not None and hostlist_names(f"n[0-{MAX_LISTED}]") is None
    assert hostlist_names("a[1-64]b[1-64]c[1-2]") is None                   # 8192 names, counted first
    assert hostlist_names("") == ()


def _owner_setup(tmp_path, nodes: int = 3):  # noqa: ANN202
    """A 3-node shard cluster with one pending (held) shard job b, the hold journal, and the sim's client."""
    sim, _ = _sim(nodes)
    b = _shard(sim)
    sim.jobs[b].held = True
    return sim, SimClient(sim), HoldJournal(Store(f"sqlite:///{tmp_path}/msched.db")), b


def test_the_round_writes_the_owners_nodes_and_its_own_together(tmp_path):
    sim, c, journal, b = _owner_setup(tmp_path)
    n1, n2, n3 = sim.node_names
    c.set_exc_nodes(b, n1)                                   # the owner's own, before any round
    assert apply_exclusions(c, {b: ()}, c.jobs(), journal) == ({}, [])          # msched needs none: no call
    assert apply_exclusions(c, {b: (n1,)}, c.jobs(), journal) == ({}, [])       # the owner's list has it
    assert journal.open_entries() == [] and sim.jobs[b].writes == 1             # the owner's write only
    assert apply_exclusions(c, {b: (n2,)}, c.jobs(), journal) == ({b: f"{n1},{n2}"}, [])
    (e,) = journal.open_entries()
    assert (e.value, e.own) == (f"{n1},{n2}", n1)
    assert apply_exclusions(c, {b: (n2,)}, c.jobs(), journal) == ({}, [])       # unchanged: no call
    # msched no longer needs n2: the owner's list comes back, the entry closes
    assert apply_exclusions(c, {b: ()}, c.jobs(), journal) == ({b: n1}, []) and journal.open_entries() == []
    assert c.excluded_nodes([b]) == {b: (n1,)}


def test_a_list_the_owner_rewrites_after_msched_is_theirs_and_kept(tmp_path):
    sim, c, journal, b = _owner_setup(tmp_path)
    n1, n2, n3 = sim.node_names
    apply_exclusions(c, {b: (n2,)}, c.jobs(), journal)
    assert c.excluded_nodes([b]) == {b: (n2,)}
    c.set_exc_nodes(b, n3)                     # the owner: `scontrol update ExcNodeList=n3` (drops msched's n2)
    assert apply_exclusions(c, {b: (n2,)}, c.jobs(), journal) == ({b: f"{n2},{n3}"}, [])
    (e,) = journal.open_entries()
    assert e.own == n3
    assert apply_exclusions(c, {b: ()}, c.jobs(), journal) == ({b: n3}, [])     # n3 stays when n2 goes
    # the owner names msched's node too: all of it is theirs, nothing msched clears later
    apply_exclusions(c, {b: (n2,)}, c.jobs(), journal)
    c.set_exc_nodes(b, f"{n1},{n2}")
    assert apply_exclusions(c, {b: (n2,)}, c.jobs(), journal) == ({}, []) and journal.open_entries() == []
    assert apply_exclusions(c, {b: ()}, c.jobs(), journal) == ({}, [])
    assert c.excluded_nodes([b]) == {b: (n1, n2)}


def test_release_puts_the_owners_list_back_and_leaves_one_they_rewrote(tmp_path):
    sim, c, journal, b = _owner_setup(tmp_path)
    n1, n2, n3 = sim.node_names
    c.set_exc_nodes(b, n1)
    apply_exclusions(c, {b: (n2,)}, c.jobs(), journal)
    assert replay(c, journal) == [] and c.excluded_nodes([b]) == {b: (n1, n2)}   # a round's replay keeps it
    assert replay(c, journal, everything=True) == [b] and journal.open_entries() == []      # --release
    assert c.excluded_nodes([b]) == {b: (n1,)}
    apply_exclusions(c, {b: (n2,)}, c.jobs(), journal)
    c.set_exc_nodes(b, n3)                                   # rewritten by the owner after msched's write
    assert replay(c, journal, everything=True) == [] and journal.open_entries() == []
    assert c.excluded_nodes([b]) == {b: (n3,)}


def test_a_job_whose_list_cannot_be_read_gets_no_write(tmp_path):
    sim, c, journal, b = _owner_setup(tmp_path)

    class Blind(SimClient):
        def excluded_nodes(self, job_ids):  # noqa: ANN001, ANN202
            return {}
    assert apply_exclusions(Blind(sim), {b: (sim.node_names[1],)}, c.jobs(), journal) == ({}, [])
    assert journal.open_entries() == [] and sim.jobs[b].writes == 0


def test_a_round_killed_between_its_record_and_its_write_keeps_the_owners_part(tmp_path):
    """Two open entries (the newer never written): the owner's part is the one whose write Slurm holds."""
    sim, c, journal, b = _owner_setup(tmp_path)
    n1, n2, n3 = sim.node_names
    c.set_exc_nodes(b, n1)
    apply_exclusions(c, {b: (n2,)}, c.jobs(), journal)
    journal.record_hold(b, "exc_nodes", f"{n1},{n3}", "killed before its call", own=n1)
    assert apply_exclusions(c, {b: (n3,)}, c.jobs(), journal) == ({b: f"{n1},{n3}"}, [])
    (e,) = journal.open_entries()
    assert e.own == n1
