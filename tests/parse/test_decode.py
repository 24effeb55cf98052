"""The typed decoder (the scans' events -> Arrow) reads every fitting document exactly as the
reference parser and pyarrow's JSON reader do: numbers of every form, escapes, missing keys,
nulls, empty and nested containers."""

import json
import random

import numpy as np
import pytest
from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    DoubleType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from dspark_json import response_schema
from dspark_json.buffers.arrow import string_buffers, to_string_array
from dspark_json.parse.cpu import CpuParser
from dspark_json.parse.json.conform import CODE_FITS, T_DOUBLE, T_INT, T_STRING, compile_type
from dspark_json.parse.json.decode import CONVERTED, group_events
from dspark_json.parse.json.scans import NO_SPARE, scan_envelope_fit
from dspark_json.parse.reader import JsonLines
from dspark_json.parse.reference import ReferenceParser
from dspark_json.parse.vectorised import Vectorised

CONTENT = {
    "type": "object",
    "properties": {
        "label": {"type": "string"},
        "score": {"type": "number"},
        "n": {"type": "integer"},
        "flag": {"type": "boolean"},
        "when": {"type": "string", "format": "date-time"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "inner": {
            "type": "object",
            "properties": {
                "deep": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {
                            "x": {"type": "integer"},
                            "w": {"type": "number"},
                            "q": {"type": "array", "items": {"type": "string"}},
                        },
                    },
                },
                "note": {"type": "string"},
            },
        },
    },
}

NUMBERS = [
    "0", "-0.0", "0.0", "1", "-1", "10", "1.5", "0.87", "0.1", "0.30000000000000004",
    "123456789012345", "1234567890123456", "12345678901234567", "9007199254740993",
    "1e5", "1E5", "1e+5", "1e-5", "2.5e-3", "1e22", "1e23", "1e-22", "1e-23", "4.9e-324",
    "1.7976931348623157e308", "0.000001234", "100.000", "3.141592653589793",
    "2.2250738585072014e-308", "5e-300", "123.456e2", "0.00000000000000000000000000001",
    "-987.654321", "1.0000000000000002", "9.999999999999999e22",
]  # fmt: skip
#: The scans leave exponents beyond 300 to the reference parser (overflow is Python's call).
FITTING = [n for n in NUMBERS if "e3" not in n and "e-3" not in n]
STRINGS = [
    "", "plain", 'quote " inside', "back\\slash", "slash / here", "tab\tnew\nline\r",
    "\b\f", "é ü ß", "日本語", "emoji 😀 pair", "\u2028\u2029", "\u0001\u001f ctrl",
    "mixed \\n not a newline", "a" * 300,
]  # fmt: skip


def _string(rng):
    text = rng.choice(STRINGS)
    # Both escaped and raw forms of the same text, as servers write either.
    return json.dumps(text, ensure_ascii=rng.random() < 0.5)


def _maybe(rng, key, value, out):
    r = rng.random()
    if r < 0.15:
        return  # missing
    out.append(f'"{key}":' + ("null" if r < 0.25 else value))


def _document(rng):
    parts = []
    _maybe(rng, "label", _string(rng), parts)
    _maybe(rng, "score", rng.choice(FITTING), parts)
    _maybe(rng, "n", str(rng.choice([0, 7, -3, 10**17, -(10**17) + 1])), parts)
    _maybe(rng, "flag", rng.choice(["true", "false"]), parts)
    _maybe(rng, "when", '"2026-11-30T12:00:00Z"', parts)
    tags = ",".join(_string(rng) for _ in range(rng.randint(0, 3)))
    _maybe(rng, "tags", f"[{tags}]", parts)
    deep = []
    for _ in range(rng.randint(0, 3)):
        item = []
        _maybe(rng, "x", str(rng.randint(-5, 5)), item)
        _maybe(rng, "w", rng.choice(FITTING), item)
        qs = ",".join(_string(rng) for _ in range(rng.randint(0, 2)))
        _maybe(rng, "q", f"[{qs}]", item)
        rng.shuffle(item)
        deep.append("{" + ", ".join(item) + "}" if rng.random() < 0.9 else "null")
    inner = []
    _maybe(rng, "deep", "[" + ",".join(deep) + "]", inner)
    _maybe(rng, "note", _string(rng), inner)
    _maybe(rng, "inner", "{" + ",".join(inner) + "}", parts)
    rng.shuffle(parts)
    ws = rng.choice(["", " ", "\n  "])
    return "{" + ws + ("," + ws).join(parts) + ws + "}"


