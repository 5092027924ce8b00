# The two commands a newcomer needs: `make demo` and `make test`. Every target sets
# up what it needs (uv, the Python environment, the Go-built Kubernetes binaries, the
# images, the Debian packages the node needs) and reuses what an earlier run left in
# the caches.
SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

export TFJOB_CACHE ?= $(HOME)/.cache/tfjob-operator
UV_VERSION := 0.13.9
UV_HOME := $(TFJOB_CACHE)/tools/uv-$(UV_VERSION)
UV := $(UV_HOME)/bin/uv
# The release builds the Python wheel with it (release/wheel.py).
export TFJOB_UV := $(UV)
VENV := .venv
BIN := $(VENV)/bin
# uv must use the machine's Python 3.11: only package registries are reachable.
export UV_PYTHON_DOWNLOADS := never
export UV_PYTHON := python3.11
# uv's package cache is the project's too, not ~/.cache/uv (Go's: hack/build-binaries.sh).
export UV_CACHE_DIR ?= $(TFJOB_CACHE)/uv
# kubectl's discovery cache and Keras' settings file, which the tests' kubectl and
# TensorFlow would otherwise write to ~/.kube/cache and ~/.keras.
export KUBECACHEDIR ?= $(TFJOB_CACHE)/kube
export KERAS_HOME ?= $(TFJOB_CACHE)/keras
PYTEST_ARGS ?=
# Tests' temporary files (pytest's tmp_path, clients' certificate files) go to the cache,
# not the host's /tmp.
IN_CACHE_TMP := mkdir -p $(TFJOB_CACHE)/tmp && TMPDIR=$(TFJOB_CACHE)/tmp
PYTEST := $(IN_CACHE_TMP) $(BIN)/pytest
BENCH_ARGS ?=
CHAOS_ARGS ?=
DEMO_ARGS ?=
IMAGES_ARGS ?=
# The registry and organisation images are named under and released to (default: where the
# release workflow publishes, tfjob_operator.published.REGISTRY): the one setting for
# a registry of one's own. `make release` also takes VERSION (default: the file VERSION),
# PLATFORMS, IMAGES and SIGN_KEY (a cosign key file, or `keyless`; empty: not signed).
REGISTRY ?=
export TFJOB_REGISTRY ?= $(REGISTRY)
VERSION ?=
PLATFORMS ?= linux/amd64,linux/arm64
IMAGES ?= operator,trainer,trainer-gpu
DIST ?= dist
SIGN_KEY ?=

.PHONY: help env binaries cluster-binaries images project-images test test-full check lint format typecheck unit integration e2e demo cluster cluster-down bench chaos e2e-kind crd manifests examples dashboard chart-readme generated-check version release clean

help: ## List the targets
	@grep -hE '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-13s %s\n", $$1, $$2}'

$(UV):
	@echo "==> installing uv $(UV_VERSION) into $(UV_HOME)"
	python3.11 -m venv $(UV_HOME)
	$(UV_HOME)/bin/pip install --quiet --disable-pip-version-check --no-cache-dir uv==$(UV_VERSION)

$(VENV)/.synced: $(UV) uv.lock pyproject.toml operator/pyproject.toml trainer/pyproject.toml localcluster/pyproject.toml VERSION
	@echo "==> syncing the Python environment in $(VENV) (uv.lock, frozen)"
	@# uv keeps a lock file in TMPDIR: the cache's, not the host's /tmp.
	@mkdir -p $(TFJOB_CACHE)/tmp
	TMPDIR=$(TFJOB_CACHE)/tmp $(UV) sync --frozen --compile-bytecode
	touch $@

env: $(VENV)/.synced ## Install the pinned Python environment (.venv)

binaries: ## Build every Go-built tool of hack/go-tools.txt (Kubernetes, etcd, helm, kind, Kueue, ...) at its pinned version into the cache (skips what is built)
	hack/build-binaries.sh all

# What a local cluster with the chart needs (`make images`, `demo`, `cluster`); kind too for
# `make demo DEMO_ARGS=--kind`. `make test` builds the other tools beside its tests.
CLUSTER_TOOLS := kubernetes etcd coredns local-path-provisioner helm nodetools $(if $(findstring --kind,$(DEMO_ARGS)),kind)

cluster-binaries:
	hack/build-binaries.sh $(CLUSTER_TOOLS)

# The operator's and trainer's images need no Go-built tool: they build beside the cluster's
# Go builds, which saves a cold `make demo` about a minute (docs/development.md).
images: env ## Build the images (operator, trainer, node, busybox) into the cache; IMAGES_ARGS=--gpu adds the GPU trainer
	$(MAKE) --no-print-directory -j2 cluster-binaries project-images
	$(BIN)/tfjob-localcluster images $(IMAGES_ARGS)

project-images: env
	$(BIN)/tfjob-localcluster images --project $(IMAGES_ARGS)

