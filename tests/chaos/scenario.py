"""One fault-injection run: workload, replicator, concurrent reader, a schedule of faults, and the
final checks. Every process is addressed by PID; everything started here is stopped here.

Fault kinds (each waits afterwards until the fake group moves on, proving recovery):
  kill            SIGKILL of the replicator's whole process group, Spark checkpoint deleted, restart
  term            SIGTERM (clean stop), restart
  pause           SIGSTOP/SIGCONT of the replicator, longer than the transaction timeout
  zombie          the replicator is frozen, a second instance takes over, the first resumes (and must
                  be fenced), then the first is stopped
  source-kill / source-bounce / target-kill / target-bounce   hard and clean broker restarts
  target-pause    SIGSTOP/SIGCONT of the target broker, longer than the transaction timeout
Multi-broker clusters only (`sandbox up --brokers 3`), the other brokers keep serving:
  source-leader-kill / target-leader-kill / target-leader-stop   SIGKILL or clean stop of the leader
                  of replicated partition 0, restart
  target-txn-coordinator-kill    SIGKILL of the transaction coordinator of the job's shard 0
  target-group-coordinator-kill  SIGKILL of the fake group's coordinator
  source-txn-coordinator-kill    SIGKILL of the source broker coordinating the trickle writer's
                  transactional id (a source transaction open, its outcome decided by the new
                  coordinator while the replicator reads read_committed)
  source-rolling-restart / target-rolling-restart   clean restart of every broker, one after another
  target-leader-isolate / source-leader-isolate   the leader of replicated partition 0 is cut off from
                  the other brokers (not from clients) for 20 s, past the broker session timeout
                  (netfault.Isolation; run as root)
  target-group-coordinator-isolate   the same for the fake group's coordinator: cut off, it still
                  answers the shards' OffsetFetch with the offsets it had (docs/reliability.md, "What the faults found")
Network (iptables on loopback, see netfault.py; any cluster shape):
  target-partition-short / target-partition-long / source-partition-long   every packet between the
                  clients and the cluster's brokers dropped for 3 s (under the 6 s transaction
                  timeout) or 15 s (over it), then restored
Slow network (a run with one of these connects the replicator to the target through delay proxies,
see delayproxy.py; the sandbox's target needs `proxied_target=True`):
  target-slow-network   100 ms one-way latency and 1 MiB/s per direction and broker, for at least
                  20 s and until the group moved on over the slow link
  target-slow-restart   the same link; the replicator is SIGKILLed and restarted over it (fencing,
                  group reads, the first transactions all cross the slow link)
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from tests.chaos import forensics, netfault, roles
from tests.chaos.delayproxy import WanLink
from tests.chaos.reader import ConcurrentReader
from tests.chaos.workload import Copiers, Trickle, verifiable_produce
from tests.kafka_helpers import create_topic, end_offsets, fake_group_offsets, settled_end_offsets
from tests.replicator_process import ReplicatorProcess, wait_until

TRANSACTION_TIMEOUT_MS = 6_000
# Short batches put many task starts and ends under fault; REPLICATOR_CHAOS_BATCH_SECONDS=300 (the
# default of `batch_duration_seconds`) keeps each shard task running through several faults instead.
BATCH_SECONDS = os.environ.get("REPLICATOR_CHAOS_BATCH_SECONDS", "10")
PAUSE_S = TRANSACTION_TIMEOUT_MS / 1000 + 3
FAULT_KINDS = ("kill", "term", "pause", "zombie", "source-kill", "source-bounce", "target-kill", "target-bounce",
               "target-pause")
MULTI_BROKER_FAULT_KINDS = ("target-leader-kill", "target-txn-coordinator-kill", "target-group-coordinator-kill",
                            "source-leader-kill", "target-leader-stop", "target-rolling-restart",
                            "source-rolling-restart", "target-leader-isolate", "source-leader-isolate",
                            "source-txn-coordinator-kill", "target-group-coordinator-isolate")
# Past the brokers' 9 s session timeout: the controller fences the isolated node and moves its
# leaderships while it still believes it leads and clients still reach it.
ISOLATE_S = 20
READER_STALL_S = 60.0  # the job is stopped and the target idle by then: a reader this still is frozen
NETWORK_FAULT_KINDS = ("target-partition-short", "target-partition-long", "source-partition-long")
PARTITION_S = {"short": TRANSACTION_TIMEOUT_MS / 1000 / 2, "long": TRANSACTION_TIMEOUT_MS / 1000 + 9}
SLOW_NETWORK_FAULT_KINDS = ("target-slow-network", "target-slow-restart")
WAN_DELAY_S = 0.1  # one way: a 200 ms round trip, an intercontinental link
WAN_RATE = 1024 * 1024  # bytes/s per direction and broker
SLOW_S = 20
NODE_READY_TIMEOUT_S = 300
BIN = Path(sys.executable).with_name("replicator")


def _restart(node) -> None:
    """A SIGKILLed node recovers its logs before it serves: on a crowded 2-core machine (load
    average 40) that took longer than the sandbox's 90 s start-up wait."""
    node.launch()
    node.wait_ready(NODE_READY_TIMEOUT_S)