def _body(rng, content):
    choices = [
        {"index": k, "message": {"role": "assistant", "content": content if k == 0 else "{}"},
         "finish_reason": rng.choice(["stop", "length", None])}
        for k in range(rng.randint(0, 2))
    ]  # fmt: skip
    body = {"id": f"c-{rng.random()}", "created": rng.randint(0, 2**31), "model": "m"}
    if rng.random() < 0.9:
        body["choices"] = choices
    if rng.random() < 0.5:
        body["usage"] = {"prompt_tokens": 3, "completion_tokens": None}
    return json.dumps(body, ensure_ascii=rng.random() < 0.5)


def _same(a, b):
    assert a.schema.equals(b.schema)
    assert repr(a.to_pylist()) == repr(b.to_pylist())  # repr: -0.0 and 0.0 differ


@pytest.mark.parametrize("seed", range(4))
def test_the_decoder_reads_what_pyarrow_and_the_reference_read(seed):
    rng = random.Random(seed)
    bodies = [_body(rng, _document(rng)) for _ in range(300)]
    schema = response_schema(response_format=CONTENT)
    decoded = CpuParser(schema)
    table = decoded.parse_vectorised(bodies)
    assert decoded.reference_rows == 0  # every row took the decoder
    _same(table, Vectorised(schema, lines=JsonLines()).parse(bodies))
    _same(table, ReferenceParser(schema).parse(bodies))


def test_rows_that_do_not_fit_are_null_in_the_decoder_and_replaced():
    schema = response_schema(response_format=CONTENT)
    bodies = ['{"id": 1}', "not json", None, '{"id": "a", "choices": [{"message": 5}]}', "{}"]
    _same(CpuParser(schema).parse_vectorised(bodies), ReferenceParser(schema).parse(bodies))


def test_doubles_match_python_float_on_every_form():
    rng = random.Random(7)
    texts = list(NUMBERS)
    for _ in range(3000):
        digits = "".join(rng.choice("0123456789") for _ in range(rng.randint(1, 18)))
        point = rng.randint(0, len(digits))
        text = (digits[:point] or "0") + ("." + digits[point:] if digits[point:] else "")
        text = text.lstrip("0") or "0"
        if text.startswith("."):
            text = "0" + text
        if rng.random() < 0.3:
            text += f"e{rng.randint(-30, 30)}"
        texts.append(("-" if rng.random() < 0.3 else "") + text)
    data = np.frombuffer("".join(texts).encode(), np.uint8)
    ends = np.cumsum([len(t) for t in texts])
    starts = ends - [len(t) for t in texts]
    # As the decoder converts them: while the events (node 0, start, end) are grouped.
    events = np.stack([np.zeros(len(texts), np.int64), starts, ends], axis=1).reshape(-1)
    a, b, *_ = group_events([events], np.array([T_DOUBLE], np.int8), data=data)
    values, slow = b.view(np.float64), a != CONVERTED
    for text, value, is_slow in zip(texts, values.tolist(), slow.tolist(), strict=True):
        if not is_slow:
            assert repr(value) == repr(float(text)), text
    assert slow.mean() < 0.5  # most take the exact fast path


