"""Options ``tools`` and ``toolChoice``: what is accepted (OpenAI definitions, bare functions,
Pydantic models), what is refused and how the error says it; the ``tool_calls`` type inferred
for a tool without parameters; ``validateSchema`` over the calls' arguments."""

import json

import pytest
from pydantic import BaseModel
from pyspark.sql.types import LongType, StringType, StructField, StructType

from dspark_json.errors import OptionError
from dspark_json.load import prepare
from dspark_json.options import Options
from dspark_json.response.answers import decode_answer
from dspark_json.schema.tools import as_tools, inferred_arguments, tool_choice_body
from dspark_json.schema.validation import tool_violations

BASE = {"endpoint": "http://h:1", "prompts": "/p", "model": "m"}
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "days": {"type": "integer", "maximum": 7}},
            "required": ["city"],
        },
    },
}


class GetTime(BaseModel):
    """The time in a zone."""

    zone: str


def test_definitions_bare_functions_and_pydantic_models_become_openai_tools():
    tools = as_tools([WEATHER, {"name": "ping"}, GetTime])
    assert [t["type"] for t in tools] == ["function"] * 3
    assert tools[0] == WEATHER
    assert tools[1]["function"] == {"name": "ping"}
    assert tools[2]["function"]["name"] == "GetTime"
    assert tools[2]["function"]["description"] == "The time in a zone."
    assert tools[2]["function"]["parameters"]["properties"]["zone"]["type"] == "string"


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("[]", "non-empty list"),
        ("[1]", "item 0 must be a tool definition"),
        ('[{"type": "function", "function": {"name": "a b"}}]', "1 to 64 letters"),
        ('[{"type": "retrieval"}]', "is not a function tool"),
        ('[{"name": "f", "parameters": "x"}]', "must be a JSON Schema object"),
        ('[{"name": "f"}, {"name": "f"}]', "more than once"),
        ('[{"name": "Foo"}, {"name": "foo"}]', "'Foo' and 'foo'"),
        ('[{"name": "get_Time"}, {"name": "a"}, {"name": "GET_TIME"}]', "differ only in case"),
        ("[{", "does not hold valid JSON"),
        ("/no/such/tools.json", "neither JSON text nor a readable file"),
    ],
)
def test_bad_tools_name_the_option_and_the_fix(text, says):
    with pytest.raises(OptionError, match="'tools'") as error:
        Options.parse({**BASE, "tools": text})
    assert says in str(error.value)


def test_tool_choice_is_a_word_or_one_of_the_tools():
    tools = as_tools([WEATHER])
    assert tool_choice_body("auto", tools) == "auto"
    assert tool_choice_body("get_weather", tools)["function"] == {"name": "get_weather"}
    options = Options.parse({**BASE, "tools": json.dumps([WEATHER]), "toolChoice": "get_wether"})
    with pytest.raises(OptionError, match=r"get_wether.*get_weather"):
        prepare(options, contact_server=False)
    with pytest.raises(OptionError, match="'toolChoice'"):
        Options.parse({**BASE, "toolChoice": "not a name!"})


def test_validate_schema_takes_tools_with_parameters_alone():
    options = Options.parse({**BASE, "tools": json.dumps([WEATHER]), "validateSchema": "true"})
    assert prepare(options, contact_server=False).json_schema is None
    options = Options.parse({**BASE, "tools": '[{"name": "f"}]', "validateSchema": "true"})
    with pytest.raises(OptionError, match="validateSchema"):
        prepare(options, contact_server=False)


def answer(*calls):
    tool_calls = [
        {"id": f"c{i}", "type": "function", "function": {"name": n, "arguments": a}}
        for i, (n, a) in enumerate(calls)
    ]
    message = {"role": "assistant", "content": None, "tool_calls": tool_calls}
    return json.dumps({"choices": [{"index": 0, "message": message}]})


def calls_of(bodies):
    return [decode_answer(b).calls for b in bodies]


def test_validation_lists_each_calls_violations_by_its_column_path():
    bodies = [
        answer(("get_weather", '{"city": "Oslo", "days": 9}'), ("get_weather", '{"days": 1}')),
        answer(("get_weather", '{"city": "Oslo"}')),
        answer(("get_weather", "{broken")),  # not validated, and said so: never [] (issue 45)
        json.dumps({"choices": [{"message": {"content": "hi"}}]}),
    ]
    found = tool_violations(as_tools([WEATHER]), calls_of(bodies))
    assert found[0] == [
        "tool_calls.get_weather[0].arguments/days: 9 is greater than the maximum of 7",
        "tool_calls.get_weather[1].arguments/$: 'city' is a required property",
    ]
    assert found[1] == [] and found[3] is None
    assert found[2] == [
        "tool_calls.get_weather[0].arguments: not validated: the JSON could not be read "
        "(Expecting property name enclosed in double quotes: line 1 column 2 (char 1))"
    ]


def test_arguments_that_cannot_be_read_are_never_said_to_conform():
    """_schema_violations = [] means "conforms" (docs/guide/schema.md): arguments nested 600
    levels, prose arguments and a call of a function not offered each get an entry saying why
    they were not validated (before: [], issue 45)."""
    deep = '{"city": ' + "[" * 600 + "]" * 600 + "}"
    bodies = [
        answer(("get_weather", deep)),
        answer(("get_weather", "sunny, I think")),
        answer(("get_weather", '{"city": "Oslo"}'), ("get_time", "{}")),
    ]
    assert tool_violations(as_tools([WEATHER]), calls_of(bodies)) == [
        [
            "tool_calls.get_weather[0].arguments: not validated: the JSON is nested more than "
            "512 levels deep"
        ],
        ["tool_calls.get_weather[0].arguments: not validated: the arguments are not JSON"],
        ["tool_calls.get_time[0]: not validated: the tools offer no function of that name"],
    ]


def test_arguments_without_parameters_are_inferred_from_samples():
    bodies = [answer(("ping", '{"n": 1}')), answer(("ping", '{"n": 2, "tag": "x"}')), None]
    assert inferred_arguments(bodies, "ping") == StructType(
        [StructField("n", LongType()), StructField("tag", StringType())]
    )
    assert inferred_arguments(bodies, "other") == StringType()  # none sampled: the JSON text
