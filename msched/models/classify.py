"""Similarity groups: which reference model a job's model is most like (DESIGN, policy point 3).

A job's model is profiled (`msched.models.profile_cache`: the shipped table for torchvision names, a cached
subprocess for `file.py:factory`), turned into log features (`msched.models.features`), standardised over the
reference set, and compared with every reference: cosine similarity by default, Euclidean or Manhattan
distance (turned into a similarity 1 / (1 + d)) as options. The group is the family of the nearest
reference. Everything here is pure Python: msub classifies on every submission without torch, numpy or
scikit-learn (those are needed only to fit the standardisation of a custom reference set).
"""

from __future__ import annotations

import math
import os
from _collections_abc import Mapping  # collections.abc's own class, without the collections package

from msched.config import DATA_DIR, METRICS, Config, load_config
from msched.errors import ProfileError
from msched.models.features import FEATURE_NAMES, Standardisation, feature_vector
from msched.util.light import json_load, lru_cache
from msched.util.record import record

TYPE_CHECKING = False       # typing.TYPE_CHECKING without importing typing
if TYPE_CHECKING:           # for annotations only: importing collections.abc costs msub ~1 ms (predict14)
    from collections.abc import Iterable, Sequence

DEFAULT_REFERENCES = os.path.join(DATA_DIR, "reference_models.json")

# Family labels for torchvision models, by name prefix (longest first). Labels only: used to name a
# reference's group and to draw one-per-family reference sets, never as a similarity feature.
_FAMILIES: tuple[tuple[str, str], ...] = (
    ("wide_resnet", "wide_resnet"), ("resnext", "resnext"), ("resnet", "resnet"), ("vgg", "vgg"),
    ("densenet", "densenet"), ("mobilenet", "mobilenet"), ("mnasnet", "mnasnet"),
    ("shufflenet", "shufflenet"), ("squeezenet", "squeezenet"), ("efficientnet_v2", "efficientnet_v2"),
    ("efficientnet", "efficientnet"), ("regnet", "regnet"), ("vit", "vit"), ("swin", "swin"),
    ("convnext", "convnext"), ("maxvit", "maxvit"), ("alexnet", "alexnet"), ("googlenet", "inception"),
    ("inception", "inception"),
)


class ClassifyError(Exception):
    """A model that cannot be classified; the message is one line that says why."""


def family_of(name: str) -> str:
    """The family label of a torchvision model name ("" for anything else)."""
    for prefix, family in _FAMILIES:
        if name.startswith(prefix):
            return family
    return ""


@record
class Reference:
    name: str
    family: str
    group: str
    measured: bool            # has measured iteration times in the default performance table
    input_size: int
    flops: float
    features: tuple[float, ...]   # raw (log) features, in the set's feature order


@record
class Classification:
    """Where a job's model falls: its group, nearest reference, and the runners-up.

    `flops_ratio` is the job's FLOPs per sample over the nearest reference's. `perf_reference` is the
    nearest reference that has measured performance (the one estimates come from when the nearest has
    none, e.g. EfficientNet), and `perf_flops_ratio` the job's FLOPs over that one's.
    """

    spec: str
    group: str
    nearest_reference: str
    similarity: float
    candidates: tuple[tuple[str, float], ...]
    flops_ratio: float
    perf_reference: str = ""
    perf_flops_ratio: float = 1.0
    flops: float = 0.0

    def to_dict(self) -> dict[str, object]:
        return {
            "spec": self.spec, "group": self.group, "nearest_reference": self.nearest_reference,
            "similarity": self.similarity, "candidates": [[n, s] for n, s in self.candidates],
            "flops_ratio": self.flops_ratio, "perf_reference": self.perf_reference,
            "perf_flops_ratio": self.perf_flops_ratio, "flops": self.flops,
        }


