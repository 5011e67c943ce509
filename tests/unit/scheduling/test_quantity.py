from decimal import Decimal

import pytest

from nodeflow.api.quantity import QuantityError, format_milli, parse_quantity, to_milli


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("500m", Decimal("0.5")),
        ("1.5Gi", Decimal(1536 * 2**20)),
        ("1e3", Decimal(1000)),
        ("2k", Decimal(2000)),
        ("1E-3", Decimal("0.001")),
        ("100Mi", Decimal(100 * 2**20)),
        ("0.1", Decimal("0.1")),
        (".5", Decimal("0.5")),
        ("3", Decimal(3)),
        ("1Ti", Decimal(2**40)),
        ("5M", Decimal(5_000_000)),
        ("250u", Decimal("0.00025")),
    ],
)
def test_parse(text: str, expected: Decimal) -> None:
    assert parse_quantity(text) == expected


@pytest.mark.parametrize("bad", ["", "abc", "1.5.5", "1Kb", "Gi", "1 Gi", "1ki", "--1"])
def test_parse_rejects_with_the_value_named(bad: str) -> None:
    with pytest.raises(QuantityError, match="quantity"):
        parse_quantity(bad)


def test_numbers_and_milli_rounding() -> None:
    assert to_milli(2) == 2000
    assert to_milli(0.25) == 250
    assert to_milli("1n") == 1  # rounds up like Kubernetes' MilliValue
    assert to_milli("8Gi") == 8 * 2**30 * 1000
    with pytest.raises(QuantityError):
        parse_quantity(True)


@pytest.mark.parametrize(
    ("milli", "resource", "text"),
    [
        (1500, "cpu", "1500m"),
        (2000, "cpu", "2"),
        (1024000, "cpu", "1024"),
        (8 * 2**30 * 1000, "memory", "8Gi"),
        (1536 * 2**20 * 1000, "memory", "1536Mi"),
        (3000, "pods", "3"),
        (1000 * 1000, "memory", "1000"),
    ],
)
def test_format(milli: int, resource: str, text: str) -> None:
    assert format_milli(milli, resource) == text
    assert to_milli(text) == milli