lint: env ## Ruff lint and format check
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: env ## Apply ruff's fixes and formatting
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

typecheck: env ## mypy, strict, on all the Python: product, harnesses, hack/ and the tests
	$(BIN)/mypy

# Two pytest-xdist workers, one per stream of tests (tests/support/streams.py): the
# session's local cluster, and what needs none of it (TensorFlow on the host, kind, the
# release's own clusters), side by side.
STREAMS := -n 2 --dist loadgroup

# The Go-built tools only later tests use (`make binaries` beyond what `make images` built)
# are built beside the tests, on the cores they leave idle (hack/beside-builds.sh).
BESIDE_BUILDS := $(IN_CACHE_TMP) hack/beside-builds.sh $(BIN)/pytest

test: env images lint typecheck ## Everything that runs here: lint, types, unit, integration, e2e (each scenario once)
	$(BESIDE_BUILDS) $(STREAMS) $(PYTEST_ARGS)

test-full: env images lint typecheck ## make test with every e2e scenario on the local cluster and on kind (the nightly workflow)
	$(BESIDE_BUILDS) $(STREAMS) --backends local,kind $(PYTEST_ARGS)

unit: env ## Unit tests only
	$(PYTEST) -m unit $(PYTEST_ARGS)

check: lint typecheck unit ## What needs no cluster and no build: lint, types, unit tests

integration: env images binaries ## Integration tests (the local cluster)
	$(PYTEST) -m integration $(PYTEST_ARGS)

e2e: env images binaries ## End-to-end tests (real TensorFlow in containers), every scenario on the local cluster
	$(PYTEST) -m e2e --backends local $(PYTEST_ARGS)

crd: env ## Regenerate the TFJob CRD (chart crds/ and its manifests/ copy)
	$(BIN)/python -m hack.gen_crd

manifests: env binaries ## Regenerate the kustomize install from the Helm chart
	$(BIN)/python -m hack.gen_manifests

examples: env ## Regenerate examples/ with `tfjob-operator new`
	$(BIN)/python -m hack.gen_examples

dashboard: env ## Regenerate the Grafana dashboard the chart ships
	$(BIN)/python -m hack.gen_dashboard

chart-readme: env ## Regenerate the chart's README (its table of values)
	$(BIN)/python -m hack.gen_chart_readme

generated-check: env binaries ## Fail if a generated file (CRD, manifests, examples, dashboard, chart README) is out of date
	$(BIN)/python -m hack.gen_crd --check
	$(BIN)/python -m hack.gen_manifests --check
	$(BIN)/python -m hack.gen_examples --check
	$(BIN)/python -m hack.gen_dashboard --check
	$(BIN)/python -m hack.gen_chart_readme --check

demo: env images ## The main job: local cluster, operator, MWMS and PSS TFJobs trained to completion
	$(BIN)/python hack/demo.py $(DEMO_ARGS)

bench: env binaries ## Control-plane benchmark: N = 100, 500, 1000 TFJobs on kwok nodes against the API server's floor
	$(BIN)/python -m bench $(BENCH_ARGS)

chaos: env images binaries ## Faults: 60 TFJobs while the operator, API server, etcd, kubelet and containerd are killed, paused, restarted and the node is lost; nothing may be lost (CHAOS_ARGS)
	$(BIN)/python -m chaos $(CHAOS_ARGS)

e2e-kind: env images binaries ## The e2e scenarios on a kind cluster (the project's node image and Docker engine where the machine has none)
	$(PYTEST) tests/e2e --backends kind $(PYTEST_ARGS)

cluster: env images ## Start the local cluster in the background and print its KUBECONFIG
	$(BIN)/tfjob-localcluster up --state-dir $(TFJOB_CACHE)/cluster

cluster-down: env ## Stop the cluster started by `make cluster`
	$(BIN)/tfjob-localcluster down --state-dir $(TFJOB_CACHE)/cluster

version: env ## Set the project's version everywhere it is written: make version VERSION=0.2.0
	@test -n "$(VERSION)" || { echo "make version: give VERSION=MAJOR.MINOR.PATCH" >&2; exit 2; }
	$(BIN)/python hack/set_version.py $(VERSION)
	$(MAKE) env examples manifests chart-readme

release: env ## Build, check, sign and push a release: make release REGISTRY=host[:port][/org] [VERSION=] [PLATFORMS=] [IMAGES=] [SIGN_KEY=] [DIST=dist]
	hack/build-binaries.sh helm $(if $(SIGN_KEY),cosign syft)
	$(BIN)/python -m release --registry "$(REGISTRY)" --version "$(VERSION)" --platforms "$(PLATFORMS)" --images "$(IMAGES)" --sign-key "$(SIGN_KEY)" --out "$(DIST)"

clean: ## Remove the Python environment and build outputs (the binary cache stays)
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache dist
