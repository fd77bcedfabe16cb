"""The soak: the replicator runs for an hour at a steady rate with periodic faults, sampled every minute.

Workload: Kafka's ProducerPerformance writes transactions at a fixed rate (a small, steady fraction of
the replicator's catch-up capacity), and the chaos trickle adds small transactions, every other one
aborted, whose values are the ground truth for "aborted records never copied".

Every minute the replicator's whole process tree (driver, Spark JVM, Python workers) is sampled: RSS,
open file descriptors, threads, Python worker processes, and the lag (source last stable offsets minus
the fake group). Faults come every few minutes, none of them on the source (the workload writers must
not fail under the test): replicator SIGKILL, SIGTERM, SIGSTOP longer than the transaction timeout,
a zombie twin, target broker bounce and pause.

The growth check compares the medians of the first and the last third of the samples (samples within
WARMUP_S of a replicator start are left out, as JIT and caches fill): the last may exceed the first by
at most GROWTH_FACTOR plus a small absolute slack per metric. Lag samples taken LAG_SETTLE_S or more
after a fault and WARMUP_S after a replicator start must stay below LAG_BOUND_S seconds' worth of the
producer rate.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from replicator.sandbox import classpath
from tests.chaos.scenario import BIN, TRANSACTION_TIMEOUT_MS, ChaosRun
from tests.chaos.workload import Trickle
from tests.kafka_helpers import create_topic, end_offsets, fake_group_offsets, settled_end_offsets
from tests.replicator_process import ReplicatorProcess, stop_with_parent, wait_until

SOAK_FAULTS = ("pause", "target-bounce", "kill", "target-pause", "term", "zombie")
SAMPLE_S = 60.0
WARMUP_S = 180.0
GROWTH_FACTOR = 1.25
SLACK = {"rss_mib": 96.0, "fds": 32.0, "threads": 16.0, "python_workers": 1.0}
LAG_SETTLE_S = 120.0
LAG_BOUND_S = 30.0


@dataclass
class SoakResult:
    minutes: float
    rate: int
    faults: list[str] = field(default_factory=list)
    samples: list[dict] = field(default_factory=list)
    growth: dict = field(default_factory=dict)  # metric -> {"first": m, "last": m, "bound": b, "ok": bool}
    lag_violations: list[dict] = field(default_factory=list)
    max_settled_lag: int = 0
    produced: int = 0
    verify: dict = field(default_factory=dict)
    verify_exit: int = -1
    trickle_committed: int = 0
    seconds: float = 0.0


def tree_sample(proc: ReplicatorProcess) -> dict:
    """What an operator's node exporter sees of the job: the whole process tree."""
    try:
        root = psutil.Process(proc.pid)
        members = [root, *root.children(recursive=True)]
    except psutil.Error:
        return {}
    rss = fds = threads = workers = 0
    for p in members:
        try:
            rss += p.memory_info().rss
            fds += p.num_fds()
            threads += p.num_threads()
            if p is not root and "python" in p.name() and "pyspark" in " ".join(p.cmdline()):
                workers += 1
        except psutil.Error:
            continue
    return {"rss_mib": rss / 2**20, "fds": fds, "threads": threads, "python_workers": workers,
            "processes": len(members)}