def test_strings_are_unescaped_in_order_into_each_nodes_column_across_parts():
    # Two string nodes' strings interleaved in document order, a null among them, a number
    # node's events between, split in two parts (as two threads' row ranges): each node's
    # column holds its own strings, unescaped, in order.
    texts = ['a\\"b', "\\\\", "\\/", "\\b\\f\\n\\r\\t", "\\u00e9", "\\ud83d\\ude00"]
    texts += ["x\\u0000y", "", "plain", "\\u2028 é"]
    raw = "".join(texts).encode()
    lengths = [len(t.encode()) for t in texts]
    ends = np.cumsum(lengths)
    starts = ends - lengths
    events = []  # (node, a, b) and, for the check, the text a string event stands for
    for i, (s0, e0) in enumerate(zip(starts.tolist(), ends.tolist(), strict=True)):
        events += [(i % 2, s0, e0, texts[i]), (2, 1, i, None)]
    events.insert(5, (1, -1, -1, None))  # a null string
    flat = np.array([e[:3] for e in events], np.int64).reshape(-1)
    parts = [flat[: 3 * 7], flat[3 * 7 :]]
    kind = np.array([T_STRING, T_STRING, T_INT], np.int8)
    _, _, _, strings, _ = group_events(parts, kind, data=np.frombuffer(raw, np.uint8))
    assert sorted(strings) == [0, 1]
    for node in (0, 1):
        offsets, out = strings[node]
        got = [out[offsets[i] : offsets[i + 1]].tobytes().decode() for i in range(len(offsets) - 1)]
        mine = [text for n, _, _, text in events if n == node]
        assert got == [json.loads(f'"{t}"') if t is not None else "" for t in mine]


def test_escape_dense_strings_of_every_length_unescape_as_json_reads_them():
    """Strings with an escape every few bytes (a model's JSON inside the envelope's content),
    runs of backslashes, ``\\uXXXX`` and control escapes, across the 64-byte blocks the
    unescape reads at once (a block of escapes in one byte compress where the CPU has one):
    each string as Python's json module reads it."""
    rng = random.Random(5)
    pieces = ["a", "b", "n", "t", "u", '"', "\\", "/", "\n", "\t", "\b", "\f", "\r", "é"]
    pieces += ["😀", "\x01", " ", "x" * 20]
    for _ in range(200):
        texts = []
        for _ in range(rng.randint(1, 30)):
            size = rng.choice([0, 1, 5, 30, 63, 64, 65, 127, 128, 200, 500])
            text = json.dumps("".join(rng.choice(pieces) for _ in range(size)))[1:-1]
            if rng.random() < 0.3:
                text = json.dumps(json.loads(f'"{text}"'), ensure_ascii=False)[1:-1]
            texts.append(text.replace("/", "\\/") if rng.random() < 0.3 else text)
        pad = "q" * rng.randint(0, 70)
        raw = (pad + "".join(texts) + pad).encode()
        lengths = [len(t.encode()) for t in texts]
        ends = np.cumsum(lengths) + len(pad)
        events = np.stack([np.zeros(len(texts), np.int64), ends - lengths, ends], axis=1)
        kind, data = np.array([T_STRING], np.int8), np.frombuffer(raw, np.uint8)
        _, _, _, strings, _ = group_events([events.reshape(-1)], kind, data=data)
        offsets, out = strings[0]
        got = [out[offsets[i] : offsets[i + 1]].tobytes().decode() for i in range(len(texts))]
        assert got == [json.loads(f'"{t}"') for t in texts]


def test_rows_split_over_threads_read_as_one_range():
    """Scans and string columns split in ranges on threads give the one-thread table."""
    rng = random.Random(11)
    bodies = [_body(rng, _document(rng)) for _ in range(9000)]  # > 2 ranges of 4,096 rows
    schema = response_schema(response_format=CONTENT)
    one, two = CpuParser(schema), CpuParser(schema)
    one.threads, two.threads = 1, 3
    _same(one.parse_vectorised(bodies), two.parse_vectorised(bodies))


