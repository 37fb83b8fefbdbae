"""Packing: how fast two jobs run when they share one GPU (DESIGN point 7, the Packing issue).

Two jobs sharing a GPU (Slurm's gres/shard) each run at a fraction of their solo speed. A pair's
combined normalized throughput, own/solo + partner/solo, says whether sharing pays: above 1 the GPU
does more work shared than either job alone; Gavel's measurements (shared/data/gavel) range from 0 (the
pair does not fit in memory together) to about 2.

What the predictor sees is what msched knows of every job before it runs, through its one estimator:
the job's solo iteration time on each of the site's GPU types and its per-GPU batch size. From those,
per job and type: how many samples a second it trains (a saturated GPU leaves little to share), how much
faster it runs on this type than on the site's slowest one (compute-bound jobs gain most from a newer
GPU, and gain least from sharing it), how much its speed spreads across types, and its batch size. A
pair's features are symmetric (sum and absolute difference of the two jobs'), so (a, b) and (b, a)
predict the same.

The model is a small random forest (scikit-learn) fitted by `scripts/fit_interference.py` on Gavel's
pair measurements and shipped as JSON (msched/data/interference_model.json); predicting walks the trees
in pure Python, so msub and the planner need neither numpy nor scikit-learn. Pairs that did not fit in
memory together (measured 0) are left out of the fit: whether two jobs fit is the memory estimate's
question, not this one's.

The guard (`pack_guard = "bound"`, the default): the forests predict the mean, and a mean that passes
the 0.5x-solo rule still leaves 42% of the pairs it passes with a job measured below 0.5x solo (held out
by model; BENCHMARKS.md). Beside them the JSON holds a gradient-boosted *quantile* regressor
(scikit-learn, alpha GUARD_ALPHA = 0.1): a low bound of one job's own speed beside a partner, fitted on
the same pairs (the 0.5x rule is the guard's one test; the combined throughput stays the mean forest's). A job outside the data (its features farther than
SEEN_RADIUS, in log units, from every job type the fit saw, on any GPU type) gets no bound: the guard
then counts it as unsafe. `guard_slower` is the guard's word on a pair.
"""

from __future__ import annotations

import json
import math
import os
import re
from array import array
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import lru_cache

from msched.config import DATA_DIR
from msched.util.record import record

MODEL_FILE = os.path.join(DATA_DIR, "interference_model.json")
FEATURES = ("log_samples_per_s", "log_speedup_over_slowest", "log_speed_spread", "log_batch_size")
# a pair predicted below this combined throughput is never packed (bench/bench_interference.py: of the pairs
# predicted above 1.0, leave-one-job-type-out, 5.5% measured below 0.8; higher thresholds were no safer)
DEFAULT_THRESHOLD = 1.0
PAIR_MEMORY_MARGIN = 0.2   # pair_fits: each job's predicted peak memory raised by this share (Gavel's
                            # measured out-of-memory pairs: BENCHMARKS.md, packing third pass)
MIN_OWN_SPEED = 0.5        # neither job of a packed pair is predicted below this share of its solo speed
DEFAULT_BATCH = 32          # a job that names no batch size: its estimating rows' batch, this for the features
GUARD_ALPHA = 0.1           # the guard's quantile: a job is predicted faster than its bound 9 times in 10
SEEN_RADIUS = 0.5           # a job farther than this (largest log-feature difference) from every job type
                            # the fit saw is outside the data: the guard gives it no bound
GUARDS = ("bound", "mean")  # config `pack_guard` (msched.config.PACK_GUARDS): the quantile bound (default) or the mean


class InterferenceError(ValueError):
    """A job without estimates on the type, or an unreadable model file; one line naming it."""


