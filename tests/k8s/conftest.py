"""Fixtures of the Kubernetes tests (`make k8s-test`): the local one-node cluster of
deploy/local-cluster/ (started here when it is not running, and then stopped again), the image built
with `make image` and loaded into its containerd, and the namespace.

These tests run only when `-m` selects the `k8s` marker: `make test` (whose -m names other markers)
never collects them into its run."""

from __future__ import annotations

import os
import subprocess

import pytest

from tests.container_engine import Podman, build_image, clean_checkout, engine_conf, have_engine
from tests.k8s.kube import NAMESPACE, Kube, cluster_settings


def pytest_configure(config):
    config.addinivalue_line("markers", "k8s: against a real local Kubernetes cluster (make k8s-test)")


def pytest_collection_modifyitems(config, items):
    if "k8s" in (config.option.markexpr or ""):
        return
    kept = [i for i in items if i.get_closest_marker("k8s") is None]
    if len(kept) != len(items):
        config.hook.pytest_deselected(items=[i for i in items if i.get_closest_marker("k8s") is not None])
        items[:] = kept


@pytest.fixture(scope="session")
def kube() -> Kube:
    k = Kube(cluster_settings())
    started = False
    if not k.serving():
        assert os.geteuid() == 0, "the local cluster needs root (cgroups, mounts): run `make k8s-test` as root"
        k.script("up.sh", timeout=7200)  # a first run compiles Kubernetes (tens of minutes)
        started = True
    assert k.serving(), "the local cluster's API server does not answer after up.sh"
    k.script("crds.sh", timeout=600)
    k.kubectl("create", "namespace", NAMESPACE, check=False)
    yield k
    if started and os.environ.get("REPLICATOR_TEST_KEEP_K8S") != "1":
        k.script("down.sh", timeout=600)


@pytest.fixture(scope="session")
def podman(tmp_path_factory) -> Podman:
    assert have_engine(), "podman/mmdebstrap missing: `make containertools` installs them (as root)"
    return Podman(engine_conf(tmp_path_factory.mktemp("engine")))


@pytest.fixture(scope="session")
def image(kube, podman, tmp_path_factory) -> str:
    """The image of the commit under test (REPLICATOR_K8S_IMAGE names one podman has already), in
    the cluster's containerd."""
    tag = os.environ.get("REPLICATOR_K8S_IMAGE")
    if not tag:
        work = tmp_path_factory.mktemp("image")
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()
        tag = f"localhost/replicator-k8s:{head}"
        if podman.run("image", "exists", tag, check=False).returncode != 0:
            build_image(podman, clean_checkout(work / "checkout"), tag, work / "build.log")
    kube.load_image(podman.env(), tag)
    return tag