@record
class ReferenceSet:
    references: tuple[Reference, ...]
    standardisation: Standardisation
    source: str = ""

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(r.name for r in self.references)

    @property
    def feature_names(self) -> tuple[str, ...]:
        return self.standardisation.names

    def get(self, name: str) -> Reference:
        for r in self.references:
            if r.name == name:
                return r
        raise KeyError(name)

    def group_of(self, name: str) -> str:
        return self.get(name).group

    def flops_of(self, name: str) -> float:
        return self.get(name).flops

    def ranked(self, raw_features: Sequence[float], metric: str = "cosine") -> list[tuple[str, float]]:
        """(reference, similarity) for every reference, most similar first (ties by name)."""
        z = self.standardisation.apply(raw_features)
        scored = [(r.name, similarity(z, self._z(r.name), metric)) for r in self.references]
        return sorted(scored, key=lambda t: (-t[1], t[0]))

    def _z(self, name: str) -> list[float]:
        return _z_cache(self, name)

    def to_dict(self) -> dict[str, object]:
        return {
            "feature_names": list(self.feature_names),
            "standardisation": self.standardisation.to_dict(),
            "references": [{
                "name": r.name, "family": r.family, "group": r.group,
                "performance": "measured" if r.measured else "unknown", "input_size": r.input_size,
                "flops": r.flops, "features": list(r.features),
            } for r in self.references],
        }

    @classmethod
    def from_dict(cls, data: Mapping, source: str = "") -> ReferenceSet:
        std = Standardisation.from_dict(data["standardisation"])
        refs = tuple(Reference(
            name=r["name"], family=r.get("family", ""), group=r.get("group") or r.get("family") or r["name"],
            measured=r.get("performance", "measured") == "measured", input_size=int(r.get("input_size", 224)),
            flops=float(r["flops"]), features=tuple(float(x) for x in r["features"]),
        ) for r in data["references"])
        if not refs:
            raise ClassifyError(f"{source or 'reference set'}: no references")
        if any(len(r.features) != len(std.names) for r in refs):
            raise ClassifyError(f"{source or 'reference set'}: feature vectors do not match feature_names")
        return cls(refs, std, source)

    @classmethod
    def from_profiles(cls, names: Sequence[str], profiles: Mapping[str, object] | None = None,
                      measured: Iterable[str] | None = None, groups: dict[str, str] | None = None,
                      feature_names: Sequence[str] = FEATURE_NAMES, source: str = "") -> ReferenceSet:
        """A reference set from model names, standardised over them (needs scikit-learn)."""
        from msched.models.profile_cache import get_profile

        if not names:
            raise ClassifyError("an empty reference set")
        measured_set = set(measured) if measured is not None else None
        refs, vectors = [], []
        for name in dict.fromkeys(names):
            try:
                prof = profiles[name] if profiles and name in profiles else get_profile(name)
            except ProfileError as exc:
                raise ClassifyError(f"reference {name}: {exc}") from exc
            vec = feature_vector(prof, feature_names)
            vectors.append(vec)
            fam = family_of(name) or (groups or {}).get(name, "") or name
            refs.append(Reference(
                name=name, family=fam, group=(groups or {}).get(name, fam),
                measured=True if measured_set is None else name in measured_set,
                input_size=int(_attr(prof, "input_size")), flops=float(_attr(prof, "flops")),
                features=tuple(vec),
            ))
        return cls(tuple(refs), Standardisation.fit(vectors, feature_names), source)


def _attr(obj: object, key: str) -> object:
    return obj[key] if isinstance(obj, Mapping) else getattr(obj, key)


@lru_cache(maxsize=4096)
def _z_cache(refset: ReferenceSet, name: str) -> list[float]:
    return refset.standardisation.apply(refset.get(name).features)


# --------------------------------------------------------------------------- metrics
def similarity(a: Sequence[float], b: Sequence[float], metric: str = "cosine") -> float:
    """Similarity of two standardised vectors: cosine in [-1, 1]; distances as 1 / (1 + d) in (0, 1]."""
    if metric == "cosine":
        dot = sum(x * y for x, y in zip(a, b, strict=True))
        na = math.sqrt(sum(x * x for x in a))
        nb = math.sqrt(sum(y * y for y in b))
        if na == 0.0 or nb == 0.0:
            return 1.0 if na == nb else 0.0
        return max(-1.0, min(1.0, dot / (na * nb)))
    if metric == "euclidean":
        return 1.0 / (1.0 + math.sqrt(sum((x - y) ** 2 for x, y in zip(a, b, strict=True))))
    if metric == "manhattan":
        return 1.0 / (1.0 + sum(abs(x - y) for x, y in zip(a, b, strict=True)))
    raise ClassifyError(f"unknown metric {metric!r}; choose one of {', '.join(METRICS)}")


# --------------------------------------------------------------------------- loading
def _load_file(path: str) -> ReferenceSet:
    try:
        st = os.stat(path)
    except OSError as exc:
        raise ClassifyError(f"cannot read reference set {path}: {exc.strerror}") from exc
    return _load_file_cached(path, st.st_mtime_ns, st.st_size)