class SoakRun(ChaosRun):
    def __init__(self, sandbox, workdir: Path, tag: str, minutes: float, rate: int, fault_every_s: float,
                 record_size: int = 512) -> None:
        super().__init__(sandbox, workdir, tag, records=0, partitions=4, faults=SOAK_FAULTS, shards=2)
        self.minutes, self.rate, self.fault_every_s, self.record_size = minutes, rate, fault_every_s, record_size

    def _producer(self) -> subprocess.Popen:
        out = open(self.workdir / "producer-performance.log", "w")  # noqa: SIM115 - handed to the child
        records = int(self.rate * (self.minutes * 60 + 600))  # outlasts the soak; stopped at its end
        cmd = ["java", "-Xmx256m", "-cp", classpath(), "org.apache.kafka.tools.ProducerPerformance",
               "--topic", self.topic, "--num-records", str(records), "--record-size", str(self.record_size),
               "--throughput", str(self.rate), "--transactional-id", f"soak-load-{self.tag}",
               "--transaction-duration-ms", "100",
               "--producer-props", f"bootstrap.servers={self.sandbox.source.bootstrap}",
               "acks=all", "linger.ms=5"]
        return subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                                preexec_fn=stop_with_parent)

    def _replicator(self) -> ReplicatorProcess:
        # The chaos runs' small batch cap would make a slow minute of this shared box look like lag.
        self.runs += 1
        return ReplicatorProcess(self.sandbox, self.topic, self.name, self.workdir / f"replicator-{self.runs}.log",
                                 "--shards", str(self.shards),
                                 env={"TMPDIR": str(self.tmp),
                                      "REPLICATOR_TRANSACTION_TIMEOUT_MS": str(TRANSACTION_TIMEOUT_MS),
                                      "REPLICATOR_MAX_TRANSACTION_SECONDS": "2",
                                      "REPLICATOR_BATCH_DURATION_SECONDS": "10"}).start()

    def _lag(self) -> int:
        try:
            ends = end_offsets(self.sandbox.source.bootstrap, self.topic, self.partitions)
            group = fake_group_offsets(self.sandbox.target.bootstrap, self.group)
            return sum(ends.values()) - sum(group.get((self.topic, p), 0) for p in range(self.partitions))
        except Exception:  # noqa: BLE001 - the target may be down by design right now
            return -1

    def soak(self) -> SoakResult:
        started = time.monotonic()
        box = self.sandbox
        result = SoakResult(self.minutes, self.rate)
        create_topic(box.source.bootstrap, self.topic, self.partitions)
        samples_log = self.workdir / "samples.jsonl"
        load = self._producer()
        trickle = Trickle(box.source.bootstrap, self.topic, self.partitions, self.truth, self.tag)
        trickle.start()
        proc = self._replicator()
        proc_started = last_fault = time.monotonic()
        next_sample, next_fault = started + SAMPLE_S, started + self.fault_every_s
        end = started + self.minutes * 60
        faults = list(SOAK_FAULTS)
        try:
            self._await_ready(proc)
            while time.monotonic() < end:
                now = time.monotonic()
                if load.poll() is not None:
                    raise AssertionError(f"the load producer exited ({load.returncode}); see producer-performance.log")
                # The first hour-long run only noticed at its end that the job had exited 1 (minute 55).
                if not proc.running():
                    raise AssertionError(f"the replicator exited ({proc.proc.returncode}):\n{proc.log()[-4000:]}")
                if now >= next_sample:
                    sample = {"t_s": round(now - started), "since_start_s": round(now - proc_started),
                              "since_fault_s": round(now - last_fault), "lag": self._lag(), **tree_sample(proc)}
                    result.samples.append(sample)
                    with open(samples_log, "a") as f:
                        f.write(json.dumps(sample) + "\n")
                    next_sample = now + SAMPLE_S
                if now >= next_fault:
                    kind = faults[len(result.faults) % len(faults)]
                    before = self._committed()
                    self._note(f"fault {kind} (group at {before})")
                    pid = proc.pid
                    proc = self._inject(kind, proc)
                    if proc.pid != pid:
                        proc_started = time.monotonic()
                    self._await_progress(before, proc, kind)
                    result.faults.append(kind)
                    last_fault = time.monotonic()
                    next_fault = last_fault + self.fault_every_s
                time.sleep(1)
            load.terminate()
            load.wait(60)
            trickle.stop.set()
            trickle.join(300)
            assert trickle.error is None, f"trickle writer failed: {trickle.error!r}"
            ends = settled_end_offsets(box.source.bootstrap, self.topic, self.partitions)
            result.produced = sum(ends.values())
            want = {(self.topic, p): ends[p] for p in range(self.partitions)}
            wait_until(lambda: fake_group_offsets(box.target.bootstrap, self.group) == want, 900,
                       "the fake group to reach the source end", proc, interval=2.0)
            assert proc.sigterm(timeout=180) == 0
        finally:
            if proc.running():
                proc.sigkill()
            if load.poll() is None:
                load.kill()
                load.wait(30)
            trickle.stop.set()
        verify = subprocess.run([str(BIN), "verify", "--source-bootstrap-servers", box.source.bootstrap,
                                 "--target-bootstrap-servers", box.target.bootstrap, "--topics", self.topic,
                                 "--name", self.name, "--quiesced", "--require-caught-up", "--ground-truth",
                                 str(self.truth), "--format", "json", "--no-progress"],
                                capture_output=True, text=True, timeout=3600)
        (self.workdir / "verify.json").write_text(verify.stdout + verify.stderr)
        result.verify_exit = verify.returncode
        result.verify = json.loads(verify.stdout) if verify.stdout.strip() else {"stderr": verify.stderr}
        result.trickle_committed = trickle.committed
        self._judge(result)
        result.seconds = time.monotonic() - started
        (self.workdir / "soak.json").write_text(json.dumps({k: v for k, v in result.__dict__.items()
                                                            if k != "verify"}, indent=1))
        return result

    def _judge(self, result: SoakResult) -> None:
        steady = [s for s in result.samples if s.get("since_start_s", 0) >= WARMUP_S and "rss_mib" in s]
        third = max(1, len(steady) // 3)
        for metric, slack in SLACK.items():
            if len(steady) < 3:
                break
            first = statistics.median(s[metric] for s in steady[:third])
            last = statistics.median(s[metric] for s in steady[-third:])
            bound = first * GROWTH_FACTOR + slack
            result.growth[metric] = {"first": round(first, 1), "last": round(last, 1), "bound": round(bound, 1),
                                     "ok": last <= bound}
        settled = [s for s in result.samples if s["since_fault_s"] >= LAG_SETTLE_S and s["lag"] >= 0
                   and s.get("since_start_s", 0) >= WARMUP_S]
        result.max_settled_lag = max((s["lag"] for s in settled), default=0)
        result.lag_violations = [s for s in settled if s["lag"] > self.rate * LAG_BOUND_S]
