"""Options dedupe and cache end to end: prompt files -> Spark -> the simulator process -> Delta,
counting the requests the simulator served (``GET /stats``)."""

import json

import pytest
from deltalake import DeltaTable

import dspark_json
from dspark_json.dev.local import SimulatorProcess
from dspark_json.metrics import read_records
from tests.helpers import REVIEW_SCHEMA, write_prompts

pytestmark = pytest.mark.spark


def repeated(n, distinct, tag):
    """``n`` rows, each with its own custom_id and a field of its own, asking ``distinct``
    prompts: a third of them repeated for n = 1.5 * distinct."""
    return [
        {"custom_id": f"{tag}{i:03d}", "prompt": f"{tag} review {i % distinct}", "lang": f"l{i}"}
        for i in range(n)
    ]


def run(spark, simulator, work, name, **options):
    """One availableNow stream of ``work/in`` into ``work/<name>`` at temperature 0; the rows
    by custom_id and the requests the simulator served."""
    before = simulator.stats().get("chat_completions", 0)
    reader = (
        spark.readStream.format("dspark-json")
        .option("endpoint", simulator.url)
        .option("prompts", str(work / "in"))
        .option("responseFormat", json.dumps(REVIEW_SCHEMA))
        .option("temperature", "0")
        .option("partitionSize", "64")  # one task: dedupe works within a partition
        .option("metrics", str(work / f"{name}-metrics"))
        .options(**options)
    )
    query = dspark_json.write_delta(
        reader.load(),
        str(work / name),
        checkpoint=str(work / f"{name}-checkpoint"),
        trigger={"availableNow": True},
    )
    query.awaitTermination()
    assert query.exception() is None
    rows = {r["custom_id"]: r for r in DeltaTable(str(work / name)).to_pyarrow_table().to_pylist()}
    return rows, simulator.stats()["chat_completions"] - before


def test_repeated_prompts_are_asked_once_and_a_rerun_with_the_cache_asks_nothing(
    spark, simulator, tmp_path
):
    write_prompts(tmp_path / "in", "a.jsonl", repeated(45, 30, "dd"))  # 15 repeats

    plain, sent_plain = run(spark, simulator, tmp_path, "plain", dedupe="off")
    once, sent_once = run(spark, simulator, tmp_path, "once", cache=str(tmp_path / "cache"))
    again, sent_again = run(spark, simulator, tmp_path, "again", cache=str(tmp_path / "cache"))

    assert (sent_plain, sent_once, sent_again) == (45, 30, 0)
    ids = [f"dd{i:03d}" for i in range(45)]
    for rows in (plain, once, again):
        assert sorted(rows) == ids and all(r["_status"] == "ok" for r in rows.values())
        assert all(rows[c]["lang"] == f"l{int(c[2:])}" for c in ids)  # each row's own fields
    # Each row holds the answer to its prompt: a repeat gets the same answer as its first.
    assert all(
        once[f"dd{i:03d}"]["parsed"] == once[f"dd{i - 30:03d}"]["parsed"] for i in range(30, 45)
    )
    assert {c: r["parsed"] for c, r in again.items()} == {c: r["parsed"] for c, r in once.items()}
    assert {c: r["parsed"] for c, r in plain.items()} == {c: r["parsed"] for c, r in once.items()}

    def counted(name):
        records = read_records(str(tmp_path / f"{name}-metrics"))
        return tuple(
            sum(r[k] for r in records)
            for k in ("deduplicated", "cache_hits", "cache_misses", "requests")
        )

    assert counted("plain") == (0, 0, 0, 45)
    assert counted("once") == (15, 0, 30, 30)
    assert counted("again") == (15, 30, 0, 0)


def test_identical_requests_in_two_tasks_running_at_once_are_sent_once(spark, tmp_path):
    # 200 rows in two tasks of one micro-batch (local[2]: both run at once), each task asking
    # the same 100 prompts. Without a cache each task sends its 100; with one, a request the
    # other task is sending (its claim) waits for its answer: 100 requests in all.
    rows = [
        {"custom_id": f"tw{i:03d}", "prompt": f"twin review {i % 100}", "lang": f"l{i}"}
        for i in range(200)
    ]
    write_prompts(tmp_path / "in", "a.jsonl", rows)
    with SimulatorProcess(seed=7, latency=0.5) as slow:
        plain, sent_plain = run(
            spark, slow, tmp_path, "plain", partitionSize="100", maxConcurrency="8"
        )
        shared, sent_shared = run(
            spark,
            slow,
            tmp_path,
            "shared",
            partitionSize="100",  # two tasks, each with every prompt once
            maxConcurrency="8",
            cache=str(tmp_path / "cache"),
        )
    assert (sent_plain, sent_shared) == (200, 100)
    ids = [f"tw{i:03d}" for i in range(200)]
    for table in (plain, shared):
        assert sorted(table) == ids and all(r["_status"] == "ok" for r in table.values())
        assert all(table[c]["lang"] == f"l{int(c[2:])}" for c in ids)
    assert all(
        shared[f"tw{i:03d}"]["parsed"] == shared[f"tw{i + 100:03d}"]["parsed"] for i in range(100)
    )
    assert {c: r["parsed"] for c, r in shared.items()} == {c: r["parsed"] for c, r in plain.items()}
    records = read_records(str(tmp_path / "shared-metrics"))
    assert len(records) == 2  # two tasks
    assert sum(r["requests"] for r in records) == 100
    assert sum(r["cache_hits"] for r in records) == 100  # each answer once from the other task
    waits = sum(r["cache_waits"] for r in records)
    assert waits > 0, "the two tasks did not run at once: nothing was waited for"
    cache = tmp_path / "cache"
    assert len(list(cache.rglob("*.answer"))) == 100
    assert not [p for p in cache.rglob("*") if p.is_file() and not p.name.endswith(".answer")]
    print(f"\nrequests: {sent_plain} without a cache, {sent_shared} with one ({waits} waited)")
