"""The CLI's subcommands, one module each, imported by `replicator.cli` only when used (`options`
holds what they share)."""
