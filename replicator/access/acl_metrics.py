"""Prometheus metrics of ACL sync (`replicator.access.acl_sync`), in the job's registry."""

from __future__ import annotations

import time

from prometheus_client import CollectorRegistry, Counter, Gauge


class AclSyncMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.enabled = Gauge("replicator_acl_sync_enabled", "1 when ACL sync runs (the principals may describe "
                             "and create ACLs), 0 when it was skipped.", registry=registry)
        self.acls = Gauge("replicator_acl_sync_acls", "ACLs the sync holds on the target, by kind: copy (READ/"
                          "DESCRIBE it created), staged (producer rules promotion applies), promoted.", ("kind",),
                          registry=registry)
        self.created = Counter("replicator_acl_sync_created_total", "ACLs the sync created on the target.",
                               registry=registry)
        self.deleted = Counter("replicator_acl_sync_deleted_total", "ACLs the sync deleted on the target (only "
                               "ones it had created, whose source rule is gone).", registry=registry)
        self.failures = Counter("replicator_acl_sync_failures_total", "ACL sync rounds that failed (retried at "
                                "the next topic discovery).", registry=registry)
        self.last_sync = Gauge("replicator_acl_sync_timestamp_seconds", "Unix time of the last successful ACL "
                               "sync round.", registry=registry)

    def on_round(self, plan, entries: dict[str, set]) -> None:
        self.created.inc(len(plan.create))
        self.deleted.inc(len(plan.delete))
        for kind, bindings in entries.items():
            self.acls.labels(kind).set(len(bindings))
        self.last_sync.set(time.time())
