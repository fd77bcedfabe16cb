"""`replicator acls`: the least Kafka ACLs for the configured replication, ready to apply."""

from __future__ import annotations

import json

import click

from replicator.commands.options import _load_config, connection_options


@click.command()
@connection_options
@click.option("--source-principal", help="Principal reading the source (default: the source's sasl.username "
                                         "or certificate subject, else User:replicator-source).")
@click.option("--target-principal", help="Principal writing the target (default: the target's sasl.username "
                                         "or certificate subject, else User:replicator-target).")
@click.option("--without", "without", multiple=True,
              type=click.Choice(["cluster-pin", "topic-creation", "config-sync", "group-sync", "promotion",
                                 "acl-sync"]),
              help="Leave out an optional feature's ACLs: the job then skips it and says so.")
@click.option("--format", "fmt", type=click.Choice(["kafka-acls", "json", "markdown"]), default="kafka-acls",
              show_default=True)
def acls(config_file: str | None, source_principal: str | None, target_principal: str | None,
         without: tuple[str, ...], fmt: str, **flags) -> None:
    """Print the least ACLs for the source reader and the target writer principals (for the configured
    name, topics, offsets group and transactional-id prefix)."""
    cfg = _load_config(config_file, flags)
    from replicator.access import acls as acls_mod

    src = (source_principal or acls_mod.principal_of(cfg.source) or acls_mod.DEFAULT_SOURCE_PRINCIPAL)
    dst = (target_principal or acls_mod.principal_of(cfg.target) or acls_mod.DEFAULT_TARGET_PRINCIPAL)
    skip = {"cluster-pin": acls_mod.CLUSTER_PIN, "topic-creation": acls_mod.CREATE, "config-sync": acls_mod.CONFIG_SYNC,
            "group-sync": acls_mod.GROUP_SYNC, "promotion": acls_mod.PROMOTION,
            "acl-sync": acls_mod.ACL_SYNC}
    entries = [a for a in acls_mod.acl_set(cfg, src, dst) if a.feature not in {skip[w] for w in without}]
    if fmt == "json":
        click.echo(json.dumps([a.to_dict() for a in entries], indent=2))
    elif fmt == "markdown":
        click.echo(acls_mod.markdown_table(entries))
    else:
        bootstrap = {"source": cfg.source_bootstrap_servers, "target": cfg.target_bootstrap_servers}
        click.echo("\n".join(acls_mod.kafka_acls_lines(entries, bootstrap)))
