"""A real schema registry for the sandbox: Apicurio Registry, speaking the Confluent REST API.

One JVM per registry, in-memory storage, on loopback; a pid file records the JVM we started, so `stop`
ends exactly that process. The application is built once from Maven Central into the cache (see
registry_rig/pom.xml for why this version and how), next to the Kafka jars.

`python -m replicator.sandbox.registry fetch` builds it ahead of the tests (`make registry`).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from replicator.sandbox.cluster import _port_shift, live_pid, port_open, record_pid, terminate
from replicator.sandbox.jars import cache_root

APICURIO_VERSION = "2.4.2.Final"
SOURCE_REGISTRY_PORT = 18081
TARGET_REGISTRY_PORT = 28081
READY_TIMEOUT_S = 180.0  # a cold Quarkus start takes ~20 s on an idle 2-core box, several times that loaded
_RIG = Path(__file__).with_name("registry_rig")
_MARKER = ".complete"
_RUNNER = "registry-runner.jar"


def registry_app(quiet: bool = True) -> Path:
    """Folder holding the runnable registry (runner jar and its lib/); built on first use."""
    target = cache_root() / f"apicurio-registry-{APICURIO_VERSION}"
    if (target / _MARKER).exists():
        return target
    if shutil.which("mvn") is None:
        raise RuntimeError("Maven (mvn) is needed to build the sandbox schema registry from Maven Central")
    # Maven writes target/ next to the POM: build in a copy inside the cache, never in the checkout.
    staging = target.with_name(target.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    shutil.copytree(_RIG, staging / "rig")
    cmd = ["mvn", "-B", "-f", str(staging / "rig" / "pom.xml"), f"-Dapicurio.version={APICURIO_VERSION}",
           "-DskipTests", "package"]
    if quiet:
        cmd.insert(1, "-q")
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-30:])
        raise RuntimeError(f"building Apicurio Registry {APICURIO_VERSION} with Maven failed:\n{tail}")
    built = staging / "rig" / "target"
    runner = next(built.glob("*-runner.jar"))
    (staging / "app").mkdir()
    runner.rename(staging / "app" / _RUNNER)
    (built / "lib").rename(staging / "app" / "lib")  # the runner's manifest names lib/ relative to itself
    shutil.rmtree(target, ignore_errors=True)
    (staging / "app").rename(target)
    shutil.rmtree(staging, ignore_errors=True)
    (target / _MARKER).write_text(APICURIO_VERSION)
    return target


@dataclass
class SchemaRegistry:
    """One registry JVM on 127.0.0.1:`port`, its pid file and log under `dir`."""

    name: str
    port: int
    dir: Path
    heap: str = "-Xms64m -Xmx384m"

    @property
    def url(self) -> str:
        """Base URL of the Confluent-compatible API (what a Confluent serializer's `schema.registry.url` takes)."""
        return f"http://127.0.0.1:{self.port}/apis/ccompat/v7"

    @property
    def pid_file(self) -> Path:
        return self.dir / "registry.pid"

    @property
    def log_file(self) -> Path:
        return self.dir / "registry.log"

    @property
    def _port_option(self) -> str:
        """On its command line: tells our registry's JVM from any other process (`live_pid`)."""
        return f"-Dquarkus.http.port={self.port}"

    def running(self) -> bool:
        return live_pid(self.pid_file, self._port_option) is not None

    def start(self, timeout: float = READY_TIMEOUT_S) -> None:
        """Starts the registry unless ours already runs (empty: storage is in memory); returns when it
        answers the Confluent API."""
        if self.running():
            return
        if port_open(self.port):
            raise RuntimeError(f"port {self.port} is taken by a process this sandbox did not start; stop it or "
                               f"set REPLICATOR_SANDBOX_PORT_SHIFT")
        app = registry_app()
        self.dir.mkdir(parents=True, exist_ok=True)
        cmd = ["java", *self.heap.split(), "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
               "-Dquarkus.http.host=127.0.0.1", self._port_option,
               "-jar", str(app / _RUNNER)]
        with open(self.log_file, "ab") as out:
            proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True)
        record_pid(proc, self.pid_file, self._port_option)
        self.wait_ready(timeout)

    def wait_ready(self, timeout: float = READY_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.running():
                raise RuntimeError(f"the {self.name} schema registry exited during start-up:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(f"{self.url}/subjects", timeout=2) as resp:
                    if resp.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.5)
        raise RuntimeError(f"the {self.name} schema registry was not ready after {timeout:.0f}s:\n{self.log_tail()}")

    def stop(self, timeout: float = 30.0) -> None:
        """Ends the JVM we started (SIGTERM, then SIGKILL after `timeout`); its schemas are gone with it."""
        pid = live_pid(self.pid_file, self._port_option)
        if pid is not None:
            terminate(pid, timeout)
        self.pid_file.unlink(missing_ok=True)

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


def registry_pair(root: Path, port_shift: int | None = None) -> tuple[SchemaRegistry, SchemaRegistry]:
    """The source and the target cluster's registries, on ports shifted like the sandbox's brokers."""
    shift = _port_shift() if port_shift is None else port_shift
    return (SchemaRegistry("source", SOURCE_REGISTRY_PORT + shift, root / "registry-source"),
            SchemaRegistry("target", TARGET_REGISTRY_PORT + shift, root / "registry-target"))


if __name__ == "__main__":
    if sys.argv[1:] != ["fetch"]:
        sys.exit("usage: python -m replicator.sandbox.registry fetch")
    print(f"schema registry: {registry_app(quiet=False)}")
