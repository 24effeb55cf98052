"""Tool calls as typed columns: each call's ``function.arguments`` (JSON in a JSON string, as
``content`` is) parsed into ``tool_calls.<function>[i].arguments``, typed from the function's
``parameters``. The rules are stated here row by row (the reference parser's), then random
documents hold the kernels' path to the reference's table, byte for byte, in both the kernels'
and the plain-Python reference."""

import json
import random

import pytest

from dspark_json import parse_responses, response_schema
from dspark_json.parse.cpu import CpuParser
from dspark_json.parse.reference import ReferenceParser

WEATHER = {
    "type": "object",
    "properties": {
        "city": {"type": "string"},
        "days": {"type": "integer"},
        "units": {"type": "string", "enum": ["c", "f"]},
        "when": {"type": "string", "format": "date-time"},
        "stops": {
            "type": "array",
            "items": {"type": "object", "properties": {"x": {"type": "number"}}},
        },
    },
    "required": ["city"],
}
TIME = {"type": "object", "properties": {"zone": {"type": "string"}, "free": {}}}
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "parameters": WEATHER}},
    {"type": "function", "function": {"name": "get_time", "parameters": TIME}},
    {"type": "function", "function": {"name": "ping"}},  # no parameters: the JSON text
]
SCHEMA = response_schema(tools=TOOLS)
CONTENT = {"type": "object", "properties": {"answer": {"type": "string"}}}
WITH_CONTENT = response_schema(response_format=CONTENT, tools=TOOLS)


@pytest.fixture(params=["cpu", pytest.param("gpu", marks=pytest.mark.gpu)])
def backend(request):
    return request.param


def body(*calls, content=None, finish="tool_calls", choices=1):
    """A vLLM 0.32 answer whose first choice makes ``calls`` ((name, arguments text), ...)."""
    message = {"role": "assistant", "content": content, "refusal": None}
    if calls:
        message["tool_calls"] = [
            {
                "id": f"chatcmpl-tool-{i:032x}",
                "type": "function",
                "function": {"name": name, "arguments": arguments},
            }
            for i, (name, arguments) in enumerate(calls)
        ]
    choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": finish}
    return json.dumps(
        {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "created": 1,
            "model": "m",
            "choices": [choice] * choices,
        }
    )


def rows(bodies, schema=SCHEMA, backend="cpu"):
    table = parse_responses(bodies, schema=schema, backend=backend)
    return table.select(["tool_calls", "_status", "_rescued_data", "_corrupt_record"]).to_pylist()


def test_the_column_is_a_struct_of_each_functions_calls_typed_from_its_parameters():
    calls = SCHEMA["tool_calls"].dataType
    assert calls.names == ["get_weather", "get_time", "ping"]
    assert calls["get_weather"].dataType.simpleString() == (
        "array<struct<id:string,arguments:struct<city:string,days:bigint,units:string,"
        "when:timestamp,stops:array<struct<x:double>>>>>"
    )
    assert calls["ping"].dataType.simpleString() == "array<struct<id:string,arguments:string>>"


def test_two_functions_calls_land_typed_with_their_ids(backend):
    [row] = rows(
        [body(("get_weather", '{"city": "Oslo", "days": 3}'), ("get_time", '{"zone": "CET"}'))],
        backend=backend,
    )
    assert row == {
        "tool_calls": {
            "get_weather": [
                {
                    "id": f"chatcmpl-tool-{0:032x}",
                    "arguments": {
                        "city": "Oslo",
                        "days": 3,
                        "units": None,
                        "when": None,
                        "stops": None,
                    },
                }
            ],
            "get_time": [
                {"id": f"chatcmpl-tool-{1:032x}", "arguments": {"zone": "CET", "free": None}}
            ],
            "ping": None,  # not called: null, so that SQL's ping[0] is null too
        },
        "_status": "ok",
        "_rescued_data": None,
        "_corrupt_record": None,
    }


def test_no_call_is_a_null_column_and_the_content_decides(backend):
    [plain, prose] = rows([body(content="hi"), body(content="hi")], WITH_CONTENT, backend)
    assert plain["tool_calls"] is None and plain["_status"] == "not_json"
    assert prose["_corrupt_record"] == "hi"


def test_calls_decide_the_status_over_a_null_content(backend):
    [row] = rows([body(("get_time", "{}"))], WITH_CONTENT, backend)
    assert row["_status"] == "ok" and row["_corrupt_record"] is None


