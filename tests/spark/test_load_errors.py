"""What a new user sees when ``.load()`` fails: our message, not a page of traceback (Spark
prints the Python traceback inside its AnalysisException; our entry points leave theirs short,
without the chained causes)."""

import pytest

pytestmark = pytest.mark.spark


@pytest.mark.parametrize(
    ("fmt", "options", "message"),
    [
        ("dspark-json", {"endpont": "http://x"}, "Did you mean 'endpoint'?"),
        (
            "dspark-json",
            {"endpoint": "http://127.0.0.1:1", "prompts": "/tmp"},
            "Cannot reach the model server at http://127.0.0.1:1/health",
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
    assert len(text.splitlines()) <= 6, text
