"""Each kind of body gets its ``_status``, ``_corrupt_record`` and ``parsed``, the same from every
parser: the vectorised CPU parser, and the reference parser with and without the numba scans
(the CPU parser hands it the rows it cannot take, and a cold process its first batches)."""

import json

import pytest
from pyspark.sql.types import ArrayType, StringType, StructField, StructType

from dspark_json.parse.cpu import CpuParser
from dspark_json.parse.reference import ReferenceParser
from dspark_json.response.envelope import content_type
from dspark_json.schema.output import output_schema, response_fields
from tests.helpers import chat

LABEL = StructType([StructField("label", StringType())])
CONTENT = {"type": "object", "properties": {"label": {"type": "string"}}}


def response_columns(schema):
    return response_fields(schema)


WITH_CONTENT = response_columns(output_schema(response_format=CONTENT))
NO_CONTENT = response_columns(output_schema())
#: parsed only per choice, no top-level ``parsed`` column
PER_CHOICE = StructType(
    [
        StructField(
            "choices",
            ArrayType(
                StructType(
                    [
                        StructField(
                            "message",
                            StructType(
                                [
                                    StructField("content", StringType()),
                                    StructField("parsed", LABEL),
                                ]
                            ),
                        ),
                        StructField("finish_reason", StringType()),
                    ]
                )
            ),
        ),
        StructField("_status", StringType()),
        StructField("_rescued_data", StringType()),
        StructField("_corrupt_record", StringType()),
    ]
)

PARSERS = {
    "cpu": lambda schema: CpuParser(schema).parse_vectorised,
    "reference": lambda schema: ReferenceParser(schema).parse,
    "reference-no-numba": lambda schema: ReferenceParser(schema, kernels=False).parse,
}


@pytest.fixture(params=list(PARSERS))
def parse(request):
    return lambda schema, bodies: PARSERS[request.param](schema)(bodies).to_pylist()


CASES = [
    # (body, _status, _corrupt_record, parsed)
    (None, None, None, None),
    ("{broken", "corrupt_envelope", "{broken", None),
    ("[1, 2]", "corrupt_envelope", "[1, 2]", None),
    (b'\xff{"id": 1', "corrupt_envelope", '\ufffd{"id": 1', None),
    ('{"id": "x"}', "empty", None, None),
    ('{"id": "x", "choices": []}', "empty", None, None),
    ('{"id": "x", "choices": null}', "empty", None, None),
    (chat('```json\n{"label": "a"}\n```'), "ok", None, {"label": "a"}),
    (chat("I cannot answer that."), "not_json", "I cannot answer that.", None),
    (chat(None), "not_json", None, None),
    (chat('{"label": "cut'), "corrupt_content", '{"label": "cut', None),
    (chat('{"label": "cut', finish="length"), "truncated", '{"label": "cut', None),
    (chat('{"label": "whole"}', finish="length"), "ok", None, {"label": "whole"}),
    (chat("[1, 2]"), "corrupt_content", "[1, 2]", None),
    (chat("no JSON here", '{"label": "b"}'), "not_json", "no JSON here", None),
    (chat('{"label": "c"}', "prose"), "ok", None, {"label": "c"}),
]


@pytest.mark.parametrize(("body", "status", "corrupt", "parsed"), CASES, ids=repr)
def test_each_body_gets_its_status(parse, body, status, corrupt, parsed):
    (row,) = parse(WITH_CONTENT, [body])
    assert (row["_status"], row["_corrupt_record"], row["parsed"]) == (status, corrupt, parsed)


def test_a_whole_batch_at_once_keeps_each_row_in_place(parse):
    rows = parse(WITH_CONTENT, [case[0] for case in CASES])
    assert [(r["_status"], r["_corrupt_record"], r["parsed"]) for r in rows] == [
        case[1:] for case in CASES
    ]


def test_a_batch_of_nothing_but_missing_bodies(parse):
    rows = parse(WITH_CONTENT, [None, None])
    assert [(r["_status"], r["_corrupt_record"], r["_rescued_data"]) for r in rows] == [
        (None, None, None)
    ] * 2


def test_without_a_content_type_any_answer_with_choices_is_ok(parse):
    rows = parse(NO_CONTENT, [chat("prose"), chat('{"a": 1}'), '{"choices": []}', "{"])
    assert [r["_status"] for r in rows] == ["ok", "ok", "empty", "corrupt_envelope"]
    assert [r["_corrupt_record"] for r in rows] == [None, None, None, "{"]


@pytest.mark.parametrize(
    "parser",
    ["cpu", "reference", "reference-no-numba"],
)
def test_parsed_per_choice_only(parser):
    body = {
        "choices": [
            {"message": {"content": c}, "finish_reason": "stop"}
            for c in ('{"label": "a", "extra": 1}', "prose")
        ]
    }
    (row,) = PARSERS[parser](PER_CHOICE)([json.dumps(body)]).to_pylist()
    assert row["_status"] == "ok"
    assert [c["message"]["parsed"] for c in row["choices"]] == [{"label": "a"}, None]
    assert json.loads(row["_rescued_data"]) == {"choices[0].message.parsed.extra": 1}


def test_the_content_type_is_found_where_the_schema_puts_it():
    assert content_type(WITH_CONTENT) == LABEL
    assert content_type(PER_CHOICE) == LABEL
    assert content_type(NO_CONTENT) is None
    no_message = StructType([StructField("choices", ArrayType(StructType([])))])
    assert content_type(no_message) is None
    text_message = StructType(
        [
            StructField(
                "choices",
                ArrayType(StructType([StructField("message", StringType())])),
            )
        ]
    )
    assert content_type(text_message) is None
