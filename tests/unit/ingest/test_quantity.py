from fractions import Fraction

import pytest

from shoal.core.ingest.quantity import QuantityError, milli, parse_quantity, whole


@pytest.mark.parametrize(
    ("text", "expected"),
    [("100m", Fraction(1, 10)), ("1", 1), ("2Gi", 2 * 2**30), ("500M", 500 * 10**6), ("1e3", 1000),
     ("0.5", Fraction(1, 2)), (".5", Fraction(1, 2)), ("1.5e-3", Fraction(3, 2000)), ("64Ki", 65536), (3, 3), (2.5, Fraction(5, 2))],
)
def test_parse_quantity(text, expected):
    assert parse_quantity(text) == expected


@pytest.mark.parametrize("bad", ["abc", "1.5.2", "1Zi", "", "m", None, True, float("nan")])
def test_parse_quantity_rejects(bad):
    with pytest.raises(QuantityError):
        parse_quantity(bad)


def test_units_round_up():
    assert milli("100m") == 100
    assert milli("0.0001") == 1
    assert whole("1.5") == 2
    assert whole("2Gi") == 2147483648


@pytest.mark.parametrize("digits", ["9" * 5000, "0." + "0" * 4999 + "1", "1" * 101 + "Mi"])
def test_a_number_of_thousands_of_digits_is_a_quantity_error_not_a_crash(digits):
    with pytest.raises(QuantityError, match="more than 100 digits"):
        parse_quantity(digits)
