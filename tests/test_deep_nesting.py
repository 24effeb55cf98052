"""Documents nested deeper than anything reads them: a row with a status and the reason, never a
RecursionError, wherever the JSON comes from (a prompt line, a recorded line, an answer, its
content, an option)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from dspark_json.errors import OptionError, ServerError
from dspark_json.inputs.listing import PromptListing, Segment
from dspark_json.inputs.prompts import infer_passthrough, read_segment
from dspark_json.inputs.recorded import read_recorded
from dspark_json.load import prepare, resolve_parsed, resolve_schema
from dspark_json.options import Options
from dspark_json.parse.json import grammar
from dspark_json.parse.json.conform import validate_row
from dspark_json.pipeline import answer, fetch
from dspark_json.records import PromptRows
from dspark_json.response.answers import decode_answer
from dspark_json.rows import MAX_NESTING, exceeds_nesting
from dspark_json.schema.inference import TYPED_NESTING, contents_of, infer_type
from dspark_json.schema.validation import schema_violations
from tests.raw_servers import Request, alive, completion, raw_server, response

DEEP = 100_000


def deep_array(levels: int = DEEP) -> str:
    return "[" * levels + "]" * levels


def deep_object(levels: int, leaf: str = "1") -> str:
    return '{"a": ' * levels + leaf + "}" * levels


def test_the_limit_is_the_parse_kernels_limit_and_agrees_with_their_scan():
    assert MAX_NESTING == grammar.MAX_DEPTH
    for levels in (MAX_NESTING, MAX_NESTING + 1):
        for text in (deep_array(levels), deep_object(levels)):
            raw = text.encode()
            rejected = validate_row(np.frombuffer(raw, np.uint8), 0, len(raw)) == 0
            assert exceeds_nesting(raw) == rejected == (levels > MAX_NESTING)
    # Brackets inside strings, escaped quotes included, do not nest.
    assert not exceeds_nesting(json.dumps({"s": "[" * 2000 + '\\"' + "{" * 2000}))


def test_deep_prompt_lines_are_invalid_prompt_rows_with_the_reason(tmp_path):
    lines = [
        deep_array(),
        json.dumps({"custom_id": "ok-1", "prompt": "hi"}),
        '{"custom_id": "deep-field", "prompt": "hi", "extra": ' + deep_array() + "}",
        json.dumps({"custom_id": "ok-2", "prompt": "[" * 5000}),  # brackets in a string
    ]
    (tmp_path / "a.jsonl").write_text("\n".join(lines) + "\n")
    records = list(read_segment(Segment(str(tmp_path / "a.jsonl"), 0, 4)))
    assert [r.problem is None for r in records] == [False, True, False, True]
    for bad in (records[0], records[2]):
        assert f"nested more than {MAX_NESTING} levels" in bad.problem
    assert records[3].messages[0]["content"] == "[" * 5000


def test_a_deep_first_line_does_not_break_the_schema_sample(tmp_path):
    (tmp_path / "a.jsonl").write_text(
        deep_array() + "\n" + json.dumps({"prompt": "p", "n": 1}) + "\n"
    )
    fields = infer_passthrough(PromptListing(str(tmp_path)))
    assert [(f.name, f.dataType.simpleString()) for f in fields] == [
        ("prompt", "string"),
        ("n", "bigint"),
    ]


def test_a_deep_recorded_line_is_a_corrupt_body_not_a_crash(tmp_path):
    (tmp_path / "r.jsonl").write_text(deep_object(DEEP) + "\n")
    _, outcomes = read_recorded([Segment(str(tmp_path / "r.jsonl"), 0, 1)])
    (outcome,) = outcomes
    assert outcome.body == deep_object(DEEP) and outcome.error is None


def test_a_deep_answer_is_skipped_by_inference_and_not_validated():
    body = json.dumps(completion(deep_array()))
    assert contents_of([body]) == []
    # Not validated, and said so: [] would mean it conforms (issue 45).
    assert schema_violations({"type": "array"}, [decode_answer(body).content]) == [
        [f"$: not validated: the JSON is nested more than {MAX_NESTING} levels deep"]
    ]


def test_validate_schema_on_a_value_deeper_than_it_checks_says_so():
    schema = {
        "anyOf": [
            {"type": "array", "items": {"$ref": "#"}},
            {"type": "object", "additionalProperties": {"$ref": "#"}},
            {"type": "integer"},
        ]
    }
    shallow = json.dumps(completion(deep_object(10)))
    deep = json.dumps(completion(deep_object(300)))  # within MAX_NESTING, beyond jsonschema
    assert schema_violations(schema, [decode_answer(b).content for b in (shallow, deep)]) == [
        [],
        [f"$: nested more than {TYPED_NESTING} levels deep, not validated"],
    ]


def test_inference_types_at_most_its_depth_and_then_a_string():
    parsed = infer_type([json.loads(deep_object(300)), json.loads(deep_array(200))])
    assert parsed.simpleString() == "string"  # a struct and an array: a mix
    typed = infer_type([json.loads(deep_object(300))])
    levels, current = 0, typed
    while current.simpleString().startswith("struct"):
        levels, current = levels + 1, current["a"].dataType
    assert levels == TYPED_NESTING and current.simpleString() == "string"


def test_a_deep_response_format_is_an_option_error():
    with pytest.raises(OptionError) as caught:
        Options.parse(
            {"endpoint": "http://h:1", "prompts": "/p", "responseFormat": deep_object(DEEP)}
        )
    assert "'responseFormat'" in str(caught.value) and "512 levels" in str(caught.value)


def deep_answers(request: Request) -> bytes | None:
    """A server whose answers hold 100,000-deep JSON, except for one prompt."""
    if alive(request):
        return alive(request)
    sent = json.loads(request.raw.partition(b"\r\n\r\n")[2])
    if sent["messages"][-1]["content"] == "fine":
        return response(200, completion('{"score": 1}'))
    return response(200, completion(deep_array()))


def test_inference_at_load_against_a_server_answering_deep_json(tmp_path):
    (tmp_path / "a.jsonl").write_text(
        "".join(json.dumps({"prompt": p}) + "\n" for p in ("deep", "fine", "deep"))
    )
    with raw_server(deep_answers) as server:
        query = prepare(Options.parse({"endpoint": server.url, "prompts": str(tmp_path)}))
        resolved = resolve_parsed(query)
    assert resolved.parsed.simpleString() == "struct<score:bigint>"
    assert resolved.source == "inferred from 1 sample answer(s)"


def test_validate_schema_and_the_parser_keep_deep_answers_as_rows(tmp_path):
    (tmp_path / "a.jsonl").write_text(
        "".join(json.dumps({"prompt": p}) + "\n" for p in ("deep", "fine"))
    )
    schema_text = json.dumps({"type": "object", "properties": {"score": {"type": "integer"}}})
    with raw_server(deep_answers) as server:
        options = {
            "endpoint": server.url,
            "prompts": str(tmp_path),
            "responseFormat": schema_text,
            "validateSchema": "true",
        }
        query = prepare(Options.parse(options))
        records = list(read_segment(Segment(str(tmp_path / "a.jsonl"), 0, 2)))
        fetched = fetch(records, query)
        answers = answer(PromptRows.of(records), query, resolve_schema(query, []), fetched=fetched)
    assert answers.statuses == ["corrupt_content", "ok"]
    assert answers.violations == [
        [f"$: not validated: the JSON is nested more than {MAX_NESTING} levels deep"],
        [],
    ]
    assert answers.responses.column("parsed").to_pylist() == [None, {"score": 1}]


def test_a_deep_extra_body_option_is_an_option_error():
    with pytest.raises(OptionError, match="'extraBody' must be a usable JSON object: nested"):
        Options.parse({"endpoint": "http://h:1", "prompts": "/p", "extraBody": deep_object(DEEP)})


def test_a_server_listing_its_models_as_deep_json_fails_load_with_a_server_error():
    def deep_models(request: Request) -> bytes:
        if request.path == "/health":
            return response(200, {})
        return response(200, '{"object": "list", "data": ' + deep_array() + "}")

    with raw_server(deep_models) as server:
        options = Options.parse({"endpoint": server.url, "prompts": "/p"})
        with pytest.raises(ServerError, match="is not an OpenAI model list"):
            prepare(options)


def test_the_reference_parser_keeps_deep_bodies_and_contents_as_rows():
    from pyspark.sql.types import LongType, StructField, StructType

    from dspark_json.parse.reference import ReferenceParser
    from dspark_json.schema.output import output_schema

    parsed = StructType([StructField("score", LongType())])
    schema = output_schema(passthrough=[], parsed=parsed)
    schema = StructType([f for f in schema.fields if f.name != "_error"])
    bodies = [deep_array(), json.dumps(completion(deep_object(DEEP))), json.dumps(completion("{}"))]
    table = ReferenceParser(schema).parse(bodies)
    assert table.column("_status").to_pylist() == ["corrupt_envelope", "corrupt_content", "ok"]
