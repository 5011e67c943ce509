"""The snapshot generator runs the live adapter against moto; same inputs, same bytes.

One build per run (about 4 s of CPU, most of it moto serializing DescribeInstanceTypes): its bytes must equal the
bundled snapshot's, which `make catalog` wrote in another process at another time. A generator whose output varied
between runs fails that (a set's order under another hash seed, a timestamp); a second build in this process, as
the test once made, shares the hash seed and so could catch only the timestamp."""

from __future__ import annotations

from pathlib import Path

from nodeflow.catalog.offline import OfflineCatalog, snapshot_path
from tools.gen_catalog import build_snapshot


def test_generator_is_deterministic_and_matches_the_bundled_snapshot(tmp_path: Path) -> None:
    first = build_snapshot(tmp_path / "a" / "catalog-us-east-1.json.gz")
    assert first.types_written >= 600
    assert first.types_written + len(first.dropped_unpriced) == first.types_described
    assert "mac2.metal" in first.dropped_unpriced  # no shared-tenancy Linux price
    # `make catalog` has been run since the inputs last changed (and the output does not vary between runs).
    assert first.path.read_bytes() == snapshot_path("us-east-1").read_bytes()
    assert first.size_bytes < 1_500_000

    data = OfflineCatalog(tmp_path / "a").load("us-east-1")
    assert data.spot_prices_estimated
    assert len(data.infos) == first.types_written
