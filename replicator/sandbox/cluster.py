"""Two real single-node KRaft Kafka clusters ("source" and "target") on loopback.

Each cluster is its own JVM with its own data dir and cluster id. A pid file records the JVM we
started, so `down` stops exactly that process and nothing else.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import signal
import socket
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from replicator.sandbox.jars import DEFAULT_KAFKA_VERSION, cache_root, classpath
from replicator.sandbox.security import SecurityMaterial

SOURCE_PORT = 19092
TARGET_PORT = 29092
READY_TIMEOUT_S = 90.0

_LOG4J2 = """\
status = warn
appender.file.type = File
appender.file.name = FILE
appender.file.fileName = ${sys:kafka.logs.dir}/server.log
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = FILE
logger.state.name = state.change.logger
logger.state.level = WARN
logger.cleaner.name = kafka.log.LogCleaner
logger.cleaner.level = WARN
"""


def _port_shift() -> int:
    """Lets several sandboxes coexist on one machine (parallel work, CI next to a demo)."""
    return int(os.environ.get("REPLICATOR_SANDBOX_PORT_SHIFT", "0"))


def startup_failure(log: str, port: int) -> str:
    """Why a broker exited while starting, from its log: the tail is its shutdown, the cause comes first."""
    cause = next((line for line in log.splitlines() if " ERROR " in line), "")
    if not cause:
        return ""
    hint = ""
    if "Address already in use" in log:
        low, high = _ephemeral_ports()
        if low <= port <= high:
            # Seen in a clean-clone run at port shift 5000: a client connection of a chaos run beside it
            # had been given the target's port as its local (ephemeral) port.
            hint = (f"; port {port} lies in this machine's ephemeral port range ({low}-{high}), where any "
                    f"client connection can take it: choose REPLICATOR_SANDBOX_PORT_SHIFT so that every "
                    f"sandbox port stays below {low}")
        else:
            hint = f"; port {port} is taken by another process"
    return f" ({cause.strip()}{hint})"


def _ephemeral_ports() -> tuple[int, int]:
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999  # Linux's default


def default_root() -> Path:
    """REPLICATOR_SANDBOX_DIR, or a directory of this checkout per port shift: two sandboxes sharing
    one directory read each other's pid files, and one's clean-up stopped the other's brokers."""
    if env := os.environ.get("REPLICATOR_SANDBOX_DIR"):
        return Path(env)
    root = cache_root().parent / ".sandbox" if cache_root().name == ".cache" else cache_root() / "sandbox"
    return root.with_name(f"{root.name}-{_port_shift()}") if _port_shift() else root


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie child of ours still "exists"; treat it as dead.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1][0] != "Z"
    except OSError:
        return False


def live_pid(pid_file: Path, owner: str) -> int | None:
    """The pid a pid file names, if that process still runs and is the one the file was written for:
    its command line holds `owner` (None for a missing or stale file). After a reboot, or a
    process's end, its pid is another process's, which `down` would otherwise signal."""
    try:
        pid = int(pid_file.read_text().strip())
    except (OSError, ValueError):
        return None
    if not _pid_alive(pid):
        return None
    return pid if owner in _cmdline(pid) else None


