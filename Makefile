# Two commands do all the set-up on a fresh machine:
#   make demo   - the main job end to end on the local backend: train, collect, report
#   make test   - lint, type checks and the whole test suite
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-client

.PHONY: venv demo test lint bench clean system-packages image image-if-possible image-test cluster cluster-if-possible cluster-down

# torch first and pinned, so the version is known. From PyPI it is the CUDA build (~3 GB,
# cached by pip after the first download; it runs on the CPU too); a machine with a CPU
# wheel or index in its pip configuration gets that instead.
TORCH ?= torch==2.13.0

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check '$(TORCH)'
	$(BIN)/pip install --quiet --disable-pip-version-check -e '.[dev,runtime]'
	touch $@

# checkov in a virtual environment of its own: beside boto3 it resolves to urllib3 1.26,
# which must not constrain the client's environment (tests/test_checkov.py runs it).
SCAN := .venv-scan
SCAN_STAMP := $(SCAN)/.installed

$(SCAN_STAMP):
	$(PYTHON) -m venv $(SCAN)
	$(SCAN)/bin/pip install --quiet --disable-pip-version-check 'checkov>=3.2,<4'
	touch $@

# TorchX beside the client (the torchx extra) in its own environment too: TorchX 0.7 pins
# urllib3<1.27 (tests/test_torchx.py runs its scheduler and CLI there).
TORCHX := .venv-torchx
TORCHX_STAMP := $(TORCHX)/.installed

$(TORCHX_STAMP): pyproject.toml
	$(PYTHON) -m venv $(TORCHX)
	$(TORCHX)/bin/pip install --quiet --disable-pip-version-check -e '.[torchx]'
	touch $@

# The upstream oracle: the official generated models of the objects kctl-train writes, with
# the dependencies they declare (kubeflow-training 1.9.4 wants kubernetes<36, below the
# client's own), in an environment of their own. tests/test_official_models.py runs them.
ORACLE := .venv-oracle
ORACLE_STAMP := $(ORACLE)/.installed

$(ORACLE_STAMP):
	$(PYTHON) -m venv $(ORACLE)
	$(ORACLE)/bin/pip install --quiet --disable-pip-version-check \
		'kubeflow-training==1.9.4' 'kubeflow-trainer-api==2.3.0'
	touch $@

venv: $(STAMP)

demo: $(STAMP)
	$(BIN)/kctl-train apply examples/quickstart.yaml --local --wait
	@echo
	@echo "Collected into results/quickstart/:"
	@ls results/quickstart
	@echo "Training curves: results/quickstart/report.png"

lint: $(STAMP)
	$(BIN)/ruff check operator_client tests bench
	$(BIN)/ruff format --check operator_client tests bench
	$(BIN)/mypy
	# The tests and benchmarks run on the venv's Python (3.11: tomllib), the package on 3.10+.
	$(BIN)/mypy --python-version 3.11 tests bench
	$(BIN)/lint-imports

# The image is built before the suite where it can be (root here and in CI: buildah), so
# tests/test_image.py runs the quickstart from it; elsewhere that test skips, saying why.
test: lint $(SCAN_STAMP) $(TORCHX_STAMP) $(ORACLE_STAMP) system-packages image-if-possible \
		cluster-if-possible
	$(BIN)/pytest -n 2 --dist loadgroup

# Debian packages the tests use, installed in one apt-get run where missing (root only):
# iproute2 for pod sandboxes, buildah and debootstrap for the trainer image, docker-registry
# and apache2-utils (htpasswd) for the registry the build tests push to; openssl, curl, gcc,
# libseccomp-dev, pkg-config, the CNI plugins and iptables for make cluster (cluster/).
PACKAGES := iproute2:ip openssl:openssl curl:curl buildah:buildah debootstrap:debootstrap docker-registry:docker-registry \
	apache2-utils:htpasswd gcc:gcc libseccomp-dev:/usr/include/seccomp.h pkg-config:pkg-config \
	containernetworking-plugins:/usr/lib/cni/bridge iptables:iptables

system-packages:
	@images/system-packages.sh $(PACKAGES)

# The trainer image: docker build where an engine runs, else buildah from a base built
# locally with debootstrap (images/build.sh; ~5 min on a fresh machine, cached after).
image: system-packages
	images/build.sh

image-if-possible: system-packages
	@if [ "$$(id -u)" = 0 ] && command -v buildah >/dev/null; then images/build.sh; \
	else echo "not building the trainer image (needs root and buildah, or Docker)"; fi

image-test: $(STAMP) image
	$(BIN)/pytest tests/test_image.py tests/test_pod_sandbox.py

bench: $(STAMP)
	$(BIN)/python bench/startup.py
	$(BIN)/python bench/first_step.py
	$(BIN)/python bench/checkpoint_stall.py
	$(BIN)/python bench/aggregate.py
	$(BIN)/python bench/collect_transfer.py
	$(BIN)/python bench/hostile_input.py
	$(BIN)/python bench/faults.py
	$(BIN)/python bench/build.py

clean:
	rm -rf $(VENV) $(SCAN) $(TORCHX) $(ORACLE) out results .pytest_cache .mypy_cache .ruff_cache .hypothesis

# A real Kubernetes control plane with the training-operator, JobSet, Kubeflow Trainer and
# simulated GPU node pools, built from upstream's Go modules and run as host processes (root,
# no Docker): cluster/.
cluster: $(STAMP) system-packages image-if-possible
	cluster/up.sh

# For make test: the cluster where it can run (root, Go and its module proxy). Elsewhere, or
# when it does not start, tests/e2e's cluster tests skip saying why; under CI=true they fail.
cluster-if-possible: $(STAMP) system-packages image-if-possible
	@if [ "$$(id -u)" = 0 ] && command -v go >/dev/null; then \
		cluster/up.sh || [ "$$CI" != true ] || exit 1; \
	else echo "not starting the cluster (needs root and Go with the module proxy)"; fi

cluster-down:
	cluster/down.sh