@pytest.mark.parametrize(
    ("arguments", "finish", "status"),
    [
        ('{"city": "Os', "tool_calls", "corrupt_content"),
        ('{"city": "Os', "length", "truncated"),
        ("[1, 2]", "tool_calls", "corrupt_content"),  # not an object
        ("the weather in Oslo", "tool_calls", "corrupt_content"),  # no JSON at all
    ],
)
def test_arguments_that_are_not_json_or_not_an_object_keep_their_text(
    backend, arguments, finish, status
):
    [row] = rows(
        [body(("get_time", '{"zone": "CET"}'), ("get_weather", arguments), finish=finish)],
        backend=backend,
    )
    assert row["_status"] == status
    assert row["_corrupt_record"] == arguments
    assert row["tool_calls"]["get_weather"] == [
        {"id": f"chatcmpl-tool-{1:032x}", "arguments": None}
    ]
    assert row["tool_calls"]["get_time"][0]["arguments"]["zone"] == "CET"


def test_drifting_arguments_are_rescued_by_path_and_the_row_is_ok(backend):
    [row] = rows(
        [body(("get_weather", '{"city": "Oslo", "days": "three", "wind": true}'))], backend=backend
    )
    assert row["_status"] == "ok"
    assert json.loads(row["_rescued_data"]) == {
        "tool_calls.get_weather[0].arguments.days": "three",
        "tool_calls.get_weather[0].arguments.wind": True,
    }
    assert row["tool_calls"]["get_weather"][0]["arguments"]["city"] == "Oslo"


def test_a_function_not_offered_is_corrupt_content_and_kept_under_its_name(backend):
    [row] = rows(
        [body(("get_weather", '{"city": "Oslo"}'), ("book_flight", '{"to": "Rome"}'))],
        backend=backend,
    )
    assert row["_status"] == "corrupt_content"
    assert json.loads(row["_rescued_data"]) == {
        "tool_calls.book_flight": [{"id": f"chatcmpl-tool-{1:032x}", "arguments": {"to": "Rome"}}]
    }
    assert row["tool_calls"]["get_weather"][0]["arguments"]["city"] == "Oslo"


def test_a_function_without_parameters_holds_its_arguments_json_text(backend):
    [row] = rows([body(("ping", '{"a": [1, 2.50]}'))], backend=backend)
    assert row["tool_calls"]["ping"][0]["arguments"] == '{"a":[1,2.5]}'
    assert row["_status"] == "ok"


# --- random documents: the kernels' path equals the reference's ----------------------------

WORDS = ["Oslo", "caf\u00e9", 'say \\"hi\\"', "tab\\there", "\\u00e9", "", "\\ud83d\\ude00"]


