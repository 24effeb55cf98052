"""The envelope, defined once (:mod:`dspark_json.response.envelope`): the answers the simulator
writes hold only its fields and vLLM's documented extras, so the parser reads them without drift,
and the extras are where the drift check looks for them."""

from __future__ import annotations

import json

import pyarrow as pa
from pyspark.sql.types import StructType

from dspark_json.dev.simulator import vllm_choice, vllm_completion
from dspark_json.parse import make_parser, new_fields
from dspark_json.response.envelope import (
    CHOICE_EXTRAS,
    ENVELOPE_COLUMNS,
    MESSAGE_EXTRAS,
    TOP_EXTRAS,
    envelope_fields,
    is_documented_extra,
    message_type,
)
from dspark_json.rows import Status
from dspark_json.schema.output import output_schema, response_fields


def _answer() -> dict:
    return vllm_completion(
        id="chatcmpl-1",
        created=1_700_000_000,
        model="m",
        choices=[vllm_choice(0, '{"a": 1}', "stop"), vllm_choice(1, "prose", "length")],
        usage={"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7},
        fingerprint="fp",
    )


def test_the_simulators_answer_holds_the_envelope_and_the_documented_extras_only():
    answer = _answer()
    envelope = StructType(envelope_fields(None))
    message = message_type(envelope)
    assert message is not None
    choice = envelope["choices"].dataType.elementType
    assert set(answer) == {*ENVELOPE_COLUMNS, *TOP_EXTRAS}
    for item in answer["choices"]:
        assert set(item) <= {*choice.names, *CHOICE_EXTRAS}
        assert set(item["message"]) <= {*message.names, *MESSAGE_EXTRAS}
    assert set(item) - set(choice.names) == set(CHOICE_EXTRAS)
    assert set(item["message"]) - set(message.names) == set(MESSAGE_EXTRAS)


def test_the_parser_reads_the_simulators_answer_without_drift():
    """Parsed into the output schema, the simulator's answer fits: status ok, its null extras
    dropped, nothing to rescue, no new field (the drift check's view of the same definition)."""
    parser = make_parser(response_fields(output_schema()), "cpu")
    table = parser.parse(pa.array([json.dumps(_answer())] * 3, pa.large_string()))
    assert table["_status"].to_pylist() == [Status.OK.value] * 3
    assert table["_rescued_data"].to_pylist() == [None] * 3
    assert table["choices"][0].as_py()[1]["finish_reason"] == "length"
    assert new_fields(table["_rescued_data"]) == set()


def test_an_extra_with_a_value_is_rescued_but_not_drift():
    answer = _answer()
    answer["metrics"] = {"ttft": 0.1}
    answer["choices"][0]["token_ids"] = [1, 2]
    answer["surprise"] = 1
    table = make_parser(response_fields(output_schema()), "cpu").parse([json.dumps(answer)])
    rescued = table["_rescued_data"]
    assert set(json.loads(rescued[0].as_py())) == {"metrics", "choices[0].token_ids", "surprise"}
    assert new_fields(rescued) == {"surprise"}


def test_an_extra_is_documented_in_any_choice_and_a_field_is_not():
    assert is_documented_extra("choices[3].message.audio")
    assert is_documented_extra("metrics")
    assert not is_documented_extra("choices[0].message.content")
    assert not is_documented_extra("choices[0].message.audio.id")
