"""Prometheus finding the replicator's pod through the Kubernetes API (kubernetes_sd_configs, role pod;
and role endpointslice for the Service), with the project's alert rules loaded. Debian's prometheus has
no Kubernetes discovery compiled in, so this is Prometheus 3 built by deploy/local-cluster/build-prometheus.sh."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import urllib.parse
import urllib.request
from pathlib import Path

from tests.k8s.kube import LOCAL, NAMESPACE, ROOT, Kube, wait_until

RULES = ROOT / "deploy" / "prometheus" / "alerts.yaml"


def _free_port(ip: str) -> int:
    with socket.socket() as s:
        s.bind((ip, 0))
        return s.getsockname()[1]


class KubePrometheus:
    def __init__(self, workdir: Path, kube: Kube) -> None:
        self.workdir = workdir
        self.kube = kube
        self.url = f"http://{kube.ip}:{_free_port(kube.ip)}"
        self.proc: subprocess.Popen | None = None

    def _sd(self, role: str) -> dict:
        pki = Path(self.kube.kubeconfig).parent
        return {"role": role, "api_server": self.kube.server, "namespaces": {"names": [NAMESPACE]},
                "tls_config": {"ca_file": str(pki / "ca.crt"), "cert_file": str(pki / "admin.crt"),
                               "key_file": str(pki / "admin.key")}}

    def start(self) -> KubePrometheus:
        built = subprocess.run(["bash", str(LOCAL / "build-prometheus.sh")], capture_output=True, text=True,
                               timeout=3600)
        assert built.returncode == 0, f"build-prometheus.sh failed:\n{built.stderr[-4000:]}"
        binary = built.stdout.strip().splitlines()[-1]
        config = {
            "global": {"scrape_interval": "2s", "scrape_timeout": "2s", "evaluation_interval": "2s"},
            "rule_files": [str(RULES)],
            "scrape_configs": [
                {"job_name": "replicator-pods", "kubernetes_sd_configs": [self._sd("pod")],
                 "relabel_configs": [
                     {"source_labels": ["__meta_kubernetes_pod_label_app_kubernetes_io_name"],
                      "regex": "replicator", "action": "keep"},
                     {"source_labels": ["__meta_kubernetes_pod_container_port_name"], "regex": "metrics",
                      "action": "keep"},
                     {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"}]},
                {"job_name": "replicator-service", "kubernetes_sd_configs": [self._sd("endpointslice")],
                 "relabel_configs": [
                     {"source_labels": ["__meta_kubernetes_service_name"], "regex": "replicator-metrics",
                      "action": "keep"},
                     {"source_labels": ["__meta_kubernetes_endpointslice_port_name"], "regex": "metrics",
                      "action": "keep"}]},
            ],
        }
        path = self.workdir / "prometheus.yml"
        path.write_text(json.dumps(config))
        log = open(self.workdir / "prometheus.log", "ab")  # noqa: SIM115 - handed to the child
        self.proc = subprocess.Popen(
            [binary, f"--config.file={path}",
             f"--storage.tsdb.path={self.workdir / 'data'}", f"--web.listen-address={self.url[7:]}",
             "--storage.tsdb.retention.time=1h", "--log.level=warn"],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        wait_until(self._ready, 60, "prometheus to be ready")
        return self

    def _ready(self) -> bool:
        assert self.proc is not None and self.proc.poll() is None, \
            f"prometheus exited: {(self.workdir / 'prometheus.log').read_text()[-2000:]}"
        try:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=5) as r:
                return r.status == 200
        except OSError:
            return False

    def api(self, path: str, **params: str) -> dict:
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        with urllib.request.urlopen(f"{self.url}/api/v1/{path}{query}", timeout=30) as r:
            body = json.load(r)
        assert body["status"] == "success", body
        return body["data"]

    def query(self, expr: str) -> dict[tuple, float]:
        return {tuple(sorted(s["metric"].items())): float(s["value"][1])
                for s in self.api("query", query=expr)["result"]}

    def targets(self, job: str) -> list[dict]:
        return [t for t in self.api("targets")["activeTargets"] if t["labels"].get("job") == job]

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(30)
