# msched — `make demo` runs the policy on the embedded simulator; `make test` runs every test.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
SLURM_DIR ?= $(CURDIR)/.slurm-dev
DEMO_DIR ?= out/demo

.PHONY: install test test-fast demo lint bench bench-quick slurm-up slurm-down clean profiles

install: $(STAMP)

$(STAMP): setup.cfg pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip setuptools wheel
	$(PY) -m pip install -q torch==2.14.1 torchvision==0.29.1
	# compat: a plain path entry instead of an import hook, so msub starts faster
	$(PY) -m pip install -q -e '.[test]' --config-settings editable_mode=compat
	touch $(STAMP)

test: install
	$(PY) -m pytest -q -ra

test-fast: install
	$(PY) -m pytest -q -ra -m "not slurm and not slow and not browser"

# A static batch (every job at t=0, the papers' makespan setting) of models that are not references, on
# a cluster of the shared table's six GPU types, one 8-GPU node each, under Slurm's default scheduler
# (sched/backfill). Sizes and durations follow Gavel's laws (--no-philly: the same demo with or without
# the shared Philly trace), durations clipped to 2 h on the median type so that no single job dominates:
# the longest job as run is under a quarter of every policy's makespan (`msched sim` prints the share),
# and the LP lower bound is printed beside the results. Jobs carry time limits as users set them
# (`msched trace synth`'s default). The starvation guard is off: with every job waiting from t=0, a
# 24 h age would fire for the whole tail of the batch.
DEMO_CLUSTER ?= a100:8x1,titanv:8x1,titanrtx:8x1,rtx2080ti:8x1,titanxp:8x1,gtx1080ti:8x1
demo: install
	mkdir -p $(DEMO_DIR)
	$(VENV)/bin/msched trace synth --jobs 600 --models non-reference --arrival static --seed 1 --no-philly \
		--max-duration 7200 --cluster $(DEMO_CLUSTER) --out $(DEMO_DIR)/trace.csv
	$(VENV)/bin/msched sim --cluster $(DEMO_CLUSTER) --scheduler backfill --trace $(DEMO_DIR)/trace.csv \
		--truth msched/data/measured_perf.csv --policy fifo,fastest,msched-once,msched,oracle --round 60 \
		--starvation-age 0 --json $(DEMO_DIR)/results.json --plot $(DEMO_DIR)/sim.png

# ruff, then pylint's duplicate-code check alone (six or more lines repeated; imports and docstrings aside)
lint: install
	$(VENV)/bin/ruff check msched slurm_sim tests bench scripts
	$(PY) -m pylint --disable=all --enable=duplicate-code --min-similarity-lines=6 \
		--ignore-imports=yes --ignore-docstrings=yes --ignore-comments=yes --score=no msched slurm_sim

bench: install
	$(PY) bench/run_all.py --full

bench-quick: install
	$(PY) bench/run_all.py --quick

profiles: install
	$(PY) scripts/build_reference_profiles.py

slurm-up:
	bash scripts/slurm-dev-cluster.sh up --dir $(SLURM_DIR)

slurm-down:
	bash scripts/slurm-dev-cluster.sh down --dir $(SLURM_DIR)

clean:
	rm -rf out build *.egg-info .pytest_cache
