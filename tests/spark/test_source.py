"""Prompts on disk -> the simulator process -> Spark (local) -> Delta on disk, all real."""

import json
import shutil
from datetime import datetime

import httpx
import pytest
from deltalake import DeltaTable

import dspark_json
from dspark_json.metrics import read_records
from tests.helpers import REVIEW_SCHEMA, write_prompts

pytestmark = pytest.mark.spark

RESPONSE_FORMAT = json.dumps(REVIEW_SCHEMA)


def prompts(start, n, **extra):
    return [
        {"custom_id": f"r{i:04d}", "prompt": f"Review {i}: it works", "lang": "en", **extra}
        for i in range(start, start + n)
    ]


def stream(spark, simulator, prompt_dir, table, checkpoint, **options):
    reader = (
        spark.readStream.format("dspark-json")
        .option("endpoint", simulator.url)
        .option("prompts", str(prompt_dir))
        .option("responseFormat", RESPONSE_FORMAT)
        .option("partitionSize", "16")
    )
    for key, value in options.items():
        reader = reader.option(key, value)
    query = dspark_json.write_delta(
        reader.load(), str(table), checkpoint=str(checkpoint), trigger={"availableNow": True}
    )
    query.awaitTermination()
    assert query.exception() is None


def expected_content(simulator, prompt):
    """What the server answers for this prompt, asked directly over HTTP."""
    response = httpx.post(
        f"{simulator.url}/v1/chat/completions",
        json={
            "model": "dspark-sim",
            "messages": [{"role": "user", "content": prompt}],
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "review", "schema": REVIEW_SCHEMA, "strict": True},
            },
        },
    )
    return json.loads(response.json()["choices"][0]["message"]["content"])


def test_stream_into_delta_typed_and_exactly_once_across_runs(spark, simulator, tmp_path):
    prompt_dir, table, checkpoint = tmp_path / "prompts", tmp_path / "table", tmp_path / "_ckpt"
    write_prompts(prompt_dir, "0001.jsonl", prompts(0, 30))
    write_prompts(prompt_dir, "0002.jsonl", prompts(30, 20))
    (prompt_dir / "0003.jsonl").write_text('{"custom_id": "bad-1", "text": "no prompt"}\n')
    before = simulator.stats().get("chat_completions", 0)

    stream(spark, simulator, prompt_dir, table, checkpoint)

    rows = DeltaTable(str(table)).to_pyarrow_table().to_pylist()
    assert len(rows) == 51
    assert sorted(r["custom_id"] for r in rows) == sorted(
        [f"r{i:04d}" for i in range(50)] + ["bad-1"]
    )
    assert simulator.stats()["chat_completions"] - before == 50

    by_id = {r["custom_id"]: r for r in rows}
    bad = by_id.pop("bad-1")
    assert bad["_status"] == "invalid_prompt"
    assert (
        bad["_error"]["type"] == "invalid_prompt" and "0003.jsonl row 1" in bad["_error"]["message"]
    )
    assert bad["_corrupt_record"] == '{"custom_id": "bad-1", "text": "no prompt"}'
    assert bad["parsed"] is None and bad["choices"] is None

    for row in by_id.values():
        assert row["_status"] == "ok", row
        assert row["lang"] == "en"
        assert row["model"] == "dspark-sim" and row["object"] == "chat.completion"
        assert isinstance(row["created"], datetime)
        assert row["usage"]["total_tokens"] == (
            row["usage"]["prompt_tokens"] + row["usage"]["completion_tokens"]
        )
    for custom_id in ("r0000", "r0031", "r0049"):
        sent = expected_content(simulator, by_id[custom_id]["prompt"])
        got = by_id[custom_id]["parsed"]
        assert got["sentiment"] == sent["sentiment"]
        assert got["score"] == pytest.approx(sent["score"]) and isinstance(got["score"], float)
        assert got["stars"] == sent["stars"] and isinstance(got["stars"], int)
        assert got["topics"] == sent["topics"]
        assert got["reviewed_at"].isoformat().replace("+00:00", "Z") == sent["reviewed_at"]
        assert got["product"]["name"] == sent["product"]["name"]
        assert got["product"]["price"] == sent["product"].get("price")

    # A second run on the same checkpoint reads only the new file, and nothing twice.
    write_prompts(prompt_dir, "0004.jsonl", prompts(50, 5))
    stream(spark, simulator, prompt_dir, table, checkpoint)
    ids = DeltaTable(str(table)).to_pyarrow_table().column("custom_id").to_pylist()
    assert len(ids) == 56 and len(set(ids)) == 56
    assert simulator.stats()["chat_completions"] - before == 55 + 3  # + 3 direct checks above