@lru_cache(maxsize=8)
def _load_file_cached(path: str, _mtime_ns: int, _size: int) -> ReferenceSet:
    try:
        with open(path) as fh:
            data = json_load(fh)
    except OSError as exc:
        raise ClassifyError(f"cannot read reference set {path}: {exc.strerror}") from exc
    except ValueError as exc:                     # json.JSONDecodeError is a ValueError
        raise ClassifyError(f"reference set {path} is not valid JSON: {exc}") from exc
    if isinstance(data, list):  # a JSON list of model names
        return ReferenceSet.from_profiles([str(n) for n in data], source=path)
    if not isinstance(data, dict) or "references" not in data:
        raise ClassifyError(f"reference set {path}: expected an object with 'references' or a list of names")
    if "standardisation" not in data:  # hand-written: names (and groups) only
        entries = data["references"]
        names = [e["name"] if isinstance(e, dict) else str(e) for e in entries]
        groups = {e["name"]: e.get("group", "") for e in entries if isinstance(e, dict) and e.get("group")}
        return ReferenceSet.from_profiles(names, groups=groups, source=path)
    try:
        refset = ReferenceSet.from_dict(data, source=path)
    except (KeyError, TypeError, ValueError) as exc:
        raise ClassifyError(f"reference set {path} is malformed: {exc}") from exc
    if tuple(refset.feature_names) != FEATURE_NAMES:
        # written by another msched version: refit from the profiles, keeping its groups and marks
        return ReferenceSet.from_profiles(
            refset.names, measured=[r.name for r in refset.references if r.measured],
            groups={r.name: r.group for r in refset.references}, source=path)
    return refset


def resolve_references(spec: str | Sequence[str] | ReferenceSet | None, config: Config | None = None) -> ReferenceSet:
    """A reference set from: a ReferenceSet, a list of names, a file path, "a,b,c", or the config."""
    if isinstance(spec, ReferenceSet):
        return spec
    if spec is None:
        cfg = config or load_config()
        spec = cfg.references
    if isinstance(spec, str):
        text = spec.strip()
        if os.path.exists(text) or text.endswith(".json"):
            return _load_file(os.path.realpath(text))
        names = [n.strip() for n in text.split(",") if n.strip()]
    else:
        names = [str(n).strip() for n in spec if str(n).strip()]
    return _names_set(tuple(names))


@lru_cache(maxsize=16)
def _names_set(names: tuple[str, ...]) -> ReferenceSet:
    measured = None
    try:
        default = _load_file(str(DEFAULT_REFERENCES))
        measured = [n for n in names if n not in default.names or default.get(n).measured]
    except ClassifyError:
        pass
    return ReferenceSet.from_profiles(list(names), measured=measured, source=",".join(names))


def load_references(config: Config | None = None) -> ReferenceSet:
    """The site's reference set (config `references`: a file or a list of names; default: shipped)."""
    return resolve_references(None, config)


# --------------------------------------------------------------------------- classify
def classify_profile(profile: object, refset: ReferenceSet, metric: str = "cosine", spec: str = "") -> Classification:
    """Classify an already-profiled model against `refset`."""
    if metric not in METRICS:
        raise ClassifyError(f"unknown metric {metric!r}; choose one of {', '.join(METRICS)}")
    flops = float(_attr(profile, "flops"))
    name = spec or str(_attr(profile, "spec"))
    size = int(_attr(profile, "input_size"))
    if name in refset.names and refset.get(name).input_size == size:
        # a reference itself: its own measurements as they are
        others = [c for c in refset.ranked(refset.get(name).features, metric) if c[0] != name]
        ranked = [(name, 1.0), *others]
    else:
        try:
            vec = feature_vector(profile, refset.feature_names)
        except KeyError as exc:
            raise ClassifyError(f"reference set uses unknown feature {exc}") from exc
        ranked = refset.ranked(vec, metric)
    best, sim = ranked[0]
    perf_ref = next((n for n, _ in ranked if refset.get(n).measured), best)
    return Classification(
        spec=name, group=refset.group_of(best), nearest_reference=best, similarity=round(sim, 6),
        candidates=tuple((n, round(s, 6)) for n, s in ranked), flops_ratio=flops / refset.flops_of(best),
        perf_reference=perf_ref, perf_flops_ratio=flops / refset.flops_of(perf_ref), flops=flops,
    )


def classify(spec: str, *, config: Config | None = None, references: object = None, metric: str | None = None,
             input_size: int | None = None, timeout: float | None = None) -> Classification:
    """Classify SPEC (torchvision name or path/to/file.py:factory) against the reference set.

    A torchvision name reads only shipped JSON (no torch); a file is profiled in a subprocess with a
    timeout and cached. Any failure raises ClassifyError with a one-line message.
    """
    from msched.models.shipped import profile_data

    cfg = config
    if metric is None or references is None:
        cfg = cfg or load_config()
    metric = metric or cfg.metric
    refset = resolve_references(references, cfg)
    try:
        # a shipped torchvision name at its own size is a JSON lookup (msub's path: no profiler module)
        prof = profile_data(spec.strip()) if input_size is None and ".py:" not in spec else None
        if prof is None:
            from msched.models.profile_cache import get_profile
            from msched.models.profiler import DEFAULT_TIMEOUT_S

            prof = get_profile(spec, input_size=input_size, timeout=timeout or DEFAULT_TIMEOUT_S)
    except ProfileError as exc:
        raise ClassifyError(str(exc)) from exc
    return classify_profile(prof, refset, metric, spec=spec.strip())
