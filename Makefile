# Pallas: one entry point for set-up, lint, tests and the demo. Every target installs what it needs.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# Re-install only when the dependency list or the lock changes.
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml requirements/build.lock requirements/dev.lock \
  requirements/install | sha256sum | cut -c1-16)
UV_VERSION := 0.13.9
MONITORING ?= 0
NETWORK_POLICY ?= 0
# pytest-xdist workers for `make test`: one lane for the node's tests, one for the control plane's,
# and two for everything else (tests/conftest.py); most of their time is waiting on processes.
WORKERS ?= 4
# The set-up steps of `make test` at once: the Go builds, the image and npm/apt downloads overlap.
SETUP_JOBS ?= 4
PYTEST_LANES := -n $(WORKERS) --dist loadgroup

.PHONY: help venv lock k8s-bins cluster-addons jaeger mcp-peers system-deps image lint verify check test test-setup \
        test-unit test-integration test-e2e coverage cluster-up cluster-down cluster-status demo demo-down clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-18s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml requirements/build.lock requirements/dev.lock requirements/install
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || \
	  { echo "make: Python >= 3.11 is required (found $$($(PYTHON) --version))" >&2; exit 1; }
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	# Exactly the locks, hashes checked, nothing resolved, then `pip check` (requirements/install).
	PIP="$(BIN)/python -m pip" requirements/install $(BIN)/python requirements/build.lock \
	  requirements/dev.lock -- -e .
	rm -f $(VENV)/.installed-* && touch $@

venv: $(STAMP) ## create .venv with the locked dependencies (requirements/dev.lock, hashes checked)

lock: venv ## re-resolve requirements/*.lock from pyproject.toml and requirements/build.in
	$(BIN)/python -m pip install --quiet --disable-pip-version-check uv==$(UV_VERSION)
	for spec in "runtime.lock:pyproject.toml" "dev.lock:pyproject.toml --extra dev" \
	    "build.lock:requirements/build.in"; do \
	  $(BIN)/uv pip compile --quiet $${spec#*:} --generate-hashes --python-version 3.11 \
	    --python-platform x86_64-manylinux_2_28 -o requirements/$${spec%%:*}; done

k8s-bins: ## build (or reuse) etcd, the Kubernetes control plane and node binaries, CoreDNS, kubectl, helm
	hack/build/k8s-bins.sh

cluster-addons: ## build (or reuse) the cluster add-ons: kube-network-policies, the Prometheus Operator and its CRDs
	hack/build/cluster-addons.sh

jaeger: ## build (or reuse) Jaeger, the trace backend the tests read traces back from
	hack/build/jaeger.sh

mcp-peers: ## install (or reuse) the pinned MCP peers: Node 22, server-everything, inspector-cli, conformance, @a2a-js/sdk
	hack/build/mcp-peers.sh

system-deps: ## install (if missing) the Debian packages: containerd, runc, CNI, buildah, debootstrap, promtool…
	hack/build/system-deps.sh

image: system-deps ## build the pallas image here (only when the project changed; always, from scratch, when CI=true) and load it into the node
	hack/build/image build $(if $(filter true,$(CI)),--fresh)

lint: venv ## ruff, mypy (strict: packages, bench, hack scripts) and the import-layering contracts
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	# One strict mypy run over everything typed (pyproject.toml's settings): five runs re-read
	# the same imports five times. The hack scripts have no .py suffix; --scripts-are-modules
	# names each after its file, so the three do not collide as __main__.
	MYPYPATH=hack/local $(BIN)/mypy --scripts-are-modules api/pallas_api api/pallas_io \
	  operator/pallas_operator runtime/pallas_runtime registry/pallas_registry bench \
	  hack/generate/chartgen.py hack/generate/chartvalues.py hack/local/localnode \
	  hack/local/cluster hack/build/image hack/local/monitoring
	$(BIN)/lint-imports

verify: venv ## regenerate crds/ from the models and fail if the committed files differ
	hack/generate/crds
	hack/generate/chart
	@generated="crds/ charts/pallas/templates/crds/ charts/pallas/templates/_rbac-rules.tpl \
	    charts/pallas/values.yaml charts/pallas/values.schema.json"; \
	  stale="$$(git diff --name-only -- $$generated; git ls-files --others --exclude-standard -- $$generated)"; \
	  if [[ -n "$$stale" ]]; then \
	    echo "make verify: generated files are stale or untracked (run hack/generate/crds, hack/generate/chart and commit):" >&2; \
	    echo "$$stale" | sed 's/^/  /' >&2; exit 1; fi

# Each unit test's time bound in seconds (read by tests/conftest.py): 5 when the unit tier runs
# alone; more where it shares the machine with the other tiers, and under coverage's tracing.
export PALLAS_UNIT_TIMEOUT ?= 5
test: PALLAS_UNIT_TIMEOUT = 15
coverage: PALLAS_UNIT_TIMEOUT = 30

check: lint ## the loop before every commit: lint, then the unit tier on every core (no process, socket or binary)
	$(BIN)/pytest tests/unit -n auto

test-unit: venv ## the unit tier on every core (each test bounded at PALLAS_UNIT_TIMEOUT s)
	$(BIN)/pytest tests/unit -n auto

test-setup: k8s-bins cluster-addons mcp-peers jaeger system-deps image ## everything the integration and e2e tiers run on

test-integration: venv k8s-bins cluster-addons mcp-peers jaeger system-deps ## tests against the real local control plane
	$(BIN)/pytest tests/integration $(PYTEST_LANES)

test-e2e: venv k8s-bins cluster-addons mcp-peers jaeger system-deps image ## the whole product as containers on the local node
	$(BIN)/pytest tests/e2e

# Lint, the generated files' check and every set-up step run at once (their logs each in one
# piece), then every tier in one pytest run on $(WORKERS) workers.
test: venv ## lint and every test tier (what CI runs)
	$(MAKE) --no-print-directory -j$(SETUP_JOBS) --output-sync=target lint verify test-setup
	$(BIN)/pytest tests $(PYTEST_LANES)

coverage: venv test-setup ## `make test`'s tests with line coverage of the product packages (htmlcov/, coverage.json)
	$(BIN)/pytest tests $(PYTEST_LANES) --cov --cov-report=term:skip-covered \
	  --cov-report=json --cov-report=html

cluster-up: k8s-bins cluster-addons system-deps ## start (or reuse) the local cluster: control plane and node
	hack/local/cluster up

cluster-down: ## stop the local cluster (every node component too) and undo its network
	hack/local/cluster down

cluster-status: ## say what runs
	hack/local/cluster status

demo: venv k8s-bins system-deps cluster-up ## the whole product as containers (MONITORING=1: with Prometheus; NETWORK_POLICY=1)
	MONITORING=$(MONITORING) NETWORK_POLICY=$(NETWORK_POLICY) hack/local/demo up

demo-down: ## remove the demo (the cluster keeps running)
	hack/local/demo down

clean: cluster-down ## stop the cluster and remove the virtualenv and caches in the repo
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .cluster
