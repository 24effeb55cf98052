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
