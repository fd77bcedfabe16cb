"""Every contender, started the same way: on one source topic, into a fresh target topic of its run.

`tag` is unique per run and ends up in every name a contender creates (replica topic, MM2 internal
topics, job name), so runs never see each other's state and a restart with the same tag resumes.
"""

from __future__ import annotations

import re
import shlex
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench import kafka_ops
from bench.proctree import Tree
from replicator.sandbox import classpath

JAVA_HEAP = ["-Xms256m", "-Xmx1g"]
# The same producer batching for every copier: ours (kafka_clients.target_producer) and MM2's.
PRODUCER_TUNING = {"linger.ms": "20", "batch.size": "1048576"}


@dataclass(frozen=True)
class Job:
    source: str  # bootstrap
    target: str
    topic: str  # source topic
    partitions: int
    records: int
    size: int
    tag: str
    logdir: Path
    extra_args: tuple[str, ...] = field(default=())
    topics_regex: str = ""  # what the copiers replicate; default: exactly `topic`
    broker_pids: tuple[int, ...] = ()  # the sandbox brokers' JVMs, for their CPU (bench/boxcpu.py)
    shape: str = "keyed"  # how the steady-state load spreads its records (bench/shapes.py)
    # Where the copier reaches a cluster across the WAN link (bench/link.py); "" is directly. The
    # bench's own observers (watcher, end offsets, load) always use `source` / `target`: they sit
    # in the cluster's region.
    source_via: str = ""
    target_via: str = ""
    # The copiers' producer compression.type towards the target, the same for every contender;
    # "" keeps each one's default (none for ours and for MM2).
    compression: str = ""

    @property
    def copier_source(self) -> str:
        return self.source_via or self.source

    @property
    def copier_target(self) -> str:
        return self.target_via or self.target

    @property
    def replica(self) -> str:
        return f"{self.tag}.{self.topic}"

    @property
    def pattern(self) -> str:
        return self.topics_regex or re.escape(self.topic)

    def log(self, what: str) -> Path:
        return self.logdir / f"{self.tag}-{what}.log"


class Contender:
    key = ""
    label = ""
    copies = True  # writes the source topic's records to job.replica; False: a read-only ceiling

    def launch(self, job: Job) -> Tree:
        raise NotImplementedError

    def outputs(self, job: Job) -> tuple[tuple[str, int], ...]:
        """The target topics (name, partitions) whose records together make up the copy."""
        return ((job.replica, job.partitions),)

    def before_restart(self, job: Job, timeout_s: float) -> dict:
        """Waits for what this contender's restart is meant to find (nothing by default); what it
        reports goes into the restart's row."""
        return {}


# A fresh install's Spark cache: empty at a job's first launch, kept for its restart.
FRESH_INSTALL, FRESH_INSTALL_NO_RECORDING = "fresh", "fresh-norecord"