def _direct_connections(proc: ReplicatorProcess, cluster) -> list[str]:
    """Connections of the replicator's process tree to the cluster's own client ports: none may
    exist while the replicator is meant to reach the target only through the delay proxies."""
    direct = {(n.host, n.port) for n in getattr(cluster, "nodes", [cluster])}
    found = []
    try:
        root = psutil.Process(proc.pid)
        tree = [root, *root.children(recursive=True)]
    except psutil.Error:
        return found
    for p in tree:
        try:
            found += [f"pid {p.pid} -> {c.raddr.ip}:{c.raddr.port}" for c in p.net_connections("tcp")
                      if c.raddr and (c.raddr.ip, c.raddr.port) in direct]
        except psutil.Error:
            continue  # gone meanwhile
    return found


@dataclass
class ChaosResult:
    records: int
    faults: list[str] = field(default_factory=list)
    verify: dict = field(default_factory=dict)
    verify_exit: int = -1
    reader_records: int = 0
    reader_out_of_order: list[str] = field(default_factory=list)
    reader_errors: list[str] = field(default_factory=list)
    reader_restarts: int = 0  # new consumers after a frozen one (ConcurrentReader)
    vp_values_seen: int = 0
    vp_acked: int = 0
    trickle_committed: int = 0
    trickle_uncertain: int = 0
    trickle_seen: int = 0
    trickle_aborted_seen: int = 0
    group_equals_source_end: bool = False
    seconds: float = 0.0


