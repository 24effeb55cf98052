"""The GPU backend end to end without a GPU: the device's fit check under numba's CUDA
simulator, the lines gathered by the device kernel, the doubles' text converted by the device
kernel, and cuDF's reader stood in for (tests/parse/gpu/stub.py). Its table must be the
reference parser's, row for row, and no CPU scan may run over the bodies (the cuDF read itself
is for a device: the ``gpu`` marker, in tests/parse/test_backend_conformance.py)."""

import json
import logging
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from pyspark.sql.types import ArrayType, DoubleType, FloatType, StructField, StructType

from dspark_json import response_schema
from dspark_json.parse import reader, vectorised
from dspark_json.parse.cpu import CpuParser
from dspark_json.parse.gpu.fit import device_target, reader_hazards
from dspark_json.parse.gpu.kernels import gather_kernel
from dspark_json.parse.gpu.parser import GpuParser
from dspark_json.parse.gpu.reader import gather_row
from dspark_json.parse.json import gather_lines, line_lengths
from dspark_json.parse.reference import ReferenceParser
from tests.parse import test_backend_conformance as conformance
from tests.parse import test_decoder_differential as differential
from tests.parse.gpu.stub import StandInLines, _Number, _value
from tests.parse.gpu.test_device_doubles import _fast, _random_number
from tests.parse.gpu.test_device_fit import SUITE, VLLM

SCHEMA = conformance.response_schema(response_format=conformance.CONTENT)
#: vLLM bodies with a whole score...
WHOLE = [
    conformance.dumps(
        conformance.vllm_body(conformance.dumps(conformance.GOOD | {"n": i, "score": 2}))
    )
    for i in range(6)
]
#: ... and with a fraction (``0.5``): read as text by cuDF, converted on the device.
GOOD = [
    conformance.dumps(conformance.vllm_body(conformance.dumps(conformance.GOOD | {"n": i})))
    for i in range(6)
]


def _gpu(schema=SCHEMA):
    return GpuParser(schema, lines=StandInLines())


def _same_as_reference(bodies, schema=SCHEMA):
    parser = _gpu(schema)
    table = parser.parse(bodies)
    want = ReferenceParser(schema).parse(bodies)
    assert repr(table.to_pylist()) == repr(want.to_pylist())
    return parser


def test_fitting_bodies_take_no_cpu_scan(monkeypatch):
    """The rows that fit are decided on the device and read by the (stub) reader: the CPU
    scans and the CPU's line gathering never run, and no row goes to the reference parser."""

    def forbidden(*args, **kwargs):
        raise AssertionError("a CPU pass over the bytes ran on the GPU path")

    monkeypatch.setattr(vectorised, "scan_envelope_fit", forbidden)
    monkeypatch.setattr(vectorised, "scan_content_fit", forbidden)
    monkeypatch.setattr(reader, "gather_lines", forbidden)
    parser = _same_as_reference(WHOLE)
    assert parser.reference_rows == 0, parser.reference_reasons


def _body(i, score="0.5", n="3"):
    """A vLLM body whose content holds ``score`` and ``n`` as written (JSON numbers' text)."""
    content = conformance.dumps(conformance.GOOD | {"n": i})
    content = content.replace('"score": 0.5', f'"score": {score}')
    content = content.replace(f'"n": {i}', f'"n": {n}')
    return conformance.dumps(conformance.vllm_body(content))


#: Scores as a model writes them, and the edges of the device's fast path (past it, 17 digits,
#: 1e23 and 1e-30: Python's float on the host).
SCORES = ["0.87", "0.3", "1e-3", "-2.5E+2", "0.30000000000000004", "1e23", "1e-30", "7", "null"]


def _no_hazard(text):
    return reader_hazards(np.frombuffer(text.encode(), np.uint8), 0, len(text)) == 0


