"""The replicator image, built and run with podman the way users and the Kubernetes manifests do.

The image is built from a clean checkout with `make image`, FROM a stand-in for the official Python
base made from Debian packages (tests/container/standin_base.sh): this machine reaches Debian's archive
and PyPI but no image registry. What is specific to this machine stays here, never in the Dockerfile:
  * the host's CA bundle is mounted for the build steps (HTTPS to PyPI goes through it);
  * containers run with runc (crun refuses this kernel's hybrid cgroups) and with rlimits at the
    host's hard limits (podman's defaults exceed them and it may not raise them).
Runs take their user, read-only root, writable paths, env and Secret wiring from the rendered
single-pod overlay, so the test runs what Kubernetes would run.
"""

from __future__ import annotations

import contextlib
import json
import resource
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / ".cache" / "container"
STANDIN_SCRIPT = ROOT / "tests" / "container" / "standin_base.sh"
STANDIN_IMAGE = "localhost/replicator-standin-python:3.11-bookworm"
CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"
KUSTOMIZE = ROOT / ".cache" / "bin" / "kustomize"
ENSURE_KUSTOMIZE = ROOT / "deploy" / "tools" / "ensure_kustomize.sh"


def engine_conf(directory: Path) -> Path:
    """containers.conf for this machine: runc, and rlimits the runtime is allowed to set."""
    nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    nproc = resource.getrlimit(resource.RLIMIT_NPROC)[1]
    # 32768 processes is plenty for the JVM and Python workers; podman's 1048576 is refused here.
    nproc = 32768 if nproc == resource.RLIM_INFINITY else min(nproc, 32768)
    nofile = 1048576 if nofile == resource.RLIM_INFINITY else nofile
    conf = directory / "containers.conf"
    conf.write_text("[containers]\n"
                    f'default_ulimits = ["nofile={nofile}:{nofile}", "nproc={nproc}:{nproc}"]\n'
                    "[engine]\n"
                    'runtime = "runc"\n')
    return conf


