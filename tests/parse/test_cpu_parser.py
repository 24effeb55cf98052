import json
from datetime import UTC, datetime

import pytest

from dspark_json.parse.cpu import CpuParser
from dspark_json.schema.output import output_schema, response_fields

CONTENT = {
    "type": "object",
    "properties": {
        "label": {"type": "string"},
        "score": {"type": "number"},
        "n": {"type": "integer"},
    },
}


def body(*contents, finish="stop", **extra):
    return json.dumps(
        {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "created": 1767225600,
            "model": "m",
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
            "system_fingerprint": None,
            **extra,
        }
    )


@pytest.fixture(scope="module")
def parser():
    schema = output_schema(response_format=CONTENT)
    return CpuParser(response_fields(schema))


def rows(parser, bodies):
    return parser.parse(bodies).to_pylist()


def test_valid_body_is_typed(parser):
    (row,) = rows(parser, [body('{"label": "x", "score": 0.5, "n": 3}')])
    assert row["_status"] == "ok"
    assert row["parsed"] == {"label": "x", "score": 0.5, "n": 3}
    assert row["created"] == datetime(2026, 1, 1, tzinfo=UTC)
    assert row["usage"] == {
        "prompt_tokens": 3,
        "completion_tokens": 4,
        "total_tokens": 7,
        "prompt_tokens_details": None,
        "completion_tokens_details": None,
    }
    assert row["choices"][0]["message"]["parsed"] == row["parsed"]
    assert row["_rescued_data"] is None and row["_corrupt_record"] is None


def test_vllms_prompt_tokens_details_are_typed_not_rescued(parser):
    """vLLM 0.32 with --enable-prompt-tokens-details (prefix caching on), as it answered the
    second time a 743-token prompt was sent: its keys are part of the envelope, not drift."""
    details = {"cached_tokens": 640, "created_cache_tokens": 0, "multimodal_tokens": None}
    usage = {"prompt_tokens": 743, "completion_tokens": 4, "total_tokens": 747}
    sent = json.loads(body('{"n": 1}'))
    sent["usage"] = {**usage, "prompt_tokens_details": details, "completion_tokens_details": None}
    (row,) = rows(parser, [json.dumps(sent)])
    assert row["_status"] == "ok" and row["_rescued_data"] is None
    assert row["usage"]["prompt_tokens_details"] == {**details, "audio_tokens": None}


def test_output_matches_declared_arrow_schema(parser):
    from dspark_json.response.convert import arrow_schema

    table = parser.parse([body('{"label": "x"}'), None, "not json"])
    assert table.schema.equals(arrow_schema(parser.schema))
    assert table.num_rows == 3


def test_rows_out_equal_bodies_in_with_a_status_each(parser):
    bodies = [
        None,
        "{broken",
        "[1, 2]",
        body(),
        body('```json\n{"label": "fenced"}\n```'),
        body('Sure, here it is: {"label": "prose"} Cheers'),
        body("I cannot answer that."),
        body('{"label": "cut', finish="length"),
        body('{"label": 1,}'),
        body("[1, 2]"),
    ]
    out = rows(parser, bodies)
    assert [r["_status"] for r in out] == [
        None,
        "corrupt_envelope",
        "corrupt_envelope",
        "empty",
        "ok",
        "ok",
        "not_json",
        "truncated",
        "corrupt_content",
        "corrupt_content",
    ]
    assert out[1]["_corrupt_record"] == "{broken"
    assert out[4]["parsed"]["label"] == "fenced"
    assert out[5]["parsed"]["label"] == "prose"
    assert out[7]["_corrupt_record"] == '{"label": "cut'
    assert out[3]["choices"] == [] and out[3]["parsed"] is None
    assert all(r["parsed"] is None for i, r in enumerate(out) if i not in (4, 5))


def test_unknown_fields_and_misfits_are_rescued_not_lost(parser):
    (row,) = rows(
        parser,
        [
            body(
                '{"label": "x", "n": "three", "confidence": 0.9}',
                '{"label": "y", "extra": [1]}',
                metadata={"trace": "abc"},
            )
        ],
    )
    rescued = json.loads(row["_rescued_data"])
    assert rescued == {
        "metadata": {"trace": "abc"},
        "parsed.n": "three",
        "parsed.confidence": 0.9,
        "choices[1].message.parsed.extra": [1],
    }
    assert row["parsed"] == {"label": "x", "score": None, "n": None}


def test_string_columns_take_any_json_value_as_text(parser):
    (row,) = rows(parser, [body('{"label": {"nested": true}}')])
    assert row["parsed"]["label"] == '{"nested":true}'


def test_nan_and_infinity_are_not_json(parser):
    (row,) = rows(parser, [body('{"score": NaN}')])
    assert row["_status"] == "corrupt_content"


@pytest.mark.parametrize("lenient", [True, False])
def test_names_with_quotes_backslashes_or_control_characters_read_as_the_reference(lenient):
    """Such a name is never matched as written (the scan's fast key match needs plain names):
    the reference decides, and both agree, raw control characters in lenient content too."""
    from dspark_json.parse.reference import ReferenceParser

    names = ['q"uote', "back\\slash", "ctl\x01char", "plain"]
    content = {"type": "object", "properties": {name: {"type": "integer"} for name in names}}
    schema = output_schema(response_format=content)
    schema = response_fields(schema)
    texts = [
        json.dumps({name: i for i, name in enumerate(names)}),
        '{"ctl\x01char": 2, "plain": 3}',  # a raw control character in a key
        '{"plain": 3, "ctl\\u0001char": 2}',
        '{"plain": 1, "extra\x02": 5}',
    ]
    bodies = [body(text) for text in texts]
    expected = ReferenceParser(schema, lenient=lenient).parse(bodies).to_pylist()
    got = CpuParser(schema, lenient=lenient).parse_vectorised(bodies).to_pylist()
    assert got == expected
    assert expected[0]["parsed"] == {name: i for i, name in enumerate(names)}
