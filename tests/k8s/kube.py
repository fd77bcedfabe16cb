"""The local one-node cluster of deploy/local-cluster/ as the k8s tests drive it: kubectl, component
restarts, containerd, the image load, and the local test overlays (image, hostNetwork, bootstrap)."""

from __future__ import annotations

import json
import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
LOCAL = ROOT / "deploy" / "local-cluster"
OVERLAYS = ROOT / "deploy" / "k8s" / "overlays"
NAMESPACE = "kafka-replicator"
SELECTOR = "app.kubernetes.io/name=replicator"
# The replicator's own pod (the Deployment's; the Spark driver in the spark-k8s overlay), and the
# executor pods that driver starts.
DRIVER_SELECTOR = f"{SELECTOR},app.kubernetes.io/component=replicator"
EXECUTOR_SELECTOR = f"{SELECTOR},app.kubernetes.io/component=spark-executor"


def cluster_settings() -> dict[str, str]:
    """env.sh's values, as the scripts see them with this process's environment."""
    out = subprocess.run(["bash", "-c", f"source {LOCAL / 'env.sh'}; set | grep '^K8S_'"], capture_output=True,
                         text=True, check=True, timeout=30).stdout
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line and not line.startswith("K8S_SERVICES"))


def wait_until(predicate, timeout: float, what: str, interval: float = 1.0):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


