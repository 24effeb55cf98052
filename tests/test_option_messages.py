"""What an unknown option's error says: the closest spelling where there is one, and every
option the source knows."""

import pytest

from dspark_json import OptionError
from dspark_json.options import OPTION_SPECS, Options


def message(raw):
    with pytest.raises(OptionError) as caught:
        Options.parse(raw)
    return str(caught.value)


def test_an_unknown_option_lists_every_known_one_and_suggests_nothing_far():
    known = ", ".join(spec.name for spec in OPTION_SPECS)
    assert message({"colour": "blue"}) == (
        f"Unknown option 'colour' for format 'dspark-json'. Known options: {known}."
    )


def test_a_misspelt_option_suggests_the_documented_spelling():
    text = message({"ENDPIONT": "http://h:1"})
    assert text.startswith(
        "Unknown option 'ENDPIONT' for format 'dspark-json'. Did you mean 'endpoint'? Known "
        "options: endpoint, "
    )


def test_two_spellings_of_one_option_are_named_as_written():
    assert message({"endpoint": "http://a:1", "vllm_endpoint": "http://b:1", "prompts": "/p"}) == (
        "Options 'endpoint' and 'vllm_endpoint' are two spellings of 'endpoint' with different "
        "values; set only one."
    )


def test_prompts_and_recorded_responses_exclude_each_other(tmp_path):
    assert message({"endpoint": "http://a:1", "path": "/p", "responses": "/r"}) == (
        "Options 'path' and 'responses' are both set: read prompts (and call the model) or "
        "replay recorded responses, not both."
    )
    replay = Options.parse({"endpoint": "http://a:1", "responses": str(tmp_path)})
    assert replay.input.prompts is None and replay.input.responses == str(tmp_path)


def test_the_key_and_its_variable_exclude_each_other():
    raw = {"endpoint": "http://a:1", "prompts": "/p", "api_key": "k", "apiKeyEnv": "KEY"}
    assert message(raw) == (
        "Options 'api_key' and 'apiKeyEnv' both give the API key; set only one (apiKeyEnv keeps "
        "the key out of the query's options)."
    )


BASE = {"endpoint": "http://a:1", "prompts": "/p"}


def test_tool_choice_required_without_tools_is_refused():
    assert message({**BASE, "toolChoice": "required"}) == (
        "Option 'toolChoice' ('required') needs option 'tools': vLLM refuses "
        "tool_choice=required without tools (HTTP 400), so every request would fail. Give "
        "option 'tools', or leave 'toolChoice' out."
    )
    tools = '[{"name": "f"}]'
    assert Options.parse({**BASE, "toolChoice": "required", "tools": tools}).request.tools


@pytest.mark.parametrize(
    ("given", "needs"),
    [
        ({"cacheMode": "all"}, "'cache'"),
        ({"repairTokenBudget": "100"}, "'repairAttempts'"),
        ({"repairMaxTokens": "2048"}, "'repairAttempts'"),
        ({"repairMaxTokens": "2048", "repairAttempts": "0"}, "'repairAttempts'"),
    ],
)
def test_an_option_that_does_nothing_without_another_is_warned_about(caplog, given, needs):
    with caplog.at_level("WARNING", logger="dspark_json"):
        Options.parse({**BASE, **given})
        Options.parse({**BASE, **given})  # Spark parses a query's options several times
    warned = [r.getMessage() for r in caplog.records if "needs option" in r.getMessage()]
    assert len(warned) == 1, warned
    first = next(iter(given))
    assert warned[0].startswith(f"Option {first!r} ({given[first]!r}) needs option {needs}")


@pytest.mark.parametrize(
    "given",
    [
        {"cacheMode": "all", "cache": "/c"},
        {"repairTokenBudget": "100", "repairAttempts": "1"},
        {"repairMaxTokens": "2048", "repairAttempts": "2"},
        {"toolChoice": "auto"},
    ],
)
def test_an_option_with_what_it_needs_is_not_warned_about(caplog, given):
    with caplog.at_level("WARNING", logger="dspark_json"):
        Options.parse({**BASE, **given})
    assert not [r for r in caplog.records if "needs option" in r.getMessage()]
