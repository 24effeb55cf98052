"""Arrow plumbing held to pyarrow's own operations: :func:`with_null_rows` is ``take`` with
null indices, for every type the parser builds, sliced or not, with nulls at every level."""

import random

import numpy as np
import pyarrow as pa
import pytest

from dspark_json.buffers.arrow import with_null_rows

_TYPE = pa.struct(
    [
        ("s", pa.string()),
        ("d", pa.float64()),
        ("t", pa.timestamp("us", tz="UTC")),
        ("b", pa.bool_()),
        ("l", pa.list_(pa.struct([("n", pa.large_string()), ("q", pa.list_(pa.string()))]))),
        ("m", pa.map_(pa.string(), pa.int64())),
        ("e", pa.struct([("x", pa.int64())])),
    ]
)


def _value(rng: random.Random, dtype: pa.DataType):
    if rng.random() < 0.15:
        return None
    if pa.types.is_struct(dtype):
        return {f.name: _value(rng, f.type) for f in dtype}
    if pa.types.is_map(dtype):
        return [(f"k{i}", i) for i in range(rng.randrange(3))]
    if pa.types.is_list(dtype):
        return [_value(rng, dtype.value_type) for _ in range(rng.randrange(4))]
    if pa.types.is_string(dtype) or pa.types.is_large_string(dtype):
        return "é" * rng.randrange(5)
    if pa.types.is_boolean(dtype):
        return rng.random() < 0.5
    if pa.types.is_timestamp(dtype):
        return rng.randrange(10**12)
    if pa.types.is_integer(dtype):
        return rng.randrange(100)
    return rng.random()


@pytest.mark.parametrize("seed", range(20))
def test_null_rows_put_in_are_take_with_null_indices(seed):
    rng = random.Random(seed)
    rows = [_value(rng, _TYPE) for _ in range(rng.randrange(0, 60))]
    array = pa.array(rows, _TYPE)
    if rng.random() < 0.5 and len(array) > 2:  # a slice: offsets that do not start at 0
        lo = rng.randrange(len(array) // 2)
        array = array.slice(lo, rng.randrange(len(array) - lo))
    present = np.zeros(len(array) + rng.randrange(0, 20), np.bool_)
    present[rng.sample(range(len(present)), len(array))] = True
    index = np.cumsum(present) - present
    expected = array.take(pa.array(index, mask=~present))
    got = with_null_rows(array, present)
    got.validate(full=True)
    assert got.equals(expected)
    assert got.to_pylist() == expected.to_pylist()
