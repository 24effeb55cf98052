"""Option prefixOrder end to end: prompt files of a few long shared prefixes, shuffled -> Spark
-> two simulator processes with vLLM's prefix cache -> Delta. With the order, each prefix is
computed on one endpoint and found there after; rows and answers are those of row order."""

import json
import random

import pytest
from deltalake import DeltaTable

import dspark_json
from dspark_json.dev.engine import Engine
from dspark_json.dev.local import SimulatorProcess
from dspark_json.metrics import read_records
from tests.helpers import REVIEW_SCHEMA, write_prompts

pytestmark = pytest.mark.spark

PREFIXES, EACH = 4, 8


def rows():
    """Four few-shot prefixes of 300 words (19 KV blocks each), eight prompts each, shuffled."""
    out = []
    for p in range(PREFIXES):
        rng = random.Random(p)
        examples = " ".join(
            rng.choice(["kettle", "lamp", "chair", "fine", "poor"]) for _ in range(300)
        )
        for q in range(EACH):
            out.append(
                [
                    {"role": "system", "content": f"Set {p}: {examples}"},
                    {"role": "user", "content": f"review {p}-{q}"},
                ]
            )
    random.Random(9).shuffle(out)
    return [{"custom_id": f"r{i:02d}", "messages": m} for i, m in enumerate(out)]


def run(spark, work, name, prefix_order):
    """A stream on two fresh simulators, each with room for two of the four prefixes; one
    request at a time, so that what the caches find does not depend on timing."""
    engine = Engine(cache_blocks=40)
    with SimulatorProcess(engine=engine) as a, SimulatorProcess(seed=0, engine=engine) as b:
        reader = (
            spark.readStream.format("dspark-json")
            .option("endpoint", f"{a.url},{b.url}")
            .option("prompts", str(work / "in"))
            .option("responseFormat", json.dumps(REVIEW_SCHEMA))
            .option("temperature", "0")
            .option("maxConcurrency", "1")
            .option("initialConcurrency", "1")
            .option("prefixOrder", prefix_order)
            .option("partitionSize", "64")  # one task: the order is within a partition
            .option("metrics", str(work / f"{name}-metrics"))
        )
        query = dspark_json.write_delta(
            reader.load(),
            str(work / name),
            checkpoint=str(work / f"{name}-checkpoint"),
            trigger={"availableNow": True},
        )
        query.awaitTermination()
        assert query.exception() is None
        cached = [s.stats().get("cached_tokens", 0) for s in (a, b)]
    table = DeltaTable(str(work / name)).to_pyarrow_table()
    records = read_records(str(work / f"{name}-metrics"))
    return table.to_pylist(), cached, sum(r["cached_tokens"] for r in records)


def test_prefix_order_finds_the_prefixes_cached_and_keeps_rows_and_answers(spark, tmp_path):
    given = rows()
    write_prompts(tmp_path / "in", "a.jsonl", given)
    plain, plain_cached, plain_metric = run(spark, tmp_path, "plain", "false")
    ordered, cached, metric = run(spark, tmp_path, "ordered", "true")
    ids = [r["custom_id"] for r in given]
    assert [r["custom_id"] for r in ordered] == [r["custom_id"] for r in plain] == ids
    assert all(r["_status"] == "ok" for r in ordered)
    assert [r["parsed"] for r in ordered] == [r["parsed"] for r in plain]
    # Each prefix computed once, on its endpoint: 4 misses of 19 blocks, the rest hits.
    blocks = 19 * 16
    assert metric == sum(cached) == (PREFIXES * EACH - PREFIXES) * blocks
    assert plain_metric == sum(plain_cached) < metric
