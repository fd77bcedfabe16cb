"""`replicator schemas sync`: the DR side's schema registry keeps the primary's schema ids.

Exit codes: 0 every subject version of the source registry is on the target under the same id; 1 a
registry cannot be reached or refused a write; 2 invalid usage; 3 a conflict (listed): some schema
cannot get the source's id on the target, so nothing after it was registered.
"""

from __future__ import annotations

import json
import logging
import signal
import sys
import threading

import click

from replicator import logs
from replicator.ops.schema_registry import Registry, RegistryError, SyncReport, registry_option, sync

OK, FAILURE, CONFLICT = 0, 1, 3
log = logging.getLogger("replicator.schemas")


@click.group()
def schemas() -> None:
    """Schema registries across the two clusters (records keep their schema ids when copied)."""


@schemas.command("sync")
@click.option("--from", "source", required=True, metavar="URL", callback=registry_option,
              help="Confluent-API base URL of the registry of the cluster being replicated from "
                   "(user:password@ for basic auth; ${env:NAME} or ${file:PATH} to read the URL from there).")
@click.option("--to", "target", required=True, metavar="URL", callback=registry_option,
              help="... of the registry the target cluster's consumers use (kept read-only for everyone else).")
@click.option("--interval", type=click.FloatRange(min=0.1), metavar="SECONDS",
              help="Sync again every SECONDS until SIGTERM/SIGINT (default: once).")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.option("--log-format", type=click.Choice(["text", "json"]), default="text", show_default=True)
def sync_command(source: Registry, target: Registry, interval: float | None, fmt: str, log_format: str) -> None:
    """Register on --to every subject version of --from that it lacks, each under the same schema id.

    Run it alongside `replicator run` (--interval), with the same direction: a consumer on the target
    then resolves every replicated record's schema id after a failover. After a failover, and before
    a failback, run it the other way round (--from the new primary's registry): schemas registered
    there come back with their ids, or are reported as conflicts, never silently dropped."""
    logs.configure(log_format)
    if interval is None:
        sys.exit(_round(source, target, fmt, quiet=False))
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    code = OK
    while not stop.is_set():
        code = _round(source, target, fmt, quiet=True)
        stop.wait(interval)
    sys.exit(code)


def _round(source: Registry, target: Registry, fmt: str, quiet: bool) -> int:
    """One sync; prints its report unless `quiet` (the loop logs instead) and returns the exit code."""
    try:
        report = sync(source, target)
    except RegistryError as e:
        log.error("schema sync failed: %s", e, extra={"event": "schema_sync_failed"})
        if not quiet:
            click.echo(f"error: {e}", err=True)
        return FAILURE
    for sv in report.copied:
        log.info("schema copied", extra={"event": "schema_copied", "subject": sv.subject, "version": sv.version,
                                         "schema_id": sv.id})
    for c in report.conflicts:
        log.error("schema sync conflict: %s", c, extra={"event": "schema_sync_conflict"})
    if not quiet:
        click.echo(json.dumps(report.to_dict(), indent=2) if fmt == "json" else _summary(report))
    return OK if report.ok else CONFLICT


def _summary(report: SyncReport) -> str:
    lines = [f"{report.source} -> {report.target}: {len(report.copied)} subject versions copied, "
             f"{report.already} already there with the same id"]
    lines += [f"  copied {sv.subject} v{sv.version} as id {sv.id}" for sv in report.copied]
    lines += [f"CONFLICT {c}" for c in report.conflicts]
    return "\n".join(lines)


if __name__ == "__main__":  # until the top-level CLI lists `schemas`
    schemas()