def _arguments(rng):
    """A call's name and arguments text: mostly conforming, sometimes drifting, broken, fenced,
    not offered, or odd JSON (escaped keys, repeated keys, whitespace)."""
    ws = rng.choice(["", " ", "\n  "])
    roll = rng.random()
    name = rng.choice(["get_weather", "get_weather", "get_time", "ping"])
    if name == "get_weather":
        parts = [f'"city":{ws}"{rng.choice(WORDS)}"']
        if rng.random() < 0.7:
            parts.append(f'"days":{ws}{rng.randint(-5, 10**12)}')
        if rng.random() < 0.3:
            parts.append(f'"units":"{rng.choice("cf")}"')
        if rng.random() < 0.2:
            parts.append('"when":"2026-01-02T03:04:05Z"')
        if rng.random() < 0.4:
            stops = ",".join(
                f'{{"x":{rng.choice(["1", "2.5", "-0", "1e3"])}}}' for _ in range(rng.randint(0, 3))
            )
            parts.append(f'"stops":[{stops}]')
        if rng.random() < 0.08:
            parts.append('"wind":{"kph":12}')  # drift: a key the schema lacks
        if rng.random() < 0.05:
            parts.append('"days":"three"')  # drift: a value of another type (repeated key too)
        if rng.random() < 0.03:
            parts.append('"\\u0063ity":"escaped key"')
        rng.shuffle(parts)
        text = "{" + ws + ("," + ws).join(parts) + ws + "}"
    elif name == "get_time":
        free = rng.choice(["1", '"x"', '[1, {"k": null}]', "{}", "true", "1.50"])
        text = (
            f'{{"zone":{ws}"{rng.choice(WORDS)}", "free": {free}}}' if rng.random() < 0.8 else "{}"
        )
    else:
        text = rng.choice(["{}", '{"a": 1}', '"just text"', "[1,2]", "null", "3.0"])
    if roll < 0.06:
        text = text[: max(1, len(text) // 2)]  # cut short: not JSON
    elif roll < 0.09:
        text = f"```json\n{text}\n```"  # fenced, as content may be
    elif roll < 0.11:
        name = "book_flight"  # not offered
    elif roll < 0.12:
        text = "no json here"
    return name, text


def random_body(rng):
    if rng.random() < 0.1:
        return body(content=rng.choice(['{"answer": "x"}', "prose", None]))
    calls = [_arguments(rng) for _ in range(rng.choice([1, 1, 1, 2, 3]))]
    content = rng.choice([None, None, None, '{"answer": "a"}', "Let me check."])
    finish = rng.choice(["tool_calls", "tool_calls", "stop", "length"])
    return body(*calls, content=content, finish=finish, choices=rng.choice([1, 1, 1, 2]))


def assert_same(ours, reference, bodies):
    for name in reference.column_names:
        a, b = ours.column(name).to_pylist(), reference.column(name).to_pylist()
        wrong = [i for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y]
        assert not wrong, f"{name}: rows {wrong[:5]} differ, e.g. {bodies[wrong[0]][:400]!r}"
    assert ours.equals(reference)


@pytest.mark.parametrize("schema", [SCHEMA, WITH_CONTENT], ids=["tools", "tools+content"])
@pytest.mark.parametrize("seed", range(3))
def test_random_tool_calls_on_the_kernels_path_equal_the_reference(seed, schema):
    rng = random.Random(seed)
    bodies = [random_body(rng) for _ in range(400)]
    parser = CpuParser(schema)
    ours = parser.parse_vectorised(bodies)
    reference = ReferenceParser(schema).parse(bodies)
    assert_same(ours, reference, bodies)
    assert_same(ReferenceParser(schema, kernels=False).parse(bodies), reference, bodies)
    statuses = set(reference.column("_status").to_pylist())
    assert {"ok", "corrupt_content", "truncated"} <= statuses
    # Most rows stay on the kernels' path: only drift, functions not offered and values to
    # convert (timestamps) take the reference.
    assert parser.reference_rows < len(bodies) // 2
    assert "tool_calls_misfit" in parser.reference_reasons


def test_conforming_calls_never_leave_the_kernels_path():
    rng = random.Random(7)
    bodies = [
        body(
            ("get_weather", json.dumps({"city": rng.choice(["Oslo", "Rome"]), "days": i})),
            ("get_time", json.dumps({"zone": "CET", "free": [i]})),
            ("ping", "{}"),
        )
        for i in range(200)
    ]
    parser = CpuParser(SCHEMA)
    ours = parser.parse_vectorised(bodies)
    assert parser.reference_rows == 0
    assert_same(ours, ReferenceParser(SCHEMA).parse(bodies), bodies)


def test_backends_agree_on_tool_calls(backend):
    rng = random.Random(11)
    bodies = [random_body(rng) for _ in range(200)]
    ours = parse_responses(bodies, tools=TOOLS, backend=backend)
    assert_same(ours, ReferenceParser(SCHEMA).parse(bodies), bodies)


def test_calls_with_keys_their_type_lacks_are_rescued_on_the_kernels_path():
    bodies = [
        body(
            ("get_time", '{"zone": "CET"}'),
            ("get_weather", json.dumps({"city": "Oslo", "wind": {"kph": i}, "gust": None})),
            ("get_weather", json.dumps({"city": "Rome", "stops": [{"x": 1, "y": [i]}]})),
        )
        for i in range(50)
    ] + [body(("get_weather", '{"city": "Oslo"}'))]
    parser = CpuParser(SCHEMA)
    ours = parser.parse_vectorised(bodies)
    assert parser.reference_rows == 0
    assert_same(ours, ReferenceParser(SCHEMA).parse(bodies), bodies)
    assert json.loads(ours.column("_rescued_data")[3].as_py()) == {
        "tool_calls.get_weather[0].arguments.wind": {"kph": 3},
        "tool_calls.get_weather[1].arguments.stops[0].y": [3],
    }
    # With drift in the envelope too, the reference parser orders the two.
    drifting = json.loads(bodies[0])
    drifting["metadata"] = {"trace": 1}
    more = [*bodies, json.dumps(drifting)]
    ours = parser.parse_vectorised(more)
    assert parser.reference_reasons == {"tool_calls_misfit": 1}
    assert_same(ours, ReferenceParser(SCHEMA).parse(more), more)