@dataclass
class Kube:
    settings: dict[str, str]

    @property
    def kubeconfig(self) -> str:
        return self.settings["K8S_KUBECONFIG"]

    @property
    def run_dir(self) -> Path:
        return Path(self.settings["K8S_RUN"])

    @property
    def ip(self) -> str:
        return self.settings["K8S_IP"]

    @property
    def node(self) -> str:
        return self.settings["K8S_NODE"]

    @property
    def server(self) -> str:
        return f"https://{self.ip}:{self.settings['K8S_APISERVER_PORT']}"

    def kubectl(self, *args: str, check: bool = True, timeout: float = 180,
                stdin: str | None = None) -> subprocess.CompletedProcess:
        done = subprocess.run(["kubectl", "--kubeconfig", self.kubeconfig, *args], capture_output=True, text=True,
                              timeout=timeout, input=stdin)
        if check and done.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}")
        return done

    def get(self, *args: str) -> dict:
        return json.loads(self.kubectl("get", "-o", "json", *args).stdout)

    def serving(self) -> bool:
        return (Path(self.kubeconfig).exists()
                and self.kubectl("get", "--raw", "/readyz", check=False, timeout=15).returncode == 0)

    def script(self, name: str, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
        done = subprocess.run(["bash", str(LOCAL / name), *args], capture_output=True, text=True, timeout=timeout)
        assert done.returncode == 0, f"{name} {' '.join(args)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
        return done

    def ctr(self, *args: str, timeout: float = 600, **kw) -> subprocess.CompletedProcess:
        return subprocess.run(["ctr", "--address", self.settings["K8S_CONTAINERD_SOCK"], "-n", "k8s.io", *args],
                              capture_output=True, timeout=timeout, **kw)

    def load_image(self, podman_env: dict[str, str], image: str) -> None:
        """The podman-built image into the kubelet's containerd (there is no registry to pull from)."""
        if image in self.ctr("images", "ls", "-q", text=True).stdout.split():
            return
        save = subprocess.Popen(["podman", "save", "--quiet", "--format", "docker-archive", image],
                                stdout=subprocess.PIPE, env=podman_env)
        done = self.ctr("images", "import", "-", stdin=save.stdout)
        save.wait(600)
        assert save.returncode == 0 and done.returncode == 0, f"image load failed: {done.stderr.decode()[-2000:]}"

    # --- the replicator's pods ---------------------------------------------------------------

    def pods(self, selector: str = SELECTOR) -> list[dict]:
        return self.get("-n", NAMESPACE, "pods", "-l", selector)["items"]

    def running_writers(self) -> list[str]:
        """Pods with a running replicator container, terminating ones included: each may write."""
        return [p["metadata"]["name"] for p in self.pods()
                if any("running" in (s.get("state") or {}) for s in p.get("status", {}).get("containerStatuses", []))]

    def ready_pod(self, timeout: float = 900, exclude: set[str] | frozenset[str] = frozenset(),
                  selector: str = SELECTOR) -> dict:
        """The one Ready pod (not one of `exclude`), after its own readiness probe passed."""
        def ready():
            for p in self.pods(selector):
                conds = {c["type"]: c["status"] for c in p.get("status", {}).get("conditions", [])}
                if (p["metadata"]["name"] not in exclude and conds.get("Ready") == "True"
                        and not p["metadata"].get("deletionTimestamp")):
                    return p
            return None
        return wait_until(ready, timeout, "a Ready replicator pod", interval=2)

    def describe(self) -> str:
        out = self.kubectl("-n", NAMESPACE, "describe", "pods", "-l", SELECTOR, check=False).stdout
        logs = self.kubectl("-n", NAMESPACE, "logs", "-l", SELECTOR, "--tail=80", check=False)
        return out[-6000:] + "\n--- logs ---\n" + (logs.stdout + logs.stderr)[-6000:]


def write_overlay(directory: Path, overlay: str, image: str, config: dict, metrics_port: int) -> Path:
    """A local test overlay on top of `overlay`: the image built here, hostNetwork (there is no pod
    network), the sandbox's bootstrap servers in the config, and the metrics port moved off 9400 (a
    shared host) and bound to the pod's (loopback) IP. Nothing else of the manifests changes."""
    directory.mkdir(parents=True, exist_ok=True)
    name, _, tag = image.rpartition(":")
    config = {**config, "metrics_port": metrics_port}
    (directory / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    patch = [
        {"op": "add", "path": "/spec/template/spec/hostNetwork", "value": True},
        {"op": "add", "path": "/spec/template/spec/dnsPolicy", "value": "ClusterFirstWithHostNet"},
        {"op": "replace", "path": "/spec/template/spec/containers/0/ports/0/containerPort", "value": metrics_port},
        {"op": "test", "path": "/spec/template/spec/containers/0/env/0/name", "value": "REPLICATOR_METRICS_PORT"},
        {"op": "replace", "path": "/spec/template/spec/containers/0/env/0/value", "value": str(metrics_port)},
        {"op": "add", "path": "/spec/template/spec/containers/0/env/-",
         "value": {"name": "REPLICATOR_METRICS_HOST", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}},
    ]
    (directory / "local.yaml").write_text(yaml.safe_dump(patch))
    kustomization = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization", "namespace": NAMESPACE,
        "resources": [os.path.relpath(OVERLAYS / overlay, directory)],
        "images": [{"name": "replicator", "newName": name, "newTag": tag}],
        "configMapGenerator": [{"name": "replicator-config", "behavior": "replace",
                                "options": {"labels": {"app.kubernetes.io/name": "replicator"}},
                                "files": ["config.yaml"]}],
        "patches": [{"path": "local.yaml", "target": {"kind": "Deployment", "name": "replicator"}}],
    }
    (directory / "kustomization.yaml").write_text(yaml.safe_dump(kustomization, sort_keys=False))
    return directory


def write_spark_overlay(directory: Path, kube: Kube, image: str, config: dict, metrics_port: int) -> Path:
    """write_overlay on the spark-k8s overlay, and what differs for Spark on this cluster: the driver
    reaches the API server at its loopback address (there is no Service routing to
    kubernetes.default.svc), the executors run with hostNetwork too, and the executors' image is the
    image under test (the overlay's replacement copies only its own image into the env var)."""
    write_overlay(directory, "spark-k8s", image, config, metrics_port)
    template = yaml.safe_load((OVERLAYS / "spark-k8s" / "executor-pod-template.yaml").read_text())
    template["spec"]["hostNetwork"] = True
    template["spec"]["dnsPolicy"] = "ClusterFirstWithHostNet"
    (directory / "executor-pod-template.yaml").write_text(yaml.safe_dump(template, sort_keys=False))
    driver = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "replicator"},
              "spec": {"template": {"spec": {"containers": [{"name": "replicator", "env": [
                  {"name": "REPLICATOR_MASTER", "value": f"k8s://{kube.server}"},
                  {"name": "SPARK_CONTAINER_IMAGE", "value": image}]}]}}}}
    (directory / "spark-local.yaml").write_text(yaml.safe_dump(driver, sort_keys=False))
    path = directory / "kustomization.yaml"
    kustomization = yaml.safe_load(path.read_text())
    kustomization["configMapGenerator"].append(
        {"name": "replicator-spark", "behavior": "replace",
         "options": {"labels": {"app.kubernetes.io/name": "replicator"}}, "files": ["executor-pod-template.yaml"]})
    kustomization["patches"].append({"path": "spark-local.yaml"})
    path.write_text(yaml.safe_dump(kustomization, sort_keys=False))
    return directory
