"""What the stages read of an answer (response/answers.py): read from the parser's table, it
equals what decoding the body gives, over a varied corpus, for the CPU backend and the
reference parser; where the table cannot say (a pruned or retyped envelope), the bodies are
read instead."""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql.types import ArrayType, LongType, StructField, StructType

from dspark_json.dev.simulator import Faults, Simulator, vllm_choice, vllm_completion
from dspark_json.parse import make_parser
from dspark_json.parse.reference import ReferenceParser
from dspark_json.response import answers
from dspark_json.response.answers import Answer, Call, decode_answer, first_message, read_answers
from dspark_json.schema.output import output_schema, response_fields, tool_arguments
from dspark_json.schema.tools import as_tools
from tests.schema.test_tools import WEATHER

SCHEMA = {
    "type": "object",
    "properties": {"word": {"type": "string"}, "n": {"type": "integer"}},
    "required": ["word", "n"],
}
USAGE = {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7}


def _body(
    content: Any = '{"word": "a", "n": 1}', finish: Any = "stop", usage: Any = USAGE, **message
):
    choice = vllm_choice(0, content, finish)
    choice["message"].update(message)
    answer = vllm_completion(
        id="x",
        created=1,
        model="m",
        choices=[choice],
        usage=usage if isinstance(usage, dict) else {},
        fingerprint="f",
    )
    if not isinstance(usage, dict):
        answer["usage"] = usage
    return json.dumps(answer)


def _call(name: Any, arguments: Any) -> dict[str, Any]:
    return {"id": "c", "type": "function", "function": {"name": name, "arguments": arguments}}


def _simulated() -> list[str]:
    """The simulator's own answers, its first-answer and tool-call faults among them."""
    faults = Faults(
        first_truncated_rate=0.2,
        first_broken_rate=0.2,
        first_prose_rate=0.2,
        first_invalid_rate=0.2,
        tool_broken_rate=0.3,
        tool_drift_rate=0.2,
        tool_unknown_rate=0.2,
    )
    simulator = Simulator(seed=3, faults=faults)
    out = []
    for i in range(40):
        request: dict[str, Any] = {
            "model": simulator.model,
            "messages": [{"role": "user", "content": f"q{i}"}],
            "max_tokens": 64,
        }
        if i % 2:
            request["response_format"] = {"type": "json_schema", "json_schema": {"schema": SCHEMA}}
        else:
            request["tools"] = [WEATHER]
        status, payload = simulator._chat(json.dumps(request).encode())
        assert status == 200
        out.append(json.dumps(payload))
    return out


#: A raw newline inside one of the envelope's strings: not JSON (the server writes strict JSON).
RAW_NEWLINE = _body().replace('"model": "m"', '"model": "m\nx"')
CORPUS: list[str | None] = [
    *_simulated(),
    _body(),
    _body(refusal="I cannot help with that."),
    _body(refusal=""),
    _body(content=None, finish="content_filter"),
    _body(content=None, tool_calls=[_call("get_weather", '{"city": "Oslo"}')]),
    _body(content=None, tool_calls=[_call("get_weather", '{"city": "Oslo",}'), _call("f", "")]),
    _body(content=None, tool_calls=[_call(None, None), None, {"function": None}, {"id": "c"}]),
    _body(content=None, tool_calls=[_call(5, {"city": "Oslo"})]),  # not strings
    _body(content=None, tool_calls=[]),
    _body(content=None, tool_calls={"get_weather": {}}),
    _body(usage=None),
    _body(usage={"prompt_tokens": 3.0, "completion_tokens": True}),
    _body(usage={"prompt_tokens": 2**70, "completion_tokens": -1}),
    _body(usage=5),
    _body(content=5),
    _body(content={"word": "a", "n": 1}),
    _body(content=["x", {"y": None}]),
    _body(content=True),
    _body(content=""),
    _body(finish=7),
    _body(refusal=False),  # Spark's rule: "false", a refusal
    '{"choices": []}',
    '{"choices": ["x"]}',
    '{"choices": {"0": {"message": {"content": "a"}}}}',
    '{"choices": [{"message": "text", "finish_reason": "stop"}]}',
    '{"choices": [{"message": {"content": "a", "content": "b"}}]}',  # the last key wins
    '{"usage": {"prompt_tokens": 1}}',
    "[1, 2]",
    "not json",
    _body()[:80],  # cut
    RAW_NEWLINE,
    "",
    None,
    "[" * 600 + "]" * 600,
]


def _schemas() -> dict[str, StructType]:
    tools = tool_arguments(as_tools([WEATHER]))
    return {
        "plain": response_fields(output_schema()),
        "parsed": response_fields(output_schema(response_format=SCHEMA)),
        "tools": response_fields(output_schema(tools=tools)),
    }


