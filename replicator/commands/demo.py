"""`replicator demo`: the whole story on a laptop, in a few minutes.

Local source and target clusters, a live sample workload with aborted transactions, the replicator
with a progress line, a SIGKILL mid-stream and a restart that resumes from the offsets on the
target, then a record-by-record comparison of source and target and a one-screen summary.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import click
from confluent_kafka import Consumer
from confluent_kafka.admin import AdminClient, NewTopic

from replicator import config as config_mod
from replicator import logs, names
from replicator.clients.kafka_clients import with_logging
from replicator.commands.sample_data import SampleProducer
from replicator.offsets import read_group
from replicator.ops.lag import partition_lags
from replicator.sandbox import Sandbox
from replicator.topics.sync import TopicMapping

TOPIC, PARTITIONS, NAME = "demo.orders", 4, "demo"


def _say(text: str) -> None:
    click.echo(click.style("[demo] ", fg="cyan") + text)


class _Job:
    """The replicator as a child process, its progress lines echoed to the console."""

    def __init__(self, source: str, target: str, log_path: Path) -> None:
        self.log_path = log_path
        args = [sys.executable, "-m", "replicator.cli", "run", "--source-bootstrap-servers", source,
                "--target-bootstrap-servers", target, "--topics", r"demo\..*", "--name", NAME,
                "--metrics-port", "0"]
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     start_new_session=True)
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        with open(self.log_path, "a") as log:
            for line in self.proc.stdout:
                log.write(line)
                if "replicator.job" in line and ("progress:" in line or "stopped" in line or "starting" in line):
                    click.echo(click.style("  [replicator] ", fg="green") + line.split(": ", 1)[-1].rstrip())
                elif " ERROR " in line:
                    click.echo(click.style("  [replicator] ", fg="red") + line.rstrip())

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def terminate(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(180)


def _compare(source: str, target: str) -> dict[str, int]:
    """Reads both sides read_committed and compares every record, partition by partition."""
    from confluent_kafka import Consumer, TopicPartition

    def read(bootstrap: str) -> dict[int, list]:
        c = Consumer(with_logging({"bootstrap.servers": bootstrap, "group.id": "demo-compare",
                                   "enable.auto.commit": False, "isolation.level": "read_committed",
                                   "enable.partition.eof": True}))
        c.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
        out: dict[int, list] = {p: [] for p in range(PARTITIONS)}
        eof: set[int] = set()
        while len(eof) < PARTITIONS:
            for m in c.consume(5000, 1.0):
                if m.error():
                    eof.add(m.partition())
                    continue
                out[m.partition()].append((m.key(), m.value(), tuple(m.headers() or ()), m.timestamp()[1]))
        c.close()
        return out

    src, dst = read(source), read(target)
    result = {"source": 0, "target": 0, "missing": 0, "duplicates": 0, "mismatched": 0}
    for p in range(PARTITIONS):
        result["source"] += len(src[p])
        result["target"] += len(dst[p])
        result["duplicates"] += len(dst[p]) - len(set(dst[p]))
        result["missing"] += len(set(src[p]) - set(dst[p]))
        result["mismatched"] += int(src[p] != dst[p])
    return result


def _lag(cfg: config_mod.ReplicatorConfig) -> int:
    return sum(x.records for x in partition_lags(cfg, [TopicMapping(TOPIC, TOPIC, PARTITIONS)]))


def _copied(bootstrap: str) -> int:
    return sum(_group_offsets(bootstrap).values())


def _group_offsets(bootstrap: str) -> dict[int, int]:
    reader = Consumer(with_logging({"bootstrap.servers": bootstrap, "group.id": names.offsets_group(NAME),
                                    "enable.auto.commit": False}))
    group = read_group(reader, [TOPIC])
    reader.close()
    return {p: c.offset for (t, p), c in sorted(group.items()) if t == TOPIC}


def _watch(producer: SampleProducer, cfg, seconds: float, target: str) -> None:
    """Progress every 5 s; the clock starts once the replicator has committed its first batch."""
    before = _copied(target)
    while _copied(target) == before:
        time.sleep(2)
        _say(f"source: {producer.committed} records committed, {producer.aborted} aborted | lag {_lag(cfg)} "
             "| waiting for the replicator's first commit")
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        time.sleep(min(5.0, max(0.0, deadline - time.monotonic())))
        _say(f"source: {producer.committed} records committed, {producer.aborted} aborted | lag {_lag(cfg)}")


@click.command()
@click.option("--seconds", default=30, show_default=True, help="Replication time before and after the crash.")
@click.option("--rate", default=1000, show_default=True, help="Sample records per second.")
@click.option("--keep-sandbox", is_flag=True, help="Leave the clusters running afterwards.")
def demo(seconds: int, rate: int, keep_sandbox: bool) -> None:
    """Local clusters, sample data, exactly-once replication, a crash and a verified restart."""
    logs.configure("text", "WARNING")  # client warnings, if any, in our format between the progress lines
    box = Sandbox()
    _say("starting the source and target clusters (real Apache Kafka, KRaft) ...")
    box.up(fresh=True)
    _say(f"source {box.source.bootstrap}, target {box.target.bootstrap}")
    cfg = config_mod.load({"source_bootstrap_servers": box.source.bootstrap,
                           "target_bootstrap_servers": box.target.bootstrap, "topics": r"demo\..*",
                           "name": NAME}, environ={})
    admin = AdminClient(with_logging({"bootstrap.servers": box.source.bootstrap}))  # alive until its future resolves
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])[TOPIC].result(30)
    del admin  # a client still alive when the clusters stop would log its failed reconnects
    producer = SampleProducer(box.source.bootstrap, TOPIC, PARTITIONS, records_per_second=rate)
    producer.start()
    _say(f"sample producer: {rate} records/s into {TOPIC}, every 5th transaction aborted")
    log_path = Path(tempfile.gettempdir()) / "replicator-demo.log"
    log_path.write_text("")
    code, job = 1, None
    try:
        _say(f"starting the replicator (Spark local mode; log: {log_path}) ...")
        job = _Job(box.source.bootstrap, box.target.bootstrap, log_path)
        _watch(producer, cfg, seconds, box.target.bootstrap)
        _say(click.style("SIGKILL the replicator mid-stream (driver, Spark JVM, workers)", fg="yellow"))
        job.kill()
        offsets = _group_offsets(box.target.bootstrap)
        _say(f"offsets committed on the target (fake group {names.offsets_group(NAME)}): {offsets}")
        _say("restarting with nothing but its config: it resumes from exactly those offsets")
        job = _Job(box.source.bootstrap, box.target.bootstrap, log_path)
        _watch(producer, cfg, seconds, box.target.bootstrap)
        producer.stop()
        _say(f"sample producer stopped: {producer.committed} committed, {producer.aborted} aborted records")
        deadline = time.monotonic() + 180
        while (lag := _lag(cfg)) > 0 and time.monotonic() < deadline:
            _say(f"catching up: lag {lag}")
            time.sleep(2)
        _say(f"lag {lag}; stopping the replicator with SIGTERM")
        exit_code = job.terminate()
        result = _compare(box.source.bootstrap, box.target.bootstrap)
        exact = (result["source"] == result["target"] == producer.committed and not result["missing"]
                 and not result["duplicates"] and not result["mismatched"])
        click.echo("\n" + "=" * 64)
        click.echo(" exactly-once replication demo: summary")
        click.echo("=" * 64)
        click.echo(f" source records committed      {producer.committed:>10}")
        click.echo(f" source records aborted        {producer.aborted:>10}  (never copied)")
        click.echo(f" target records                {result['target']:>10}")
        click.echo(f" missing / duplicates / order  {result['missing']:>4} / {result['duplicates']} / "
                   f"{'same' if not result['mismatched'] else 'DIFFERENT'}")
        click.echo(" crash + restart               1 SIGKILL, resumed from the target's offsets")
        click.echo(f" final lag                     {lag:>10}")
        click.echo(f" replicator exit on SIGTERM    {exit_code:>10}")
        click.echo(" result                        " + click.style("EXACTLY ONCE" if exact else "MISMATCH",
                                                                  fg="green" if exact else "red", bold=True))
        click.echo("=" * 64)
        code = 0 if exact and exit_code == 0 else 1
    finally:
        if job is not None:
            job.kill()
        if producer.is_alive():
            producer.stop()
        if not keep_sandbox:
            box.down()
            _say("clusters stopped")
    sys.exit(code)
