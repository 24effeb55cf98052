"""ISO-8601 text -> Arrow timestamps and dates, vectorised for the common shapes.

The scan converts the shapes models write almost always (``YYYY-MM-DD``, and
``YYYY-MM-DD[T ]HH:MM:SS[.fff|.ffffff][Z|+HH:MM|-HH:MM]``) exactly as
``datetime.fromisoformat`` does (no zone = UTC). Anything else is left to
:func:`dspark_json.parse.convert.parse_timestamp` / ``parse_date``, value by value.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dspark_json.parse.json.compiled import kernel, leaf

__all__ = ["scan_dates", "scan_timestamps"]

_DAY_US = 86_400_000_000


@leaf
def _digits(data: Any, pos: int, count: int) -> int:
    value = 0
    for i in range(pos, pos + count):
        c = data[i]
        if c < 48 or c > 57:
            return -1
        value = value * 10 + (c - 48)
    return value


@leaf
def _days(year: int, month: int, day: int) -> int:
    """Days since 1970-01-01 of a valid proleptic Gregorian date (Hinnant's algorithm);
    -10**9 when the date does not exist."""
    if month < 1 or month > 12 or day < 1 or year < 1:
        return -(10**9)
    leap = (year % 4 == 0 and year % 100 != 0) or year % 400 == 0
    length = 31
    if month == 2:
        length = 29 if leap else 28
    elif month == 4 or month == 6 or month == 9 or month == 11:
        length = 30
    if day > length:
        return -(10**9)
    y = year - 1 if month <= 2 else year
    era = y // 400
    yoe = y - era * 400
    mp = month + 9 if month <= 2 else month - 3
    doy = (153 * mp + 2) // 5 + day - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468


@leaf
def _date_at(data: Any, pos: int) -> int:
    """``YYYY-MM-DD`` at ``pos``: days since the epoch, or -10**9."""
    if data[pos + 4] != 45 or data[pos + 7] != 45:
        return -(10**9)
    year, month, day = _digits(data, pos, 4), _digits(data, pos + 5, 2), _digits(data, pos + 8, 2)
    if year < 0 or month < 0 or day < 0:
        return -(10**9)
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
            if days != -(10**9):
                out[i] = days
                done[i] = True
    return out, done


@leaf
def _timestamp(data: Any, start: int, end: int) -> tuple[int, bool]:
    if end - start < 19:
        return 0, False
    days = _date_at(data, start)
    sep = data[start + 10]
    if days == -(10**9) or (sep != 84 and sep != 32):  # 'T' or ' '
        return 0, False
    if data[start + 13] != 58 or data[start + 16] != 58:
        return 0, False
    hour = _digits(data, start + 11, 2)
    minute = _digits(data, start + 14, 2)
    second = _digits(data, start + 17, 2)
    if hour < 0 or hour > 23 or minute < 0 or minute > 59 or second < 0 or second > 59:
        return 0, False
    pos = start + 19
    micros = 0
    if pos < end and data[pos] == 46:  # a fraction of 3 or 6 digits
        if pos + 7 <= end and _digits(data, pos + 1, 6) >= 0:
            micros = _digits(data, pos + 1, 6)
            pos += 7
        elif pos + 4 <= end and _digits(data, pos + 1, 3) >= 0:
            micros = _digits(data, pos + 1, 3) * 1000
            pos += 4
        else:
            return 0, False
        if pos < end and 48 <= data[pos] <= 57:
            return 0, False
    offset = 0
    if pos < end:
        c = data[pos]
        if c == 90 and pos + 1 == end:  # 'Z'
            pos += 1
        elif (c == 43 or c == 45) and pos + 6 == end and data[pos + 3] == 58:
            oh, om = _digits(data, pos + 1, 2), _digits(data, pos + 4, 2)
            if oh < 0 or oh > 23 or om < 0 or om > 59:
                return 0, False
            offset = (oh * 60 + om) * 60_000_000
            if c == 45:
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
