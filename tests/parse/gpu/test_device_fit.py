"""The device's fit check (parse/gpu/fit.py, run by numba's CUDA simulator where there is no
device) held to the CPU scans (parse/json/scans.py) on the conformance corpora: JSONTestSuite's
318 documents as bodies and as message contents, the hostile cases of tests/parse, the drift
bodies of the backend conformance suite, and vLLM's bodies as recorded. Codes, content spans
and the unknown keys to rescue must be the CPU's, row for row."""

import json
from pathlib import Path

import numpy as np
import pytest
from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    DoubleType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from dspark_json.buffers.arrow import string_buffers, to_string_array
from dspark_json.parse.gpu.fit import (
    HAZARD_DIGITS,
    HAZARD_ESCAPE,
    DeviceFit,
    reader_hazards,
)
from dspark_json.parse.json import NESTED_STRIDE, compile_type
from dspark_json.parse.json.conform import CODE_EXTRA, CODE_FITS, CODE_INVALID, CODE_MISFIT
from dspark_json.parse.json.scans import NO_SPARE, scan_content_fit, scan_envelope_fit
from dspark_json.parse.plan import plan_of
from dspark_json.rows import data_fields
from tests.parse import test_backend_conformance as conformance
from tests.parse import test_fit_scans

ROOT = Path(__file__).parents[3]
SUITE = sorted((ROOT / "tests" / "data" / "jsontestsuite").glob("*.json"))
VLLM = [
    *sorted((ROOT / "tests" / "data" / "vllm-0.32").glob("*.json")),
    *sorted(Path("/work/shared/vllm/samples").glob("*.json")),
]

CONTENT = StructType(
    [
        StructField("label", StringType()),
        StructField("score", DoubleType()),
        StructField("n", LongType()),
        StructField("tags", ArrayType(StringType())),
        StructField("inner", StructType([StructField("x", IntegerType())])),
        StructField("flag", BooleanType()),
    ]
)


def _suite_texts():
    return [p.read_bytes() for p in SUITE]


def _hostile_bodies():
    """The envelope cases of test_fit_scans (each chosen to trip one rule) and the drift and
    struct cases of the backend conformance suite."""
    cases = [body for body, _ in test_fit_scans.test_envelope_codes.pytestmark[0].args[1]]
    drift = [
        '{"label": "x", "n": "three", "extra": {"a": 1}}',
        '{"when": 1767225600, "score": 1e400}',
        '{"n": 1.0, "tags": [1, "a"]}',
        json.dumps(conformance.GOOD),
    ]
    bodies = [conformance.dumps(conformance.envelope(c)) for c in drift]
    bodies += [body for _, body, _ in conformance.STRUCT_CASES]
    bodies.append(conformance.duplicate)
    return cases, bodies


def _contents(bodies):
    """The message texts of the bodies that hold any."""
    texts = []
    for body in bodies:
        try:
            value = json.loads(body)
        except (TypeError, ValueError):
            continue
        choices = value.get("choices") if isinstance(value, dict) else None
        for choice in choices if isinstance(choices, list) else []:
            message = choice.get("message") if isinstance(choice, dict) else None
            if isinstance(message, dict) and isinstance(message.get("content"), str):
                texts.append(message["content"])
    return texts


def _same_keys(cpu, device):
    """The unknown keys both record: rows and spans (nested entries up to their path)."""
    c_rows, c_spans, c_nrows, c_nested = cpu.rows, cpu.spans, cpu.nested_rows, cpu.nested
    assert device.rows.tolist() == c_rows.tolist()
    assert device.spans.tolist() == c_spans.tolist()
    assert device.nested_rows.tolist() == c_nrows.tolist()
    for c, d in zip(
        c_nested.reshape(-1, NESTED_STRIDE), device.nested.reshape(-1, NESTED_STRIDE), strict=True
    ):
        assert d[: 5 + d[4]].tolist() == c[: 5 + c[4]].tolist()


def _envelope_agrees(texts, dtype):
    offsets, data, valid = string_buffers(to_string_array(texts))
    table = compile_type(dtype) if not hasattr(dtype, "nodes") else dtype
    cpu = scan_envelope_fit(offsets, data, valid, table.nodes, False, True, 0, len(texts), NO_SPARE)
    device = DeviceFit().fit(offsets, data, valid, table)
    assert device.codes.tolist() == cpu.codes.tolist()
    assert device.deep.tolist() == cpu.deep.tolist()
    _same_keys(cpu, device)
    return device


def _content_agrees(texts, dtype, lenient):
    offsets, data, valid = string_buffers(to_string_array(texts))
    table = compile_type(dtype)
    cpu = scan_content_fit(offsets, data, valid, table.nodes, lenient, 0, len(texts), NO_SPARE)
    device = DeviceFit().fit(offsets, data, valid, table, content=True, lenient=lenient)
    assert device.codes.tolist() == cpu.codes.tolist()
    assert device.starts.tolist() == cpu.starts.tolist()
    assert device.ends.tolist() == cpu.ends.tolist()
    assert device.deep.tolist() == cpu.deep.tolist()
    _same_keys(cpu, device)
    return device


@pytest.mark.parametrize("lenient", [False, True], ids=["strict", "lenient"])
def test_jsontestsuite_as_contents(lenient):
    device = _content_agrees(_suite_texts(), CONTENT, lenient)
    assert len(SUITE) == 318
    assert len(set(device.codes.tolist())) >= 4  # the corpus reaches most codes


def test_jsontestsuite_as_bodies():
    _envelope_agrees(_suite_texts(), CONTENT)
    _envelope_agrees(_suite_texts(), StringType())


