"""`msched calibrate refit`: the cost model refitted after a site's measurements, and how its error on
the site's rows changed (issue: predict any model on any GPU type, `msched calibrate`).

The site here is real data: the measured torchvision table's titanv rows play a site's calibration of a
type the shipped parameters never saw (they are fitted on the other types' rows of the same models)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from msched.estimate.calibrate import CalibrationError, refit_cost_model
from msched.estimate.cost_fit import fit, rows_from_perf
from msched.estimate.cost_model import CostModel
from msched.estimate.gpu_specs import load_specs
from msched.estimate.perf_table import PerfTable
from msched.models.shipped import load_table

MEASURED_TABLE = os.path.join(os.path.dirname(__file__), "..", "msched", "data", "measured_perf.csv")
MODELS = ("resnet18", "resnet50", "vgg16", "mobilenet_v2", "densenet121", "shufflenet_v2_x1_0")
SITE_TYPE = "titanv"


@pytest.fixture(scope="module")
def site_setup(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("refit")
    table = PerfTable.load(MEASURED_TABLE)
    rows = [r for r in table.rows if r.model in MODELS and r.num_gpus == 1]
    shipped = PerfTable([r for r in rows if r.gpu_type != SITE_TYPE])
    site = PerfTable(rows)                                   # the shipped rows plus the site's titanv rows
    shipped_path, site_path, base_path = tmp / "shipped.csv", tmp / "perf.csv", tmp / "base.json"
    shipped.write(shipped_path)
    site.write(site_path)
    base_path.write_text(json.dumps(fit(rows_from_perf(shipped.rows), load_table()["models"], load_specs())))
    return tmp, shipped_path, site_path, base_path, site


def test_refit_lowers_the_error_on_the_sites_rows(site_setup):
    _tmp, shipped_path, _site_path, base_path, site = site_setup
    params, summary = refit_cost_model(site, base_params=str(base_path), shipped_table=str(shipped_path))
    n_site = sum(1 for r in site.rows if r.gpu_type == SITE_TYPE)
    assert summary.site_rows == n_site and summary.skipped == 0
    assert summary.fit_rows == len(site.rows)
    assert [t for t, *_ in summary.by_type] == [SITE_TYPE]
    assert summary.error_after < summary.error_before
    # the parameters written are a usable cost model
    model = CostModel(params)
    assert model.knows_generation("volta")
    # a type of this site never measured (a T4 added later) runs on the site's machines: it takes the
    # site's host factor and GPU-time factor (here titanv's, the one site type), not the shipped machines' mean
    assert params["run_host"]["site"] == pytest.approx(params["type_host"][SITE_TYPE])
    assert model.default_host == pytest.approx(params["run_host"]["site"]) and model.default_run == "site"
    shipped_mean = CostModel({k: v for k, v in params.items() if k not in ("default_host", "default_run")})
    assert shipped_mean.default_host != pytest.approx(model.default_host, rel=0.05)
    t4 = load_specs().get("t4")
    profile = load_table()["models"]["densenet121"]           # host-bound at batch 12: the factor shows
    assert model.iteration_ms(profile, t4) != pytest.approx(shipped_mean.iteration_ms(profile, t4), rel=0.02)


def test_refit_without_site_rows_is_one_clear_error(site_setup):
    _tmp, shipped_path, _site_path, base_path, _site = site_setup
    with pytest.raises(CalibrationError, match="no rows of the site's own"):
        refit_cost_model(PerfTable.load(shipped_path), base_params=str(base_path), shipped_table=str(shipped_path))


GAVEL_SAMPLE = os.path.join(os.path.dirname(__file__), "data", "shared_sample", "gavel", "perf_table.csv")


@pytest.mark.slow
def test_refit_command(tmp_path):
    """The command writes the parameters where the config's `cost_model` says and prints the change. The
    site's rows: Gavel's measured ResNet-50 on P100 (a type the shipped table lacks); the refit runs on
    the whole shipped table (a minute of fitting)."""
    site = PerfTable.load(MEASURED_TABLE).merged_with(
        r for r in PerfTable.load(GAVEL_SAMPLE).rows if r.model == "resnet50" and r.gpu_type == "p100" and r.num_gpus == 1)
    site_path = tmp_path / "perf.csv"
    site.write(site_path)
    conf = tmp_path / "msched.toml"
    conf.write_text(f'state_dir = "{tmp_path}"\ncost_model = "{tmp_path / "site_cost_model.json"}"\n'
                    'estimator = "predictor"\n')
    env = dict(os.environ, MSCHED_CONFIG=str(conf))
    proc = subprocess.run([sys.executable, "-m", "msched.cli", "calibrate", "refit", "--perf", str(site_path)],
                          capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "site_cost_model.json").exists()
    lines = proc.stdout.splitlines()
    assert lines[1].split() == ["TYPE", "ROWS", "BEFORE", "AFTER"]
    assert lines[2].split()[:2] == ["p100", "4"]
    assert lines[-1].split()[0] == "all"
    # no place to write: one line naming the option and the config key
    conf.write_text(f'state_dir = "{tmp_path}"\n')
    proc = subprocess.run([sys.executable, "-m", "msched.cli", "calibrate", "refit", "--perf", str(site_path)],
                          capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode != 0 and "--out FILE" in proc.stderr and "cost_model" in proc.stderr
