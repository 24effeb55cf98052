import json

import pytest

from dspark_json import OptionError
from dspark_json.options import Options

BASE = {"endpoint": "http://127.0.0.1:8000", "prompts": "/data/prompts"}


def parse(**extra):
    return Options.parse({**BASE, **extra})


def test_defaults():
    opts = parse()
    assert opts.http.endpoint == "http://127.0.0.1:8000"
    assert opts.rows.parse_mode == "auto"
    assert opts.rows.mode == "PERMISSIVE"
    assert opts.request.model is None and opts.request.response_format is None
    assert opts.http.max_concurrency == 32


def test_option_names_are_case_insensitive():
    opts = Options.parse({"ENDPOINT": "http://h:1", "Prompts": "/p", "PARSEMODE": "cpu"})
    assert (opts.http.endpoint, opts.rows.parse_mode) == ("http://h:1", "cpu")


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ({"vllm_endpoint": "http://h:9/"}, ("http.endpoint", "http://h:9")),
        ({"endpoint": "http://h:9/v1"}, ("http.endpoint", "http://h:9")),
        ({"dspark.json.parse_mode": "gpu-accelerated"}, ("rows.parse_mode", "gpu")),
        ({"parseMode": "GPU"}, ("rows.parse_mode", "gpu")),
        ({"mode": "dropmalformed"}, ("rows.mode", "DROPMALFORMED")),
        ({"path": "/elsewhere"}, ("input.prompts", "/elsewhere")),
    ],
    ids=["vllm_endpoint", "trailing-v1", "gpustack-parse-mode", "upper-case", "mode-lower", "path"],
)
def test_aliases_and_spellings(raw, expected):
    base = dict(BASE)
    if "vllm_endpoint" in raw:
        del base["endpoint"]
    if "path" in raw:
        del base["prompts"]
    opts = Options.parse({**base, **raw})
    path, value = expected
    stage, attr = path.split(".")
    assert getattr(getattr(opts, stage), attr) == value


def test_unknown_option_suggests_the_close_name():
    with pytest.raises(
        OptionError, match=r"Unknown option 'responseFromat'.*Did you mean 'responseFormat'"
    ):
        parse(responseFromat="{}")


def test_unknown_option_without_a_close_name_lists_known_ones():
    with pytest.raises(OptionError, match=r"Unknown option 'colour'.*Known options: endpoint"):
        parse(colour="blue")


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("parseMode", "fast", r"'parseMode' has value 'fast'; allowed values: auto, cpu, gpu"),
        ("mode", "LENIENT", r"'mode' has value 'LENIENT'; allowed values: PERMISSIVE"),
        ("maxConcurrency", "0", r"'maxConcurrency' must be a whole number above 0, got '0'"),
        ("maxConcurrency", "many", r"'maxConcurrency' must be a whole number above 0, got 'many'"),
        ("requestTimeout", "-1", r"'requestTimeout' must be a number above 0"),
        ("endpoint", "vllm:8000", r"'endpoint' must be http\(s\) URLs.*got 'vllm:8000'"),
        ("topP", "1.5", r"'topP' must be a number from 0 to 1, got '1.5'"),
        ("adaptiveConcurrency", "yes", r"'adaptiveConcurrency' must be true or false"),
        ("extraBody", "[1]", r"'extraBody' must be a JSON object, got a JSON list"),
        ("extraBody", "{nope", r"'extraBody' must be a JSON object.*'\{nope'"),
        ("apiKeyEnv", "sk-abc-123", r"must be the NAME of an environment variable"),
        ("model", " ", r"'model' must not be empty"),
    ],
)
def test_bad_values_name_option_value_and_allowed(option, value, message):
    with pytest.raises(OptionError, match=message):
        parse(**{option: value})


def test_missing_required_option_says_what_it_is():
    with pytest.raises(OptionError, match=r"Option 'prompts' is required.*Example"):
        Options.parse({"endpoint": "http://h:1"})


def test_two_spellings_with_different_values_are_refused():
    with pytest.raises(OptionError, match="two spellings of 'endpoint'"):
        Options.parse({**BASE, "vllm_endpoint": "http://other:1"})


def test_response_format_inline_file_and_wrapper(tmp_path):
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    assert parse(responseFormat=json.dumps(schema)).request.response_format == schema
    path = tmp_path / "s.json"
    path.write_text(json.dumps(schema))
    assert parse(responseFormat=str(path)).request.response_format == schema
    wrapped = {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}
    assert parse(responseFormat=json.dumps(wrapped)).request.response_format == schema


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("{not json", r"'responseFormat' does not hold valid JSON"),
        ("[1, 2]", r"must be a JSON Schema object"),
        ("/no/such/schema.json", r"neither JSON text nor a readable file: '/no/such/schema.json'"),
    ],
)
def test_response_format_errors(value, message):
    with pytest.raises(OptionError, match=message):
        parse(responseFormat=value)


def test_relative_prompt_path_becomes_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert Options.parse({"endpoint": "http://h:1", "prompts": "in"}).input.prompts == str(
        tmp_path / "in"
    )


def test_gpu_memory_fraction_is_a_share_of_the_device():
    assert parse(gpuMemoryFraction="0.25").rows.gpu_memory_fraction == 0.25
    assert parse().rows.gpu_memory_fraction == 0.1
    with pytest.raises(OptionError, match=r"'gpuMemoryFraction' must be a share .* got '25'"):
        parse(gpuMemoryFraction="25")


CANARY = "zq-canary-7f3a9c"