def test_a_parser_reusing_its_buffers_gives_a_fresh_parsers_tables():
    """A parser keeps its scans' event buffers and its reads' arrays from batch to batch: a
    batch after a larger one, a smaller one or one of another shape (buffers grown, reused,
    written over) reads as a fresh parser reads it."""
    rng = random.Random(7)
    schema = response_schema(response_format=CONTENT)
    batches = [[_body(rng, _document(rng)) for _ in range(size)] for size in (400, 40, 900, 3)]
    batches.append(batches[0])
    kept = CpuParser(schema)
    tables = [kept.parse_vectorised(bodies) for bodies in batches]  # each read over the last
    for bodies, table in zip(batches, tables, strict=True):
        _same(table, CpuParser(schema).parse_vectorised(bodies))


def _kept_bytes(parser: Vectorised) -> int:
    """The bytes of the event buffers a parser keeps between batches (spare and lent)."""
    return sum(spare.nbytes for spare in parser._spares + parser._lent)


def test_a_long_row_does_not_leave_its_parser_a_buffer_sized_for_it():
    """What a parser keeps follows the events its batches wrote: after a batch with one 4 MB
    body (room for a row that long, each byte an event of the widest type, is gigabytes of
    address space, which ``spark.executor.pyspark.memory`` counts), a small batch leaves it a
    few megabytes, and both read as a fresh parser reads them."""
    rng = random.Random(11)
    schema = response_schema(response_format=CONTENT)
    content = json.dumps({"label": "x" * 4_000_000, "tags": ["a", "b"]})
    long_body = json.dumps(
        {"id": "c-long", "created": 1, "model": "m",
         "choices": [{"index": 0, "message": {"role": "assistant", "content": content}}]}
    )  # fmt: skip
    batches = [[long_body] + [_body(rng, _document(rng)) for _ in range(50)]]
    batches.append([_body(rng, _document(rng)) for _ in range(200)])
    kept = Vectorised(schema)
    for bodies in batches:
        _same(kept.parse(bodies), CpuParser(schema).parse_vectorised(bodies))
    assert kept._spares and not kept._lent  # the small batch's spare, given back
    assert _kept_bytes(kept) < 64 * 2**20


def test_a_parser_reading_with_json_lines_keeps_no_more_buffers_batch_after_batch():
    """Where the documents are read as JSON lines (the scans' events unread), the buffers lent
    to the scans come back all the same: what the parser keeps does not grow with batches."""
    rng = random.Random(12)
    schema = response_schema(response_format=CONTENT)
    parser = Vectorised(schema, lines=JsonLines())
    bodies = [_body(rng, _document(rng)) for _ in range(300)]
    for _ in range(2):  # the first batch sizes the spares, the second makes them
        parser.parse(bodies)
    after_two = _kept_bytes(parser)
    for _ in range(3):
        parser.parse(bodies)
    assert not parser._lent
    assert _kept_bytes(parser) == after_two > 0


#: A struct with a field of every kind below it, lists of structs inside it: a null or missing
#: struct is one event (decode expands it over the nodes below it through struct fields).
_ITEM = StructType([StructField("q", StringType()), StructField("k", LongType())])
_INNER = StructType([StructField("text", StringType()), StructField("items", ArrayType(_ITEM))])
_S = StructType(
    [StructField("name", StringType()), StructField("n", LongType()),
     StructField("x", DoubleType()), StructField("flag", BooleanType()),
     StructField("inner", _INNER), StructField("tags", ArrayType(StringType()))]
)  # fmt: skip
NULLS = StructType(
    [StructField("id", StringType()), StructField("s", _S),
     StructField("t", StructType([StructField("text", StringType())])),
     StructField("list", ArrayType(_S))]
)  # fmt: skip


