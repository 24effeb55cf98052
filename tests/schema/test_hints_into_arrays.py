"""schemaHints paths into arrays' elements (``choices[].message.x``), as the drift messages and
``_rescued_data`` spell them (``choices[0].message.x``); a gateway's envelope fields
(LiteLLM's ``provider_specific_fields``) are documented extras, not drift."""

import json
import re

import pyarrow as pa
import pytest
from pyspark.sql.types import ArrayType, IntegerType, LongType, StringType, StructField, StructType

from dspark_json import OptionError
from dspark_json.errors import SchemaError
from dspark_json.parse.drift import new_fields
from dspark_json.pipeline import check_no_new_fields
from dspark_json.response.envelope import envelope_fields, message_type
from dspark_json.rows import RESCUED_DATA
from dspark_json.schema.ddl import ELEMENT, apply_hints, parse_hints, to_ddl
from dspark_json.schema.output import drift_keys


class Rows:
    """What check_no_new_fields asks of the prompt rows: where a row is."""

    def describe(self, row: int) -> str:
        return f"row {row}"


def envelope() -> StructType:
    return StructType(envelope_fields(None))


def test_the_hint_a_drift_error_suggests_is_accepted_and_makes_the_field_a_column():
    rescued = json.dumps({"choices[0].message.gateway_note": {"route": "b"}})
    table = pa.table({RESCUED_DATA.name: [rescued]})
    with pytest.raises(SchemaError) as caught:
        check_no_new_fields(table, Rows())
    found = re.search(r"\(e\.g\. '([^']+)'\)", str(caught.value))
    assert found is not None, str(caught.value)
    hint = found.group(1)
    assert hint == "choices[0].message.gateway_note STRING"
    message = message_type(apply_hints(envelope(), parse_hints(hint)))
    assert message is not None and message["gateway_note"].dataType == StringType()


@pytest.mark.parametrize("spelling", ["choices[]", "choices[0]", "choices[3]"])
def test_a_path_into_an_array_s_elements_takes_either_spelling(spelling):
    hints = parse_hints(f"{spelling}.message.provider_specific_fields STRING, n INT")
    assert hints == [
        (("choices", ELEMENT, "message", "provider_specific_fields"), StringType()),
        (("n",), IntegerType()),
    ]
    message = message_type(apply_hints(envelope(), hints))
    assert message is not None
    assert message["provider_specific_fields"].dataType == StringType()
    assert message["content"].dataType == StringType()  # the rest kept


def test_a_hint_pins_a_field_of_the_choice_and_an_array_s_element_type():
    pinned = apply_hints(envelope(), parse_hints("choices[].stop_reason BIGINT"))
    choice = pinned["choices"].dataType.elementType
    assert choice["stop_reason"].dataType == LongType()
    schema = StructType([StructField("grid", ArrayType(ArrayType(StringType())))])
    assert to_ddl(apply_hints(schema, parse_hints("grid[][] INT"))) == "grid ARRAY<ARRAY<INT>>"


def test_a_path_into_what_is_not_an_array_names_the_column_and_the_fix():
    schema = StructType([StructField("parsed", StructType([StructField("a", StringType())]))])
    with pytest.raises(OptionError) as caught:
        apply_hints(schema, parse_hints("parsed[].a INT"))
    assert str(caught.value) == (
        "Option 'schemaHints': parsed[].a goes into the elements of 'parsed', which is "
        "struct<a:string>, not an array. Hint 'parsed' itself instead."
    )
    with pytest.raises(OptionError, match=r"choices\[\]\.index\.x goes into 'index', which is"):
        apply_hints(envelope(), parse_hints("choices[].index.x INT"))


@pytest.mark.parametrize("text", ["a.[0] INT", "[] INT", "a[x] INT"])
def test_a_misplaced_bracket_is_a_clear_error(text):
    with pytest.raises(OptionError, match=r"'schemaHints' is not a list of 'column TYPE' hints"):
        parse_hints(text)


def test_litellm_s_provider_specific_fields_are_documented_extras_not_drift():
    rescued = json.dumps(
        {
            "choices[0].message.provider_specific_fields": {"refusal": None},
            "choices[0].provider_specific_fields": {"stop_reason": None},
            "choices[1].provider_specific_fields": {"stop_reason": 7},
            "choices[0].message.surprise": 1,
        }
    )
    assert drift_keys(rescued) == ["choices[0].message.surprise"]
    assert new_fields(pa.array([rescued])) == {"choices[0].message.surprise"}
    gateway_only = json.dumps({"choices[0].provider_specific_fields": {"stop_reason": None}})
    check_no_new_fields(pa.table({RESCUED_DATA.name: [gateway_only]}), Rows())  # no error