class Replicator(Contender):
    def __init__(self, guarantee: str, index: bool = True, install: str = "") -> None:
        self.guarantee = guarantee
        self.index = index  # the consumer-group translation index (its cost is measured on vs off)
        # "": the bench's own class cache, recorded before the first measurement ("with caches");
        # FRESH_INSTALL...: an empty one per job, as after `pip install`, with or without the
        # background recording of the class-data archive (replicator.engine.class_recorder).
        self.install = install
        self._first_launch: dict[str, float] = {}  # by job tag: when a fresh install started
        short = "eos" if guarantee == "exactly-once" else "alo"
        self.key, self.label = f"replicator-{short}", f"replicator {guarantee}"
        if not index:
            self.key, self.label = f"{self.key}-noindex", f"{self.label}, translation index off"
        if install:
            self.key = f"{self.key}-{install}"
            self.label += (", fresh install" if install == FRESH_INSTALL
                           else ", fresh install, class-data recording off")

    def launch(self, job: Job) -> Tree:
        cmd = [str(self._executable()), "run",
               "--source-bootstrap-servers", job.copier_source, "--target-bootstrap-servers", job.copier_target,
               "--topics", job.pattern, "--name", f"bench-{job.tag}", "--metrics-port", "0",
               "--replication-policy", "prefix", "--source-alias", job.tag, "--guarantee", self.guarantee,
               *job.extra_args]
        env = {} if self.index else {"REPLICATOR_TRANSLATION_INDEX": "false"}
        if self.install:
            self._first_launch.setdefault(job.tag, time.time())
            env["REPLICATOR_SPARK_CLASS_CACHE"] = str(self._cache(job))
            if self.install == FRESH_INSTALL_NO_RECORDING:
                env["REPLICATOR_SPARK_CLASS_CACHE_RECORD"] = "false"
        if job.compression:  # the `target:` client properties; only the producer reads this one
            env["REPLICATOR_TARGET__COMPRESSION_TYPE"] = job.compression
        return Tree(cmd, job.log(self.key), env={**env, **self._env()})

    def _executable(self) -> Path:
        return Path(sys.executable).with_name("replicator")

    def _env(self) -> dict[str, str]:
        return {}

    def _cache(self, job: Job) -> Path:
        return job.logdir / f"{job.tag}-{self.key}-spark-cache"

    def before_restart(self, job: Job, timeout_s: float) -> dict:
        """A fresh install's restart is measured once its background recording has published the
        archive (at most `timeout_s`): the first restart after it, what every later one gets too.
        How long the recording took since the job started is in the row."""
        if self.install != FRESH_INSTALL:
            return {}
        t0 = time.monotonic()
        while not list(self._cache(job).glob("*.jsa")) and time.monotonic() - t0 < timeout_s:
            time.sleep(1)
        archives = list(self._cache(job).glob("*.jsa"))
        if not archives:
            return {"archive_recorded": False}
        return {"archive_recorded": True,
                "archive_after_s": archives[0].stat().st_mtime - self._first_launch[job.tag]}


class BareLoop(Contender):
    """The engine's per-shard transaction loop (ShardCopier) in one Python process, no Spark."""

    def __init__(self, index: bool = True) -> None:
        self.index = index
        self.key, self.label = "bare-python-eos", "bare Python loop exactly-once (no Spark)"
        if not index:
            self.key, self.label = f"{self.key}-noindex", "bare Python loop exactly-once, translation index off"

    def launch(self, job: Job) -> Tree:
        cmd = [sys.executable, "-m", "bench.bare_loop", "--source", job.copier_source, "--target", job.copier_target,
               "--topic", job.topic, "--alias", job.tag, "--translation-index", "on" if self.index else "off"]
        return Tree(cmd, job.log(self.key), env={"PYTHONPATH": str(Path(__file__).resolve().parents[1])})