def test_max_records_per_trigger_bounds_every_batch(spark, simulator, tmp_path):
    prompt_dir, table = tmp_path / "prompts", tmp_path / "table"
    write_prompts(prompt_dir, "a.jsonl", prompts(0, 15))
    write_prompts(prompt_dir, "b.jsonl", prompts(15, 10))
    stream(spark, simulator, prompt_dir, table, tmp_path / "_ckpt", maxRecordsPerTrigger="10")
    delta = DeltaTable(str(table))
    sizes = [
        DeltaTable(str(table), version=v).to_pyarrow_table().num_rows
        for v in range(delta.version() + 1)
    ]
    added = [b - a for a, b in zip([0, *sizes[:-1]], sizes, strict=True)]
    assert added == [10, 10, 5]


def test_micro_batch_ids_continue_across_restarts_from_the_checkpoint(spark, simulator, tmp_path):
    """The metrics records' batch ids are counted in the offsets Spark checkpoints, not rebuilt
    from the metrics directory: emptied between runs, the next run still numbers on; a run that
    finds nothing new runs no batch."""
    prompt_dir, table, checkpoint = tmp_path / "prompts", tmp_path / "table", tmp_path / "_ckpt"
    metrics = tmp_path / "metrics"

    def run_and_take_ids():
        stream(
            spark, simulator, prompt_dir, table, checkpoint,
            maxRecordsPerTrigger="4", metrics=str(metrics),
        )  # fmt: skip
        ids = sorted({r["batch"] for r in read_records(str(metrics))})
        shutil.rmtree(metrics)
        metrics.mkdir()
        return ids

    write_prompts(prompt_dir, "0001.jsonl", prompts(0, 10))
    assert run_and_take_ids() == [0, 1, 2]  # 4 + 4 + 2 rows
    write_prompts(prompt_dir, "0002.jsonl", prompts(10, 5))
    assert run_and_take_ids() == [3, 4]  # 4 + 1 rows, after a restart
    assert run_and_take_ids() == []  # nothing new
    ids = DeltaTable(str(table)).to_pyarrow_table().column("custom_id").to_pylist()
    assert sorted(ids) == [f"r{i:04d}" for i in range(15)]


def batch_read(spark, simulator, prompt_dir, **options):
    reader = (
        spark.read.format("dspark-json")
        .option("endpoint", simulator.url)
        .option("prompts", str(prompt_dir))
        .option("responseFormat", RESPONSE_FORMAT)
    )
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def test_an_unknown_model_fails_at_load_naming_what_is_served(spark, simulator, tmp_path):
    write_prompts(tmp_path, "a.jsonl", prompts(0, 3))
    with pytest.raises(
        Exception,
        match=r"Model 'no-such-model' is not served by http://127\.0\.0\.1:\d+ "
        r"\(it serves: dspark-sim\)\. Fix option 'model'",
    ):
        batch_read(spark, simulator, tmp_path, model="no-such-model")


def test_failfast_names_the_row_and_dropmalformed_drops_it(spark, simulator, tmp_path):
    write_prompts(tmp_path, "a.jsonl", [*prompts(0, 2), {"custom_id": "broken", "prompt": 42}])
    dropped = batch_read(spark, simulator, tmp_path, mode="DROPMALFORMED").collect()
    assert sorted(r["custom_id"] for r in dropped) == ["r0000", "r0001"]
    with pytest.raises(Exception, match=r"mode=FAILFAST: custom_id 'broken'.*invalid_prompt"):
        batch_read(spark, simulator, tmp_path, mode="FAILFAST").collect()


