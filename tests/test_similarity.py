"""Similarity: features, standardisation, classification against the shipped references (no torch)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from msched.models.classify import (
    ClassifyError,
    ReferenceSet,
    classify,
    family_of,
    load_references,
    resolve_references,
    similarity,
)
from msched.models.features import FEATURE_NAMES, Standardisation, feature_dict, feature_vector
from msched.models.profile_cache import shipped_profile, shipped_profiles

REPO = Path(__file__).resolve().parent.parent
REFERENCES = REPO / "msched" / "data" / "reference_models.json"
FAMILIES_REQUIRED = {"resnet", "vgg", "densenet", "squeezenet"}


def test_default_reference_set_spans_the_families():
    refs = load_references()
    assert len(refs.names) >= 10
    groups = {refs.group_of(n) for n in refs.names}
    assert FAMILIES_REQUIRED <= groups
    assert groups & {"resnext", "wide_resnet"} and groups & {"mobilenet", "mnasnet", "shufflenet"}
    unknown = {r.group for r in refs.references if not r.measured}
    assert {"efficientnet", "regnet", "vit"} <= unknown


def test_features_are_logs_and_never_the_name():
    p = shipped_profile("resnet50")
    d = feature_dict(p)
    assert list(d) == list(FEATURE_NAMES)
    assert d["log_flops"] == pytest.approx(math.log(p.flops))
    renamed = p.to_dict() | {"spec": "something_else"}
    assert feature_vector(renamed) == feature_vector(p)


def test_standardisation_fit_and_pure_python_apply_agree():
    profs = shipped_profiles()
    names = ["resnet18", "vgg16", "densenet121", "mobilenet_v2", "squeezenet1_0"]
    vectors = [feature_vector(profs[n]) for n in names]
    std = Standardisation.fit(vectors)
    z = [std.apply(v) for v in vectors]
    for j, name in enumerate(FEATURE_NAMES):
        col = [row[j] for row in z]
        mean = sum(col) / len(col)
        var = sum((c - mean) ** 2 for c in col) / len(col)
        assert mean == pytest.approx(0, abs=1e-9), name
        assert var == pytest.approx(1.0, rel=1e-6) or var == pytest.approx(0.0, abs=1e-12), name


def test_shipped_reference_file_is_consistent_with_the_shipped_profiles():
    shipped = load_references()
    refit = ReferenceSet.from_profiles(shipped.names, profiles=shipped_profiles(),
                                       measured=[r.name for r in shipped.references if r.measured])
    assert shipped.feature_names == FEATURE_NAMES
    for a, b in zip(shipped.standardisation.mean, refit.standardisation.mean, strict=True):
        assert a == pytest.approx(b, rel=1e-9, abs=1e-12)
    for ra, rb in zip(shipped.references, refit.references, strict=True):
        assert ra.features == pytest.approx(rb.features) and ra.flops == rb.flops and ra.measured == rb.measured


def test_metrics():
    a, b = [1.0, 2.0, -1.0], [2.0, 4.0, -2.0]
    for metric in ("cosine", "euclidean", "manhattan"):
        assert similarity(a, a, metric) == pytest.approx(1.0)
    assert similarity(a, b, "cosine") == pytest.approx(1.0)
    assert similarity(a, [-x for x in a], "cosine") == pytest.approx(-1.0)
    assert similarity(a, b, "euclidean") == pytest.approx(1 / (1 + math.sqrt(1 + 4 + 1)))
    assert similarity(a, b, "manhattan") == pytest.approx(1 / (1 + 4))
    with pytest.raises(ClassifyError, match="cosine, euclidean, manhattan"):
        similarity(a, b, "chebyshev")


def test_a_reference_classifies_as_itself():
    for name in load_references().names:
        c = classify(name)
        assert (c.nearest_reference, c.similarity, c.flops_ratio) == (name, 1.0, 1.0)
        assert c.group == family_of(name)


def test_classification_of_torchvision_models():
    refs = load_references()
    profs = shipped_profiles()
    c = classify("densenet169")
    assert c.nearest_reference == "densenet121" and c.group == "densenet"
    assert c.flops_ratio == pytest.approx(profs["densenet169"].flops / profs["densenet121"].flops)
    sims = [s for _, s in c.candidates]
    assert sims == sorted(sims, reverse=True) and len(c.candidates) == len(refs.names)
    # members of the measured families mostly land in their own family's group (other families have
    # close kin across labels, e.g. RegNetX is built like ResNeXt, MobileNetV3 like EfficientNet)
    fams = {r.group for r in refs.references if r.measured}
    members = [n for n in profs if family_of(n) in fams and n not in refs.names]
    hits = sum(classify(n).group == family_of(n) for n in members)
    assert len(members) >= 20 and hits / len(members) >= 0.85, f"{hits}/{len(members)}"


def test_unmeasured_nearest_reference_points_to_a_measured_one():
    refs = load_references()
    c = classify("vit_b_32")
    assert c.group == "vit" and not refs.get(c.nearest_reference).measured
    first_measured = next(n for n, _ in c.candidates if refs.get(n).measured)
    assert c.perf_reference == first_measured
    assert c.perf_flops_ratio == pytest.approx(c.flops / refs.flops_of(c.perf_reference))


def test_custom_references_by_names_and_file(tmp_path):
    c = classify("resnet101", references="resnet50,vgg16,mobilenet_v2")
    assert c.nearest_reference == "resnet50" and [n for n, _ in c.candidates][0] == "resnet50"
    f = tmp_path / "refs.json"
    f.write_text(json.dumps(["vgg16", "squeezenet1_1"]))
    assert classify("vgg19_bn", references=str(f)).nearest_reference == "vgg16"
    f.write_text(json.dumps({"references": [{"name": "densenet121", "group": "dense"}, {"name": "vgg11"}]}))
    c = classify("densenet201", references=str(f))
    assert (c.nearest_reference, c.group) == ("densenet121", "dense")   # a file's own group names win
    assert resolve_references(["resnet18", "vgg11"]).names == ("resnet18", "vgg11")


@pytest.mark.parametrize("kwargs, message", [
    ({"references": "resnet50,resnt18"}, "did you mean resnet18"),
    ({"metric": "hamming"}, "choose one of cosine, euclidean, manhattan"),
    ({"references": "/nonexistent/refs.json"}, "cannot read reference set"),
])
def test_classify_errors_are_one_line(kwargs, message):
    with pytest.raises(ClassifyError) as exc:
        classify("resnet50" if "metric" not in kwargs else "vgg13", **kwargs)
    assert message in str(exc.value) and "\n" not in str(exc.value)


def test_classify_unknown_model():
    with pytest.raises(ClassifyError, match="unknown model 'alexnett'.*alexnet"):
        classify("alexnett")


def test_classify_hot_path_imports_no_heavy_library():
    code = textwrap.dedent("""
        import json, sys
        from msched.models.classify import ClassifyError, classify
        c = classify("wide_resnet101_2")
        try:
            classify("resnet5")          # an unknown name is answered from the shipped table too
        except ClassifyError:
            pass
        heavy = [m for m in ("torch", "numpy", "sklearn", "sqlalchemy") if m in sys.modules]
        print(json.dumps({"ref": c.nearest_reference, "heavy": heavy}))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=REPO)
    data = json.loads(out.stdout)
    assert data == {"ref": "wide_resnet50_2", "heavy": []}


def test_classify_command_json_and_errors():
    msched = [sys.executable, "-m", "msched.cli", "classify"]
    out = subprocess.run([*msched, "vgg13", "--json"], capture_output=True, text=True, timeout=60)
    data = json.loads(out.stdout)
    assert {"group", "nearest_reference", "similarity", "candidates"} <= set(data)
    assert data["group"] == "vgg" and len(data["candidates"]) == 2
    assert data["candidates"][0][1] <= data["similarity"]
    text = subprocess.run([*msched, "mnasnet0_5", "--metric", "euclidean"], capture_output=True, text=True, timeout=60)
    assert text.returncode == 0 and "group mnasnet" in text.stdout and text.stdout.count("next ") == 2
    bad = subprocess.run([*msched, "vgg13", "--metric", "nope"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "'cosine', 'euclidean', 'manhattan'" in bad.stderr and "Traceback" not in bad.stderr
    bad = subprocess.run([*msched, "vgg13", "--references", "vgg16,nope"], capture_output=True, text=True,
                         timeout=60)
    assert bad.returncode == 1 and bad.stderr.startswith("Error: reference nope: unknown model 'nope'")
