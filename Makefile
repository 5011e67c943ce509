# nodeflow: `make test` and `make demo` each create .venv (pinned requirements) when missing.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: test lint typecheck unit docs docs-reference demo bench bench-all bench-cost bench-fidelity catalog synth install-manifests clean

$(STAMP): requirements.txt requirements-dev.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet -r requirements-dev.txt
	$(PY) -c "import pathlib, site; pathlib.Path(site.getsitepackages()[0], 'nodeflow-src.pth').write_text('$(CURDIR)/functions\n$(CURDIR)\n$(CURDIR)/agent\n')"
	touch $(STAMP)

lint: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

typecheck: $(STAMP)
	$(PY) -m mypy

# The pinned CDK CLI (package.json / package-lock.json), for `make synth` and the infra CLI test.
node_modules/.package-lock.json: package.json package-lock.json
	npm ci --no-audit --no-fund --loglevel=error

# Lambda dependencies for arm64 / CPython 3.12, downloaded once; bundling then runs offline.
$(VENV)/lambda-wheels/.done: requirements.txt $(STAMP)
	$(PY) -m infra.bundling download
	touch $@

# pytest-xdist workers: one more than the cores this process may use (a third of the suite's time is spent
# waiting on workflows, subprocesses and the control plane); --dist load hands tests out in collected order, so the
# long ones tests/conftest.py puts first start on different workers at once; TEST_JOBS=0 runs them in this process.
TEST_JOBS ?= $(shell $(PYTHON) -c 'import os; print(len(os.sched_getaffinity(0)) + 1)')
unit: $(STAMP) node_modules/.package-lock.json
	$(PY) -m pytest -q -n $(TEST_JOBS) $(if $(filter 0,$(TEST_JOBS)),,--dist load)

test: lint typecheck unit

# The documentation site into site/ (strict: a broken link or anchor fails; tests/docs builds it too).
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict

# Regenerate the reference pages (CLI, CRD fields, metrics, settings, events, parity) from the code;
# tests/docs/test_reference.py fails while they are stale.
docs-reference: $(STAMP)
	$(PY) tools/gen_docs.py

demo: $(STAMP)
	$(PY) -m sandbox.demo $(if $(KEEP),--keep)

bench: $(STAMP)
	$(PY) benchmarks/solver.py

# Plan fidelity on the real control plane (docs/benchmarks/fidelity.md): does kube-scheduler bind the pods to the
# nodes nodeflow launched for them? ARGS="--workloads spread,gpu" for a subset.
bench-fidelity: $(STAMP)
	$(PY) -m benchmarks.fidelity $(ARGS)

# Every benchmark under benchmarks/, one table with the scale targets (~15 min, +6-9 for cost, +5 for fidelity;
# ARGS=--quick: a smoke run,
# ARGS="--only plan_scale,imports", ARGS="--pin 1" to run each on one core).
bench-all: $(STAMP)
	$(PY) -m benchmarks.all $(ARGS)

# What running nodeflow costs (docs/cost.md): measured on the local control plane and moto, priced for 10, 100 and
# 1,000 nodes, written into docs/cost.md (6-9 min; ARGS=--quick: a smoke run, 2-3 min, docs/cost.md untouched).
bench-cost: $(STAMP)
	$(PY) -m benchmarks.cost $(if $(ARGS),$(ARGS),--markdown docs/cost.md)

# Regenerate the bundled offline catalog snapshot (from moto's copy of real DescribeInstanceTypes data).
catalog: $(STAMP)
	$(PY) tools/gen_catalog.py

# Synthesize the stack (cdk.out/): make synth CLUSTER=my-cluster
synth: $(STAMP) node_modules/.package-lock.json $(VENV)/lambda-wheels/.done
	npx cdk synth -c clusterName=$(or $(CLUSTER),demo) -q

# Render the in-cluster install from a deployed stack, then `kubectl apply -k` the printed directory:
# make install-manifests STACK=Nodeflow-my-cluster [REGION=us-east-1] [OUT=dir]
install-manifests: $(STAMP)
	@test -n "$(STACK)" || { echo "usage: make install-manifests STACK=Nodeflow-<cluster> [REGION=...] [OUT=dir]" >&2; exit 2; }
	$(PY) -m nodeflow install-manifests --stack $(STACK) $(if $(REGION),--region $(REGION)) $(if $(OUT),-o $(OUT))

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache cdk.out node_modules site
