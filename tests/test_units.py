from decimal import Decimal

import pytest

from operator_client.spec.quantities import parse_duration, parse_quantity
from operator_client.spec.units import Every


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90s", 90), ("30m", 1800), ("72h", 259200), ("1h30m", 5400), ("2d", 172800), ("0s", 0)],
)
def test_durations(text: str, seconds: int) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "30", "m", "1.5h", "-5m", "30 minutes", "1H", "5w"])
def test_bad_durations_say_what_is_valid(text: str) -> None:
    with pytest.raises(ValueError, match=r"is not a duration.*'30m'"):
        parse_duration(text)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("8", Decimal(8)),
        ("500m", Decimal("0.5")),
        ("64Gi", Decimal(64 * 2**30)),
        ("512Mi", Decimal(512 * 2**20)),
        ("1G", Decimal(10**9)),
        ("1.5", Decimal("1.5")),
        ("1e3", Decimal(1000)),
        (".5Ki", Decimal(512)),
    ],
)
def test_quantities(text: str, value: Decimal) -> None:
    assert parse_quantity(text) == value


@pytest.mark.parametrize("text", ["", "Gi", "64GB", "64 Gi", "-1", "1.2.3", "0x10", "1Gib"])
def test_bad_quantities_say_what_is_valid(text: str) -> None:
    with pytest.raises(ValueError, match=r"is not a Kubernetes quantity.*'64Gi'"):
        parse_quantity(text)


@pytest.mark.parametrize(
    ("text", "seconds", "steps"),
    [("30m", 1800, None), ("500 steps", None, 500), ("1step", None, 1), ("100steps", None, 100)],
)
def test_checkpoint_intervals(text: str, seconds: int | None, steps: int | None) -> None:
    every = Every.parse(text)
    assert (every.seconds, every.steps, every.text) == (seconds, steps, text)


@pytest.mark.parametrize("text", ["0 steps", "0m", "500", "steps", "5 epochs", "-3 steps"])
def test_bad_checkpoint_intervals(text: str) -> None:
    with pytest.raises(ValueError, match="not a checkpoint interval"):
        Every.parse(text)