def _cmdline(pid: int) -> str:
    """The process's command line, "" when it is gone (or still being exec'd: see `record_pid`)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def record_pid(proc: subprocess.Popen, pid_file: Path, owner: str, timeout: float = 10.0) -> None:
    """Writes the pid of a process just started once its command line shows `owner`, as
    `live_pid` expects. Popen returns while the kernel is still loading the new program, whose
    command line reads empty for that moment (26 of 2,000 starts here): a clean-clone CI run
    took its starting broker for one that had exited."""
    deadline = time.monotonic() + timeout
    while proc.poll() is None and time.monotonic() < deadline and owner not in _cmdline(proc.pid):
        time.sleep(0.01)
    pid_file.write_text(str(proc.pid))


def terminate(pid: int, timeout: float) -> None:
    """SIGTERM, then SIGKILL after `timeout`; returns once the process is gone and reaped."""
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while _pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    if _pid_alive(pid):
        os.kill(pid, signal.SIGKILL)
        while _pid_alive(pid):
            time.sleep(0.1)
    _reap(pid)


def _reap(pid: int) -> None:
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def port_open(port: int, host: str = "127.0.0.1", timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


@dataclass
class KafkaCluster:
    name: str
    port: int
    root: Path
    version: str = DEFAULT_KAFKA_VERSION
    transaction_version: int | None = None  # None: the release default (2 on fresh 4.x)
    heap: str = "-Xms384m -Xmx512m"
    security: SecurityMaterial | None = None  # None: PLAINTEXT, no authorizer (the demo default)
    cluster_id: str | None = None  # formatted with a fresh random id when None (one node per cluster)
    host: str = "127.0.0.1"  # a multi-broker node has its own loopback address (multi.py)
    # A second listener, advertised at `proxy_port` where a test's delay proxy forwards to
    # `proxied_port`: clients that bootstrap through the proxy are sent back to it by the metadata
    # (tests/chaos/delayproxy.py, the slow-network fault). Nothing listens on `proxy_port` otherwise.
    proxied: bool = False

    @property
    def controller_port(self) -> int:
        return self.port + 1

    @property
    def proxied_port(self) -> int:
        return self.port + 6  # above a three-node cluster's client and controller ports (multi.py)

    @property
    def proxy_port(self) -> int:
        return self.port + 7

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def dir(self) -> Path:
        return self.root / self.name

    @property
    def pid_file(self) -> Path:
        return self.dir / "kafka.pid"

    @property
    def log_file(self) -> Path:
        return self.dir / "logs" / "server.log"

    def pid(self) -> int | None:
        return live_pid(self.pid_file, str(self.dir / "server.properties"))

    def running(self) -> bool:
        return self.pid() is not None

    def pids(self) -> list[int | None]:
        return [self.pid()]

    def data_dirs(self) -> list[str]:
        return [str(self.dir)]

    def serving(self) -> bool:
        return port_open(self.port, self.host)

    def _listener_properties(self) -> list[str]:
        p, c, h = self.port, self.controller_port, self.host
        if self.security:
            if self.proxied:
                raise RuntimeError("a proxied listener on a secure sandbox is not supported")
            return self.security.listener_properties(p, c)
        proxied = (f",PROXIED://{h}:{self.proxied_port}", f",PROXIED://{h}:{self.proxy_port}",
                   ",PROXIED:PLAINTEXT") if self.proxied else ("", "", "")
        return [
            f"listeners=PLAINTEXT://{h}:{p},CONTROLLER://{h}:{c}{proxied[0]}",
            f"advertised.listeners=PLAINTEXT://{h}:{p}{proxied[1]}",
            f"listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT{proxied[2]}",
            "inter.broker.listener.name=PLAINTEXT",
        ]

    def _properties(self) -> str:
        c = self.controller_port
        listeners = self._listener_properties()
        return "\n".join([
            "process.roles=broker,controller",
            "node.id=1",
            f"controller.quorum.voters=1@{self.host}:{c}",
            "controller.listener.names=CONTROLLER",
            *listeners,
            f"log.dirs={self.dir / 'data'}",
            "num.partitions=1",
            "offsets.topic.replication.factor=1",
            "offsets.topic.num.partitions=4",
            "transaction.state.log.replication.factor=1",
            "transaction.state.log.min.isr=1",
            "transaction.state.log.num.partitions=4",
            "share.coordinator.state.topic.replication.factor=1",
            "share.coordinator.state.topic.min.isr=1",
            "group.initial.rebalance.delay.ms=0",
            "transaction.abort.timed.out.transaction.cleanup.interval.ms=1000",
            "transaction.remove.expired.transaction.cleanup.interval.ms=60000",
            # The 128 MiB default dedupe buffer is allocated on a 512 MiB heap.
            "log.cleaner.dedupe.buffer.size=16777216",
            "auto.create.topics.enable=false",
            "num.network.threads=2",
            "num.io.threads=4",
            "",
        ])

    def _java(self, main: str, *args: str) -> list[str]:
        return ["java", "-cp", classpath(self.version), main, *args]

    def _format(self) -> None:
        cluster_id = self.cluster_id or _cluster_id()
        cmd = self._java("kafka.tools.StorageTool", "format", "-t", cluster_id,
                         "-c", str(self.dir / "server.properties"), "-g")
        if self.transaction_version is not None:
            cmd += ["--feature", f"transaction.version={self.transaction_version}"]
        if self.security:
            cmd += self.security.format_arguments()
        proc = subprocess.run(cmd, capture_output=True, text=True,
                              env={**os.environ, "KAFKA_LOG4J_OPTS": ""})
        if proc.returncode != 0:
            output = proc.stdout + proc.stderr
            if self.security:
                output = self.security.redact(output)
            raise RuntimeError(f"formatting the {self.name} cluster failed:\n{output}")

    def start(self, fresh: bool = False) -> None:
        """Starts the broker unless ours already runs; returns when it serves requests."""
        self.launch(fresh)
        self.wait_ready()

    def launch(self, fresh: bool = False) -> None:
        """Starts the broker JVM unless ours already runs, without waiting for it to serve (the nodes
        of a multi-broker cluster must all be launched before any can elect a controller)."""
        if self.running():
            if not fresh:
                return
            self.stop()
        if port_open(self.port, self.host) or port_open(self.controller_port, self.host):
            raise RuntimeError(
                f"port {self.port} or {self.controller_port} of {self.host} is taken by a process this sandbox did not "
                f"start; stop it or set REPLICATOR_SANDBOX_PORT_SHIFT")
        if fresh and self.dir.exists():
            import shutil
            shutil.rmtree(self.dir)
        (self.dir / "logs").mkdir(parents=True, exist_ok=True)
        # Private: a secure broker's file holds its own SCRAM password.
        props_file = self.dir / "server.properties"
        props_file.touch(mode=0o600)
        props_file.write_text(self._properties())
        (self.dir / "log4j2.properties").write_text(_LOG4J2)
        if not (self.dir / "data" / "meta.properties").exists():
            self._format()
        if self.log_file.exists():
            self.log_file.rename(self.log_file.with_suffix(f".{int(time.time())}.log"))
        cmd = ["java", *self.heap.split(), "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
               "-Djava.awt.headless=true", f"-Dkafka.logs.dir={self.dir / 'logs'}",
               f"-Dlog4j2.configurationFile={self.dir / 'log4j2.properties'}",
               "-cp", classpath(self.version), "kafka.Kafka", str(props_file)]
        with open(self.dir / "logs" / "stdout.log", "ab") as out:
            proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True, extra_groups=self._extra_groups() or None)
        record_pid(proc, self.pid_file, str(props_file))

    def _extra_groups(self) -> list[int]:
        return []  # a multi-broker node adds one (multi.py)

    def wait_ready(self, timeout: float = READY_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.running():
                try:
                    log = self.log_file.read_text(errors="replace")
                except OSError:
                    log = ""
                raise RuntimeError(f"the {self.name} broker exited during start-up{startup_failure(log, self.port)}:"
                                   f"\n{self.log_tail()}")
            if port_open(self.port, self.host) and self._started_logged():
                return
            time.sleep(0.25)
        raise RuntimeError(f"the {self.name} broker was not ready after {timeout:.0f}s:\n{self.log_tail()}")

    def _started_logged(self) -> bool:
        try:
            return "Kafka Server started" in self.log_file.read_text(errors="replace")
        except OSError:
            return False

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_file.read_text(errors="replace").splitlines()
        except OSError:
            text = []
        with contextlib.suppress(OSError):
            text += (self.dir / "logs" / "stdout.log").read_text(errors="replace").splitlines()[-10:]
        return "\n".join(text[-lines:])

    def stop(self, timeout: float = 30.0) -> None:
        """Clean shutdown of the JVM we started (SIGTERM, then SIGKILL after `timeout`)."""
        pid = self.pid()
        if pid is None:
            self.pid_file.unlink(missing_ok=True)
            return
        self.signal(signal.SIGCONT)  # a paused broker cannot shut down
        terminate(pid, timeout)
        self.pid_file.unlink(missing_ok=True)

    def kill(self) -> None:
        """Hard crash (SIGKILL) for fault injection; the data dir stays for a restart."""
        pid = self.pid()
        if pid is not None:
            os.kill(pid, signal.SIGKILL)
            while _pid_alive(pid):
                time.sleep(0.05)
            _reap(pid)
        self.pid_file.unlink(missing_ok=True)

    def signal(self, sig: int) -> None:
        pid = self.pid()
        if pid is not None:
            os.kill(pid, sig)


def _cluster_id() -> str:
    """A random Kafka cluster id. One in 64 base64url ids starts with '-', which the storage tool's
    argument parser reads as an option (a clean-clone CI run failed on it); Kafka's own
    Uuid.randomUuid() redraws those too."""
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


class Sandbox:
    """The source and target clusters as one unit for the CLI, the demo and the tests.

    `secure` is "plaintext" (the default), one mode for both clusters ("scram", "mtls"), a (source
    mode, target mode) pair, or "remembered": what the last `up` in this sandbox dir used (so
    `status` and `down` need no flag). `proxied_target` gives each target broker the listener a
    test's delay proxy forwards to (KafkaCluster.proxied)."""

    def __init__(self, root: Path | None = None, version: str = DEFAULT_KAFKA_VERSION,
                 source_tv: int | None = None, target_tv: int | None = None,
                 port_shift: int | None = None, secure: str | tuple[str, str] = "plaintext",
                 source_version: str | None = None, target_version: str | None = None,
                 brokers: int | None = None, proxied_target: bool = False, heap: str | None = None) -> None:
        root = self.root = root or default_root()
        shift = _port_shift() if port_shift is None else port_shift
        modes = security_modes(root, secure)
        material = {name: SecurityMaterial(root / "secure" / mode, mode) if mode else None
                    for name, mode in zip(("source", "target"), modes, strict=True)}
        self.brokers = remembered_brokers(root) if brokers is None else brokers
        if self.brokers > 1:
            if any(material.values()):
                raise RuntimeError("a secure multi-broker sandbox is not supported (yet): use one of the two")
            from replicator.sandbox.multi import MultiBrokerCluster

            self.source = MultiBrokerCluster("source", SOURCE_PORT + shift, root, source_version or version,
                                             source_tv, self.brokers)
            self.target = MultiBrokerCluster("target", TARGET_PORT + shift, root, target_version or version,
                                             target_tv, self.brokers, proxied=proxied_target)
            return
        sized = {"heap": heap} if heap else {}
        self.source = KafkaCluster("source", SOURCE_PORT + shift, root, source_version or version, source_tv,
                                   security=material["source"], **sized)
        self.target = KafkaCluster("target", TARGET_PORT + shift, root, target_version or version, target_tv,
                                   security=material["target"], proxied=proxied_target, **sized)

    @property
    def clusters(self) -> tuple[KafkaCluster, KafkaCluster]:
        return self.source, self.target

    @property
    def secure(self) -> bool:
        return any(c.security for c in self.clusters)

    def up(self, fresh: bool = False) -> None:
        try:
            for cluster in self.clusters:
                # Other listeners and users than its data dir was made with: start that cluster over.
                cluster.start(fresh=fresh or _configured_security(cluster) != _mode(cluster))
        except BaseException:
            self.down()  # a half-started sandbox would hold its ports against the next attempt
            raise
        _MODE_FILE(self.root).write_text(json.dumps([_mode(c) for c in self.clusters]))
        _BROKERS_FILE(self.root).write_text(str(self.brokers))

    def down(self) -> None:
        for cluster in self.clusters:
            cluster.stop()

    def client_properties(self, cluster: str, principal: str = "admin", *,
                          by_reference: bool = False) -> dict[str, str]:
        """librdkafka properties (without bootstrap) for `principal` on `cluster`; empty for PLAINTEXT."""
        security = getattr(self, cluster).security
        return security.client_properties(principal, by_reference=by_reference) if security else {}

    def status(self) -> dict[str, dict[str, object]]:
        return {
            c.name: {"bootstrap": c.bootstrap, "pid": c.pid(), "pids": c.pids(), "serving": c.serving(),
                     "data_dir": c.data_dirs()[0], "data_dirs": c.data_dirs(), "security": _mode(c) or "plaintext",
                     "client_properties": self.client_properties(c.name, by_reference=True)}
            for c in self.clusters
        }