class MirrorMaker(Contender):
    """MirrorMaker 2 in dedicated mode (org.apache.kafka.connect.mirror.MirrorMaker)."""

    def __init__(self, exactly_once: bool, tasks: int) -> None:
        self.eos, self.tasks = exactly_once, tasks
        self.key = "mm2-eos" if exactly_once else "mm2-alo"
        self.label = f"MirrorMaker 2 {'exactly-once' if exactly_once else 'at-least-once'}"

    def properties(self, job: Job, rest_port: int) -> str:
        a = job.tag  # source cluster alias: prefixes the replica and MM2's internal topics
        lines = {
            "clusters": f"{a}, tgt",
            f"{a}.bootstrap.servers": job.copier_source,
            "tgt.bootstrap.servers": job.copier_target,
            f"{a}->tgt.enabled": "true",
            f"tgt->{a}.enabled": "false",
            f"{a}->tgt.topics": job.pattern,
            "tasks.max": str(self.tasks),
            "refresh.topics.interval.seconds": "5",
            "refresh.groups.enabled": "false",
            # Topic config sync on, as ours, both at their default interval (10 minutes).
            "sync.topic.configs.enabled": "true",
            "sync.topic.acls.enabled": "false",
            "emit.heartbeats.enabled": "false",
            "emit.checkpoints.enabled": "false",
            "sync.group.offsets.enabled": "false",
            "offset-syncs.topic.location": "target",
            "offset.flush.interval.ms": "1000",
            # Single-broker sandbox.
            "replication.factor": "1",
            "offset-syncs.topic.replication.factor": "1",
            "checkpoints.topic.replication.factor": "1",
            "heartbeats.topic.replication.factor": "1",
            "offset.storage.replication.factor": "1",
            "status.storage.replication.factor": "1",
            "config.storage.replication.factor": "1",
            # Same reading and batching as ours: read_committed source, 20 ms linger, 1 MiB batches.
            f"{a}.consumer.isolation.level": "read_committed",
            f"{a}.consumer.max.poll.records": "10000",
            f"{a}.consumer.fetch.max.bytes": str(64 * 1024 * 1024),
            f"{a}.consumer.max.partition.fetch.bytes": str(16 * 1024 * 1024),
            **{f"tgt.producer.{k}": v for k, v in PRODUCER_TUNING.items()},
            "tgt.producer.buffer.memory": str(256 * 1024 * 1024),
            "tgt.producer.enable.idempotence": "true",
            "tgt.producer.max.in.flight.requests.per.connection": "5",
            # KIP-710: the internal REST server a dedicated cluster needs to forward task configs.
            "dedicated.mode.enable.internal.rest": "true",
            "listeners": f"http://127.0.0.1:{rest_port}",
        }
        if job.compression:
            lines["tgt.producer.compression.type"] = job.compression
        if self.eos:
            lines["tgt.exactly.once.source.support"] = "enabled"  # KIP-618
        return "".join(f"{k} = {v}\n" for k, v in lines.items())

    def launch(self, job: Job) -> Tree:
        props = job.logdir / f"{job.tag}-mm2.properties"
        props.write_text(self.properties(job, _free_port()))
        log4j = job.logdir / "mm2-log4j2.properties"
        log4j.write_text(_LOG4J2.format(log=job.log(self.key + "-app")))
        cmd = ["java", *JAVA_HEAP, "-XX:+UseG1GC", f"-Dlog4j2.configurationFile={log4j}",
               "-cp", classpath(), "org.apache.kafka.connect.mirror.MirrorMaker", str(props),
               "--clusters", "tgt"]
        return Tree(cmd, job.log(self.key))


class ProducerPerf(Contender):
    """Kafka's ProducerPerformance into the target: what the target takes from one fast producer."""

    copies = True

    def __init__(self, transactional: bool) -> None:
        self.txn = transactional
        self.key = "produce-txn" if transactional else "produce"
        self.label = f"ProducerPerformance{' transactional' if transactional else ''} (ceiling)"

    def launch(self, job: Job) -> Tree:
        kafka_ops.create_topic(job.target, job.replica, job.partitions)
        props = [f"bootstrap.servers={job.copier_target}", "acks=all", "enable.idempotence=true",
                 "buffer.memory=268435456", *(f"{k}={v}" for k, v in PRODUCER_TUNING.items())]
        cmd = ["java", *JAVA_HEAP, "-cp", classpath(), "org.apache.kafka.tools.ProducerPerformance",
               "--topic", job.replica, "--num-records", str(job.records), "--record-size", str(job.size),
               "--throughput", "-1", "--producer-props", *props]
        if self.txn:
            # Transactions about as long as the replicator's under load (200k records or 10 s, ~2 s).
            cmd += ["--transactional-id", f"pp-{job.tag}", "--transaction-duration-ms", "2000"]
        return Tree(cmd, job.log(self.key))


