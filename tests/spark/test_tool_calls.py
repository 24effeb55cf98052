"""Function calling end to end: a stream that offers two tools lands in Delta with each call's
arguments typed (``tool_calls.<function>[i].arguments``) and queryable in SQL; broken and
drifting arguments, and calls of a function not offered, keep their data in the documented
columns. Real Spark, the simulator in its own process, a Delta table on disk."""

import json

import pytest

from dspark_json.compat import start
from dspark_json.dev.local import SimulatorProcess
from dspark_json.dev.simulator import Faults
from tests.helpers import write_prompts

pytestmark = pytest.mark.spark

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The weather in a city.",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string"},
                    "days": {"type": "integer", "minimum": 1, "maximum": 7},
                },
                "required": ["city", "days"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "get_time",
            "parameters": {
                "type": "object",
                "properties": {"zone": {"type": "string", "enum": ["CET", "UTC", "PST"]}},
                "required": ["zone"],
            },
        },
    },
]


def test_two_tools_land_in_delta_typed_and_broken_or_drifting_calls_keep_their_data(
    spark, tmp_path
):
    faults = Faults(tool_broken_rate=0.1, tool_drift_rate=0.1, tool_unknown_rate=0.05)
    rows = [{"custom_id": f"q{i:03d}", "prompt": f"Question {i}"} for i in range(120)]
    write_prompts(tmp_path / "in", "a.jsonl", rows)
    with SimulatorProcess(seed=5, faults=faults) as server:
        df = (
            spark.readStream.format("dspark-json")
            .option("endpoint", server.url)
            .option("prompts", str(tmp_path / "in"))
            .option("tools", json.dumps(TOOLS))
            .option("toolChoice", "required")
            .option("inferSchemaSamples", "0")
            .option("parseMode", "cpu")
            .option("maxRecordsPerTrigger", "60")
            .load()
        )
        writer = df.writeStream.format("dspark-delta").option(
            "checkpointLocation", str(tmp_path / "checkpoint")
        )
        query = start(writer, {"availableNow": True}, path=str(tmp_path / "table"))
        query.awaitTermination()
        assert query.exception() is None
        # The requests offered the tools and the choice, as OpenAI's fields.
        assert server.stats()["chat_completions"] == len(rows)

    spark.read.format("dspark-delta").load(str(tmp_path / "table")).createOrReplaceTempView("t")
    kinds = spark.sql("SELECT typeof(tool_calls) AS t FROM t LIMIT 1").first()["t"]
    assert kinds == (
        "struct<get_weather:array<struct<id:string,arguments:struct<city:string,days:bigint>>>,"
        "get_time:array<struct<id:string,arguments:struct<zone:string>>>>"
    )
    # Typed arguments, read in SQL with no from_json.
    calls = spark.sql(
        """
        SELECT custom_id, w.id AS id, w.arguments.city AS city, w.arguments.days AS days
        FROM t LATERAL VIEW explode(tool_calls.get_weather) AS w
        WHERE _status = 'ok'
        """
    ).collect()
    assert len(calls) > 20
    assert all(c.id.startswith("chatcmpl-tool-") and 1 <= c.days <= 7 for c in calls)
    assert all(isinstance(c.city, str) and c.city for c in calls)
    zones = spark.sql(
        "SELECT DISTINCT z.arguments.zone AS zone FROM t "
        "LATERAL VIEW explode(tool_calls.get_time) AS z WHERE z.arguments IS NOT NULL"
    ).collect()
    assert {z.zone for z in zones} <= {"CET", "UTC", "PST"} and zones
    # A function a row did not call is null: [0] is null too (no error under ANSI mode).
    first = spark.sql("SELECT tool_calls.get_weather[0].arguments.city AS c FROM t").collect()
    assert any(r.c for r in first) and any(r.c is None for r in first)

    table = spark.sql("SELECT * FROM t").toPandas()
    assert len(table) == len(rows) and set(table["custom_id"]) == {r["custom_id"] for r in rows}
    statuses = set(table["_status"])
    assert {"ok", "corrupt_content"} <= statuses

    # Broken arguments: corrupt_content, the text kept in _corrupt_record (and in the envelope).
    broken = table[table["_corrupt_record"].notna()]
    assert len(broken) > 0 and set(broken["_status"]) == {"corrupt_content"}
    for text in broken["_corrupt_record"]:
        with pytest.raises(ValueError):
            json.loads(text)
    # Drift: the key the parameters lack, rescued by its column path; the row stays ok.
    drifted = [
        json.loads(r) for r in table[table["_status"] == "ok"]["_rescued_data"] if r is not None
    ]
    assert drifted and all(
        any(k.startswith("tool_calls.get_") and k.endswith("].arguments.confidence") for k in d)
        for d in drifted
    )
    # A function not offered: corrupt_content, its calls kept under its name.
    unknown = [
        json.loads(r)
        for r, s in zip(table["_rescued_data"], table["_status"], strict=True)
        if s == "corrupt_content" and r is not None
    ]
    assert unknown and all(any(k.endswith("_v2") for k in u) for u in unknown)
