"""generate()'s keywords, checked before anything touches Spark or the server."""

import pytest

import dspark_json


def test_generate_takes_options_by_their_snake_case_names_only():
    with pytest.raises(
        dspark_json.OptionError,
        match=r"unknown keyword 'responseFormat'.*"
        r"Did you mean 'response_format'",
    ):
        dspark_json.generate(None, endpoint="http://127.0.0.1:9", responseFormat={})  # type: ignore[arg-type]


def test_generate_checks_values_like_the_source_does():
    with pytest.raises(dspark_json.OptionError, match="'maxConcurrency' must be a whole number"):
        dspark_json.generate(None, endpoint="http://127.0.0.1:9", max_concurrency=0)  # type: ignore[arg-type]
    with pytest.raises(dspark_json.OptionError, match="'mode' has value 'LOUD'"):
        dspark_json.generate(None, endpoint="http://127.0.0.1:9", mode="LOUD")  # type: ignore[arg-type]


def test_generate_takes_the_parser_as_backend_as_parse_responses_does():
    with pytest.raises(
        dspark_json.OptionError, match=r"unknown keyword 'parse_mode'\. Did you mean 'backend'"
    ):
        dspark_json.generate(None, endpoint="http://127.0.0.1:9", parse_mode="cpu")  # type: ignore[arg-type]
    with pytest.raises(dspark_json.OptionError, match="'parseMode' has value 'tpu'"):
        dspark_json.generate(None, endpoint="http://127.0.0.1:9", backend="tpu")  # type: ignore[arg-type]


def test_the_three_entry_points_spell_and_type_each_concept_once():
    """generate, parse_responses and parse_dataframe: the same keyword for the same thing, typed
    by the same alias (``rows.ParseMode``, ``rows.RecordMode``, ``ResponseFormat``)."""
    import inspect

    entry = [dspark_json.generate, dspark_json.parse_responses, dspark_json.parse_dataframe]
    params = [inspect.signature(f).parameters for f in entry]
    for keyword, kind in [
        ("backend", "ParseMode"),
        ("mode", "RecordMode"),
        ("response_format", "ResponseFormat | None"),
    ]:
        assert [p[keyword].annotation for p in params] == [kind] * 3, keyword
        assert all(p[keyword].kind is inspect.Parameter.KEYWORD_ONLY for p in params)
    for df_function in (params[0], params[2]):  # the DataFrame's column of input, second
        assert list(df_function)[:2] == ["df", "column"]
    assert {n for p in params for n in p} & {"prompt_col", "engine", "parse_mode"} == set()


def test_the_renamed_prompt_column_keyword_names_its_new_name():
    with pytest.raises(
        dspark_json.OptionError, match=r"unknown keyword 'prompt_col'\. Did you mean 'column'"
    ):
        dspark_json.generate(None, endpoint="http://127.0.0.1:9", prompt_col="q")  # type: ignore[arg-type]


def test_generate_masks_a_url_like_model_s_credentials_in_its_errors(simulator):
    model = "https://alice:hunter22@models.example/m?token=tok987654"
    with pytest.raises(dspark_json.ServerError, match="not served") as caught:
        dspark_json.generate(None, endpoint=simulator.url, model=model)  # type: ignore[arg-type]
    assert "https://***@models.example/m?token=***" in str(caught.value)
    assert "hunter22" not in str(caught.value) and "tok987654" not in str(caught.value)


def test_the_schema_command_masks_a_url_like_model_s_credentials(simulator, tmp_path, capsys):
    from dspark_json.cli import main
    from tests.helpers import write_prompts

    write_prompts(tmp_path, "a.jsonl", [{"prompt": "p"}])
    model = "https://alice:hunter22@models.example/m?token=tok987654"
    argv = ["schema", "--endpoint", simulator.url, "--model", model, "--prompts", str(tmp_path)]
    assert main(argv) == 2
    said = capsys.readouterr().err
    assert "https://***@models.example/m?token=***" in said
    assert "hunter22" not in said and "tok987654" not in said