def _MODE_FILE(root: Path) -> Path:  # noqa: N802 - reads as the constant it stands for
    return root / "security.json"


def _BROKERS_FILE(root: Path) -> Path:  # noqa: N802 - reads as the constant it stands for
    return root / "brokers"


def remembered_brokers(root: Path) -> int:
    """Brokers per cluster of the last `up` in this sandbox dir, so `status` and `down` need no flag."""
    try:
        return int(_BROKERS_FILE(root).read_text())
    except (OSError, ValueError):
        return 1


def _mode(cluster: KafkaCluster) -> str | None:
    return cluster.security.mode if cluster.security else None


def _configured_security(cluster: KafkaCluster) -> str | None:
    """The mode the cluster's data dir was formatted for (None: plaintext or never formatted)."""
    try:
        text = (cluster.dir / "server.properties").read_text()
    except OSError:
        return _mode(cluster)  # nothing yet: whatever we ask for
    if "SASL_SSL" in text:
        return "scram"
    return "mtls" if "CLIENT:SSL" in text else None


def security_modes(root: Path, secure: str | tuple[str, str]) -> tuple[str | None, str | None]:
    if secure == "remembered":
        try:
            source, target = json.loads(_MODE_FILE(root).read_text())
            return source, target
        except (OSError, ValueError):
            return None, None
    pair = (secure, secure) if isinstance(secure, str) else secure
    return tuple(None if m == "plaintext" else m for m in pair)  # type: ignore[return-value]
