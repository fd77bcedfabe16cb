"""The `replicator` command line."""

from __future__ import annotations

import json
import sys

import click

from replicator import __version__
from replicator.sandbox import DEFAULT_KAFKA_VERSION, Sandbox, kafka_jars


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
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
def sandbox_up(kafka_version: str, fresh: bool, tv0: str | None) -> None:
    """Start both clusters (idempotent); returns when both brokers serve requests."""
    box = Sandbox(version=kafka_version, source_tv=0 if tv0 == "source" else None,
                  target_tv=0 if tv0 == "target" else None)
    try:
        if tv0 and not fresh:
            getattr(box, tv0).stop()
            getattr(box, tv0).start(fresh=True)
        box.up(fresh=fresh)
    except RuntimeError as e:
        click.echo(f"error: {e}", err=True)
        sys.exit(1)
    click.echo(f"source bootstrap: {box.source.bootstrap}")
    click.echo(f"target bootstrap: {box.target.bootstrap}")


@sandbox.command("down")
def sandbox_down() -> None:
    """Stop the broker JVMs this sandbox started (by PID)."""
    Sandbox().down()
    click.echo("sandbox stopped")


@sandbox.command("status")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table")
def sandbox_status(fmt: str) -> None:
    """Which sandbox brokers run, their PIDs and bootstrap addresses."""
    status = Sandbox().status()
    if fmt == "json":
        click.echo(json.dumps(status, indent=2))
        return
    for name, s in status.items():
        state = "up" if s["pid"] and s["serving"] else ("starting" if s["pid"] else "down")
        click.echo(f"{name:7} {state:8} {s['bootstrap']:16} pid={s['pid'] or '-'}  {s['data_dir']}")
