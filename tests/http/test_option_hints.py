"""Option values a new user gets wrong, each told what to give instead at ``.load()``: an
endpoint with an API path in it, a Python class for responseFormat."""

import pytest

from dspark_json.errors import OptionError
from dspark_json.options import Options


@pytest.mark.parametrize(
    ("endpoint", "base"),
    [
        ("http://vllm:8000/v2", "http://vllm:8000"),
        ("http://vllm:8000/v1/chat/completions", "http://vllm:8000"),
        ("http://gw/proxy/v1/chat/completions/", "http://gw/proxy"),
        ("http://vllm:8000/v1/models", "http://vllm:8000"),
        ("http://host:8000/v1/chat/completions", "http://host:8000"),
        ("http://models:8000/v1/models", "http://models:8000"),
    ],
    ids=["v2", "chat-completions", "gateway-path", "models", "port", "host-named-models"],
)
def test_an_endpoint_with_an_api_path_names_option_endpoint_and_the_base_url(endpoint, base):
    with pytest.raises(OptionError) as caught:
        Options.parse({"endpoint": endpoint, "prompts": "/tmp"})
    message = str(caught.value)
    assert message.startswith("Option 'endpoint' must be the server's base URL")
    assert f"Give {base!r}." in message and "'model'" not in message


@pytest.mark.parametrize(
    ("endpoint", "base"),
    [
        ("http://vllm:8000", "http://vllm:8000"),
        ("http://vllm:8000/v1", "http://vllm:8000"),
        ("http://gw:80/proxy/llm", "http://gw:80/proxy/llm"),
        # Only the path is an API path: hosts may be named like one.
        ("http://models", "http://models"),
        ("http://models:8000", "http://models:8000"),
        ("http://v1.example", "http://v1.example"),
        ("http://v1", "http://v1"),
        ("http://v2/v1", "http://v2"),
    ],
)
def test_base_urls_are_accepted(endpoint, base):
    options = Options.parse({"endpoint": endpoint, "prompts": "/tmp"})
    assert [e.url for e in options.http.endpoints] == [base]


def test_a_python_class_for_response_format_says_how_to_pass_its_schema():
    class Review:  # what str() of a Pydantic model class looks like, as Spark passes it
        pass

    with pytest.raises(OptionError, match=r"got a Python class \(<class .*Review'>\)") as caught:
        Options.parse({"endpoint": "http://h", "prompts": "/tmp", "responseFormat": str(Review)})
    assert "json.dumps(Model.model_json_schema())" in str(caught.value)
