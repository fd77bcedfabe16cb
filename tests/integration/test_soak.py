"""`make soak`: an hour of steady replication with periodic faults; tests/chaos/soak.py says what is
sampled and the bounds checked. docs/reliability.md ("make soak") records the current result.

    REPLICATOR_SOAK_MINUTES (60)  REPLICATOR_SOAK_RATE (records/s, 500)  REPLICATOR_SOAK_FAULT_EVERY_S (300)
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.chaos.soak import SoakRun

MINUTES = float(os.environ.get("REPLICATOR_SOAK_MINUTES", "60"))
RATE = int(os.environ.get("REPLICATOR_SOAK_RATE", "500"))
FAULT_EVERY_S = float(os.environ.get("REPLICATOR_SOAK_FAULT_EVERY_S", "300"))


@pytest.mark.soak
def test_soak(sandbox, unique, tmp_path):
    out = os.environ.get("REPLICATOR_SOAK_OUT")
    workdir = Path(out) / f"soak-{unique}" if out else tmp_path
    workdir.mkdir(parents=True, exist_ok=True)
    result = SoakRun(sandbox, workdir, unique, MINUTES, RATE, FAULT_EVERY_S).soak()

    report = result.verify
    assert result.verify_exit == 0 and report.get("ok") is True, report.get("violations", report)
    for kind in ("duplicates", "missing", "extra", "reordered", "aborted_visible", "lag"):
        assert report["totals"][kind] == 0, (kind, report["totals"])
    assert report["totals"]["source_records"] == report["totals"]["target_records"] > 0
    assert report["hanging_transactions"] == [] and report["open_transactions"] == []
    # Each fault waits for recovery before the next interval starts, so a slow box sees fewer.
    assert len(result.faults) >= max(1, int(MINUTES * 60 // FAULT_EVERY_S) // 2), result.faults
    assert result.growth and all(g["ok"] for g in result.growth.values()), result.growth
    assert result.lag_violations == [], result.lag_violations
