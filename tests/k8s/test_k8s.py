"""The manifests of deploy/k8s applied to a real (local, one-node) Kubernetes cluster: server-side dry
runs of every overlay; the single-pod and tls-scram overlays run for real against sandbox Kafka
clusters, with only a local test overlay (image, hostNetwork, bootstrap servers, metrics port). The
pod must become Ready through its own probes, its Service and PodDisruptionBudget must select it,
Prometheus must find it through the Kubernetes API and see the lag reach 0, and after every fault
(pod deleted, container killed under the kubelet, kubelet restarted, ConfigMap rolled out, node
drained) `replicator verify` must find the target holding exactly the source's committed records."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from tests.k8s.kube import (
    DRIVER_SELECTOR,
    EXECUTOR_SELECTOR,
    NAMESPACE,
    OVERLAYS,
    ROOT,
    SELECTOR,
    Kube,
    wait_until,
    write_overlay,
    write_spark_overlay,
)
from tests.k8s.prometheus_k8s import KubePrometheus
from tests.kafka_helpers import create_topic, end_offsets, fake_group_offsets, produce_transactional

pytestmark = pytest.mark.k8s

BIN = Path(sys.executable).with_name("replicator")
PARTITIONS = 3
BASE_CONFIG = yaml.safe_load((ROOT / "deploy/k8s/base/config.yaml").read_text())
TLS_CONFIG = yaml.safe_load((OVERLAYS / "tls-scram/config.yaml").read_text())
SPARK_CONFIG = yaml.safe_load((OVERLAYS / "spark-k8s/config.yaml").read_text())
# Kinds whose definition no registry reachable here serves (so the API server cannot check them).
UNAVAILABLE_CRDS = {"SparkApplication"}


def metrics_port(kube: Kube, offset: int) -> int:
    return 9400 + int(kube.settings["K8S_SHIFT"]) + offset


def records(n: int, start: int) -> list[tuple]:
    base_ts = int(time.time() * 1000) - 600_000
    return [(i % PARTITIONS, f"k{i % 53}".encode(), f"v{i}".encode() + bytes(i % 30),
             # Timestamps stay in the past whatever `start` is (the broker refuses records over an hour ahead).
             [("seq", str(i).encode())] if i % 2 else None, base_ts + i % 100_000) for i in range(start, start + n)]


class Feed:
    """Keeps the source moving (every third transaction aborted) while a fault happens."""

    def __init__(self, bootstrap: str, topic: str, txn_id: str, start: int) -> None:
        self.args = (bootstrap, topic, txn_id)
        self.next = start
        self.stop_event = threading.Event()
        self.errors: list[BaseException] = []
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        bootstrap, topic, txn_id = self.args
        try:
            while not self.stop_event.is_set():
                produce_transactional(bootstrap, topic, records(300, self.next), txn_id, per_txn=100, abort_every=3)
                self.next += 300
                time.sleep(1)
        except BaseException as e:  # noqa: BLE001 - re-raised by stop()
            self.errors.append(e)

    def __enter__(self) -> Feed:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop_event.set()
        self.thread.join(120)
        if self.errors and exc[0] is None:
            raise self.errors[0]


def caught_up(bootstrap_source: str, bootstrap_target: str, topic: str, name: str) -> bool:
    ends = end_offsets(bootstrap_source, topic, PARTITIONS)
    committed = fake_group_offsets(bootstrap_target, f"__replicator.{name}")
    return all(committed.get((topic, p), -1) == ends[p] for p in range(PARTITIONS))


def verify(args: list[str], *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN), "verify", *args, "--format", "text", *extra], capture_output=True, text=True,
                          timeout=600)


def assert_verified(args: list[str], what: str, *extra: str) -> None:
    done = verify(args, *extra)
    assert done.returncode == 0 and "OK" in done.stdout, \
        f"verify after {what} exited {done.returncode}:\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"


def container_pid(kube: Kube, pod: dict) -> int:
    cid = pod["status"]["containerStatuses"][0]["containerID"].removeprefix("containerd://")
    for line in kube.ctr("tasks", "ls", text=True).stdout.splitlines()[1:]:
        task, pid, status = line.split()[:3]
        if task == cid and status == "RUNNING":
            return int(pid)
    raise AssertionError(f"container {cid} of {pod['metadata']['name']} has no running task")


def restarts(pod: dict) -> int:
    return pod["status"]["containerStatuses"][0]["restartCount"]


@pytest.fixture
def clean_namespace(kube):
    yield
    kube.kubectl("-n", NAMESPACE, "delete", "deployment,configmap,secret,service,pdb,serviceaccount,"
                 "networkpolicy,servicemonitor,role,rolebinding", "-l", SELECTOR, "--wait=true", "--timeout=180s",
                 check=False, timeout=240)
    kube.kubectl("-n", NAMESPACE, "delete", "secret", "replicator-kafka", check=False)
    kube.kubectl("uncordon", kube.node, check=False)


def test_every_overlay_passes_a_server_side_dry_run(kube):
    for overlay in ("../base", "single-pod", "tls-scram", "spark-operator", "spark-k8s"):
        rendered = kube.kubectl("kustomize", str(OVERLAYS / overlay)).stdout
        docs = [d for d in yaml.safe_load_all(rendered) if d]
        checkable = [d for d in docs if d["kind"] not in UNAVAILABLE_CRDS]
        done = kube.kubectl("apply", "--dry-run=server", "-f", "-", stdin=yaml.safe_dump_all(checkable),
                            check=False)
        assert done.returncode == 0, f"{overlay}: server-side dry run failed:\n{done.stdout}\n{done.stderr}"
        assert done.stdout.count("(server dry run)") == len(checkable), done.stdout
        assert "Warning" not in done.stderr, f"{overlay}: the API server warned:\n{done.stderr}"
    # Only the operator overlay's SparkApplication went unchecked (no CRD for it here).
    operator = kube.kubectl("kustomize", str(OVERLAYS / "spark-operator")).stdout
    assert {d["kind"] for d in yaml.safe_load_all(operator) if d} & UNAVAILABLE_CRDS == {"SparkApplication"}


def test_single_pod_replicates_exactly_once_through_pod_and_node_faults(kube, image, sandbox, unique, tmp_path,
                                                                       clean_namespace):
    topic, name = f"k8s-{unique}", f"k8s-{unique}"
    src, tgt = sandbox.source.bootstrap, sandbox.target.bootstrap
    create_topic(src, topic, PARTITIONS)
    produce_transactional(src, topic, records(3000, 0), f"seed-{unique}", per_txn=500, abort_every=4)
    config = {**BASE_CONFIG, "name": name, "topics": topic, "source_bootstrap_servers": src,
              "target_bootstrap_servers": tgt, "source": {}, "target": {}}
    port = metrics_port(kube, 0)
    overlay = write_overlay(tmp_path / "overlay", "single-pod", image, config, port)
    verify_args = ["--source-bootstrap-servers", src, "--target-bootstrap-servers", tgt, "--topics", topic,
                   "--name", name]
    prometheus = KubePrometheus(tmp_path, kube).start()
    timings: dict[str, float] = {}
    try:
        t0 = time.monotonic()
        kube.kubectl("apply", "-k", str(overlay))
        pod = kube.ready_pod()
        timings["apply to Ready"] = time.monotonic() - t0

        # The Service and the PDB select the pod: the disruption controller counts it, and the
        # Service's selector matches its labels.
        svc = kube.get("-n", NAMESPACE, "service", "replicator-metrics")
        labels = pod["metadata"]["labels"]
        assert all(labels.get(k) == v for k, v in svc["spec"]["selector"].items()), (svc["spec"], labels)
        pdb = wait_until(lambda: (p := kube.get("-n", NAMESPACE, "pdb", "replicator"))["status"].get(
            "currentHealthy") == 1 and p, 120, "the PDB to count the pod")
        assert pdb["status"]["expectedPods"] == 1 and pdb["status"]["disruptionsAllowed"] == 1, pdb["status"]

        # Prometheus finds the pod through the Kubernetes API and sees the lag drop to 0.
        wait_until(lambda: caught_up(src, tgt, topic, name), 600, "the first catch-up", interval=2)
        target = wait_until(lambda: [t for t in prometheus.targets("replicator-pods") if t["health"] == "up"], 180,
                            "Prometheus to scrape the pod")
        assert target[0]["labels"]["pod"] == pod["metadata"]["name"]
        assert target[0]["scrapeUrl"] == f"http://{kube.ip}:{port}/metrics"
        lag = wait_until(lambda: (q := prometheus.query(f'replicator_lag_records{{topic="{topic}"}}')) and
                         all(v == 0 for v in q.values()) and len(q) == PARTITIONS and q, 180,
                         "replicator_lag_records to reach 0 for every partition")
        assert set(lag.values()) == {0.0}
        groups = prometheus.api("rules")["groups"]
        rules = [r for g in groups for r in g["rules"]]
        assert rules and all(r["health"] != "err" for r in rules), groups
        assert_verified(verify_args, "the first catch-up")

        start = 1_000_000

        def fault(what: str, action, expect_new_pod: bool) -> tuple[dict, list[int]]:
            """`action` while the source keeps moving; then Ready again, caught up, verified. Returns
            the pod after it and the number of writers seen at each poll while it happened."""
            nonlocal start, pod
            before = pod
            writers: list[int] = []
            copied = sum(fake_group_offsets(tgt, f"__replicator.{name}").values())
            with Feed(src, topic, f"feed-{unique}", start) as feed:
                # Mid-stream: the job is copying the feed when the fault hits.
                wait_until(lambda: sum(fake_group_offsets(tgt, f"__replicator.{name}").values()) > copied, 180,
                           f"copying to go on before {what}")
                t = time.monotonic()
                action(writers)
                exclude = {before["metadata"]["name"]} if expect_new_pod else set()
                pod = kube.ready_pod(exclude=exclude)
                timings[what] = time.monotonic() - t
                time.sleep(5)
            start = feed.next + 1_000_000
            wait_until(lambda: caught_up(src, tgt, topic, name), 600, f"catch-up after {what}", interval=2)
            assert_verified(verify_args, what)
            return pod, writers

        def count_writers(writers: list[int], seconds: float) -> None:
            deadline = time.monotonic() + seconds
            while time.monotonic() < deadline:
                writers.append(len(kube.running_writers()))
                time.sleep(0.5)

        # 1. kubectl delete pod, mid-stream.
        def delete_pod(writers):
            kube.kubectl("-n", NAMESPACE, "delete", "pod", pod["metadata"]["name"], "--wait=false")
            count_writers(writers, 20)
        _, deleted_writers = fault("pod deleted", delete_pod, expect_new_pod=True)

        # 2. The container SIGKILLed under the kubelet: the kubelet restarts it in the same pod.
        def kill_container(writers):
            pid = container_pid(kube, pod)
            subprocess.run(["kill", "-KILL", str(pid)], check=True)
            wait_until(lambda: restarts(kube.get("-n", NAMESPACE, "pod", pod["metadata"]["name"])) > restarts(pod),
                       300, "the kubelet to restart the container")
        before_kill = restarts(pod)
        pod, _ = fault("container killed", kill_container, expect_new_pod=False)
        assert restarts(pod) == before_kill + 1

        # 3. The kubelet restarted under the running pod: the container goes on, nothing restarts.
        pid_before = container_pid(kube, pod)
        def restart_kubelet(writers):
            kube.script("restart.sh", "kubelet")
            wait_until(lambda: kube.kubectl("get", "node", kube.node, "-o",
                                            "jsonpath={.status.conditions[?(@.type=='Ready')].status}").stdout
                       == "True", 300, "the node Ready after the kubelet restart")
        pod, _ = fault("kubelet restarted", restart_kubelet, expect_new_pod=False)
        assert container_pid(kube, pod) == pid_before, "the kubelet restart restarted the container"

        # 4. A ConfigMap change rolled out: never two writers at once.
        def roll_config(writers):
            changed = {**config, "refresh_topics_interval_seconds": 11}
            write_overlay(overlay, "single-pod", image, changed, port)
            kube.kubectl("apply", "-k", str(overlay))
            count_writers(writers, 30)
        _, rollout_writers = fault("ConfigMap rolled out", roll_config, expect_new_pod=True)
        assert max(rollout_writers) <= 1, f"two generations wrote at once during the rollout: {rollout_writers}"

        # 5. kubectl drain: the eviction goes through the PDB; the pod comes back once uncordoned.
        def drain(writers):
            done = kube.kubectl("drain", kube.node, "--ignore-daemonsets", "--delete-emptydir-data",
                                "--timeout=300s", check=False, timeout=360)
            assert done.returncode == 0, f"drain failed:\n{done.stdout}\n{done.stderr}"
            assert "evicted" in done.stdout, done.stdout
            kube.kubectl("uncordon", kube.node)
        fault("node drained", drain, expect_new_pod=True)

        # Finally stopped (scaled to 0): nothing open, nothing missing, nothing twice.
        kube.kubectl("-n", NAMESPACE, "scale", "deployment/replicator", "--replicas=0")
        wait_until(lambda: not kube.pods(), 180, "the pod to go")
        assert_verified(verify_args, "the final stop", "--quiesced", "--require-caught-up")
        print(f"\nk8s timings (s): { {k: round(v) for k, v in timings.items()} }; writers while a pod was "
              f"deleted: {sorted(set(deleted_writers))}, during the rollout: {sorted(set(rollout_writers))}")
    except BaseException:
        print(kube.describe())
        raise
    finally:
        prometheus.stop()


def running(pods: list[dict]) -> list[dict]:
    return [p for p in pods if p.get("status", {}).get("phase") == "Running"
            and not p["metadata"].get("deletionTimestamp")]


def owned_by(pod: dict, owner: dict) -> bool:
    return any(ref["uid"] == owner["metadata"]["uid"] for ref in pod["metadata"].get("ownerReferences", []))


def names(pods: list[dict]) -> set[str]:
    return {p["metadata"]["name"] for p in pods}


def test_spark_k8s_overlay_runs_executor_pods_and_survives_losing_them(kube, image, sandbox, unique, tmp_path,
                                                                       clean_namespace):
    """Spark's own Kubernetes scheduler: the Deployment's pod is the driver and starts two executor
    pods it owns; an executor pod deleted mid-task is replaced by Spark and its shard's task retried;
    the driver pod deleted takes its executors with it, and the new driver resumes from the offsets
    committed on the target with new executors. Exactly once throughout, nothing left at the end."""
    topic, name = f"k8s-spark-{unique}", f"k8s-spark-{unique}"
    src, tgt = sandbox.source.bootstrap, sandbox.target.bootstrap
    create_topic(src, topic, PARTITIONS)
    produce_transactional(src, topic, records(3000, 0), f"seed-{unique}", per_txn=500, abort_every=4)
    # With hostNetwork every executor pod would claim Spark's fixed block manager port (7079) as a
    # host port, and the second one found no node with the port free ("didn't have free ports for the
    # requested pod ports"); port 0 takes any free port and declares none.
    config = {**SPARK_CONFIG, "name": name, "topics": topic, "source_bootstrap_servers": src,
              "target_bootstrap_servers": tgt, "source": {}, "target": {},
              "spark": {**SPARK_CONFIG["spark"], "spark.blockManager.port": "0"}}
    instances = int(SPARK_CONFIG["spark"]["spark.executor.instances"])
    overlay = write_spark_overlay(tmp_path / "overlay", kube, image, config, metrics_port(kube, 2))
    verify_args = ["--source-bootstrap-servers", src, "--target-bootstrap-servers", tgt, "--topics", topic,
                   "--name", name]
    timings: dict[str, float] = {}

    def executors_of(driver: dict, exclude: set[str] = frozenset()) -> list[dict] | None:
        pods = [p for p in running(kube.pods(EXECUTOR_SELECTOR)) if owned_by(p, driver)
                and p["metadata"]["name"] not in exclude]
        return pods if len(pods) >= instances else None

    def copied() -> int:
        return sum(fake_group_offsets(tgt, f"__replicator.{name}").values())

    def every_partition_moved_past(offsets: dict) -> bool:
        """Each shard owns some of the partitions: all of them moving means every shard's task runs,
        the one whose executor was lost included."""
        now = fake_group_offsets(tgt, f"__replicator.{name}")
        return all(now.get(tp, -1) > o for tp, o in offsets.items()) and len(now) == PARTITIONS

    def driver_log(pod: dict) -> str:
        return kube.kubectl("-n", NAMESPACE, "logs", pod["metadata"]["name"], check=False).stdout

    try:
        t0 = time.monotonic()
        kube.kubectl("apply", "-k", str(overlay))
        driver = kube.ready_pod(selector=DRIVER_SELECTOR)
        timings["apply to driver Ready"] = time.monotonic() - t0
        executors = wait_until(lambda: executors_of(driver), 600, f"{instances} executor pods Running")
        timings["apply to executors Running"] = time.monotonic() - t0
        # The executors run the image under test with Spark's executor backend, as the template says.
        for pod in executors:
            (container,) = pod["spec"]["containers"]
            assert container["image"] == image and container["args"][0] == "executor", container
            assert container["command"] == ["/opt/replicator/spark-entrypoint.sh"]
        wait_until(lambda: caught_up(src, tgt, topic, name), 600, "the first catch-up", interval=2)
        assert_verified(verify_args, "the first catch-up")
        start = 1_000_000

        # 1. An executor pod deleted while its shard's task copies the feed: Spark asks for a
        #    replacement pod and retries the task there; it resumes from the target's offsets.
        with Feed(src, topic, f"feed-{unique}", start) as feed:
            before = copied()
            wait_until(lambda: copied() > before, 180, "copying to go on before the executor's deletion")
            victim = executors[0]["metadata"]["name"]
            victim_id = executors[0]["metadata"]["labels"]["spark-exec-id"]
            at_deletion = fake_group_offsets(tgt, f"__replicator.{name}")
            t = time.monotonic()
            kube.kubectl("-n", NAMESPACE, "delete", "pod", victim, "--wait=false")
            executors = wait_until(lambda: executors_of(driver, exclude={victim}), 600,
                                   "a replacement executor pod Running")
            timings["executor deleted to replacement Running"] = time.monotonic() - t
            # The driver saw the executor (and so its running task) lost, and every shard copies again.
            wait_until(lambda: f"Lost executor {victim_id} " in driver_log(driver), 120,
                       f"the driver to report executor {victim_id} lost")
            wait_until(lambda: every_partition_moved_past(at_deletion), 300,
                       "every partition to move on after the executor's deletion", interval=2)
            timings["executor deleted to every partition moving"] = time.monotonic() - t
            assert victim not in names(kube.pods(EXECUTOR_SELECTOR))
            assert driver["metadata"]["name"] in names(running(kube.pods(DRIVER_SELECTOR))), "the driver restarted"
        start = feed.next + 1_000_000
        wait_until(lambda: caught_up(src, tgt, topic, name), 600, "catch-up after the executor's deletion",
                   interval=2)
        assert_verified(verify_args, "an executor pod deleted mid-task")

        # 2. The driver pod deleted: the Deployment starts a new one; the old executors go with the old
        #    driver (they are its pods), the new driver starts its own and resumes from the target.
        with Feed(src, topic, f"feed-{unique}", start) as feed:
            before = copied()
            wait_until(lambda: copied() > before, 180, "copying to go on before the driver's deletion")
            old_driver, old_executors = driver, names(executors)
            t = time.monotonic()
            kube.kubectl("-n", NAMESPACE, "delete", "pod", old_driver["metadata"]["name"], "--wait=false")
            driver = kube.ready_pod(exclude={old_driver["metadata"]["name"]}, selector=DRIVER_SELECTOR)
            executors = wait_until(lambda: executors_of(driver), 600, "the new driver's executor pods Running")
            timings["driver deleted to new executors Running"] = time.monotonic() - t
            wait_until(lambda: not old_executors & names(kube.pods(EXECUTOR_SELECTOR)), 300,
                       "the old driver's executor pods to go")
            timings["driver deleted to old executors gone"] = time.monotonic() - t
            at_deletion = fake_group_offsets(tgt, f"__replicator.{name}")
            wait_until(lambda: every_partition_moved_past(at_deletion), 300,
                       "every partition to move on under the new driver", interval=2)
            timings["driver deleted to every partition moving"] = time.monotonic() - t
        wait_until(lambda: caught_up(src, tgt, topic, name), 600, "catch-up after the driver's deletion",
                   interval=2)
        assert_verified(verify_args, "the driver pod deleted")

        # Stopped (scaled to 0): the driver ends its executors; nothing of the app is left in the
        # namespace (no pod of Spark's, no ConfigMap Spark made for its executors).
        kube.kubectl("-n", NAMESPACE, "scale", "deployment/replicator", "--replicas=0")
        wait_until(lambda: not kube.pods(), 300, "the driver and executor pods to go")
        wait_until(lambda: not [o for o in kube.get("-n", NAMESPACE, "pods,configmaps")["items"]
                                if o["metadata"]["name"].startswith("spark-")
                                or "spark-app-selector" in o["metadata"].get("labels", {})],
                   180, "Spark's executor pods and ConfigMap to go")
        assert_verified(verify_args, "the final stop", "--quiesced", "--require-caught-up")
        print(f"\nspark-k8s timings (s): { {k: round(v) for k, v in timings.items()} }")
    except BaseException:
        print(kube.describe())
        raise


def test_tls_scram_overlay_replicates_with_the_secret_mounted(kube, image, tmp_path_factory, unique, tmp_path,
                                                               clean_namespace):
    from replicator.sandbox import Sandbox
    from replicator.sandbox.cluster import _port_shift
    from tests.secure_helpers import committed_records, write_config
    from tests.secure_helpers import create_topic as create_secure_topic
    from tests.secure_helpers import produce as produce_secure

    box = Sandbox(root=tmp_path_factory.mktemp("scram"), port_shift=_port_shift() + 90, secure="scram")
    box.up(fresh=True)
    try:
        topic, name = f"k8s-tls-{unique}", f"k8s-tls-{unique}"
        create_secure_topic(box, "source", topic, PARTITIONS)
        produce_secure(box, topic, PARTITIONS, 2000)
        material = box.source.security
        # The overlay's config with only the bootstrap servers and principals of this sandbox.
        config = {**TLS_CONFIG, "name": name, "topics": topic, "source_bootstrap_servers": box.source.bootstrap,
                  "target_bootstrap_servers": box.target.bootstrap}
        config["source"] = {**TLS_CONFIG["source"], "sasl.username": "admin"}
        config["target"] = {**TLS_CONFIG["target"], "sasl.username": "admin"}
        kube.kubectl("-n", NAMESPACE, "create", "secret", "generic", "replicator-kafka",
                     f"--from-file=source-ca.crt={material.ca_file}",
                     f"--from-file=target-ca.crt={box.target.security.ca_file}",
                     f"--from-file=source-sasl-password={material.password_file('admin')}",
                     f"--from-file=target-sasl-password={box.target.security.password_file('admin')}")
        overlay = write_overlay(tmp_path / "overlay", "tls-scram", image, config, metrics_port(kube, 1))
        kube.kubectl("apply", "-k", str(overlay))
        pod = kube.ready_pod()
        mounts = {m["mountPath"]: m for m in pod["spec"]["containers"][0]["volumeMounts"]}
        assert mounts["/etc/replicator-secrets"]["readOnly"] is True
        wait_until(lambda: committed_records(box, "target", topic, PARTITIONS) == 2000, 600,
                   "the records on the target")
        cm = kube.get("-n", NAMESPACE, "configmap", "-l", SELECTOR)["items"]
        assert all(material.password("admin") not in yaml.safe_dump(c["data"]) for c in cm)
        logs = kube.kubectl("-n", NAMESPACE, "logs", pod["metadata"]["name"]).stdout
        assert material.password("admin") not in logs and box.target.security.password("admin") not in logs
        cfg = write_config(box, tmp_path / "verify.yaml", name, topic, source_principal="admin",
                           target_principal="admin")
        kube.kubectl("-n", NAMESPACE, "scale", "deployment/replicator", "--replicas=0")
        wait_until(lambda: not kube.pods(), 180, "the pod to go")
        assert_verified(["--config", str(cfg)], "the TLS + SCRAM run", "--quiesced", "--require-caught-up")
    except BaseException:
        print(kube.describe())
        raise
    finally:
        box.down()
