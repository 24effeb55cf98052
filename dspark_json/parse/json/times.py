"""ISO-8601 text -> Arrow timestamps and dates, vectorised for the common shapes.

The scan converts the shapes models write almost always (``YYYY-MM-DD``, and
``YYYY-MM-DD[T ]HH:MM:SS[.fff|.ffffff][Z|+HH:MM|-HH:MM]``) exactly as
``datetime.fromisoformat`` does (no zone = UTC). Anything else is left to
:func:`dspark_json.response.convert.parse_timestamp` / ``parse_date``, value by value.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dspark_json.buffers.bytes import (
    COLON,
    DOT,
    MINUS,
    NINE,
    PLUS,
    SPACE,
    UPPER_T,
    UPPER_Z,
    ZERO,
)
from dspark_json.buffers.compiled import kernel, leaf

__all__ = ["scan_dates", "scan_timestamps"]

_DAY_US = 86_400_000_000
#: What a day count is where there is no date (a date that does not exist, or another shape).
_NO_DATE = -(10**9)


@leaf
def _digits(data: Any, pos: int, count: int) -> int:
    value = 0
    for i in range(pos, pos + count):
        c = data[i]
        if c < ZERO or c > NINE:
            return -1
        value = value * 10 + (c - ZERO)
    return value


@leaf
def _days(year: int, month: int, day: int) -> int:
    """Days since 1970-01-01 of a valid proleptic Gregorian date (Hinnant's algorithm);
    :data:`_NO_DATE` when the date does not exist."""
    if month < 1 or month > 12 or day < 1 or year < 1:
        return _NO_DATE
    leap = (year % 4 == 0 and year % 100 != 0) or year % 400 == 0
    length = 31
    if month == 2:
        length = 29 if leap else 28
    elif month == 4 or month == 6 or month == 9 or month == 11:
        length = 30
    if day > length:
        return _NO_DATE
    y = year - 1 if month <= 2 else year
    era = y // 400
    yoe = y - era * 400
    mp = month + 9 if month <= 2 else month - 3
    doy = (153 * mp + 2) // 5 + day - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468


@leaf
def _date_at(data: Any, pos: int) -> int:
    """``YYYY-MM-DD`` at ``pos``: days since the epoch, or :data:`_NO_DATE`."""
    if data[pos + 4] != MINUS or data[pos + 7] != MINUS:
        return _NO_DATE
    year, month, day = _digits(data, pos, 4), _digits(data, pos + 5, 2), _digits(data, pos + 8, 2)
    if year < 0 or month < 0 or day < 0:
        return _NO_DATE
    return _days(year, month, day)


@kernel
def scan_dates(offsets: Any, data: Any, valid: Any) -> tuple[Any, Any]:
    """Per text: ``(days since the epoch, converted)``; not converted = null or another shape."""
    n = len(offsets) - 1
    out = np.zeros(n, np.int32)
    done = np.zeros(n, np.bool_)
    for i in range(n):
        start = offsets[i]
        if valid[i] and offsets[i + 1] - start == 10:
            days = _date_at(data, start)
            if days != _NO_DATE:
                out[i] = days
                done[i] = True
    return out, done


@leaf
def _timestamp(data: Any, start: int, end: int) -> tuple[int, bool]:
    if end - start < 19:
        return 0, False
    days = _date_at(data, start)
    sep = data[start + 10]
    if days == _NO_DATE or (sep != UPPER_T and sep != SPACE):
        return 0, False
    if data[start + 13] != COLON or data[start + 16] != COLON:
        return 0, False
    hour = _digits(data, start + 11, 2)
    minute = _digits(data, start + 14, 2)
    second = _digits(data, start + 17, 2)
    if hour < 0 or hour > 23 or minute < 0 or minute > 59 or second < 0 or second > 59:
        return 0, False
    pos = start + 19
    micros = 0
    if pos < end and data[pos] == DOT:  # a fraction of 3 or 6 digits
        if pos + 7 <= end and _digits(data, pos + 1, 6) >= 0:
            micros = _digits(data, pos + 1, 6)
            pos += 7
        elif pos + 4 <= end and _digits(data, pos + 1, 3) >= 0:
            micros = _digits(data, pos + 1, 3) * 1000
            pos += 4
        else:
            return 0, False
        if pos < end and ZERO <= data[pos] <= NINE:
            return 0, False
    offset = 0
    if pos < end:
        c = data[pos]
        if c == UPPER_Z and pos + 1 == end:
            pos += 1
        elif (c == PLUS or c == MINUS) and pos + 6 == end and data[pos + 3] == COLON:
            oh, om = _digits(data, pos + 1, 2), _digits(data, pos + 4, 2)
            if oh < 0 or oh > 23 or om < 0 or om > 59:
                return 0, False
            offset = (oh * 60 + om) * 60_000_000
            if c == MINUS:
                offset = -offset
            pos += 6
        else:
            return 0, False
    value = days * _DAY_US + ((hour * 60 + minute) * 60 + second) * 1_000_000 + micros - offset
    return value, True


@kernel
def scan_timestamps(offsets: Any, data: Any, valid: Any) -> tuple[Any, Any]:
    """Per text: ``(microseconds since the epoch, UTC; converted)``."""
    n = len(offsets) - 1
    out = np.zeros(n, np.int64)
    done = np.zeros(n, np.bool_)
    for i in range(n):
        if valid[i]:
            out[i], done[i] = _timestamp(data, offsets[i], offsets[i + 1])
    return out, done
