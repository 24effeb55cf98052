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
