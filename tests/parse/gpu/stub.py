"""A stand-in for cuDF's reader, in tests only: the JSON lines the device gathered, read as
cuDF reads them with explicit dtypes: unknown keys pruned, a number in a float column as cuDF
rounds it, and a number in a string column as its own text (cuDF's ``str`` dtype keeps a
number's bytes: what the GPU backend's doubles rest on; benchmarks/gpu/cudf_numbers.py checks
it on a device). pyarrow's reader refuses a number in a string column, so the lines are read
with Python's json, numbers kept as their text."""

import json

import numpy as np
import pyarrow as pa

from dspark_json.parse.gpu.reader import CudfLines


class _Number(str):
    """A JSON number's text, as the line holds it."""


def _value(value, arrow_type):
    """A value Python's json read (numbers as :class:`_Number`) as cuDF gives it for
    ``arrow_type``."""
    if value is None:
        return None
    if pa.types.is_struct(arrow_type):
        return {f.name: _value(value.get(f.name), f.type) for f in arrow_type}
    if pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type):
        return [_value(v, arrow_type.value_type) for v in value]
    if isinstance(value, _Number):
        if pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type):
            return str(value)
        if pa.types.is_integer(arrow_type):
            return int(value)
        return _cudf_double(value)
    return value


def _cudf_double(text):
    """A number read into a float column as cuDF's ``parse_numeric`` reads it, by its source
    (``cpp/src/io/utilities/parsing_utils.cuh``): each fraction digit times a power of ten,
    then times ``exp10`` of the exponent, not the correctly rounded double (``0.3`` is
    ``0.30000000000000004``): why the GPU backend reads doubles as text."""
    mantissa, _, exponent = text.lower().partition("e")
    whole, _, fraction = mantissa.partition(".")
    negative = whole.startswith("-")
    value = float(int(whole.lstrip("-") or "0"))
    for k, digit in enumerate(fraction):
        value += int(digit) * 10.0 ** -(k + 1)
    if exponent:
        value *= 10.0 ** int(exponent)
    return -value if negative else value


class StandInLines(CudfLines):
    """cuDF's :meth:`read_lines` replaced by a reader that keeps a number's text in a string
    column, as cuDF's does (no cuDF here)."""

    def read_lines(self, lines, schema):
        chunk = np.asarray(lines.copy_to_host(), np.uint8).tobytes()
        rows = [
            json.loads(line, parse_float=_Number, parse_int=_Number)
            for line in chunk.decode("utf-8").split("\n")
            if line
        ]
        row_type = pa.struct(list(schema))
        return pa.Table.from_pylist([_value(r, row_type) for r in rows], schema=schema)