@record
class JobSpeeds:
    """What the predictor knows of one job: solo iteration time (ms) per GPU type, and its per-GPU batch."""

    iter_ms: Mapping[str, float]
    batch_size: int

    def features(self, gpu_type: str) -> list[float]:
        ms = self.iter_ms.get(gpu_type)
        if not ms or ms <= 0:
            raise InterferenceError(f"no solo estimate on {gpu_type} (known: {', '.join(sorted(self.iter_ms))})")
        speeds = [1.0 / v for v in self.iter_ms.values() if v and v > 0]
        slowest, fastest = min(speeds), max(speeds)
        batch = max(1, int(self.batch_size))
        return [math.log(batch * 1000.0 / ms), math.log((1.0 / ms) / slowest), math.log(fastest / slowest),
                math.log(batch)]


def pair_features(a: JobSpeeds, b: JobSpeeds, gpu_type: str) -> list[float]:
    """Symmetric: sums and absolute differences of the two jobs' features, then the faster and the
    slower job's samples a second (the same information as their sum and difference, but a tree splits
    on one axis at a time: with them, leave-one-job-type-out MAE 0.189 -> 0.176, bench_interference)."""
    fa, fb = a.features(gpu_type), b.features(gpu_type)
    return ([x + y for x, y in zip(fa, fb, strict=True)] + [abs(x - y) for x, y in zip(fa, fb, strict=True)]
            + [max(fa[0], fb[0]), min(fa[0], fb[0])])


@record
class Boosted:
    """A fitted gradient-boosted regressor (scikit-learn's GradientBoostingRegressor, one output):
    prediction = init + rate x the sum of its trees' leaf values. Features are rounded to float32 before
    the walk, as scikit-learn's trees compare them, so the pure-Python prediction is sklearn's own."""

    init: float
    rate: float
    trees: tuple

    def predict(self, x: Sequence[float]) -> float:
        x32 = array("f", x)
        total = 0.0
        for left, right, feature, threshold, value in self.trees:
            node = 0
            while left[node] != -1:
                node = left[node] if x32[feature[node]] <= threshold[node] else right[node]
            total += value[node]
        return self.init + self.rate * total

    def to_dict(self) -> dict:
        return {"init": self.init, "rate": self.rate, "trees": [
            dict(zip(("left", "right", "feature", "threshold", "value"), t, strict=True)) for t in self.trees]}

    @classmethod
    def from_dict(cls, data: Mapping) -> Boosted:
        return cls(float(data["init"]), float(data["rate"]), tuple(
            (t["left"], t["right"], t["feature"], t["threshold"], t["value"]) for t in data["trees"]))


