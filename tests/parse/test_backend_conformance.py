"""Conformance: every backend turns the same bodies into the same table, equal to what Python's
json module says the table must be (computed here, independently of the parser's code)."""

import json
import math
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pytest

from dspark_json import parse_responses, response_schema
from dspark_json.parse.content import extract_json_python
from dspark_json.parse.reference import ReferenceParser
from dspark_json.response.convert import arrow_schema

SUITE = Path(__file__).parents[1] / "data" / "jsontestsuite"
WS = " \t\r\n\ufeff"
INVALID = object()

CONTENT = {
    "type": "object",
    "properties": {
        "label": {"type": "string"},
        "score": {"type": "number"},
        "n": {"type": "integer"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "when": {"type": "string", "format": "date-time"},
        "inner": {
            "type": "object",
            "properties": {
                "deep": {
                    "type": "array",
                    "items": {"type": "object", "properties": {"x": {"type": "integer"}}},
                }
            },
        },
        "flag": {"type": "boolean"},
    },
}


@pytest.fixture(params=["cpu", pytest.param("gpu", marks=pytest.mark.gpu)])
def backend(request):
    return request.param


# --- the independent expectation -------------------------------------------------------------


def _reject(name):
    raise ValueError(name)


def _depth(value):
    if isinstance(value, dict):
        return 1 + max((_depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((_depth(v) for v in value), default=0)
    return 0


def _utf8_clean(value):
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return False
        return True
    if isinstance(value, dict):
        return all(_utf8_clean(k) and _utf8_clean(v) for k, v in value.items())
    if isinstance(value, list):
        return all(_utf8_clean(v) for v in value)
    return True


def strict(text):
    """The value of ``text`` as strict RFC 8259 JSON (depth <= 512), else INVALID."""
    try:
        value = json.loads(text, parse_constant=_reject)
    except (ValueError, RecursionError):
        return INVALID
    if _depth(value) > 512 or not _utf8_clean(value):
        return INVALID
    return value


def lenient(text):
    """As :func:`strict`, but raw control characters are allowed inside strings (a message's
    content: option allowUnquotedControlChars, the default)."""
    try:
        value = json.loads(text, parse_constant=_reject, strict=False)
    except (ValueError, RecursionError):
        return INVALID
    if _depth(value) > 512 or not _utf8_clean(value):
        return INVALID
    return value


#: The documented rule for JSON inside a message, in plain Python (the library's restatement of
#: the kernels' rule: the vectorised parser is held to it here, and the reference parser's plain
#: Python path to the kernels in test_the_rules_in_plain_python_agree_with_the_kernels).
find_json = extract_json_python


def as_text(value):
    if value is None or isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def typed_content(value):
    """A conforming content object as the CONTENT struct (the corpus keeps to the schema)."""

    def get(key, convert=lambda v: v):
        return convert(value[key]) if value.get(key) is not None else None

    inner = value.get("inner")
    return {
        "label": get("label"),
        "score": get("score", float),
        "n": get("n"),
        "tags": get("tags"),
        "when": get("when", _aware),
        "inner": None
        if inner is None
        else {
            "deep": None
            if inner.get("deep") is None
            else [{"x": e.get("x")} for e in inner["deep"]]
        },
        "flag": get("flag"),
    }


def _aware(text):
    value = datetime.fromisoformat(text)
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def content_outcome(choice, fit):
    message = choice.get("message") or {}
    content = message.get("content")
    if not isinstance(content, str):
        return "not_json", None, None
    found = find_json(content)
    if found is None:
        return "not_json", None, content
    value = lenient(found)
    if value is INVALID:
        truncated = choice.get("finish_reason") == "length"
        return ("truncated" if truncated else "corrupt_content"), None, content
    ok, typed = fit(value)
    if not ok:
        return "corrupt_content", None, content
    return "ok", typed, None


def fit_struct(value):
    return isinstance(value, dict), typed_content(value) if isinstance(value, dict) else None


def fit_string(value):
    return True, as_text(value)


def expected_row(body, fit, *, rescued=None):
    """What the table must hold for one body, from Python's json module."""
    nothing = {"_status": None, "_rescued_data": None, "_corrupt_record": None}
    if body is None:
        return nothing
    raw = body if isinstance(body, bytes) else body.encode("utf-8", "surrogatepass")
    text = raw.decode("utf-8", "replace")
    try:
        envelope = strict(raw.decode("utf-8"))
    except UnicodeDecodeError:
        envelope = INVALID
    if not isinstance(envelope, dict):
        return {**nothing, "_status": "corrupt_envelope", "_corrupt_record": text}
    choices = envelope.get("choices") or []
    row = {
        "id": as_text(envelope.get("id")),
        "object": as_text(envelope.get("object")),
        "created": _timestamp(envelope.get("created")),
        "model": as_text(envelope.get("model")),
        "choices": None if envelope.get("choices") is None else [],
        "usage": envelope.get("usage"),
        "system_fingerprint": as_text(envelope.get("system_fingerprint")),
        "service_tier": as_text(envelope.get("service_tier")),
        "_status": "empty",
        "_rescued_data": None if not rescued else json.dumps(rescued, separators=(",", ":")),
        "_corrupt_record": None,
        "parsed": None,
    }
    for i, choice in enumerate(choices):
        status, value, corrupt = content_outcome(choice, fit)
        message = choice.get("message")
        row["choices"].append(
            {
                "index": choice.get("index"),
                "message": None
                if message is None
                else {
                    "role": message.get("role"),
                    "content": message.get("content"),
                    "refusal": message.get("refusal"),
                    "reasoning": message.get("reasoning"),
                    "reasoning_content": message.get("reasoning_content"),
                    "tool_calls": message.get("tool_calls"),
                    "parsed": value,
                },
                "logprobs": choice.get("logprobs"),
                "finish_reason": choice.get("finish_reason"),
                "stop_reason": as_text(choice.get("stop_reason")),
            }
        )
        if i == 0:
            row.update(_status=status, parsed=value, _corrupt_record=corrupt)
    return row


def _timestamp(value):
    return None if value is None else datetime.fromtimestamp(value, UTC)


# --- the corpus ------------------------------------------------------------------------------


def envelope(*contents, finish="stop", **extra):
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1767225600,
        "model": "qwen",
        "choices": [
            {
                "index": i,
                "message": {"role": "assistant", "content": c, "tool_calls": []},
                "finish_reason": finish,
                "stop_reason": None,
            }
            for i, c in enumerate(contents)
        ],
        "usage": {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7},
        **extra,
    }


LOGPROBS = {
    "content": [
        {
            "token": " -",
            "logprob": -7.65,
            "bytes": [32, 45],
            "top_logprobs": [{"token": " -", "logprob": -7.65, "bytes": [32, 45]}],
        }
    ]
}


def vllm_body(*contents, logprobs=None, token_ids=None, prompt_token_ids=None):
    """A body in vLLM 0.32's exact shape (every key it writes, in its order)."""
    return {
        "id": "chatcmpl-b9bdd42719e08d67",
        "object": "chat.completion",
        "created": 1796036068,
        "model": "tiny-random",
        "choices": [
            {
                "index": i,
                "message": {
                    "role": "assistant",
                    "content": c,
                    "refusal": None,
                    "annotations": None,
                    "audio": None,
                    "function_call": None,
                    "reasoning": None,
                },
                "logprobs": logprobs,
                "finish_reason": "stop",
                "stop_reason": None,
                "token_ids": token_ids,
                "routed_experts": None,
            }
            for i, c in enumerate(contents)
        ],
        "service_tier": None,
        "system_fingerprint": "vllm-0.32.0-46aff662",
        "usage": {
            "prompt_tokens": 18,
            "total_tokens": 50,
            "completion_tokens": 32,
            "prompt_tokens_details": None,
            "completion_tokens_details": None,
        },
        "prompt_logprobs": None,
        "prompt_token_ids": prompt_token_ids,
        "prompt_text": None,
        "kv_transfer_params": None,
        "ec_transfer_params": None,
        "metrics": None,
    }


def dumps(value, ascii_only=False):
    return json.dumps(value, ensure_ascii=ascii_only)


GOOD = {
    "label": "x",
    "score": 0.5,
    "n": 3,
    "tags": ["a", "b"],
    "when": "2026-11-29T10:00:00",
    "inner": {"deep": [{"x": 1}, {"x": None}, {}]},
    "flag": True,
}

tool_call = envelope(None)
tool_call["choices"][0]["message"]["tool_calls"] = [
    {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}
]
tool_call["choices"][0]["finish_reason"] = "tool_calls"
int_stop = envelope(dumps(GOOD))
int_stop["choices"][0]["stop_reason"] = 128001
duplicate = dumps(envelope(dumps(GOOD)))[:-1] + ', "model": "second"}'

# (name, body, rescued the row must carry)
STRUCT_CASES = [
    ("valid", dumps(envelope(dumps(GOOD))), None),
    ("sparse", dumps(envelope('{"label": "only"}')), None),
    ("n-choices", dumps(envelope(dumps(GOOD), "```json\n" + dumps(GOOD) + "\n```", "no")), None),
    ("empty-choices", dumps(envelope()), None),
    ("no-choices", dumps({"id": "x", "object": "chat.completion", "created": 1}), None),
    (
        "metadata",
        dumps(envelope(dumps(GOOD), metadata={"trace": "t1", "n": [1, 2]})),
        {"metadata": {"trace": "t1", "n": [1, 2]}},
    ),
    ("null-extras", dumps(envelope(dumps(GOOD), system_fingerprint=None)), None),
    (
        "content-extras",
        dumps(
            envelope(
                '{"label": "x", "confidence": 0.9, "inner": {"deep": [{"x": 1, "y": 2}]}}',
                '{"z": [1]}',
                metadata={"m": 1},
            )
        ),
        {
            "choices[1].message.parsed.z": [1],
            "parsed.inner.deep[0].y": 2,
            "parsed.confidence": 0.9,
            "metadata": {"m": 1},
        },
    ),
    (
        "top-level-extras",
        dumps(
            envelope(
                '{"label": "x", "c": 1}',
                '{"z": {"deep": [1]}, "label": "y"}',
                metadata={"m": 1},
                system_fingerprint="fp",
            )
        ),
        {
            "choices[1].message.parsed.z": {"deep": [1]},
            "parsed.c": 1,
            "metadata": {"m": 1},
        },
    ),
    ("vllm-0.32-shape", dumps(vllm_body(dumps(GOOD), dumps(GOOD))), None),
    (
        "vllm-documented-extras-with-values",
        dumps(vllm_body(dumps(GOOD), token_ids=[1, 2], prompt_token_ids=[3])),
        {"choices[0].token_ids": [1, 2], "prompt_token_ids": [3]},
    ),
    ("vllm-logprobs", dumps(vllm_body(dumps(GOOD), logprobs=LOGPROBS)), None),
    ("raw-control-chars", dumps(envelope('{"label": "a\u0012b\nc\td", "n": 1}')), None),
    ("raw-control-chars-fenced", dumps(envelope('```json\n{"label": "x\ny"}\n```')), None),
    (
        "whitespace-runs",
        dumps(envelope("{" + " " * 700 + '"label":\t\r\n "x"' + " " * 300 + "}")),
        None,
    ),
    ("raw-nul-in-string", dumps(envelope('{"label": "a\u0000b"}')), None),
    ("parsed-in-body", dumps(envelope(dumps(GOOD), parsed={"label": "not from content"})), None),
    ("tool-calls", dumps(tool_call), None),
    (
        "unicode-escapes",
        dumps(envelope(dumps({**GOOD, "label": "caf\u00e9 \U0001f600 \u4e2d"}, True)), True),
        None,
    ),
    ("unicode-raw", dumps(envelope(dumps({**GOOD, "label": "caf\u00e9 \U0001f600"}))), None),
    (
        "numbers",
        dumps(envelope(dumps({"score": 1e308, "n": 9007199254740993}), dumps({"score": 5e-324}))),
        None,
    ),
    ("long-min", dumps(envelope(dumps({"n": -(2**63), "score": -0.0}))), None),
    ("int-score", dumps(envelope('{"score": 7, "n": -0}', '{"score": -0}')), None),
    ("zoned-time", dumps(envelope(dumps({**GOOD, "when": "2026-11-29T10:00:00+01:00"}))), None),
    ("odd-time", dumps(envelope(dumps({**GOOD, "when": "2026-11-29T10:00:00.5"}))), None),
    ("fenced", dumps(envelope("Sure!\n```json\n" + dumps(GOOD) + "\n```\nBye")), None),
    ("prose", dumps(envelope("Here: " + dumps(GOOD) + " hope it helps")), None),
    ("bom-ws", dumps(envelope("\ufeff \n" + dumps(GOOD) + "\n\t")), None),
    ("truncated", dumps(envelope('{"label": "cut', finish="length")), None),
    ("corrupt-content", dumps(envelope('{"label": "cut')), None),
    ("not-json", dumps(envelope("I cannot help with that.")), None),
    ("array-content", dumps(envelope("[1, 2]")), None),
    ("float-created", dumps({**envelope(dumps(GOOD)), "created": 1767225600.5}), None),
    ("int-stop-reason", dumps(int_stop), None),
    ("duplicate-key", duplicate, None),
    ("crlf", json.dumps(envelope(dumps(GOOD)), indent=1).replace("\n", "\r\n"), None),
    ("broken", '{"id": "x", "choices": [', None),
    ("empty-body", "", None),
    ("whitespace-body", "  \n ", None),
    ("bare-null", "null", None),
    ("array-body", "[]", None),
    ("number-body", "42", None),
    ("nan", '{"id": NaN}', None),
    ("invalid-utf8", b'{"id": "\xff\xfe"}', None),
    ("lone-surrogate", '{"id": "\\ud800"}', None),
    ("no-body", None, None),
]


def suite_files(prefix):
    return sorted(p for p in SUITE.iterdir() if p.name.startswith(prefix) and p.suffix == ".json")


def as_content(path):
    """A vLLM body whose content is the file's text (for files that are UTF-8 text)."""
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError:
        return None
    return dumps(envelope(text))


def assert_table(actual, rows, schema):
    expected = pa.Table.from_pylist(rows, schema=arrow_schema(schema))
    assert actual.schema.equals(expected.schema)
    if not actual.equals(expected):
        for i, (a, e) in enumerate(zip(actual.to_pylist(), expected.to_pylist(), strict=True)):
            assert a == e, f"row {i} differs"
        pytest.fail("tables differ in a way to_pylist does not show")
    # Arrow's equality takes -0.0 for 0.0; Spark shows the sign, so compare the values' reprs too.
    assert repr(actual.to_pylist()) == repr(expected.to_pylist())


# --- the tests -------------------------------------------------------------------------------


def test_struct_corpus_matches_python_json(backend):
    schema = response_schema(response_format=CONTENT)
    bodies = [body for _, body, _ in STRUCT_CASES]
    rows = [expected_row(body, fit_struct, rescued=r) for _, body, r in STRUCT_CASES]
    actual = parse_responses(bodies, response_format=CONTENT, backend=backend)
    assert actual.num_rows == len(bodies)
    assert_table(actual, rows, schema)


def test_json_test_suite_as_content(backend):
    target = response_schema(schema=_string_parsed())
    cases = [(p, as_content(p)) for p in suite_files("y_") + suite_files("n_")]
    cases = [(p, body) for p, body in cases if body is not None]
    actual = parse_responses([b for _, b in cases], schema=target, backend=backend)
    rows = [expected_row(body, fit_string) for _, body in cases]
    assert_table(actual, rows, target)
    statuses = dict(
        zip((p.name for p, _ in cases), actual.column("_status").to_pylist(), strict=True)
    )
    assert all(s == "ok" for name, s in statuses.items() if name.startswith("y_"))
    # An n_ document is never "ok" unless the content rule finds a valid object inside it
    # (prose around JSON is allowed), or its only fault is a raw control character inside a
    # string (allowed in content by default): those are listed, and checked, here.
    accepted = {n for n, s in statuses.items() if n.startswith("n_") and s == "ok"}
    control = set()
    for name in accepted:
        text = (SUITE / name).read_text()
        if find_json(text) == text.strip(WS):
            assert strict(text) is INVALID and lenient(text) is not INVALID, name
            control.add(name)
    assert {"n_string_unescaped_tab.json", "n_string_unescaped_newline.json"} <= control
    # Strict content (allowUnquotedControlChars=false): exactly those become corrupt_content.
    strict_table = parse_responses(
        [b for _, b in cases], schema=target, backend=backend, allow_unquoted_control_chars=False
    )
    strict_statuses = dict(
        zip((p.name for p, _ in cases), strict_table.column("_status").to_pylist(), strict=True)
    )
    assert {n for n in control if strict_statuses[n] == "corrupt_content"} == control
    assert {n for n, s in strict_statuses.items() if s != statuses[n]} == control


def test_json_test_suite_as_whole_bodies(backend):
    """Each file as the whole body: none crashes, n_ land in _corrupt_record, rows out = in."""
    paths = suite_files("y_") + suite_files("n_") + suite_files("i_")
    bodies = [p.read_bytes() for p in paths]
    target = response_schema(response_format=CONTENT)
    actual = parse_responses(bodies, response_format=CONTENT, backend=backend)
    assert actual.num_rows == len(bodies)
    reference = ReferenceParser(target).parse(bodies)
    assert actual.equals(reference)
    for path, row in zip(paths, actual.to_pylist(), strict=True):
        if path.name.startswith("n_"):
            assert row["_status"] == "corrupt_envelope", path.name
            assert row["_corrupt_record"] == path.read_bytes().decode("utf-8", "replace")
        if path.name.startswith("y_"):
            value = strict(path.read_text())
            assert value is not INVALID, path.name
            assert row["_status"] == (
                "corrupt_envelope" if not isinstance(value, dict) else "empty"
            )


def test_vectorised_and_reference_parsers_agree_on_drift():
    """Rows with content drift go through the reference parser inside the CPU backend."""
    schema = response_schema(response_format=CONTENT)
    drift = [
        dumps(envelope('{"label": "x", "n": "three", "extra": {"a": 1}}')),
        dumps(envelope(dumps(GOOD), '{"label": 5, "when": "not a date"}')),
        dumps(envelope('{"when": 1767225600, "score": 1e400}')),
        dumps(envelope('{"n": 1.0, "tags": [1, "a"]}')),
    ]
    bodies = [dumps(envelope(dumps(GOOD)))] * 3 + drift
    actual = parse_responses(bodies, response_format=CONTENT, backend="cpu")
    reference = ReferenceParser(schema).parse(bodies)
    assert actual.drop_columns("_status").equals(reference.drop_columns("_status"))
    # parse_responses' word for a value that does not fit its field of parsed (schema/fit.py)
    assert actual.column("_status").to_pylist() == [
        *(["ok"] * 3),
        *["schema_mismatch", "ok", "schema_mismatch", "schema_mismatch"],
    ]
    rescued = [json.loads(r) if r else None for r in actual.column("_rescued_data").to_pylist()]
    assert rescued[3] == {"parsed.n": "three", "parsed.extra": {"a": 1}}
    assert rescued[4] == {"choices[1].message.parsed.when": "not a date"}
    assert actual.column("choices")[4].as_py()[1]["message"]["parsed"]["label"] == "5"
    assert rescued[5] == {"parsed.score": "1e400"}
    assert actual.column("parsed")[5].as_py()["when"] == datetime(2026, 1, 1, tzinfo=UTC)
    assert rescued[6] == {"parsed.n": 1.0}
    assert actual.column("parsed")[6].as_py()["tags"] == ["1", "a"]
    assert not math.isnan(actual.column("parsed")[3].as_py()["score"] or 0.0)


def _string_parsed():
    from pyspark.sql.types import StringType

    full = response_schema()
    return _with_parsed(full, StringType())


def _with_parsed(schema, parsed_type):
    from pyspark.sql.types import ArrayType, StructField, StructType

    fields = []
    for f in schema.fields:
        if f.name == "choices":
            choice = f.dataType.elementType
            message = choice["message"].dataType
            message = StructType([*message.fields, StructField("parsed", parsed_type)])
            choice = StructType(
                [StructField(c.name, message) if c.name == "message" else c for c in choice.fields]
            )
            fields.append(StructField("choices", ArrayType(choice)))
        else:
            fields.append(f)
    fields.insert(len(fields) - 3, StructField("parsed", parsed_type))
    return StructType(fields)


def test_the_vectorised_path_takes_conforming_rows_and_only_misfits_go_row_by_row():
    from dspark_json.parse.cpu import CpuParser

    parser = CpuParser(response_schema(response_format=CONTENT))
    good = [dumps(envelope(dumps(GOOD), "```json\n" + dumps(GOOD) + "\n```"))] * 50
    broken = ["{", "", None, dumps(envelope("no json", '{"cut'))]
    extras = [dumps(envelope('{"label": "x", "new": 1}', metadata={"a": 1}))]
    drift = [dumps(envelope('{"n": "three"}'))]  # a value to rescue: row by row
    table = parser.parse(good + broken + extras + drift)
    assert parser.reference_rows == len(drift)
    assert table.num_rows == len(good + broken + extras + drift)
    assert table.column("_rescued_data")[len(good + broken)].as_py() == (
        '{"parsed.new":1,"metadata":{"a":1}}'
    )


@pytest.mark.parametrize("lenient", [True, False])
def test_the_rules_in_plain_python_agree_with_the_kernels(lenient):
    """The reference parser without numba (a cold process's first batches) gives what it gives
    with the kernels, on every corpus: whole bodies, contents, struct cases."""
    bodies = [body for _, body, _ in STRUCT_CASES]
    paths = suite_files("y_") + suite_files("n_") + suite_files("i_")
    bodies += [p.read_bytes() for p in paths]
    bodies += [b for b in (as_content(p) for p in paths) if b is not None]
    for schema in (
        response_schema(response_format=CONTENT),
        response_schema(schema=_string_parsed()),
    ):
        with_kernels = ReferenceParser(schema, lenient=lenient).parse(bodies)
        plain = ReferenceParser(schema, lenient=lenient, kernels=False).parse(bodies)
        for name in with_kernels.column_names:
            a, b = with_kernels.column(name).to_pylist(), plain.column(name).to_pylist()
            wrong = [i for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y]
            assert not wrong, f"{name}: rows {wrong[:5]} differ, e.g. {bodies[wrong[0]][:120]!r}"


ARRAY_CONTENT = {
    "type": "array",
    "items": {
        "type": "object",
        "properties": {"title": {"type": "string"}, "pages": {"type": "integer"}},
    },
}


@pytest.mark.parametrize("choices", [1, 2])
def test_top_level_arrays_whose_elements_carry_unknown_keys_rescue_one_spelling(choices):
    """A content that is a JSON array: its elements' unknown keys are rescued as
    ``parsed[0].subtitle`` (and ``choices[1].message.parsed[0].subtitle``) by the kernels' path
    as by the reference parser, which spells an element index after its column without a dot."""
    from dspark_json.parse.cpu import CpuParser

    schema = response_schema(response_format=ARRAY_CONTENT)
    items = '[{"title": "a", "subtitle": "b"}, {"title": "c", "pages": 3, "isbn": [1, 2]}]'
    fitting = [dumps(envelope('[{"title": "x", "pages": 1}]'))] * 30
    bodies = fitting + [dumps(envelope(*[items] * choices))] * 3
    parser = CpuParser(schema)
    actual = parser.parse(bodies)
    assert parser.reference_rows == 0  # the kernels' path took every row, the rescue too
    assert actual.equals(ReferenceParser(schema).parse(bodies))
    expected = {"parsed[0].subtitle": "b", "parsed[1].isbn": [1, 2]}
    if choices == 2:
        expected |= {
            "choices[1].message.parsed[0].subtitle": "b",
            "choices[1].message.parsed[1].isbn": [1, 2],
        }
    assert json.loads(actual.column("_rescued_data")[-1].as_py()) == expected