def test_a_missing_or_null_struct_is_one_event_for_what_is_below_it():
    table = compile_type(NULLS)
    s, t, lst = (table.fields[0][name] for name in ("s", "t", "list"))
    for body in ['{"id": "a"}', '{"id": "a", "s": null, "t": null, "list": null}']:
        offsets, data, valid = string_buffers(to_string_array([body]))
        scan = scan_envelope_fit(offsets, data, valid, table.nodes, False, False, 0, 1, NO_SPARE)
        assert scan.codes.tolist() == [CODE_FITS]
        events = scan.events.reshape(-1, 3)[:, :2].tolist()
        assert events == [[1, 8], [s, -1], [t, -1], [lst, -1], [0, 1]]


def _null_body(rng):
    def text():
        return json.dumps(rng.choice(STRINGS), ensure_ascii=rng.random() < 0.5)

    def item():
        fields = []
        _maybe(rng, "q", text(), fields)
        _maybe(rng, "k", str(rng.randint(-9, 9)), fields)
        return "{" + ",".join(fields) + "}" if rng.random() < 0.8 else "null"

    def struct():
        fields, inner = [], []
        _maybe(rng, "text", text(), inner)
        _maybe(rng, "items", "[" + ",".join(item() for _ in range(rng.randint(0, 3))) + "]", inner)
        _maybe(rng, "name", text(), fields)
        _maybe(rng, "n", str(rng.randint(0, 10**6)), fields)
        _maybe(rng, "x", rng.choice(FITTING), fields)
        _maybe(rng, "flag", rng.choice(["true", "false"]), fields)
        _maybe(rng, "inner", "{" + ",".join(inner) + "}", fields)
        _maybe(rng, "tags", "[" + ",".join(text() for _ in range(rng.randint(0, 2))) + "]", fields)
        rng.shuffle(fields)
        return "{" + ",".join(fields) + "}"

    parts = [f'"id": {text()}']
    # Most rows without "s" (a null for all below it), some with some of its fields.
    if rng.random() < 0.3:
        parts.append('"s": ' + (struct() if rng.random() < 0.8 else "null"))
    _maybe(rng, "t", '{"text": ' + text() + "}", parts)
    _maybe(rng, "list", "[" + ",".join(struct() for _ in range(rng.randint(0, 3))) + "]", parts)
    rng.shuffle(parts)
    return "{" + ", ".join(parts) + "}" if rng.random() < 0.97 else "not json"


def _object(**properties):
    return {"type": "object", "properties": properties}


_STRING, _INTEGER = {"type": "string"}, {"type": "integer"}
_S_SCHEMA = _object(
    name=_STRING, n=_INTEGER, x={"type": "number"}, flag={"type": "boolean"},
    inner=_object(text=_STRING, items={"type": "array", "items": _object(q=_STRING, k=_INTEGER)}),
    tags={"type": "array", "items": _STRING},
)  # fmt: skip
#: NULLS as a model's answer (a choice's content).
NULLS_SCHEMA = _object(
    id=_STRING, s=_S_SCHEMA, t=_object(text=_STRING), list={"type": "array", "items": _S_SCHEMA}
)


@pytest.mark.parametrize("seed", range(3))
def test_null_structs_beside_filled_ones_read_as_the_reference_reads_them(seed):
    """Null and missing structs, their fields filled in other rows of the batch (or in no row:
    a node null in every row), lists of structs under them and structs null in lists, rows
    whose content does not fit (a null row): the reference parser's table."""
    rng = random.Random(seed)
    schema = response_schema(response_format=NULLS_SCHEMA)
    bodies = [_body(rng, _null_body(rng)) for _ in range(400)]
    parser = CpuParser(schema)
    _same(parser.parse_vectorised(bodies), ReferenceParser(schema).parse(bodies))
    assert parser.reference_rows == 0
    # Nothing below "s" filled in any row: its nodes are null in every row.
    rows = [b for b in bodies if '\\"s\\"' not in b]
    assert 200 < len(rows) < 400
    _same(parser.parse_vectorised(rows), ReferenceParser(schema).parse(rows))