@dataclass
class Podman:
    conf: Path

    def env(self) -> dict[str, str]:
        import os
        return {**os.environ, "CONTAINERS_CONF": str(self.conf)}

    def run(self, *args: str, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess:
        done = subprocess.run(["podman", *args], capture_output=True, text=True, timeout=timeout, env=self.env())
        if check and done.returncode != 0:
            raise AssertionError(f"podman {' '.join(args)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}")
        return done

    def inspect(self, what: str, kind: str = "image") -> dict:
        return json.loads(self.run(kind, "inspect", what).stdout)[0]


def clean_checkout(dest: Path) -> Path:
    """A fresh clone of the commit under test: only what is committed reaches the build."""
    subprocess.run(["git", "clone", "--quiet", "--no-hardlinks", str(ROOT), str(dest)], check=True, timeout=300)
    return dest


def standin_base(podman: Podman) -> str:
    done = subprocess.run(["bash", str(STANDIN_SCRIPT), STANDIN_IMAGE, str(CACHE)], capture_output=True,
                          text=True, timeout=900, env=podman.env())
    assert done.returncode == 0, f"stand-in base image failed:\n{done.stdout}\n{done.stderr}"
    return STANDIN_IMAGE


def build_image(podman: Podman, checkout: Path, tag: str, log: Path) -> float:
    """`make image` in the checkout, as a user runs it; returns the seconds it took."""
    flags = ["--pull=never", "--network", "host", "--build-arg", f"PYTHON_IMAGE={standin_base(podman)}",
             "-v", f"{CA_BUNDLE}:{CA_BUNDLE}:ro"]
    started = time.monotonic()
    with open(log, "wb") as out:
        done = subprocess.run(["make", "-C", str(checkout), "image", f"IMAGE={tag}", "ENGINE=podman",
                               f"IMAGE_BUILD_FLAGS={' '.join(flags)}"], stdout=out, stderr=subprocess.STDOUT,
                              timeout=2400, env=podman.env())
    assert done.returncode == 0, f"make image failed ({done.returncode}):\n{log.read_text()[-6000:]}"
    return time.monotonic() - started


def rendered(checkout: Path, overlay: str) -> list[dict]:
    """An overlay's objects, as `kustomize build` gives them to the cluster."""
    subprocess.run(["bash", str(ENSURE_KUSTOMIZE)], cwd=ROOT, check=True, capture_output=True, timeout=900)
    out = subprocess.run([str(KUSTOMIZE), "build", str(checkout / "deploy/k8s/overlays" / overlay)],
                         capture_output=True, text=True, check=True, timeout=120).stdout
    return [d for d in yaml.safe_load_all(out) if d]


@dataclass
class PodLikeRun:
    """`podman run` options equivalent to one container of a pod: what Kubernetes would give it."""
    pod_security: dict
    security: dict
    volumes: list[dict]
    mounts: list[dict]
    env: list[dict]
    args: list[str]
    grace_seconds: int
    config_dir: Path
    volumes_dir: Path
    secrets: dict[str, str]
    overrides: dict[str, str] = field(default_factory=dict)

    @classmethod
    def deployment(cls, objects: list[dict], **kw) -> PodLikeRun:
        dep = next(o for o in objects if o["kind"] == "Deployment")
        pod = dep["spec"]["template"]["spec"]
        c = pod["containers"][0]
        return cls(pod["securityContext"], c["securityContext"], pod["volumes"], c["volumeMounts"], c["env"],
                   list(c.get("args", [])), int(pod["terminationGracePeriodSeconds"]), **kw)

    @classmethod
    def spark_role(cls, objects: list[dict], role: str, **kw) -> PodLikeRun:
        """The driver or executor of the SparkApplication (the operator builds its pods from these)."""
        app = next(o for o in objects if o["kind"] == "SparkApplication")["spec"]
        r = app[role]
        return cls(r["podSecurityContext"], r["securityContext"], app["volumes"], r["volumeMounts"], r["env"],
                   [], int(r.get("terminationGracePeriodSeconds", 30)), **kw)

    def options(self) -> list[str]:
        pod_sc, sc = self.pod_security, self.security
        user, group = sc.get("runAsUser", pod_sc["runAsUser"]), sc.get("runAsGroup", pod_sc["runAsGroup"])
        opts = ["--network", "host", "--user", f"{user}:{group}", "--group-add", str(pod_sc["fsGroup"])]
        if sc.get("readOnlyRootFilesystem"):
            # Only the volumes below are writable: no tmpfs that podman would add on its own.
            opts += ["--read-only", "--read-only-tmpfs=false"]
        if sc.get("allowPrivilegeEscalation") is False:
            opts += ["--security-opt", "no-new-privileges"]
        opts += [f"--cap-drop={c.lower()}" for c in sc.get("capabilities", {}).get("drop", [])]
        volumes = {v["name"]: v for v in self.volumes}
        for mount in self.mounts:
            volume = volumes[mount["name"]]
            mode = "ro" if mount.get("readOnly") else "rw"
            if "configMap" in volume:
                opts += ["-v", f"{self.config_dir}:{mount['mountPath']}:ro"]
            else:
                assert "emptyDir" in volume, volume
                # An emptyDir outlives container restarts in its pod: one host directory per volume.
                host = self.volumes_dir / mount["name"]
                host.mkdir(parents=True, exist_ok=True)
                host.chmod(0o777)
                opts += ["-v", f"{host}:{mount['mountPath']}:{mode}"]
        names = set()
        for var in self.env:
            names.add(var["name"])
            value = var["value"] if "value" in var else self.secrets[var["valueFrom"]["secretKeyRef"]["key"]]
            opts += ["--env", f"{var['name']}={self.overrides.get(var['name'], value)}"]
        opts += [f"--env={k}={v}" for k, v in self.overrides.items() if k not in names]
        return opts


def http_get(url: str, timeout: float = 5) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read().decode(errors="replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")
    except OSError as e:
        return 0, str(e)


def remove(podman: Podman, keep_logs: Path, *names: str) -> None:
    """Removes the containers, first saving their logs as keep_logs/<name>.log for a failed test."""
    for name in names:
        with contextlib.suppress(subprocess.TimeoutExpired):
            done = podman.run("logs", name, check=False)
            (keep_logs / f"{name}.log").write_text(done.stdout + done.stderr)
            podman.run("rm", "--force", "--time", "0", name, check=False, timeout=120)


def have_engine() -> bool:
    return shutil.which("podman") is not None and shutil.which("mmdebstrap") is not None