def test_fractional_scores_are_not_routed_and_equal_the_cpu(monkeypatch):
    """Doubles with fractions and exponents stay on the GPU path (read as text, converted on
    the device): no row goes to the reference parser, no CPU scan runs, and the table is the
    reference's and the CPU backend's."""
    rng = random.Random(5)
    scores = SCORES + [_random_number(rng) for _ in range(16)]
    # Not the numbers that go to the reference parser on purpose: -0 (the CPU rules') and
    # integers past 15 digits (a hazard).
    negative_zero = [s for s in scores if s != "null" and float(s) == 0 and s[0] == "-"]
    scores = [s for s in scores if s == "null" or (_no_hazard(s) and s not in negative_zero)]
    assert len(scores) > len(SCORES)
    bodies = [_body(i, score) for i, score in enumerate(scores)]
    cpu = CpuParser(SCHEMA).parse(bodies)

    def forbidden(*args, **kwargs):
        raise AssertionError("a CPU pass over the bytes ran on the GPU path")

    monkeypatch.setattr(vectorised, "scan_envelope_fit", forbidden)
    monkeypatch.setattr(vectorised, "scan_content_fit", forbidden)
    parser = _same_as_reference(bodies)
    assert parser.reference_rows == 0, parser.reference_reasons
    assert parser.device_fit.hazard_rows == 0
    fast = [s for s in scores if s == "null" or _fast(s)]
    assert parser.host_doubles == len(scores) - len(fast) >= 3  # 17 digits, 1e23, 1e-30...
    assert repr(parser.parse(bodies).to_pylist()) == repr(cpu.to_pylist())


def test_rows_cudf_would_read_otherwise_go_to_the_reference():
    long_n = [_body(i, n="1234567890123456") for i in range(3)]
    parser = _same_as_reference(WHOLE[:3] + long_n)
    assert parser.device_fit.hazard_rows == 3  # 16 digits: cuDF's int64 parse, unverified
    assert parser.reference_reasons == {"reader_rules": 3}


#: A content type cuDF's JSON lines reader cannot take: a map, and a tuple struct.
MAPPED = {
    "type": "object",
    "properties": {
        "label": {"type": "string"},
        "scores": {"type": "object", "additionalProperties": {"type": "number"}},
    },
}
TUPLED = {
    "type": "object",
    "properties": {
        "label": {"type": "string"},
        "pair": {"type": "array", "prefixItems": [{"type": "string"}, {"type": "number"}]},
    },
}


@pytest.mark.parametrize(
    ("content_type", "contents", "column"),
    [
        (
            MAPPED,
            [{"label": "a", "scores": {"x": 0.87, "y": 1e-3}}, {"label": "b", "scores": {}}],
            "a map (column 'choices[].message.parsed.scores')",
        ),
        (
            TUPLED,
            [{"label": "a", "pair": ["x", 0.5]}, {"label": "b", "pair": None}],
            "a tuple struct (column 'choices[].message.parsed.pair')",
        ),
    ],
    ids=["map", "tuple"],
)
def test_a_schema_cudf_cannot_read_takes_the_cpu_kernels(content_type, contents, column, caplog):
    """Not the reference parser: no row is the reference's (reference_reasons empty), the
    table is the reference's, and the log says once which column sent the batch there."""
    from dspark_json.parse.gpu import parser as gpu_parser

    schema = response_schema(response_format=content_type)
    bodies = [conformance.dumps(conformance.vllm_body(conformance.dumps(c))) for c in contents * 3]
    gpu_parser._logged.discard(column)
    with caplog.at_level(logging.INFO, logger="dspark_json"):
        parser = _same_as_reference(bodies, schema)
        parser.parse(bodies)
    assert parser.cpu_kernels == column
    assert parser.backend == "cpu"  # what the metrics and the batch line report
    assert parser.reference_rows == 0 and parser.reference_reasons == {}
    said = [r.getMessage() for r in caplog.records if "CPU kernels" in r.getMessage()]
    assert said == [
        f"GPU backend: cuDF's JSON reader cannot read {column}; the CPU kernels parse these "
        "batches, as on the CPU backend"
    ]


def test_a_schema_cudf_reads_stays_on_the_device():
    parser = GpuParser(SCHEMA, lines=StandInLines())
    assert parser.cpu_kernels is None and parser.backend == "gpu"


def test_the_conformance_bodies():
    bodies = [body for _, body, _ in conformance.STRUCT_CASES]
    bodies += [
        conformance.dumps(conformance.envelope(c))
        for c in ('{"label": "x", "n": "three", "extra": {"a": 1}}', '{"n": 1.0, "tags": [1]}')
    ]
    _same_as_reference(bodies + GOOD)


def test_jsontestsuite_as_contents():
    texts = [p.read_bytes().decode("utf-8", "replace") for p in SUITE]
    bodies = [conformance.dumps(conformance.envelope(t)) for t in texts]
    _same_as_reference(bodies)


def test_vllm_bodies():
    _same_as_reference([p.read_text() for p in VLLM])


