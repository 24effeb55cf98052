"""What a new user sees when ``.load()`` fails: our message, not a page of traceback (Spark
prints the Python traceback inside its AnalysisException; our entry points leave theirs short,
without the chained causes)."""

import re

import pytest

pytestmark = pytest.mark.spark


@pytest.mark.parametrize(
    ("fmt", "options", "message"),
    [
        ("dspark-json", {"endpont": "http://x"}, "Did you mean 'endpoint'?"),
        (
            "dspark-json",
            {"endpoint": "http://127.0.0.1:1", "prompts": "/tmp"},
            "Cannot reach the model server at http://127.0.0.1:1/v1/models",
        ),
        ("dspark-delta", {"path": "/nonexistent/t"}, "There is no Delta table at"),
    ],
    ids=["typo", "no-server", "no-table"],
)
def test_a_load_error_is_its_message_and_a_short_traceback(spark, fmt, options, message):
    with pytest.raises(Exception, match=message) as caught:
        spark.read.format(fmt).options(**options).load()
    text = str(caught.value)
    assert "direct cause" not in text and "During handling" not in text
    # Our message first (after Spark's wrapper and the error's type), no traceback quoting our
    # code: in a Spark Python worker the traceback is left out (dspark_json/errors.py).
    first = text.splitlines()[0]
    assert re.search(
        r"^\[PYTHON_DATA_SOURCE_ERROR\] Failed to [^:]+: dspark_json\.errors\.\w+: ", first
    )
    assert re.search(message, first), text
    assert "Traceback" not in text and "File " not in text, text
    assert len(text.splitlines()) <= 3, text


CANARY = "zqCanary7pw"


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (
            {"tools": '[{"name": "Foo"}, {"name": "foo"}]'},
            "Option 'tools' names functions that differ only in case \\('Foo' and 'foo'\\)",
        ),
        ({"toolChoice": "required"}, "Option 'toolChoice' \\('required'\\) needs option 'tools'"),
        (
            {"cache": f"foo://ann:{CANARY}@store.invalid/c"},
            "Option 'cache' names foo://\\*\\*\\*@store.invalid/c, which cannot be written",
        ),
        (
            {"cache": f"foo://ann:{CANARY}@store.invalid/c?sig={CANARY}"},
            "Option 'cache' is a URI with a query string or fragment "
            "\\(foo://\\*\\*\\*@store.invalid/c\\?sig=\\*\\*\\*\\).*option 'storageOptions'",
        ),
    ],
    ids=["tools-case", "tool-choice-alone", "cache-credentials", "cache-query-parameters"],
)
def test_a_refused_setup_sends_no_prompt_and_shows_no_secret(spark, tmp_path, options, message):
    from tests.helpers import write_prompts
    from tests.raw_servers import alive, raw_server

    write_prompts(tmp_path / "in", "a.jsonl", [{"prompt": "p"}])
    with raw_server(alive) as server:
        with pytest.raises(Exception, match=message) as caught:
            spark.read.format("dspark-json").options(
                endpoint=server.url, prompts=str(tmp_path / "in"), **options
            ).load()
        sent = [r for r in server.requests if r.method == "POST"]
    assert not sent  # refused before any prompt was sent (or paid for)
    assert CANARY not in str(caught.value)
