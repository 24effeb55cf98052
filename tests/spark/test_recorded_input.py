"""Option responses: recorded answers (raw bodies, or batch runner output) parsed, nothing sent."""

import json

import httpx
import pytest

from tests.helpers import REVIEW_SCHEMA, write_prompts

pytestmark = pytest.mark.spark


def test_recorded_bodies_and_batch_output_are_parsed_without_a_server(spark, simulator, tmp_path):
    rf = {"type": "json_schema", "json_schema": {"name": "review", "schema": REVIEW_SCHEMA}}
    body = httpx.post(
        f"{simulator.url}/v1/chat/completions",
        json={
            "model": "dspark-sim",
            "messages": [{"role": "user", "content": "x"}],
            "response_format": rf,
        },
    ).json()
    lines = [
        body,  # a raw body
        {
            "id": "b1",
            "custom_id": "ok-1",
            "response": {"status_code": 200, "body": body},
            "error": None,
        },
        {
            "id": "b2",
            "custom_id": "err-1",
            "response": None,
            "error": {"code": "batch_expired", "message": "This line was not processed."},
        },
        {
            "id": "b3",
            "custom_id": "err-2",
            "error": None,
            "response": {
                "status_code": 500,
                "body": {"error": {"message": "engine died", "type": "InternalServerError"}},
            },
        },
    ]
    write_prompts(tmp_path, "out.jsonl", lines)
    with (tmp_path / "out.jsonl").open("a") as f:
        f.write("{not json\n")
    df = (
        spark.read.format("dspark-json")
        .option("responses", str(tmp_path))
        .option("responseFormat", json.dumps(REVIEW_SCHEMA))
        .load()
    )
    got = df.collect()
    assert [r._status for r in got] == ["ok", "ok", "http_error", "http_error", "corrupt_envelope"]
    assert [r.custom_id for r in got] == [None, "ok-1", "err-1", "err-2", None]
    assert got[0].parsed == got[1].parsed and got[0].parsed.sentiment is not None
    assert got[2]._error.asDict() == {
        "status": None,
        "type": "batch_expired",
        "message": "This line was not processed.",
        "attempts": None,
    }
    assert (got[3]._error.status, got[3]._error.type) == (500, "InternalServerError")
    assert got[4]._corrupt_record == "{not json"
    with pytest.raises(Exception, match="'prompts' and 'responses' are both set"):
        spark.read.format("dspark-json").option("responses", str(tmp_path)).option(
            "prompts", str(tmp_path)
        ).load()
