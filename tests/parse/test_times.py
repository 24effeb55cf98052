import random
import re
from datetime import UTC, date, datetime

import pytest

from dspark_json.buffers.arrow import string_buffers, to_string_array
from dspark_json.parse.json.times import scan_dates, scan_timestamps

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
#: The shapes the scan converts itself (others go value by value to fromisoformat).
SHAPE = re.compile(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(\.\d{3}|\.\d{6})?(Z|[+-]\d{2}:\d{2})?")


def python_micros(text):
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        return None
    value = value if value.tzinfo else value.replace(tzinfo=UTC)
    return (
        (value - EPOCH).days * 86_400_000_000
        + (value - EPOCH).seconds * 1_000_000
        + (value - EPOCH).microseconds
    )


def texts():
    rng = random.Random(3)
    fixed = [
        "2026-11-29T10:00:00",
        "2026-11-29 10:00:00Z",
        "2024-02-29T23:59:59.999999+05:30",
        "2023-02-29T00:00:00",
        "0001-01-01T00:00:00",
        "9999-12-31T23:59:59-23:59",
        "2026-13-01T00:00:00",
        "2026-11-29T24:00:00",
        "2026-11-29T10:00:00.5",
        "2026-11-29T10:00:00.1234567",
        "2026-11-29T10:00",
        "2026-11-29",
        "20261129T100000",
        "2026-11-29T10:00:00+0530",
        "1969-12-31T23:59:59.001Z",
    ]
    for _ in range(2000):
        y, mo, d = rng.randint(1, 9999), rng.randint(0, 13), rng.randint(0, 32)
        h, mi, s = rng.randint(0, 24), rng.randint(0, 60), rng.randint(0, 60)
        frac = rng.choice(["", ".123", ".123456", ".1"])
        zone = rng.choice(["", "Z", "+01:00", "-11:30", "+24:00"])
        fixed.append(
            f"{y:04d}-{mo:02d}-{d:02d}{rng.choice('T ')}{h:02d}:{mi:02d}:{s:02d}{frac}{zone}"
        )
    return fixed


def test_timestamps_match_fromisoformat_where_they_convert():
    values = texts()
    offsets, data, valid = string_buffers(to_string_array(values))
    micros, done = scan_timestamps(offsets, data, valid)
    converted = 0
    for text, value, ok in zip(values, micros.tolist(), done.tolist(), strict=True):
        expected = python_micros(text)
        if ok:
            converted += 1
            assert value == expected, text
        elif expected is not None:
            assert not SHAPE.fullmatch(text), f"{text} has a common shape but was not converted"
    assert converted > 500


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2024-02-29", date(2024, 2, 29)),
        ("2023-02-29", None),
        ("2026-1-01", None),
        ("0001-01-01", date(1, 1, 1)),
    ],
)
def test_dates(text, expected):
    offsets, data, valid = string_buffers(to_string_array([text]))
    days, done = scan_dates(offsets, data, valid)
    if expected is None:
        assert not done[0]
    else:
        assert done[0] and days[0] == (expected - date(1970, 1, 1)).days