@record
class InterferenceModel:
    """A fitted forest: each tree as parallel lists (left, right, feature, threshold, value), sklearn's layout."""

    trees: tuple[tuple[list[int], list[int], list[int], list[float], list[float]], ...]
    meta: Mapping[str, object]
    own_trees: tuple = ()      # a second forest: one job's own/solo speed beside a partner (ordered pair)
    bound_own: Boosted | None = None        # the guard: GUARD_ALPHA quantile of one job's own speed beside a partner
    seen: Mapping = None       # GPU type -> the job types' feature vectors the fit saw there

    @staticmethod
    def _walk(trees, x: Sequence[float]) -> float:  # noqa: ANN001
        total = 0.0
        for left, right, feature, threshold, value in trees:
            node = 0
            while left[node] != -1:
                node = left[node] if x[feature[node]] <= threshold[node] else right[node]
            total += value[node]
        return total / len(trees)

    def predict_features(self, x: Sequence[float]) -> float:
        return self._walk(self.trees, x)

    def combined_throughput(self, a: JobSpeeds, b: JobSpeeds, gpu_type: str) -> float:
        """Predicted own/solo + partner/solo of `a` and `b` sharing one GPU of `gpu_type`."""
        return self.predict_features(pair_features(a, b, gpu_type))

    def own_speed(self, a: JobSpeeds, b: JobSpeeds, gpu_type: str) -> float | None:
        """Predicted own/solo speed of `a` beside `b` (None: the model has no such forest). A pair can
        pay overall (combined above 1) while one job crawls; this is what keeps each job above a floor."""
        if not self.own_trees:
            return None
        return self._walk(self.own_trees, a.features(gpu_type) + b.features(gpu_type))

    def slower_speed(self, a: JobSpeeds, b: JobSpeeds, gpu_type: str) -> float | None:
        """The slower job's predicted own/solo speed in the pair (None: unknown)."""
        x, y = self.own_speed(a, b, gpu_type), self.own_speed(b, a, gpu_type)
        return None if x is None or y is None else min(x, y)

    def is_seen(self, a: JobSpeeds, gpu_type: str) -> bool:
        """Whether the job on the type is inside the data: within SEEN_RADIUS (the largest difference of
        its log features) of a job type the fit saw on some GPU type (the model reads features, never a
        type's name, so a titanxp job is judged by the jobs it resembles on Gavel's K80/P100/V100)."""
        return self._inside(a.features(gpu_type))

    def own_bound(self, a: JobSpeeds, b: JobSpeeds, gpu_type: str) -> float | None:
        """The guard's low bound of `a`'s own/solo speed beside `b` (None: no guard in the model, or
        either job outside the data)."""
        if self.bound_own is None or not (self.is_seen(a, gpu_type) and self.is_seen(b, gpu_type)):
            return None
        return self.bound_own.predict(a.features(gpu_type) + b.features(gpu_type))

    def guard_slower(self, a: JobSpeeds, b: JobSpeeds, gpu_type: str) -> float:
        """The guard's word on a pair, in `slower_speed`'s place: the lower of the two jobs' own-speed
        bounds (`own_bound` both ways, each job's features computed once), and 0.0 (never packed) when
        a job is outside the data or the model has no guard."""
        if self.bound_own is None:
            return 0.0
        fa, fb = a.features(gpu_type), b.features(gpu_type)
        if not (self._inside(fa) and self._inside(fb)):
            return 0.0
        return min(self.bound_own.predict(fa + fb), self.bound_own.predict(fb + fa))

    def _inside(self, x: Sequence[float]) -> bool:
        return any(max(abs(u - v) for u, v in zip(x, y, strict=True)) <= SEEN_RADIUS
                   for ys in (self.seen or {}).values() for y in ys)

    def slower_for(self, guard: str) -> Callable[[JobSpeeds, JobSpeeds, str], float | None]:
        """The slower-job check the packing decisions use: the guard's bound or the mean forest's."""
        if guard not in GUARDS:
            raise InterferenceError(f"pack_guard {guard!r} is not one of {', '.join(GUARDS)}")
        return self.guard_slower if guard == "bound" else self.slower_speed

    def to_json(self) -> str:
        def out(trees):  # noqa: ANN001, ANN202
            return [dict(zip(("left", "right", "feature", "threshold", "value"), t, strict=True)) for t in trees]

        data = {"meta": dict(self.meta), "features": list(FEATURES), "trees": out(self.trees),
                "own_trees": out(self.own_trees)}
        if self.bound_own is not None:
            data["guard"] = {"alpha": GUARD_ALPHA, "own": self.bound_own.to_dict(), "seen": {k: list(v) for k, v in (self.seen or {}).items()}}
        return json.dumps(data, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> InterferenceModel:
        data = json.loads(text)

        def read(key: str) -> tuple:
            return tuple((t["left"], t["right"], t["feature"], t["threshold"], t["value"]) for t in data.get(key, ()))

        trees = read("trees")
        if not trees:
            raise InterferenceError("interference model has no trees")
        guard = data.get("guard")
        if not guard:
            return cls(trees=trees, meta=data.get("meta", {}), own_trees=read("own_trees"))
        return cls(trees=trees, meta=data.get("meta", {}), own_trees=read("own_trees"),
                   bound_own=Boosted.from_dict(guard["own"]),
                   seen={k: tuple(tuple(float(x) for x in v) for v in vs) for k, vs in guard["seen"].items()})


@lru_cache(maxsize=2)
def load_model(path: str = MODEL_FILE) -> InterferenceModel:
    try:
        with open(path, encoding="utf-8") as fh:
            return InterferenceModel.from_json(fh.read())
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise InterferenceError(f"cannot read interference model {path}: {exc}") from exc


def speeds_from_tag(tag, times) -> JobSpeeds | None:  # noqa: ANN001 - a JobTag and an iteration-time source
    """What the predictor knows of a tagged job: its estimating model's solo iteration time on each type at
    1 GPU (msched.estimate.runtime.reference_for: the same rule as every runtime estimate), and its batch.
    None when no type has a figure."""
    from msched.estimate.runtime import reference_for

    ref, flops = reference_for(tag, times.knows)
    if not ref:
        return None
    figures = times(ref, 1, tag.bs)
    iter_ms = {t: s * flops * 1000.0 for t, (s, _) in figures.items() if s and s > 0}
    return JobSpeeds(iter_ms=iter_ms, batch_size=tag.bs or DEFAULT_BATCH) if iter_ms else None


def peak_gb(model: str, batch_size: int | None) -> float | None:
    """Peak training memory of a shipped torchvision model (msched.estimate.memory); None when unknown (a
    user's own model file, whose profile msub and the round do not hold)."""
    from msched.estimate.memory import peak_memory_gb
    from msched.models.shipped import profile_data

    try:
        profile = profile_data(model)
    except Exception:  # noqa: BLE001 - an unreadable table means "unknown", never a failed decision
        return None
    return peak_memory_gb(profile, batch_size or DEFAULT_BATCH).peak_gb if profile else None


def pair_fits(peaks: Sequence[float | None], usable_gb: float | None, margin: float = PAIR_MEMORY_MARGIN) -> bool:
    """Whether jobs with these peak memories fit one GPU together (shards are not fenced: a pair that
    does not fit fails): their predicted peaks, each raised by `margin` (the estimate's error: allocator
    rounding, cuDNN workspaces it does not see), plus one more CUDA context per job beyond the first
    (each process holds its own; `usable_gb` already leaves room for one) within the GPU's usable
    memory. Unknown peaks or an unknown GPU size are not held against the pair: the predictor alone
    decides then. Checked against Gavel's pairs that did not fit (bench/bench_packing.py
    --memory-check; BENCHMARKS.md, packing third pass)."""
    from msched.estimate.memory import RESERVED_GB

    if usable_gb is None or any(p is None for p in peaks):
        return True
    known = [p for p in peaks if p is not None]
    return sum(known) * (1.0 + margin) + RESERVED_GB * max(0, len(known) - 1) <= usable_gb


def type_usable_gb(gpu_type: str, specs=None) -> float | None:  # noqa: ANN001 - a SpecTable
    """Usable memory of one GPU of the type (msched.estimate.memory.usable_gb), None without a spec row
    (the site's table by default: a type its config's `gpu_specs` added counts)."""
    from msched.estimate.gpu_specs import site_specs
    from msched.estimate.memory import usable_gb

    spec = (specs or site_specs()).get(gpu_type)
    return usable_gb(spec) if spec and spec.memory_gb > 0 else None


# ------------------------------------------------------------------------------------------ Gavel's data
@record
class PairSample:
    """One measured pair: job types a and b sharing one GPU of `gpu_type`, and their combined throughput."""

    a: str
    b: str
    gpu_type: str
    combined: float
    own_a: float = 0.0        # a's own/solo speed beside b
    own_b: float = 0.0

    @property
    def families(self) -> tuple[str, str]:
        return family_of(self.a), family_of(self.b)


def family_of(job_type: str) -> str:
    """'ResNet-50 (batch size 64)' -> 'ResNet-50': the job type without its batch size."""
    return job_type.split(" (", 1)[0]


def batch_of(job_type: str) -> int:
    m = re.search(r"batch size (\d+)", job_type)
    return int(m.group(1)) if m else 1


def _parse_key(key: str) -> tuple[str, int]:
    m = re.fullmatch(r"\('(.+)', (\d+)\)", key)
    if not m:
        raise InterferenceError(f"unexpected job key {key!r} in Gavel's throughputs")
    return m.group(1), int(m.group(2))


def read_gavel(path: str | os.PathLike, gpu_types: Iterable[str] = ("k80", "p100", "v100")
               ) -> tuple[dict[str, JobSpeeds], list[PairSample]]:
    """Gavel's simulation_throughputs.json: each single-GPU job type's solo speeds (steps/s -> iter ms)
    and every measured pair on one GPU. Pairs measured at 0 (they did not fit together) are dropped."""
    with open(path, encoding="utf-8") as fh:
        data = json.load(fh)
    types = list(gpu_types)
    solo: dict[str, dict[str, float]] = {}
    for g in types:
        for key, entry in data[g].items():
            name, scale = _parse_key(key)
            if scale == 1 and entry.get("null", 0) > 0:
                solo.setdefault(name, {})[g] = 1000.0 / entry["null"]
    jobs = {n: JobSpeeds(iter_ms=ms, batch_size=batch_of(n)) for n, ms in solo.items() if len(ms) == len(types)}
    pairs = []
    for g in types:
        for key, entry in data[g].items():
            a, sa = _parse_key(key)
            if sa != 1 or a not in jobs:
                continue
            for key2, both in entry.items():
                if key2 == "null":
                    continue
                b, sb = _parse_key(key2)
                if sb != 1 or b not in jobs:
                    continue
                own_a, own_b = both[0] * jobs[a].iter_ms[g] / 1000.0, both[1] * jobs[b].iter_ms[g] / 1000.0
                if own_a + own_b > 0:
                    pairs.append(PairSample(a, b, g, own_a + own_b, own_a, own_b))
    return jobs, pairs


# ------------------------------------------------------------------------------------------ fitting
def fit(jobs: Mapping[str, JobSpeeds], pairs: Sequence[PairSample], *, trees: int = 50, max_depth: int = 6,
        max_features: float = 0.5, seed: int = 0, guard: bool = True) -> InterferenceModel:
    """Two random forests (scikit-learn, imported here only): the pair's combined throughput from its
    symmetric features, and one job's own speed from (its features, its partner's), each measured pair
    giving both orders. Each split looks at half the features (`max_features`; all of them before):
    held out by job type and by family alike the error is no worse and by family 0.176 -> 0.172
    (bench/bench_interference.py; chosen on those folds, so mildly optimistic). With `guard`, also the
    quantile guard (module docstring): `fit_quantile` of the own speed,
    and the job types' feature vectors per GPU type (what `is_seen` measures against)."""
    from sklearn.ensemble import RandomForestRegressor

    def forest(x, y):  # noqa: ANN001, ANN202
        f = RandomForestRegressor(n_estimators=trees, max_depth=max_depth, min_samples_leaf=3,
                                  max_features=max_features, random_state=seed)
        f.fit(x, y)
        return tuple((t.tree_.children_left.tolist(), t.tree_.children_right.tolist(), t.tree_.feature.tolist(),
                      t.tree_.threshold.tolist(), t.tree_.value[:, 0, 0].tolist()) for t in f.estimators_)

    combined = forest([pair_features(jobs[p.a], jobs[p.b], p.gpu_type) for p in pairs], [p.combined for p in pairs])
    ordered = [(jobs[p.a].features(p.gpu_type) + jobs[p.b].features(p.gpu_type), p.own_a) for p in pairs] + \
              [(jobs[p.b].features(p.gpu_type) + jobs[p.a].features(p.gpu_type), p.own_b) for p in pairs]
    own = forest([x for x, _ in ordered], [y for _, y in ordered])
    meta = {"pairs": len(pairs), "trees": trees, "max_depth": max_depth, "max_features": max_features, "seed": seed,
            "families": sorted({f for p in pairs for f in p.families})}
    if not guard:
        return InterferenceModel(trees=combined, meta=meta, own_trees=own)
    bound_own = fit_quantile([x for x, _ in ordered], [y for _, y in ordered], seed=seed)
    seen: dict[str, list] = {}
    for p in pairs:
        for name in (p.a, p.b):
            x = [round(v, 6) for v in jobs[name].features(p.gpu_type)]
            if x not in seen.setdefault(p.gpu_type, []):
                seen[p.gpu_type].append(x)
    meta["guard"] = {"alpha": GUARD_ALPHA, "seen_radius": SEEN_RADIUS}
    return InterferenceModel(trees=combined, meta=meta, own_trees=own,
                             bound_own=bound_own, seen={k: tuple(map(tuple, v)) for k, v in sorted(seen.items())})


def fit_quantile(x: Sequence[Sequence[float]], y: Sequence[float], *, alpha: float = GUARD_ALPHA, seed: int = 0,
                 estimators: int = 100, max_depth: int = 3, rate: float = 0.1, min_leaf: int = 5,
                 raw: bool = False):  # noqa: ANN201 - a Boosted, or with `raw` also sklearn's model
    """A gradient-boosted quantile regressor (scikit-learn, imported here only) as a `Boosted`."""
    from sklearn.ensemble import GradientBoostingRegressor

    g = GradientBoostingRegressor(loss="quantile", alpha=alpha, n_estimators=estimators, max_depth=max_depth,
                                  learning_rate=rate, min_samples_leaf=min_leaf, random_state=seed)
    g.fit(x, y)
    init = float(g.init_.constant_.ravel()[0])
    boosted = Boosted(init, float(g.learning_rate), tuple(
        (t.tree_.children_left.tolist(), t.tree_.children_right.tolist(), t.tree_.feature.tolist(),
         t.tree_.threshold.tolist(), t.tree_.value[:, 0, 0].tolist()) for t in g.estimators_[:, 0]))
    return (boosted, g) if raw else boosted


@record
class HoldOutResult:
    """Leave-one-out by job type or by family: every pair holding the held-out one was left out of the
    fit that predicted it."""

    held_out: str
    pairs: int
    mean_abs_error: float
    predicted: list[float]
    measured: list[float]
    slower_predicted: list = ()     # the slower job's predicted own speed, per pair
    slower_measured: list = ()
    slower_bound: list = ()         # the guard's word on the pair (`guard_slower`: 0.0 outside the data)


def job_type_of(job_type: str) -> str:
    """The job type itself ('ResNet-50 (batch size 64)'): `leave_one_out`'s key for the Packing issue's
    leave-one-job-type-out (Gavel's job types are a model at one batch size)."""
    return job_type


def leave_one_out(jobs: Mapping[str, JobSpeeds], pairs: Sequence[PairSample],
                  key: Callable[[str], str] = job_type_of, **fit_opts) -> list[HoldOutResult]:
    """For each job type (`key=job_type_of`, the issue's validation) or each family (`key=family_of`:
    stricter, every batch size of the model is held out together, as for a model msched never saw
    measured), fit on the pairs holding none of it and predict the pairs holding it."""
    out = []
    for held in sorted({key(t) for p in pairs for t in (p.a, p.b)}):
        train = [p for p in pairs if held not in (key(p.a), key(p.b))]
        test = [p for p in pairs if held in (key(p.a), key(p.b))]
        model = fit(jobs, train, **fit_opts)
        pred = [model.combined_throughput(jobs[p.a], jobs[p.b], p.gpu_type) for p in test]
        meas = [p.combined for p in test]
        mae = sum(abs(a - b) for a, b in zip(pred, meas, strict=True)) / len(test)
        slower = [model.slower_speed(jobs[p.a], jobs[p.b], p.gpu_type) for p in test]
        bound = [model.guard_slower(jobs[p.a], jobs[p.b], p.gpu_type) for p in test] if model.bound_own else []
        out.append(HoldOutResult(held, len(test), mae, pred, meas, slower, [min(p.own_a, p.own_b) for p in test],
                                 bound))
    return out
