"""Sizes as people write them, parsed and shown one way everywhere."""

from __future__ import annotations

import pytest

from rayform.errors import InvalidInput
from rayform.sizes import format_size, parse_size


@pytest.mark.parametrize(("text", "expected"), [
    ("64MiB", 64 << 20), ("64MB", 64_000_000), ("64M", 64_000_000), ("1.5 GB", 1_500_000_000),
    ("200gb", 200_000_000_000), ("512KiB", 512 << 10), ("1000000", 1_000_000), ("12B", 12), (4096, 4096),
])
def test_parse(text, expected):
    assert parse_size(text) == expected


@pytest.mark.parametrize("bad", ["", "lots", "-5MB", "5XB", "1e6", True, -1])
def test_a_bad_size_is_one_error_naming_it(bad):
    with pytest.raises(InvalidInput, match="cache limit"):
        parse_size(bad, "cache limit")


def test_format():
    assert [format_size(n) for n in (12, 2048, 3 << 30)] == ["12 B", "2.0 KiB", "3.0 GiB"]