def test_load_fails_fast_on_a_bad_option(spark, simulator, tmp_path):
    with pytest.raises(Exception, match=r"Unknown option 'promts'.*Did you mean 'prompts'"):
        (
            spark.readStream.format("dspark-json")
            .option("endpoint", simulator.url)
            .option("promts", str(tmp_path))
            .load()
        )
    with pytest.raises(Exception, match=r"'parseMode' has value 'turbo'"):
        (
            spark.readStream.format("dspark-json")
            .option("endpoint", simulator.url)
            .option("prompts", str(tmp_path))
            .option("parseMode", "turbo")
            .load()
        )


def test_gpu_mode_without_a_gpu_is_a_loud_error(spark, simulator, tmp_path):
    from dspark_json.parse import gpu

    if gpu.unavailable_reason() is None:
        pytest.skip("a GPU backend is available here")
    write_prompts(tmp_path, "a.jsonl", prompts(0, 1))
    asked = simulator.stats().get("chat_completions", 0)
    with pytest.raises(Exception, match=r"parseMode=gpu, but cuDF is not installed"):
        batch_read(
            spark, simulator, tmp_path, **{"dspark.json.parse_mode": "gpu-accelerated"}
        ).collect()
    assert simulator.stats().get("chat_completions", 0) == asked  # failed before any request


def test_user_schema_wins_and_what_it_leaves_out_is_rescued(spark, simulator, tmp_path):
    write_prompts(tmp_path, "a.jsonl", prompts(0, 2))
    df = (
        spark.read.format("dspark-json")
        .schema(
            "custom_id string, parsed struct<sentiment:string, stars:int>, _rescued_data string"
        )
        .option("endpoint", simulator.url)
        .option("prompts", str(tmp_path))
        .option("responseFormat", RESPONSE_FORMAT)
        .load()
    )
    assert df.columns == ["custom_id", "parsed", "_rescued_data"]
    rows = sorted(df.collect(), key=lambda r: r.custom_id)
    sent = expected_content(simulator, "Review 0: it works")
    assert rows[0].parsed.asDict() == {"sentiment": sent["sentiment"], "stars": sent["stars"]}
    rescued = json.loads(rows[0]._rescued_data)
    assert rescued["parsed.score"] == sent["score"]
    assert rescued["lang"] == "en" and rescued["model"] == "dspark-sim"


def test_an_empty_directory_reads_as_no_rows_and_a_missing_one_fails_naming_it(
    spark, simulator, tmp_path
):
    assert batch_read(spark, simulator, tmp_path).count() == 0
    with pytest.raises(Exception, match=f"names {tmp_path / 'missing'}, which does not exist"):
        batch_read(spark, simulator, tmp_path / "missing")


def test_parse_dataframe_types_a_column_of_bodies(spark):
    import dspark_json

    content = {"type": "object", "properties": {"label": {"type": "string"}}}
    good = json.dumps(
        {
            "id": "c1",
            "choices": [{"index": 0, "message": {"content": '```json\n{"label": "x"}\n```'}}],
        }
    )
    rows = [(1, good), (2, "{broken"), (3, None)]
    df = spark.createDataFrame(rows, "offset BIGINT, value STRING")
    out = dspark_json.parse_dataframe(df, "value", response_format=content)
    assert out.columns[:2] == ["offset", "id"]
    got = {r["offset"]: r for r in out.collect()}
    assert got[1]["parsed"]["label"] == "x" and got[1]["_status"] == "ok"
    assert got[2]["_status"] == "corrupt_envelope" and got[2]["_corrupt_record"] == "{broken"
    assert got[3]["_status"] is None
    dropped = dspark_json.parse_dataframe(df, response_format=content, mode="DROPMALFORMED")
    assert sorted(r["offset"] for r in dropped.collect()) == [1, 3]
    with pytest.raises(dspark_json.OptionError, match="column 'body' is not in the DataFrame"):
        dspark_json.parse_dataframe(df, "body")


