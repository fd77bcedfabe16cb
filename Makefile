# Two commands matter on a fresh machine: `make demo` and `make test` (see README).
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# pytest with a base directory inside the checkout, one per target: pytest prunes /tmp/pytest-of-<user>
# to its newest three sessions, which deleted the live directories of concurrent sessions of one user.
pytest = $(BIN)/pytest --basetemp=$(CURDIR)/.pytest-tmp/$(1)

.PHONY: demo test lint unit integration chaos versions bench bench-proxy bench-index jars registry debs containertools image image-test spark-classes clean sandbox-up sandbox-down soak

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]'
	touch $(STAMP)

jars: $(STAMP)
	$(BIN)/replicator sandbox fetch

# The sandbox's schema registry (Apicurio, built once from Maven Central into the cache; first time
# ~150 MB of Maven downloads): tests/integration/test_schema_registry.py.
registry: $(STAMP)
	$(BIN)/python -m replicator.sandbox.registry fetch

# Debian packages used by tests (Prometheus server and promtool; iptables for the chaos harness's
# network partitions); installed as root when missing.
debs:
	@command -v prometheus >/dev/null && command -v promtool >/dev/null && command -v iptables >/dev/null || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq prometheus iptables >/dev/null; \
	  else echo "prometheus/promtool/iptables missing: run 'sudo apt-get install prometheus iptables'" >&2; exit 1; fi; }

# Container engine and stand-in base image tools for `make image-test` (the image is built and run
# with podman there; mmdebstrap makes its base from Debian packages).
CONTAINER_DEBS := podman buildah mmdebstrap runc crun uidmap fuse-overlayfs slirp4netns \
  containernetworking-plugins golang-github-containers-common
containertools:
	@command -v podman >/dev/null && command -v mmdebstrap >/dev/null && command -v runc >/dev/null || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	    --no-install-recommends $(CONTAINER_DEBS) >/dev/null; \
	  else echo "container tools missing: run 'sudo apt-get install $(CONTAINER_DEBS)'" >&2; exit 1; fi; }

# The image, with docker if its daemon runs, else podman or buildah: `make image IMAGE=replicator:0.1.0`.
# IMAGE_BUILD_FLAGS go to the engine as they are (e.g. --build-arg PYTHON_IMAGE=...).
image:
	IMAGE="$(IMAGE)" ENGINE="$(ENGINE)" deploy/tools/build_image.sh $(IMAGE_BUILD_FLAGS)

# kustomize for tests/unit/test_deploy.py, into .cache/bin (go install via the Go module proxy).
deploytools:
	deploy/tools/ensure_kustomize.sh

.pytest-tmp:
	mkdir -p $@

lint: $(STAMP)
	$(BIN)/ruff check replicator tests bench

unit: $(STAMP) | .pytest-tmp
	$(call pytest,unit) -q tests/unit

# The Spark class-data archive the suite's jobs map (docs/design.md, "Restarts are short"), recorded once into
# the checkout's cache: each of the suite's Spark starts then spends ~6 s less JVM CPU.
TEST_CLASS_CACHE := $(CURDIR)/.cache/spark-classes
# Only a speed-up: without an archive (the JVM too slow to write it on a loaded box) the tests still run.
spark-classes: $(STAMP)
	REPLICATOR_SPARK_CLASS_CACHE=$(TEST_CLASS_CACHE) $(BIN)/replicator spark-warmup \
	  || echo "no Spark class-data archive in $(TEST_CLASS_CACHE): test jobs start without one" >&2

# Two pytest workers, each with its own clusters (tests/conftest.py): a serial run left this 2-core box
# idle more than half the time, waiting on brokers, timeouts and restarts. A file stays on one worker,
# and the longest files go first (conftest.py's order, kept by --no-loadscope-reorder).
TEST_WORKERS ?= 2
test: $(STAMP) jars registry debs lint deploytools spark-classes | .pytest-tmp
	REPLICATOR_SPARK_CLASS_CACHE=$(TEST_CLASS_CACHE) $(call pytest,test) -q --durations=30 \
	  -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder \
	  -m "not chaos and not image and not versions and not soak" tests

