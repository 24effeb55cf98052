"""The GPU backend's doubles (parse/gpu/doubles.py): numbers' text converted on the device (numba's
CUDA simulator where there is no device) with the CPU's ``_double_of``, the rest by Python's
``float`` on the host, held to the CPU's conversion and to ``float`` bit for bit (``-0.0``
included) on edge numbers and on seeded random ones."""

import random

import numpy as np
import pyarrow as pa
import pytest

from dspark_json.parse.gpu.doubles import DeviceDoubles, NotANumber, text_schema
from dspark_json.parse.json.decode import _POW10, _double_of

EDGES = [
    "0", "-0", "0.0", "-0.0", "1", "-1", "0e0", "0E+0", "1e0",
    "1e22", "1e-22", "-1e22", "9e22", "1e23", "1e-23", "1.5e22", "1e+22", "1E-22",
    "123456789012345", "999999999999999", "1234567890123456", "9007199254740993",
    "9007199254740992", "0.123456789012345", "0.1234567890123456", "12345.6789012345",
    "0.1", "0.2", "0.3", "0.30000000000000004", "0.7", "0.87", "2.675", "1.005",
    "0.000001", "0.0000000000000000000001", "0.00000000000000000000001", "100e-24",
    "1.7976931348623157e308", "2.2250738585072014e-308", "5e-324", "1e-400", "4.9e-324",
    "123e-2", "-123.456e+3", "1e5", "2E-3", "0.5e1", "50e-1", "0.001e3",
    "10000000000000000000000", "12345678901234567890", "3.141592653589793",
    "1e10", "1e-10", "7.0e-10", "-2.5E+10",
]  # fmt: skip


def _texts(xs):
    return pa.array(xs, pa.string())


def _bits(values):
    return np.asarray(values, np.float64).view(np.uint64)


def _fast(text):
    """Whether the CPU's fast path converts ``text`` (else Python's float does)."""
    raw = np.frombuffer(text.encode(), np.uint8)
    return _double_of(raw, 0, len(raw), _POW10)[0]


def _cpu(text):
    """What the CPU's reader of events gives for ``text``: its fast path, else ``float``."""
    raw = np.frombuffer(text.encode(), np.uint8)
    fast, value = _double_of(raw, 0, len(raw), _POW10)
    return value if fast else float(text)


def _assert_as_float(texts, got):
    want = [float(t) for t in texts]
    assert _bits(got).tolist() == _bits(want).tolist(), [
        (t, g, w) for t, g, w in zip(texts, got, want, strict=True) if repr(g) != repr(w)
    ]
    assert _bits(got).tolist() == _bits([_cpu(t) for t in texts]).tolist()


def test_edge_numbers_are_the_cpu_s_and_python_s():
    doubles = DeviceDoubles()
    got = doubles.convert(_texts(EDGES)).to_pylist()
    _assert_as_float(EDGES, got)
    # The fast path (<= 15 digits, |exponent| <= 22) took every number but these:
    host = {t for t in EDGES if not _fast(t)}
    assert len(set(EDGES)) == len(EDGES) and doubles.host_values == len(host)
    assert "1e22" not in host and "1e-22" not in host and "0.87" not in host
    assert {"1e23", "1e-23", "1234567890123456", "5e-324"} <= host


def _random_number(rng):
    digits = "".join(rng.choice("0123456789") for _ in range(rng.randint(1, 18)))
    sign = rng.choice(["", "-"])
    whole = digits.lstrip("0") or "0"
    shape = rng.randrange(4)
    if shape == 0:
        return sign + whole
    point = rng.randint(0, len(digits))
    fraction = f"{whole[:point] or '0'}.{whole[point:] or '0'}"
    if shape == 1:
        return sign + fraction
    exponent = f"{rng.choice('eE')}{rng.choice(['', '+', '-'])}{rng.randint(0, 40)}"
    return sign + (fraction if shape == 2 else whole) + exponent


@pytest.mark.parametrize("seed", range(2))
def test_random_numbers_are_the_cpu_s_and_python_s(seed):
    rng = random.Random(seed)
    texts = [_random_number(rng) for _ in range(300)]
    texts += [repr(rng.random()) for _ in range(50)]  # 17 significant digits: the host's
    texts += [repr(round(rng.uniform(-1e3, 1e3), rng.randint(0, 6))) for _ in range(50)]
    got = DeviceDoubles().convert(_texts(texts)).to_pylist()
    _assert_as_float(texts, got)


def test_whitespace_around_a_number_is_skipped():
    texts = [" 0.87", "0.87 ", "\t-1e-3\r\n", " 1e23 "]
    got = DeviceDoubles().convert(_texts(texts)).to_pylist()
    assert got == [0.87, 0.87, -1e-3, 1e23]


def test_nulls_and_slices_keep_their_places():
    texts = _texts(["1.5", None, "0.25", None, "1e-30"]).slice(1)
    got = DeviceDoubles().convert(texts)
    assert got.to_pylist() == [None, 0.25, None, 1e-30]
    assert DeviceDoubles().convert(_texts([])).to_pylist() == []
    assert DeviceDoubles().convert(_texts([None, None])).to_pylist() == [None, None]


def test_nested_double_columns_read_as_text_come_back_typed():
    schema = pa.schema(
        [
            ("score", pa.float64()),
            ("weights", pa.list_(pa.float32())),
            ("inner", pa.struct([("x", pa.float64()), ("n", pa.int64())])),
            ("label", pa.string()),
        ]
    )
    as_text = text_schema(schema)
    assert as_text.types == [
        pa.string(),
        pa.list_(pa.string()),
        pa.struct([("x", pa.string()), ("n", pa.int64())]),
        pa.string(),
    ]
    read = pa.table(
        {
            "score": ["0.87", None],
            "weights": [["0.1", "2e-3"], None],
            "inner": [{"x": "-1.25e2", "n": 3}, None],
            "label": ["a", "b"],
        },
        schema=as_text,
    )
    got = DeviceDoubles().table(read, schema)
    assert got.schema == schema
    assert got.to_pylist() == [
        {"score": 0.87, "weights": [np.float32(0.1), np.float32(2e-3)],
         "inner": {"x": -125.0, "n": 3}, "label": "a"},
        {"score": None, "weights": None, "inner": None, "label": "b"},
    ]  # fmt: skip


@pytest.mark.parametrize("text", ["null", "true", '"0.5"', "NaN", "Infinity", "1_0", "0x10", "1e"])
def test_text_that_is_no_json_number_is_refused_not_converted(text):
    """What the doubles rest on is unverified (cuDF's ``str`` dtype giving a number's own
    text): text that is not a JSON number (a null or a quoted value kept as text, say) must
    not become a double (``null`` read as digits was 69560.0, ``true`` read past its end)."""
    with pytest.raises(NotANumber, match="not a JSON number"):
        DeviceDoubles().convert(_texts(["0.5", text, None]))