class ChaosRun:
    def __init__(self, sandbox, workdir: Path, tag: str, records: int, partitions: int = 2,
                 faults: list[str] | tuple[str, ...] = FAULT_KINDS, shards: int = 2) -> None:
        self.sandbox, self.workdir, self.tag = sandbox, workdir, tag
        self.records, self.partitions, self.faults, self.shards = records, partitions, list(faults), shards
        self.input, self.topic, self.name = f"chaos-in-{tag}", f"chaos-{tag}", f"chaos-{tag}"
        self.group = f"__replicator.{self.name}"
        self.truth = workdir / "ground-truth.jsonl"
        self.tmp = workdir / "tmp"  # the replicator's scratch (Spark checkpoint) lives here
        self.tmp.mkdir(parents=True, exist_ok=True)
        self.runs = 0
        self.log = workdir / "chaos.log"
        self.wan: WanLink | None = None  # the replicator's path to the target when the run has slow kinds

    # -- helpers ------------------------------------------------------------------------------
    def _note(self, text: str) -> None:
        with open(self.log, "a") as f:
            f.write(f"{time.strftime('%H:%M:%S')} {text}\n")

    def _replicator(self) -> ReplicatorProcess:
        self.runs += 1
        proc = ReplicatorProcess(self.sandbox, self.topic, self.name, self.workdir / f"replicator-{self.runs}.log",
                                 "--shards", str(self.shards), target=self.wan,
                                 env={"TMPDIR": str(self.tmp), "REPLICATOR_TRANSACTION_TIMEOUT_MS":
                                      str(TRANSACTION_TIMEOUT_MS), "REPLICATOR_MAX_TRANSACTION_SECONDS": "2",
                                      "REPLICATOR_BATCH_DURATION_SECONDS": BATCH_SECONDS})
        return proc.start()

    def _committed(self) -> int:
        try:
            return sum(fake_group_offsets(self.sandbox.target.bootstrap, self.group).values())
        except Exception:  # noqa: BLE001 - the target may be down by design right now
            return -1

    def _reader_state(self, reader: ConcurrentReader, target_ends: dict[int, int]) -> str:
        """What tells a stuck reader from a stuck partition: its positions against the ends it waits
        for, and the target's last stable offset against its high watermark now (LSO < HW: a
        transaction is still open there)."""
        lso, hw = {}, {}
        with contextlib.suppress(Exception):
            lso = end_offsets(self.sandbox.target.bootstrap, self.topic, self.partitions)
        with contextlib.suppress(Exception):
            hw = end_offsets(self.sandbox.target.bootstrap, self.topic, self.partitions, committed=False)
        return (f"reader alive: {reader.is_alive()}, records: {reader.records}, errors: {reader.errors[-5:]}\n"
                f"reader positions: {sorted(reader.positions.items())}\n"
                f"its librdkafka partitions: {sorted(reader.fetch_states.items())}\n"
                f"target ends it waits for: {sorted(target_ends.items())}\n"
                f"target last stable offsets now: {sorted(lso.items())}\n"
                f"target high watermarks now: {sorted(hw.items())}")

    def _reader_caught_up(self, reader: ConcurrentReader, target_ends: dict[int, int]) -> bool:
        """Once the faults are over and the job stopped, a reader frozen below the target's ends is
        restarted at its positions (`ConcurrentReader`: a librdkafka stall). If the new consumer
        moves, the target was readable all along; if it freezes as well, the wait fails."""
        if reader.caught_up_to(target_ends):
            return True
        if time.monotonic() - reader.moved_at > READER_STALL_S and reader.restarts < 2:
            self._note(f"reader frozen for {READER_STALL_S:.0f}s: {self._reader_state(reader, target_ends)}")
            self._note("reader: a new consumer resumes at its positions")
            reader.restart()
        return False

    def _await_progress(self, since: int, proc: ReplicatorProcess, what: str) -> None:
        # A killed run's last transaction can complete after the kill and move the group by itself:
        # the new run must also be up before the next fault.
        self._await_ready(proc)
        wait_until(lambda: self._committed() > since, 300, f"progress after {what}", proc, interval=2.0)

    def _await_ready(self, proc: ReplicatorProcess) -> None:
        wait_until(lambda: "progress:" in proc.log(), 300, "the replicator to start", proc)

    # -- faults ------------------------------------------------------------------------------
    def _inject(self, kind: str, proc: ReplicatorProcess) -> ReplicatorProcess:
        box = self.sandbox
        if kind == "kill":
            proc.sigkill()
            shutil.rmtree(self.tmp)  # the checkpoint of the killed run goes with it
            self.tmp.mkdir()
            proc = self._replicator()
        elif kind == "term":
            code = proc.sigterm(timeout=180)
            assert code == 0, f"SIGTERM exit code {code}"
            proc = self._replicator()
        elif kind == "pause":
            os.killpg(proc.pid, signal.SIGSTOP)
            time.sleep(PAUSE_S)
            os.killpg(proc.pid, signal.SIGCONT)
        elif kind == "zombie":
            os.killpg(proc.pid, signal.SIGSTOP)
            twin = self._replicator()
            self._await_ready(twin)
            self._await_progress(self._committed(), twin, "the twin took over")
            os.killpg(proc.pid, signal.SIGCONT)  # the zombie wakes up mid-transaction
            time.sleep(PAUSE_S)
            proc.sigkill()
            proc = twin
        elif kind in ("source-kill", "target-kill"):
            cluster = box.source if kind.startswith("source") else box.target
            cluster.kill()
            time.sleep(2)
            cluster.start()
        elif kind in ("source-bounce", "target-bounce"):
            cluster = box.source if kind.startswith("source") else box.target
            cluster.stop()
            time.sleep(2)
            cluster.start()
        elif kind == "target-pause":
            box.target.signal(signal.SIGSTOP)
            time.sleep(PAUSE_S)
            box.target.signal(signal.SIGCONT)
        elif "-partition-" in kind:
            ports = netfault.client_ports(box.source if kind.startswith("source") else box.target)
            with netfault.Partition(ports):
                time.sleep(PARTITION_S[kind.rsplit("-", 1)[1]])
            assert not netfault.active(ports), "iptables rules left behind"
        elif kind in SLOW_NETWORK_FAULT_KINDS:
            assert self.wan is not None
            self.wan.slow(WAN_DELAY_S, WAN_RATE)
            try:
                if kind == "target-slow-restart":
                    proc.sigkill()
                    proc = self._replicator()
                    self._await_ready(proc)
                before, held = self._committed(), time.monotonic() + SLOW_S
                wait_until(lambda: self._committed() > before and time.monotonic() >= held, 600,
                           "progress over the slow network", proc, interval=2.0)
                direct = _direct_connections(proc, box.target)
                assert not direct, f"the replicator bypassed the slow link: {direct}"
            finally:
                self.wan.fast()
            self._note(f"  over the slow link: {sum(p.bytes for p in self.wan.proxies)} bytes, "
                       f"{sum(p.connections for p in self.wan.proxies)} connections so far")
        elif kind.endswith("-isolate"):
            cluster = box.source if kind.startswith("source") else box.target
            node_id = (roles.group_coordinator(cluster.bootstrap, self.group) if "coordinator" in kind
                       else roles.partition_leader(cluster.bootstrap, self.topic, 0))
            node = cluster.nodes[node_id - 1]
            self._note(f"  isolating node {node.node_id} ({node.host})")
            assert all(netfault.carries_its_group(n) for n in cluster.nodes), \
                "a node's JVM lacks its isolation group (start the sandbox as root)"
            with netfault.Isolation(cluster.nodes, node):
                time.sleep(ISOLATE_S)
            assert not netfault.isolation_active([n.port for n in cluster.nodes]), "iptables rules left behind"
        elif kind.endswith("-rolling-restart"):
            for node in (box.source if kind.startswith("source") else box.target).nodes:
                node.stop()
                _restart(node)
        elif kind in self._ROLES:
            cluster = box.source if kind.startswith("source") else box.target
            node_id = self._ROLES[kind](self)
            self._note(f"  {kind.rsplit('-', 1)[0]} is node {node_id}")
            node = cluster.nodes[node_id - 1]
            if kind.endswith("-stop"):
                node.stop()
            else:
                node.kill()
            time.sleep(2)
            _restart(node)
        else:
            raise ValueError(kind)
        return proc

    _ROLES = {
        "source-leader-kill": lambda self: roles.partition_leader(self.sandbox.source.bootstrap, self.topic, 0),
        "target-leader-kill": lambda self: roles.partition_leader(self.sandbox.target.bootstrap, self.topic, 0),
        "target-leader-stop": lambda self: roles.partition_leader(self.sandbox.target.bootstrap, self.topic, 0),
        "target-txn-coordinator-kill": lambda self: roles.transaction_coordinator(
            self.sandbox.target.bootstrap, f"{self.name}-shard-"),
        "target-group-coordinator-kill": lambda self: roles.group_coordinator(self.sandbox.target.bootstrap,
                                                                              self.group),
        "source-txn-coordinator-kill": lambda self: roles.transaction_coordinator(
            self.sandbox.source.bootstrap, f"trickle-{self.tag}"),
    }

    # -- the run -----------------------------------------------------------------------------
    def run(self) -> ChaosResult:
        started = time.monotonic()
        box = self.sandbox
        if any("-partition-" in k for k in self.faults):
            netfault.sweep(netfault.client_ports(box.source) + netfault.client_ports(box.target))
        if any(k.endswith("-isolate") for k in self.faults):
            netfault.sweep_isolation(netfault.client_ports(box.source) + netfault.client_ports(box.target))
        create_topic(box.source.bootstrap, self.input, self.partitions)
        create_topic(box.source.bootstrap, self.topic, self.partitions)
        partition_of = verifiable_produce(box.source.bootstrap, self.input, self.records,
                                          self.workdir / "verifiable-producer.log")
        result = ChaosResult(self.records, vp_acked=sum(1 for p in partition_of if p >= 0))
        self._note(f"VerifiableProducer: {result.vp_acked} of {self.records} acknowledged")
        copiers = Copiers(box.source.bootstrap, self.input, self.topic, self.partitions, self.workdir, self.tag)
        trickle = Trickle(box.source.bootstrap, self.topic, self.partitions, self.truth, self.tag)
        trickle.start()
        if any(k in SLOW_NETWORK_FAULT_KINDS for k in self.faults):
            self.wan = WanLink(box.target).__enter__()
        proc = self._replicator()
        reader = None
        try:
            self._await_ready(proc)
            create_deadline = time.monotonic() + 120
            while self._committed() <= 0 and time.monotonic() < create_deadline:
                time.sleep(1)  # the target topic exists once the first transaction committed
            reader = ConcurrentReader(box.target.bootstrap, self.topic, self.partitions, partition_of)
            reader.start()
            for kind in self.faults:
                if kind.startswith("source"):
                    # The Java copiers are the ground truth's writers: they must not die under the test.
                    wait_until(copiers.done, 1800, "the transactional copiers to finish", interval=2.0)
                before = self._committed()
                self._note(f"fault {kind} (group at {before})")
                proc = self._inject(kind, proc)
                result.faults.append(kind)
                self._await_progress(before, proc, kind)
            wait_until(copiers.done, 1800, "the transactional copiers to finish", interval=2.0)
            trickle.stop.set()
            trickle.join(300)
            assert trickle.error is None, f"trickle writer failed: {trickle.error!r}"
            ends = settled_end_offsets(box.source.bootstrap, self.topic, self.partitions)
            want = {(self.topic, p): ends[p] for p in range(self.partitions)}
            try:
                wait_until(lambda: fake_group_offsets(box.target.bootstrap, self.group) == want, 900,
                           "the fake group to reach the source end", proc, interval=2.0)
            except AssertionError as e:
                # What differed, read again now: a stale read, a moved source end and a group short of
                # it are three different failures.
                seen = {}
                with contextlib.suppress(Exception):
                    seen = fake_group_offsets(box.target.bootstrap, self.group)
                now = {}
                with contextlib.suppress(Exception):
                    now = end_offsets(box.source.bootstrap, self.topic, self.partitions)
                raise AssertionError(f"{e}\nfake group now: {sorted(seen.items())}\nsource end when the "
                                     f"writers were done: {sorted(want.items())}\nsource end now: "
                                     f"{sorted(now.items())}") from None
            assert proc.sigterm(timeout=180) == 0
            target_ends = end_offsets(box.target.bootstrap, self.topic, self.partitions)
            try:
                wait_until(lambda: self._reader_caught_up(reader, target_ends), 300,
                           "the concurrent reader to catch up")
            except AssertionError as e:
                raise AssertionError(f"{e}\n{self._reader_state(reader, target_ends)}") from None
        finally:
            if proc.running():
                proc.sigkill()
            copiers.kill()
            trickle.stop.set()
            if reader is not None:
                reader.stop.set()
                reader.join(60)
            if self.wan is not None:
                self.wan.__exit__()
        result.group_equals_source_end = fake_group_offsets(box.target.bootstrap, self.group) == want
        verify = subprocess.run([str(BIN), "verify", "--source-bootstrap-servers", box.source.bootstrap,
                                 "--target-bootstrap-servers", box.target.bootstrap, "--topics", self.topic,
                                 "--name", self.name, "--quiesced", "--require-caught-up", "--ground-truth",
                                 str(self.truth), "--ground-truth", str(self.workdir / "verifiable-producer.log"),
                                 "--format", "json", "--no-progress"],
                                capture_output=True, text=True, timeout=1800)
        (self.workdir / "verify.json").write_text(verify.stdout + verify.stderr)
        result.verify_exit = verify.returncode
        result.verify = json.loads(verify.stdout) if verify.stdout.strip() else {"stderr": verify.stderr}
        if verify.returncode != 0 and "partitions" in result.verify:
            with contextlib.suppress(Exception):  # diagnostics only: the verdict stands without them
                for path in forensics.dump(box.source.bootstrap, box.target.bootstrap, self.name, result.verify,
                                           self.workdir):
                    self._note(f"forensics: {path}")
        result.reader_records = reader.records
        result.reader_out_of_order = reader.out_of_order
        result.reader_errors = reader.errors
        result.reader_restarts = reader.restarts
        result.vp_values_seen = sum(n for s, n in reader.seen.items() if s.startswith("vp-"))
        result.trickle_committed, result.trickle_uncertain = trickle.committed, len(trickle.uncertain)
        result.trickle_seen = reader.seen["trickle"]
        committed_or_uncertain = self._trickle_allowed(trickle)
        result.trickle_aborted_seen = len(reader.seen_trickle - committed_or_uncertain)
        result.seconds = time.monotonic() - started
        self._note(f"result: {json.dumps({k: v for k, v in result.__dict__.items() if k != 'verify'})}")
        return result

    def _trickle_allowed(self, trickle: Trickle) -> set[int]:
        allowed = set(trickle.uncertain)
        for line in self.truth.read_text().splitlines():
            row = json.loads(line)
            if "committed" in row:
                allowed.add(int(row["committed"][2:]))
        return allowed