def test_jsontestsuite_wrapped_in_text():
    """The content rule's other candidates: a fence, prose around the braces."""
    texts = [b"Here:\n```json\n" + t + b"\n```" for t in _suite_texts()[::3]]
    texts += [b"The answer is " + t + b" as asked." for t in _suite_texts()[1::3]]
    _content_agrees(texts, CONTENT, True)


def test_hostile_cases():
    cases, bodies = _hostile_bodies()
    _envelope_agrees(cases, test_fit_scans.TYPE)
    schema = conformance.response_schema(response_format=conformance.CONTENT)
    plan = plan_of(data_fields(schema), False)
    _envelope_agrees(bodies, plan.envelope_table)
    _content_agrees(_contents(bodies), CONTENT, True)


def test_nesting_at_and_past_the_limit():
    texts = ['{"a":' * d + "1" + "}" * d for d in (511, 512, 513)]
    device = _envelope_agrees(texts, StringType())
    assert device.codes.tolist() == [CODE_MISFIT, CODE_MISFIT, CODE_INVALID]  # 513: too deep
    arrays = ["[" * d + "]" * d for d in (511, 512, 513)]
    device = _content_agrees(arrays, StringType(), True)
    assert device.codes.tolist() == [CODE_MISFIT, CODE_MISFIT, CODE_INVALID]


def test_vllm_bodies():
    assert VLLM, "no vLLM samples"
    bodies = [p.read_text() for p in VLLM]
    schema = conformance.response_schema(response_format=conformance.CONTENT)
    plan = plan_of(data_fields(schema), False)
    device = _envelope_agrees(bodies, plan.envelope_table)
    fits = (device.codes == CODE_FITS) | (device.codes == CODE_EXTRA)
    assert fits.sum() >= len(VLLM) // 2
    _content_agrees(_contents(bodies), CONTENT, True)


@pytest.mark.parametrize(
    ("text", "hazards"),
    [
        ('{"a":1,"b":"x","c":true,"d":false,"e":null}', 0),
        ('{"s":"0.3 and 1e5 inside a string","t":"say \\"1.5\\""}', 0),
        # Doubles are read as text and converted on the device (parse/gpu/doubles.py).
        ('{"score":0.3}', 0),
        ('{"score":1e5}', 0),
        ('{"score":2E-3}', 0),
        ('{"score":0.30000000000000004}', 0),
        ('{"score":1234567890123456.5}', 0),
        ('{"score":-1.5e+300}', 0),
        ('{"score":1.5e-0000000000000001}', 0),  # an exponent's digits are no integer
        ('{"n":123456789012345}', 0),  # 15 digits: below the bound
        ('{"n":1234567890123456}', HAZARD_DIGITS),  # cuDF's int64 parse of these: unverified
        ('{"n":[1,-1234567890123456]}', HAZARD_DIGITS),
        ("12345678901234567", HAZARD_DIGITS),  # a number that ends the document
        ('{"true":true,"e":1234567890123456e1}', 0),
        ('{"s":"\\ud83d\\ude00"}', HAZARD_ESCAPE),
        ('{"s":"\\u0000"}', HAZARD_ESCAPE),
        ('{"s":"\\u00e9\\n\\\\"}', 0),
        ('{"true":true,"x":[1,2]}', 0),
    ],
)
def test_what_cudf_reads_otherwise_is_flagged(text, hazards):
    raw = np.frombuffer(text.encode(), np.uint8)
    assert reader_hazards(raw, 0, len(raw)) == hazards
    offsets, data, valid = string_buffers(to_string_array([text]))
    table = compile_type(StructType([StructField("score", DoubleType())]))
    fitted = DeviceFit().fit(offsets, data, valid, table)
    assert int(fitted.hazards[0]) == (hazards if fitted.codes[0] in (CODE_FITS, CODE_EXTRA) else 0)
    if hazards and fitted.codes[0] in (CODE_FITS, CODE_EXTRA):
        assert fitted.routed()[0] == CODE_MISFIT  # to the reference parser


def _long_string(rng):
    """A string literal past the CPU's 64-byte blocks, of pieces that trip each of its rules
    where they fall across a block's edge: escapes, backslash runs, UTF-8, bad bytes."""
    pieces = [
        b"a" * rng.randint(1, 70),
        b'\\"',
        b"\\\\" * rng.randint(1, 40),
        b"\\n\\t\\/\\b\\f\\r",
        b"\\u00e9",
        b"\\ud83d\\ude00",
        b"\\ud83d",  # a lone high surrogate
        b"\\ude00",  # a lone low surrogate
        b"\\x",  # not an escape
        b"\x01",  # a raw control character
        "é😀€".encode(),
        b"\xff",  # not UTF-8
        b"\xe2\x82",  # a cut sequence
        b"\\u12",  # a short escape
    ]
    weights = [30, 5, 5, 5, 5, 3, 1, 1, 1, 1, 5, 1, 1, 1]
    body = b"".join(rng.choices(pieces, weights, k=rng.randint(2, 30)))
    return b'"' + body + b'"'


def test_long_strings_across_the_cpu_s_blocks():
    """The device reads strings a byte at a time, the CPU 64 bytes a block: seeded strings
    whose escapes, backslash runs and bad bytes fall anywhere in and across blocks."""
    import random

    rng = random.Random(35)
    texts = [b'{"label":' + _long_string(rng) + b',"n":1}' for _ in range(300)]
    device = _content_agrees(texts, CONTENT, True)
    codes = set(device.codes.tolist())
    assert {CODE_FITS, CODE_MISFIT, CODE_INVALID} <= codes  # valid, lenient-only and invalid
    _envelope_agrees(texts, CONTENT)