def test_several_endpoints_and_credentials_taken_out_of_the_url():
    opts = parse(endpoint=f"http://ann:{CANARY}@h1:8000/v1, http://h2:8000")
    assert [e.url for e in opts.http.endpoints] == ["http://h1:8000", "http://h2:8000"]
    assert opts.http.endpoints[0].credentials.reveal() == f"ann:{CANARY}"
    assert opts.http.endpoint == "http://h1:8000"
    assert CANARY not in repr(opts) and CANARY not in str(opts)


def test_the_api_key_never_prints_and_its_spellings_are_accepted():
    for spelling in ("apiKey", "api_key", "vllm_api_key"):
        opts = parse(**{spelling: CANARY})
        assert opts.http.key.resolve().reveal() == CANARY
        assert CANARY not in repr(opts) and CANARY not in f"{opts.http.api_key}"


def test_a_bad_endpoint_with_credentials_does_not_echo_them():
    with pytest.raises(OptionError) as info:
        parse(endpoint=f"ftp://ann:{CANARY}@h1")
    assert CANARY not in str(info.value)


def test_key_and_key_variable_together_are_refused():
    with pytest.raises(OptionError, match="'apiKey' and 'apiKeyEnv' both give the API key"):
        parse(apiKey=CANARY, apiKeyEnv="VLLM_API_KEY")


def test_request_options_are_typed():
    opts = parse(
        systemPrompt="Be terse.",
        maxTokens="64",
        temperature="0",
        topP="0.9",
        seed="-3",
        n="2",
        extraBody='{"repetition_penalty": 1.05}',
        adaptiveConcurrency="FALSE",
    )
    assert (
        opts.request.system_prompt,
        opts.request.max_tokens,
        opts.request.temperature,
        opts.request.top_p,
    ) == (
        "Be terse.",
        64,
        0.0,
        0.9,
    )
    assert (opts.request.seed, opts.request.n, opts.request.extra_body) == (
        -3,
        2,
        {"repetition_penalty": 1.05},
    )
    assert opts.http.adaptive_concurrency is False


@pytest.mark.parametrize(
    ("raw", "reuse"),
    [
        ({}, ("auto", None, "deterministic")),
        ({"dedupe": "OFF", "cache": "/c", "cacheMode": "all"}, ("off", "/c", "all")),
        ({"dedupe": "force"}, ("force", None, "deterministic")),
    ],
)
def test_the_reuse_options(raw, reuse):
    opts = parse(**raw).reuse
    assert (opts.dedupe, opts.cache, opts.cache_mode) == reuse


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"dedupe": "yes"}, r"'dedupe' has value 'yes'; allowed values: auto, off, force"),
        ({"cacheMode": "off"}, r"'cacheMode' has value 'off'; allowed values: deterministic, all"),
        ({"cache": " "}, r"'cache' must name a directory"),
    ],
)
def test_bad_reuse_options_say_what_is_allowed(raw, message):
    with pytest.raises(OptionError, match=message):
        parse(**raw)


def test_a_cache_with_recorded_responses_is_refused():
    with pytest.raises(OptionError, match="'cache' and 'responses' are both set"):
        Options.parse({"responses": "/r", "cache": "/c"})


def test_options_that_do_not_apply_are_refused_and_not_required():
    opts = Options.parse({"endpoint": "http://h:1"}, unused=("prompts",))
    assert opts.input.prompts is None
    with pytest.raises(OptionError, match="'prompts' does not apply here"):
        Options.parse({"endpoint": "http://h:1", "prompts": "/p"}, unused=("prompts",))


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"temperature": "-0.5"}, r"'temperature' must be a number from 0, got '-0.5'"),
        ({"temperature": "nan"}, r"'temperature' must be a number from 0"),
        ({"topP": "1.5"}, r"'topP' must be a number from 0 to 1, got '1.5'"),
        ({"gpuMemoryFraction": "0"}, r"'gpuMemoryFraction' must be a share .* got '0'"),
        ({"gpuMemoryFraction": "1.01"}, r"'gpuMemoryFraction' must be a share"),
        ({"maxConcurrency": "0"}, r"'maxConcurrency' must be a whole number above 0"),
        ({"requestTimeout": "nan"}, r"'requestTimeout' must be a number above 0"),
        ({"inferSchemaSamples": "-1"}, r"'inferSchemaSamples' must be a whole number from 0"),
    ],
)
def test_out_of_range_values_are_refused(raw, message):
    with pytest.raises(OptionError, match=message):
        parse(**raw)


def test_boundary_values_are_accepted():
    opts = parse(temperature="0", topP="1", gpuMemoryFraction="1", inferSchemaSamples="0")
    assert (opts.request.temperature, opts.request.top_p) == (0.0, 1.0)
    assert (opts.rows.gpu_memory_fraction, opts.schema.infer_schema_samples) == (1.0, 0)


def test_every_option_has_one_stage_one_field_and_a_snake_case_keyword():
    from dspark_json.options import OPTION_SPECS

    names = [spec.name for spec in OPTION_SPECS]
    assert len(names) == len(set(names))
    assert {spec.stage for spec in OPTION_SPECS} == {
        "http",
        "request",
        "input",
        "schema",
        "rows",
        "repair",
        "reuse",
        "storage",
    }
    keywords = {spec.name: spec.keyword for spec in OPTION_SPECS}
    assert keywords["responseFormat"] == "response_format"
    assert keywords["maxRecordsPerTrigger"] == "max_records_per_trigger"