class ParallelTxnProducers(Contender):
    """N transactional ProducerPerformance processes at once, each into its own topic holding its
    share of the partitions (the replica's partitions split N ways): the ceiling for N shards, each
    with one transactional producer, which one producer thread is not."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.key = "produce-txn-parallel"
        self.label = f"{n} transactional ProducerPerformance in parallel (ceiling)"

    def outputs(self, job: Job) -> tuple[tuple[str, int], ...]:
        share, extra = divmod(job.partitions, self.n)
        return tuple((f"{job.replica}.p{i}", share + (i < extra)) for i in range(self.n) if share + (i < extra))

    def launch(self, job: Job) -> Tree:
        outs = self.outputs(job)
        # Records split like the partitions: each process writes "its shard's" share.
        counts = [job.records * n // job.partitions for _, n in outs]
        counts[0] += job.records - sum(counts)
        cmds = []
        for i, ((topic, partitions), records) in enumerate(zip(outs, counts, strict=True)):
            kafka_ops.create_topic(job.target, topic, partitions)
            props = [f"bootstrap.servers={job.copier_target}", "acks=all", "enable.idempotence=true",
                     "buffer.memory=268435456", *(f"{k}={v}" for k, v in PRODUCER_TUNING.items())]
            cmds.append(["java", *JAVA_HEAP, "-cp", classpath(), "org.apache.kafka.tools.ProducerPerformance",
                         "--topic", topic, "--num-records", str(records), "--record-size", str(job.size),
                         "--throughput", "-1", "--producer-props", *props,
                         "--transactional-id", f"pp-{job.tag}-{i}", "--transaction-duration-ms", "2000"])
        # One shell in its own session: the tree (and a SIGKILL to its group) covers every JVM, and
        # it exits non-zero when any of them did.
        script = "".join(f"{shlex.join(c)} & pids=\"$pids $!\"\n" for c in cmds)
        script += 'rc=0; for p in $pids; do wait "$p" || rc=1; done; exit $rc\n'
        return Tree(["bash", "-c", script], job.log(self.key))


class ConsumerPerf(Contender):
    """Kafka's ConsumerPerformance from the source: what the source gives one fast reader."""

    key, label, copies = "consume", "ConsumerPerformance read_committed (ceiling)", False

    def launch(self, job: Job) -> Tree:
        conf = job.logdir / f"{job.tag}-consumer.properties"
        conf.write_text("isolation.level=read_committed\nfetch.max.bytes=67108864\n"
                        "max.partition.fetch.bytes=16777216\nauto.offset.reset=earliest\n")
        cmd = ["java", *JAVA_HEAP, "-cp", classpath(), "org.apache.kafka.tools.ConsumerPerformance",
               "--bootstrap-server", job.copier_source, "--topic", job.topic, "--messages", str(job.records),
               "--group", f"cp-{job.tag}", "--timeout", "120000", "--consumer.config", str(conf)]
        return Tree(cmd, job.log(self.key))


def parse_consumer_perf(output: str) -> tuple[float, float] | None:
    """(fetch seconds, records/s) from ConsumerPerformance's result line (rebalance time excluded)."""
    for line in reversed(output.splitlines()):
        cols = [c.strip() for c in line.split(",")]
        if len(cols) >= 10:
            try:
                return float(cols[7]) / 1000, float(cols[9])
            except ValueError:
                continue
    return None


class BaseCheckout(Replicator):
    """Our exactly-once job as another checkout (its own `.venv`) builds it: the engine before a
    change, A/B in the same invocation as the change (`bench.run --base-checkout`)."""

    key, label = "replicator-eos-base", "replicator exactly-once, base checkout"

    def __init__(self, checkout: Path) -> None:
        super().__init__("exactly-once")
        self.key, self.label = BaseCheckout.key, BaseCheckout.label
        self.checkout = checkout

    def _executable(self) -> Path:
        return self.checkout / ".venv" / "bin" / "replicator"

    def _env(self) -> dict[str, str]:
        # Spark starts its Python workers as `python -m pyspark.worker` in the job's working
        # directory (this checkout), which puts it first on sys.path: without this the base's
        # workers import this checkout's replicator/, not the base's.
        return {"PYTHONSAFEPATH": "1"}


def all_contenders(tasks: int) -> list[Contender]:
    """`tasks`: MM2's tasks.max and the number of parallel transactional producers (our shards)."""
    return [Replicator("exactly-once"), Replicator("exactly-once", install=FRESH_INSTALL),
            Replicator("exactly-once", install=FRESH_INSTALL_NO_RECORDING),
            Replicator("exactly-once", index=False), Replicator("at-least-once"),
            BareLoop(), BareLoop(index=False),
            MirrorMaker(True, tasks), MirrorMaker(False, tasks), ParallelTxnProducers(tasks),
            ProducerPerf(True), ProducerPerf(False), ConsumerPerf()]


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


_LOG4J2 = """\
status = warn
appender.file.type = File
appender.file.name = FILE
appender.file.fileName = {log}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = FILE
"""
