"""The `replicator` command line."""

from __future__ import annotations

import json
import sys

import click

from replicator import __version__
from replicator.commands.options import _load_config, connection_options, run_options
from replicator.sandbox import DEFAULT_KAFKA_VERSION, Sandbox, kafka_jars


class _LazyGroup(click.Group):
    """Subcommands living in their own modules, imported only when used (keeps `--help` fast and
    each concept in its module)."""

    lazy = {
        "acls": "replicator.commands.acls:acls",
        "demo": "replicator.commands.demo:demo",
        "divergence": "replicator.commands.groups:divergence",
        "failback": "replicator.commands.groups:failback",
        "failover": "replicator.commands.groups:failover",
        "groups": "replicator.commands.groups:groups",
        "switchover": "replicator.commands.groups:switchover",
        "lag": "replicator.commands.lag:lag",
        "schemas": "replicator.commands.schemas:schemas",
        "topics": "replicator.commands.topics:topics",
        "verify": "replicator.commands.verify:verify",
    }
    # Resolved, never listed: `--help` imports what it lists, and this one imports PySpark.
    unlisted = {"spark-warmup": "replicator.engine.spark_warmup:spark_warmup"}

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted([*super().list_commands(ctx), *self.lazy])

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if target := self.lazy.get(name) or self.unlisted.get(name):
            import importlib

            module, attr = target.split(":")
            try:
                return getattr(importlib.import_module(module), attr)
            except ImportError:
                return None
        return super().get_command(ctx, name)


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="replicator")
def main() -> None:
    """Exactly-once cross-cluster Kafka replication as a Spark Structured Streaming job."""


@main.group()
def sandbox() -> None:
    """Two local single-node KRaft clusters: source at 127.0.0.1:19092, target at 127.0.0.1:29092."""


_version_opt = click.option("--kafka-version", default=DEFAULT_KAFKA_VERSION, show_default=True,
                            help="Apache Kafka release resolved from Maven Central.")


@sandbox.command("fetch")
@_version_opt
def sandbox_fetch(kafka_version: str) -> None:
    """Resolve the Kafka broker, tools and MirrorMaker 2 jars into the local cache."""
    click.echo(f"kafka jars: {kafka_jars(kafka_version, quiet=False)}")


@sandbox.command("up")
@_version_opt
@click.option("--fresh", is_flag=True, help="Wipe the data dirs first (new cluster ids).")
@click.option("--transaction-version-0", "tv0", type=click.Choice(["source", "target"]),
              help="Format this cluster with transaction.version=0 (pre-KIP-890 protocol). Implies a "
                   "fresh data dir for it.")
@click.option("--secure", type=click.Choice(["scram", "mtls"]), is_flag=False, flag_value="scram",
              help="TLS listeners, an authorizer that denies what no ACL allows, and SCRAM-SHA-512 users "
                   "(scram, the default) or client certificates (mtls). Plaintext without it.")
@click.option("--brokers", type=click.Choice(["1", "3"]), default="1", show_default=True,
              help="Brokers per cluster. 3: combined KRaft broker+controller nodes, each on its own loopback "
                   "address (127.0.0.2-4), replication factor 3 and min.insync.replicas 2 for data and "
                   "internal topics.")
def sandbox_up(kafka_version: str, fresh: bool, tv0: str | None, secure: str | None, brokers: str) -> None:
    """Start both clusters (idempotent); returns when every broker serves requests."""
    from replicator.sandbox.cluster import default_root, remembered_brokers

    try:
        if remembered_brokers(default_root()) != int(brokers):
            Sandbox(secure="remembered").down()  # the other layout's node 1 holds the same ports
        box = Sandbox(version=kafka_version, source_tv=0 if tv0 == "source" else None,
                      target_tv=0 if tv0 == "target" else None, secure=secure or "plaintext",
                      brokers=int(brokers))
        if tv0 and not fresh:
            getattr(box, tv0).stop()
            getattr(box, tv0).start(fresh=True)
        box.up(fresh=fresh)
    except RuntimeError as e:
        click.echo(f"error: {e}", err=True)
        sys.exit(1)
    click.echo(f"source bootstrap: {box.source.bootstrap}")
    click.echo(f"target bootstrap: {box.target.bootstrap}")
    if box.secure:
        click.echo("client properties: `replicator sandbox status`")


@sandbox.command("down")
def sandbox_down() -> None:
    """Stop the broker JVMs this sandbox started (by PID)."""
    Sandbox(secure="remembered").down()
    click.echo("sandbox stopped")


@sandbox.command("status")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table")
def sandbox_status(fmt: str) -> None:
    """Which sandbox brokers run, their PIDs, bootstrap addresses and, when secure, the client
    properties of the admin principal (passwords as `${file:...}` references, never values)."""
    status = Sandbox(secure="remembered").status()
    if fmt == "json":
        click.echo(json.dumps(status, indent=2))
        return
    for name, s in status.items():
        state = "up" if all(s["pids"]) and s["serving"] else ("starting" if s["pid"] else "down")
        pids = ",".join(str(p or "-") for p in s["pids"])
        click.echo(f"{name:7} {state:8} {s['bootstrap']:16} pid={pids}  {s['security']:9} "
                   f"{s['data_dir']}")
    for name, s in status.items():
        if s["client_properties"]:
            click.echo(f"\n{name}: (YAML for a replicator --config file; other principals: reader, writer, other)")
            click.echo(f"{name}_bootstrap_servers: {s['bootstrap']}\n{name}:")
            for key, value in s["client_properties"].items():
                click.echo(f"  {key}: {value!r}" if "$" in value else f"  {key}: {value}")


def crash_traces() -> None:
    """A crash inside native code (librdkafka's assertions abort the process) leaves every Python
    thread's stack in the job's log (stderr), so the call that crashed is known. A multi-broker chaos
    run lost its driver to `rd_kafka_enq_once_del_source_return: Assertion eonce->refcnt > 0` during
    the start-up checks with nothing else to go on (docs/reliability.md, "What the faults found")."""
    import faulthandler

    faulthandler.enable(all_threads=True)


@main.command()
@connection_options
@run_options
def run(config_file: str | None, **flags) -> None:
    """Replicate until SIGTERM/SIGINT. Exit 0 clean stop, 1 runtime failure or a stop that left something
    open, 2 invalid configuration.

    Every option is also settable in the --config file and as REPLICATOR_<OPTION> (flags win over the
    environment, which wins over the file): docs/configuration.md lists them all."""
    # First thing: a SIGTERM that arrives while Spark is still loading is a clean stop too, not a
    # kill by the default handler.
    import signal
    import threading

    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    crash_traces()
    cfg = _load_config(config_file, flags, echo_ignored=False)
    import logging

    from replicator import logs
    from replicator.commands.options import ignored_environment_lines
    from replicator.engine import service

    logs.configure(cfg.log_format, cfg.log_level)
    for line in ignored_environment_lines(cfg):
        logging.getLogger("replicator.config").warning("%s", line, extra={"event": "environment_ignored"})
    sys.exit(service.run(cfg, stop=stop))


if __name__ == "__main__":
    main()