@pytest.mark.parametrize("schema", ["plain", "parsed", "tools"])
@pytest.mark.parametrize("parser", ["cpu", "reference"])
def test_the_answers_read_from_the_parse_equal_the_bodies_decoded(parser, schema, monkeypatch):
    target = _schemas()[schema]
    parse = make_parser(target, "cpu") if parser == "cpu" else ReferenceParser(target)
    bodies = pa.array(CORPUS, pa.large_string())
    table = parse.parse(bodies if parser == "cpu" else CORPUS)  # the reference: Python text

    def decoded(body: str | None) -> Answer:
        raise AssertionError("the table has every field: no body is decoded")

    expected = [decode_answer(b) for b in CORPUS]
    monkeypatch.setattr(answers, "decode_answer", decoded)
    assert read_answers(table, bodies) == expected
    some = [len(CORPUS) - 1, 3, 0, 41]
    assert read_answers(table, bodies, some) == [expected[i] for i in some]


def test_what_an_answer_reads():
    """The values themselves, conforming answers and not (Spark's rule for a string field that
    holds another JSON value: its compact JSON text)."""
    read = read_answers(
        ReferenceParser(_schemas()["plain"]).parse(CORPUS),
        pa.array(CORPUS, pa.large_string()),
    )
    by_body = dict(zip(CORPUS, read, strict=True))
    assert by_body[_body()] == Answer(
        content='{"word": "a", "n": 1}', finish_reason="stop", prompt_tokens=3, completion_tokens=4
    )
    assert by_body[_body(refusal="I cannot help with that.")].refused
    assert not by_body[_body(refusal="")].refused
    assert by_body[_body(content=None, finish="content_filter")].refused
    assert by_body[
        _body(content=None, tool_calls=[_call("get_weather", '{"city": "Oslo",}'), _call("f", "")])
    ].calls == (Call("get_weather", '{"city": "Oslo",}'), Call("f", ""))
    assert by_body[
        _body(content=None, tool_calls=[_call(None, None), None, {"function": None}, {"id": "c"}])
    ].calls == (Call(None, None),)
    assert by_body[_body(content=None, tool_calls=[_call(5, {"city": "Oslo"})])].calls == (
        Call("5", '{"city":"Oslo"}'),
    )
    floats = by_body[_body(usage={"prompt_tokens": 3.0, "completion_tokens": True})]
    assert (floats.prompt_tokens, floats.completion_tokens) == (None, None)
    huge = by_body[_body(usage={"prompt_tokens": 2**70, "completion_tokens": -1})]
    assert (huge.prompt_tokens, huge.completion_tokens) == (None, -1)
    assert by_body[_body(usage=None)].prompt_tokens is None
    assert by_body[_body(content=5)].content == "5"
    assert by_body[_body(content={"word": "a", "n": 1})].content == '{"word":"a","n":1}'
    assert by_body[_body(finish=7)].finish_reason == "7"
    assert by_body[_body(refusal=False)].refused
    assert by_body['{"choices": [{"message": {"content": "a", "content": "b"}}]}'].content == "b"
    for body in ["not json", _body()[:80], RAW_NEWLINE, "", None, "[1, 2]"]:
        assert by_body[body] == Answer(), body


def _pruned(drop: str = "", retype: str = "") -> StructType:
    """The plain envelope with the message's field ``drop`` left out, or its ``retype`` a long
    (as a user's .schema(...) or schemaHints may)."""
    full = _schemas()["plain"]
    choice = full["choices"].dataType.elementType
    message = StructType(
        [
            StructField(f.name, LongType()) if f.name == retype else f
            for f in choice["message"].dataType.fields
            if f.name != drop
        ]
    )
    choice = StructType(
        [StructField("message", message) if f.name == "message" else f for f in choice.fields]
    )
    return StructType(
        [StructField("choices", ArrayType(choice)) if f.name == "choices" else f for f in full]
    )


@pytest.mark.parametrize(
    "schema",
    [
        StructType([f for f in _schemas()["plain"].fields if f.name != "usage"]),
        _pruned(retype="content"),
        _pruned(drop="refusal"),
        _pruned(drop="tool_calls"),
    ],
    ids=["no usage", "content retyped", "no refusal", "no tool calls"],
)
def test_a_pruned_or_retyped_envelope_is_read_from_the_bodies(schema):
    """A user schema without usage, with content retyped, without refusal: the table cannot
    say, so the bodies are decoded (the parser's schema is not widened: _rescued_data stays as
    it was)."""
    bodies = pa.array(CORPUS, pa.large_string())
    table = ReferenceParser(schema).parse(CORPUS)
    assert read_answers(table, bodies) == [decode_answer(b) for b in CORPUS]


def test_first_message_is_the_first_choices_message_or_none():
    answer = vllm_completion(
        id="c",
        created=1,
        model="m",
        choices=[vllm_choice(0, "hi", "stop")],
        usage=USAGE,
        fingerprint="f",
    )
    assert first_message(json.dumps(answer)) == answer["choices"][0]["message"]
    for body in [
        None,
        "",
        "not json",
        "[]",
        '{"choices": []}',
        '{"choices": {"0": 1}}',
        '{"choices": "abc"}',
        '{"choices": [{"index": 0}]}',
        "[" * 600 + "]" * 600,
    ]:
        assert first_message(body) is None, body
    assert first_message('{"choices": [{"message": "text"}]}') == "text"  # the caller checks