def test_parse_dataframe_over_a_tasks_many_batches_equals_one_parse_of_all_bodies(spark):
    """A task parses its Arrow batches one after another with one parser: its rows come out
    as parse_responses gives them for all the bodies at once (nothing carried from one batch to
    the next). Batches of SMALL_BATCH rows take the kernels' path even while they compile; the
    last, short one may take the reference parser; rows that fit, rescues and malformed bodies
    are in every batch."""
    import dspark_json
    from dspark_json.parse.warmup import SMALL_BATCH

    content = {"type": "object", "properties": {"label": {"type": "string"}}}

    def body(i: int) -> str | None:
        if i % 5 == 3:
            return None if i % 2 else "{broken"
        text = {"label": f"l{i}"} if i % 3 else {"label": f"l{i}", "extra": i}
        return json.dumps({"id": f"c{i}", "choices": [{"message": {"content": json.dumps(text)}}]})

    bodies = [body(i) for i in range(2 * SMALL_BATCH + 37)]
    df = spark.createDataFrame(list(enumerate(bodies)), "n INT, value STRING").coalesce(1)
    key = "spark.sql.execution.arrow.maxRecordsPerBatch"
    before = spark.conf.get(key)
    spark.conf.set(key, str(SMALL_BATCH))
    try:
        got = dspark_json.parse_dataframe(df, response_format=content).orderBy("n").collect()
        kept = dspark_json.parse_dataframe(df, response_format=content, mode="DROPMALFORMED")
        kept_n = sorted(r["n"] for r in kept.collect())
    finally:
        spark.conf.set(key, before)
    expected = dspark_json.parse_responses(bodies, response_format=content).to_pylist()
    assert [r["_status"] for r in got] == [e["_status"] for e in expected]
    assert [r["_rescued_data"] for r in got] == [e["_rescued_data"] for e in expected]
    assert [r["parsed"] and r["parsed"]["label"] for r in got] == [
        e["parsed"] and e["parsed"]["label"] for e in expected
    ]
    assert {"ok", "corrupt_envelope", None} <= {r["_status"] for r in got}
    assert any(r["_rescued_data"] for r in got)
    assert kept_n == [i for i, e in enumerate(expected) if e["_status"] != "corrupt_envelope"]


def test_a_default_run_cuts_its_batch_by_the_slots_and_lands_every_prompt_once(
    spark, simulator, tmp_path
):
    """No option partitionSize: the session's two slots (``register(spark)``, local[2]) share the
    micro-batch's 1,200 prompts as four tasks of 300 (the fixed 256 cut five); the offset Spark
    checkpoints keeps the size, for a replay."""
    prompt_dir, table, checkpoint = tmp_path / "prompts", tmp_path / "table", tmp_path / "_ckpt"
    metrics = tmp_path / "metrics"
    write_prompts(prompt_dir, "a.jsonl", prompts(0, 700))
    write_prompts(prompt_dir, "b.jsonl", prompts(700, 500))
    reader = (
        spark.readStream.format("dspark-json")
        .option("endpoint", simulator.url)
        .option("prompts", str(prompt_dir))
        .option("responseFormat", RESPONSE_FORMAT)
        .option("journal", str(tmp_path / "journal"))
        .option("metrics", str(metrics))
    )
    query = dspark_json.write_delta(
        reader.load(), str(table), checkpoint=str(checkpoint), trigger={"availableNow": True}
    )
    query.awaitTermination()
    assert query.exception() is None
    assert [sum(r["rows"].values()) for r in read_records(str(metrics))] == [300] * 4
    ids = DeltaTable(str(table)).to_pyarrow_table().column("custom_id").to_pylist()
    assert sorted(ids) == [f"r{i:04d}" for i in range(1200)]
    logged = (checkpoint / "offsets" / "0").read_text().splitlines()
    assert json.loads(logged[-1])["partitionSize"] == 300