@pytest.mark.parametrize(("prefix", "suffix"), [(b"", b""), (b'{"v":', b"}")])
def test_lines_gathered_on_the_device_are_the_cpu_s(prefix, suffix):
    from numba import cuda

    texts = ['{"a":\n1}', None, "[1,\r\n2]", "", '"x"']
    array = pa.array(texts, pa.string())
    offsets = np.frombuffer(array.buffers()[1], np.int32)[: len(texts) + 1].astype(np.int64)
    data = np.frombuffer(array.buffers()[2], np.uint8)
    take = np.array([t is not None for t in texts])
    starts, ends = offsets[:-1], offsets[1:]
    lengths = line_lengths(starts, ends, take, len(prefix) + len(suffix))
    line_at = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    head, tail = np.frombuffer(prefix, np.uint8), np.frombuffer(suffix, np.uint8)
    want = np.zeros(int(line_at[-1]), np.uint8)
    gather_lines(data, starts, ends, take, head, tail, want)
    got = cuda.device_array(int(line_at[-1]), np.uint8)
    inputs = (data, starts, ends, take, head, tail, line_at[:-1])
    kernel = gather_kernel(device_target().compile(gather_row))
    kernel[1, 4](*(cuda.to_device(np.ascontiguousarray(a)) for a in inputs), got)
    assert got.copy_to_host().tobytes() == want.tobytes()
    assert json.loads(want.tobytes().split(b"\n")[0] or b"{}") is not None


