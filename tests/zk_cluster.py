"""A Kafka 3.x broker in ZooKeeper mode, with its ZooKeeper, for the version matrix (tests only).

ZooKeeper comes from the same Maven resolution as the broker (Kafka 3.x depends on
org.apache.zookeeper:zookeeper at runtime), so no tarball is needed. Kafka 4.x has no ZooKeeper mode.
"""

from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass

from replicator.sandbox.cluster import KafkaCluster, live_pid, port_open, record_pid, terminate
from replicator.sandbox.jars import classpath


@dataclass
class ZooKeeperKafkaCluster(KafkaCluster):
    @property
    def zk_port(self) -> int:
        return self.port + 5

    @property
    def zk_dir(self):
        return self.dir.with_name(self.name + "-zookeeper")

    @property
    def zk_pid_file(self):
        return self.zk_dir / "zookeeper.pid"

    def _properties(self) -> str:
        return "\n".join([
            "broker.id=1",
            f"zookeeper.connect=127.0.0.1:{self.zk_port}",
            f"listeners=PLAINTEXT://127.0.0.1:{self.port}",
            f"advertised.listeners=PLAINTEXT://127.0.0.1:{self.port}",
            f"log.dirs={self.dir / 'data'}",
            "num.partitions=1",
            "offsets.topic.replication.factor=1",
            "offsets.topic.num.partitions=4",
            "transaction.state.log.replication.factor=1",
            "transaction.state.log.min.isr=1",
            "transaction.state.log.num.partitions=4",
            "group.initial.rebalance.delay.ms=0",
            "transaction.abort.timed.out.transaction.cleanup.interval.ms=1000",
            "log.cleaner.dedupe.buffer.size=16777216",
            "auto.create.topics.enable=false",
            "num.network.threads=2",
            "num.io.threads=4",
            "",
        ])

    def _format(self) -> None:
        """ZooKeeper mode has no storage format step: the broker registers itself."""

    def _started_logged(self) -> bool:
        try:
            return "started (kafka.server.KafkaServer)" in self.log_file.read_text(errors="replace")
        except OSError:
            return False

    def start(self, fresh: bool = False) -> None:
        if fresh:
            self.stop()  # the broker first, then its ZooKeeper; both are wiped below
        self._start_zookeeper(fresh)
        super().start(fresh=fresh)

    def _start_zookeeper(self, fresh: bool) -> None:
        if self._zk_pid() is not None:
            return
        if port_open(self.zk_port):
            raise RuntimeError(f"port {self.zk_port} is taken by a process this sandbox did not start")
        zk_dir = self.zk_dir
        if fresh and zk_dir.exists():
            import shutil
            shutil.rmtree(zk_dir)
        (zk_dir / "data").mkdir(parents=True, exist_ok=True)
        (zk_dir / "zoo.cfg").write_text(f"dataDir={zk_dir / 'data'}\nclientPort={self.zk_port}\n"
                                        "clientPortAddress=127.0.0.1\ntickTime=2000\nadmin.enableServer=false\n")
        with open(zk_dir / "zookeeper.out", "ab") as out:
            proc = subprocess.Popen(["java", "-Xmx128m", "-Dzookeeper.admin.enableServer=false",
                                     "-cp", classpath(self.version), "org.apache.zookeeper.server.ZooKeeperServerMain",
                                     str(zk_dir / "zoo.cfg")], stdout=out, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
        record_pid(proc, self.zk_pid_file, str(zk_dir / "zoo.cfg"))
        deadline = time.monotonic() + 60
        while not port_open(self.zk_port):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"ZooKeeper for {self.name} did not start: "
                                   f"{(zk_dir / 'zookeeper.out').read_text(errors='replace')[-2000:]}")
            time.sleep(0.25)

    def _zk_pid(self) -> int | None:
        return live_pid(self.zk_pid_file, str(self.zk_dir / "zoo.cfg"))

    def _stop_zookeeper(self) -> None:
        pid = self._zk_pid()
        if pid is not None:
            terminate(pid, 20)
        self.zk_pid_file.unlink(missing_ok=True)

    def stop(self, timeout: float = 30.0) -> None:
        super().stop(timeout)
        self._stop_zookeeper()