# The image built from a clean clone and run as Kubernetes would (tests/integration/test_container_image.py).
# Its own target because a cold build takes minutes (CI runs it after `make test`, see .ci/run).
image-test: $(STAMP) jars containertools deploytools | .pytest-tmp
	$(call pytest,image) -q -m image tests

demo: $(STAMP) jars
	$(BIN)/replicator demo

chaos: $(STAMP) jars | .pytest-tmp
	REPLICATOR_CHAOS_OUT=$(CURDIR)/.chaos $(call pytest,chaos) -q -m chaos tests

# The engine's exactly-once check across Kafka 3.6 / 3.9 (KRaft and ZooKeeper) / 4.1 pairs (docs/reliability.md, "Kafka versions").
versions: $(STAMP) jars | .pytest-tmp
	$(call pytest,versions) -q -m versions tests/integration/test_versions.py

# An hour of steady replication with periodic faults (docs/reliability.md, "make soak"); REPLICATOR_SOAK_MINUTES shortens it.
soak: $(STAMP) jars | .pytest-tmp
	REPLICATOR_SOAK_OUT=$(CURDIR)/.soak $(call pytest,soak) -q -s -m soak tests

# The WAN part's link (bench/wanproxy, Go, no third-party module) into ~/.cache/replicator/bin; bench/link.py
# also builds it on first use.
bench-proxy:
	mkdir -p $(HOME)/.cache/replicator/bin && nice -n 19 go build -o $(HOME)/.cache/replicator/bin/wanproxy bench/wanproxy/main.go

bench: $(STAMP) jars bench-proxy
	$(BIN)/python -m bench.run $(BENCH_ARGS)

# The translation index's cost, A/B on the bare copy loop (BENCHMARKS.md, "Translation index on/off").
bench-index: $(STAMP) jars
	$(BIN)/python -m bench.index_ab $(BENCH_ARGS)

sandbox-up: $(STAMP) jars
	$(BIN)/replicator sandbox up

sandbox-down: $(STAMP)
	$(BIN)/replicator sandbox down

clean:
	-$(BIN)/replicator sandbox down
	rm -rf $(VENV) .sandbox .sandbox-* .pytest_cache .ruff_cache

# A one-node Kubernetes cluster on this machine (deploy/local-cluster/, as root): etcd, the control
# plane and a kubelet on containerd, on 127.0.24.1; the first `k8s-up` compiles Kubernetes (tens of
# minutes, cached in ~/.cache/replicator). `k8s-down` stops it and undoes every host change.
.PHONY: k8s-up k8s-down k8s-test k8sdebs
# Debian's etcd, containerd, runc, CNI plugins and catatonit (the pause image), installed as root when
# missing: a fresh machine has none of them.
K8S_DEBS := etcd-server containerd runc containernetworking-plugins catatonit podman iptables openssl
k8sdebs:
	@command -v etcd >/dev/null && command -v containerd >/dev/null && command -v runc >/dev/null && \
	  command -v catatonit >/dev/null && command -v podman >/dev/null && [ -x /usr/lib/cni/loopback ] || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	    --no-install-recommends $(K8S_DEBS) >/dev/null; \
	  else echo "missing: run 'sudo apt-get install $(K8S_DEBS)'" >&2; exit 1; fi; }
k8s-up: k8sdebs
	deploy/local-cluster/up.sh
k8s-down:
	deploy/local-cluster/down.sh
# The manifests on that cluster (tests/k8s; starts the cluster when none runs, and stops it after).
k8s-test: $(STAMP) jars debs containertools deploytools k8sdebs | .pytest-tmp
	$(call pytest,k8s) -q -s -m k8s tests/k8s