@pytest.mark.slow
def test_the_profile_finds_no_per_byte_pass_on_the_host(tmp_path):
    """benchmarks/gpu/profile_fit.py (the figures in benchmarks/results/gpu_profile.md) exits 1
    where a function that reads bytes one by one runs on the host."""
    done = subprocess.run(
        [sys.executable, "benchmarks/gpu/profile_fit.py", "--rows", "16", "--out", str(tmp_path)],
        cwd=Path(__file__).parents[3],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    text = (tmp_path / "gpu_profile.md").read_text()
    assert "check_row" in text.split("On the host")[0]  # the rules ran, on the device
    assert "on the host (" in text.lower() and text.rstrip().endswith("none")


@pytest.mark.parametrize(
    "bodies",
    [
        [],
        [None],
        ['{"id":"x","choices":[]}'],
        ["nope"],
        [conformance.dumps(conformance.envelope())],
    ],
    ids=["no-rows", "null", "no-choices", "not-json", "empty-choices"],
)
def test_batches_with_nothing_to_read(bodies):
    _same_as_reference(bodies)


#: Doubles of every shape (tests/parse/test_decoder_differential.py's), at the fast path's
#: edges and past them, and the ones the CPU rules set aside (-0, past 1e300).
NUMBERS = [
    "-0e0", "-0.0", "0e999", "1E5", "0.1e-7", "1e-400", "0." + "0" * 400 + "1",
    "123456789012345678901234567890", "9" * 300, "1.7976931348623157e308",
    "4.9406564584124654e-324", "2.4703282292062328e-324", "9007199254740993", "0.87", "1e22",
    "1e-22", "1e23", "-2.5E+2", "10000000000e300",
]  # fmt: skip


def test_doubles_of_every_shape_at_every_depth_equal_the_reference():
    """A double, a list of doubles and a float column in the content, as the reference reads
    them (the device's conversion, the host's float past its fast path)."""
    parsed = StructType(
        [
            StructField("x", DoubleType()),
            StructField("xs", ArrayType(DoubleType())),
            StructField("f", FloatType()),
        ]
    )
    schema = differential._schema(parsed)
    bodies = [
        differential._body(f'{{"x": {n}, "xs": [{n}, 0.5, null], "f": {n}}}') for n in NUMBERS
    ]
    parser = _same_as_reference(bodies, schema)
    assert parser.host_doubles > 0
    assert set(parser.reference_reasons) <= {"content_misfit", "reader_rules"}


class _QuotingLines(StandInLines):
    """A cuDF whose ``str`` dtype kept a double's quotes (``"0.5"``): what
    benchmarks/gpu/cudf_numbers.py rules out on a device."""

    def read_lines(self, lines, schema):
        chunk = np.asarray(lines.copy_to_host(), np.uint8).tobytes()
        rows = [
            json.loads(line, parse_float=lambda t: _Number(f'"{t}"'), parse_int=_Number)
            for line in chunk.decode("utf-8").split("\n")
            if line
        ]
        row_type = pa.struct(list(schema))
        return pa.Table.from_pylist([_value(r, row_type) for r in rows], schema=schema)


def test_a_reader_giving_no_number_s_text_sends_its_batch_to_the_reference(caplog):
    """Not doubles made of a quote's bytes: the batch is not read, as a chunk cuDF rejects (the
    content's rows then count as ``content_misfit``), the table is the reference's, and the
    log says why."""
    parser = GpuParser(SCHEMA, lines=_QuotingLines())
    with caplog.at_level(logging.WARNING, logger="dspark_json"):
        table = parser.parse(GOOD)
    assert repr(table.to_pylist()) == repr(ReferenceParser(SCHEMA).parse(GOOD).to_pylist())
    assert parser.reference_reasons == {"content_misfit": len(GOOD)}
    assert any("not a JSON number" in r.getMessage() for r in caplog.records)


def test_rows_the_cpu_kernels_set_aside_still_go_to_the_reference():
    """On the CPU kernels' path (a map), a row that does not fit (a string for a number) is the
    reference's, as on the CPU backend: the whole batch is not ``column_types``."""
    schema = response_schema(response_format=MAPPED)
    contents = [{"label": "a", "scores": {"x": "high"}}, {"label": "b", "scores": {"x": 0.5}}]
    bodies = [conformance.dumps(conformance.vllm_body(conformance.dumps(c))) for c in contents]
    parser = _same_as_reference(bodies, schema)
    assert parser.cpu_kernels is not None
    assert parser.reference_reasons == {"content_misfit": 1}
    cpu = CpuParser(schema).parse(bodies)
    assert repr(parser.parse(bodies).to_pylist()) == repr(cpu.to_pylist())


def test_a_tuple_in_the_envelope_is_the_cpu_backend_s_too():
    """A tuple struct in the envelope takes the CPU kernels' path: its rows go where the CPU
    backend's kernels send them (on their path since issue 38c; before, to the reference
    parser, which is why the log says "as on the CPU backend", not that it spares the
    reference parser)."""
    from pyspark.sql.types import LongType, StringType

    base = response_schema(response_format={"type": "object", "properties": {}})
    pair = StructType([StructField("_1", StringType()), StructField("_2", LongType())])
    schema = StructType([f if f.name != "usage" else StructField("usage", pair) for f in base])
    body = json.loads(conformance.dumps(conformance.vllm_body("{}")))
    bodies = [json.dumps(body | {"usage": ["x", 3]})] * 2
    parser = _same_as_reference(bodies, schema)
    assert parser.cpu_kernels == "a tuple struct (column 'usage')"
    cpu_kernels = vectorised.Vectorised(schema)
    cpu_kernels.parse(bodies)
    assert parser.reference_reasons == cpu_kernels.reference_reasons


def test_rescue_scope_parsed_is_the_cpu_backend_s():
    """Rescue scope ``parsed`` (the pipeline's for a ``.schema`` without ``_rescued_data``):
    the GPU backend's table equals the CPU backend's of that scope, and the same misfits are
    found as with scope ``all``."""
    from dspark_json.schema.fit import find_misfits

    misfit = conformance.vllm_body(conformance.dumps(conformance.GOOD | {"n": "many"}))
    bodies = [
        *(b[:-1] + ', "reasoning": "why", "extra": {"a": [1]}}' for b in GOOD[:3]),
        conformance.dumps(misfit)[:-1] + ', "reasoning": "why"}',
        conformance.dumps(
            conformance.vllm_body(conformance.dumps(conformance.GOOD | {"more": [1, {"b": 2}]}))
        ),
    ]
    scoped = GpuParser(SCHEMA, lines=StandInLines(), rescue="parsed").parse(bodies)
    assert scoped.equals(CpuParser(SCHEMA, rescue="parsed").parse(bodies))
    whole = _gpu().parse(bodies)
    others = [n for n in whole.column_names if n != "_rescued_data"]
    assert scoped.select(others).equals(whole.select(others))
    rescued = scoped.column("_rescued_data").to_pylist()
    assert rescued[:3] == [None] * 3  # the envelope's keys alone: not gathered
    parsed = SCHEMA["parsed"].dataType
    found = find_misfits(scoped.column("_rescued_data"), parsed)
    assert found == find_misfits(whole.column("_rescued_data"), parsed)
    assert list(found) == [3]
