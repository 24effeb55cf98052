"""Schema resolution and drift, end to end: Spark, the simulator process, real answers."""

import json
import subprocess
import sys

import pytest

from dspark_json.dev.local import SimulatorProcess
from dspark_json.dev.simulator import Faults
from tests.helpers import REVIEW_SCHEMA, write_prompts

pytestmark = pytest.mark.spark

#: The kind of schema vLLM's structured-output examples use: $defs, a nested array of objects,
#: an enum, an optional (nullable) field, a date-time.
ORDER_SCHEMA = {
    "title": "order",
    "type": "object",
    "$defs": {
        "item": {
            "type": "object",
            "properties": {
                "sku": {"type": "string"},
                "qty": {"type": "integer", "minimum": 1, "maximum": 5},
            },
            "required": ["sku", "qty"],
        }
    },
    "properties": {
        "status": {"enum": ["open", "shipped"]},
        "items": {"type": "array", "items": {"$ref": "#/$defs/item"}, "minItems": 1},
        "note": {"anyOf": [{"type": "string"}, {"type": "null"}]},
        "placed_at": {"type": "string", "format": "date-time"},
    },
    "required": ["status", "items", "note", "placed_at"],
}


def prompts(start, n):
    return [{"custom_id": f"o{i:03d}", "prompt": f"Order {i}"} for i in range(start, start + n)]


def load(spark, url, prompt_dir, **options):
    reader = (
        spark.read.format("dspark-json").option("endpoint", url).option("prompts", str(prompt_dir))
    )
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def test_served_schema_inference_and_hints(spark, tmp_path):
    write_prompts(tmp_path, "a.jsonl", prompts(0, 6))
    served = Faults(served_schema=json.dumps(ORDER_SCHEMA))
    with SimulatorProcess(seed=3, faults=served) as server:
        from_endpoint = load(spark, server.url, tmp_path, schemaEndpoint="/health/json-schema")
        inferred = load(spark, server.url, tmp_path, inferSchemaSamples="4")
        pinned = load(
            spark,
            server.url,
            tmp_path,
            inferSchemaSamples="4",
            schemaHints="parsed.placed_at TIMESTAMP, parsed.items ARRAY<STRUCT<sku: STRING, "
            "qty: INT>>",
        )
        rows = pinned.collect()
        stats = server.stats()
    assert from_endpoint.schema["parsed"].dataType.simpleString() == (
        "struct<status:string,items:array<struct<sku:string,qty:bigint>>,note:string,"
        "placed_at:timestamp>"
    )
    # Inferred from 4 answers: the same fields; a date-time string stays a string.
    assert inferred.schema["parsed"].dataType.simpleString() == (
        "struct<status:string,items:array<struct<sku:string,qty:bigint>>,note:string,"
        "placed_at:string>"
    )
    assert pinned.schema["parsed"].dataType.simpleString() == (
        "struct<status:string,items:array<struct<sku:string,qty:int>>,note:string,"
        "placed_at:timestamp>"
    )
    assert all(r._status == "ok" and r.parsed.placed_at is not None for r in rows)
    assert stats["chat_completions"] == 4 + 4 + 6  # two loads sampled 4 each; one read


def test_recorded_answers_are_sampled_without_a_server(spark, tmp_path):
    bodies = [
        {"choices": [{"message": {"content": json.dumps({"a": 1, "b": "x"})}}]},
        {"choices": [{"message": {"content": "```json\n" + json.dumps({"a": 2.5, "c": [1]})}}]},
    ]
    write_prompts(tmp_path, "recorded.jsonl", bodies)
    df = spark.read.format("dspark-json").option("responses", str(tmp_path)).load()
    assert (
        df.schema["parsed"].dataType.simpleString() == "struct<a:double,b:string,c:array<bigint>>"
    )
    assert [r.parsed.a for r in df.collect()] == [1.0, 2.5]


def test_drift_mid_stream_is_rescued_validated_or_stops_the_stream(spark, tmp_path):
    write_prompts(tmp_path / "in", "a.jsonl", prompts(0, 10))
    write_prompts(tmp_path / "in", "b.jsonl", prompts(10, 10))
    strict = {**REVIEW_SCHEMA, "additionalProperties": False}
    with SimulatorProcess(seed=4, faults=Faults(drift_after=10)) as server:

        def stream(name, **options):
            reader = (
                spark.readStream.format("dspark-json")
                .option("endpoint", server.url)
                .option("prompts", str(tmp_path / "in"))
                .option("responseFormat", json.dumps(strict))
                .option("maxRecordsPerTrigger", "10")
            )
            for key, value in options.items():
                reader = reader.option(key, value)
            query = reader.load().writeStream.format("memory").queryName(name)
            return query.trigger(availableNow=True).start()

        query = stream("drift", validateSchema="true", journal=str(tmp_path / "j"))
        query.awaitTermination()
        rows = {r.custom_id: r for r in spark.sql("select * from drift").collect()}
        failing = stream("drift_fail", schemaEvolutionMode="failOnNewColumns")
        with pytest.raises(Exception) as failure:
            failing.awaitTermination()
    assert len(rows) == 20
    before = [rows[f"o{i:03d}"] for i in range(10)]
    after = [rows[f"o{i:03d}"] for i in range(10, 20)]
    assert all(r._rescued_data is None and r._schema_violations == [] for r in before)
    for r in after:  # nothing lost: the new fields are in _rescued_data, the rest typed
        rescued = json.loads(r._rescued_data)
        assert set(rescued) == {"metadata", "parsed.confidence"}
        assert rescued["metadata"]["engine"] == "dspark-sim"
        assert r.parsed.sentiment is not None and r._status == "ok"
        assert r._schema_violations == [
            "$: Additional properties are not allowed ('confidence' was unexpected)"
        ]
    message = str(failure.value)
    assert "schemaEvolutionMode=failOnNewColumns" in message
    assert "metadata (first in custom_id 'o000'" in message and "parsed.confidence" in message
    assert "schemaHints" in message


def test_the_schema_command_prints_tree_and_ddl(simulator, tmp_path):
    write_prompts(tmp_path / "in", "a.jsonl", [{"custom_id": "x", "prompt": "hi", "lang": "en"}])
    spec = tmp_path / "schema.json"
    spec.write_text(json.dumps(ORDER_SCHEMA))
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "dspark_json",
            "schema",
            "--endpoint",
            simulator.url,
            "--prompts",
            str(tmp_path / "in"),
            "--response-format",
            str(spec),
            "--schema-hints",
            "parsed.note STRING",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert " |-- parsed: struct (nullable = true)" in done.stdout
    ddl = "DDL (for .schema(...)):\nprompt STRING, lang STRING, custom_id STRING, id STRING"
    assert ddl in done.stdout
    assert "items: ARRAY<STRUCT<sku: STRING, qty: BIGINT>>" in done.stdout
    bad = subprocess.run(
        [sys.executable, "-m", "dspark_json", "schema", "--response-format", "{broken"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert bad.returncode == 2 and "does not hold valid JSON" in bad.stderr
