"""The snapshot generator runs the live adapter against moto; same inputs, same bytes."""

from __future__ import annotations

from pathlib import Path

from nodeflow.catalog.offline import OfflineCatalog, snapshot_path
from tools.gen_catalog import build_snapshot


def test_generator_is_deterministic_and_matches_the_bundled_snapshot(tmp_path: Path) -> None:
    first = build_snapshot(tmp_path / "a" / "catalog-us-east-1.json.gz")
    second = build_snapshot(tmp_path / "b" / "catalog-us-east-1.json.gz")
    assert first.path.read_bytes() == second.path.read_bytes()
    assert first.types_written >= 600
    assert first.types_written + len(first.dropped_unpriced) == first.types_described
    assert "mac2.metal" in first.dropped_unpriced  # no shared-tenancy Linux price
    # `make catalog` has been run since the inputs last changed.
    assert first.path.read_bytes() == snapshot_path("us-east-1").read_bytes()
    assert first.size_bytes < 1_500_000

    data = OfflineCatalog(tmp_path / "a").load("us-east-1")
    assert data.spot_prices_estimated
    assert len(data.infos) == first.types_written
