"""What the `gateway` tier's tests share: the prompts, a stream through a gateway into a memory
table, and the backends' completion counts."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.sql.streaming import DataStreamReader

from dspark_json.dev.local import SimulatorProcess
from tests.helpers import write_prompts

#: A stream of a few hundred prompts (the simulators answer at once).
ROWS = 300


def write(directory: Path, n: int = ROWS, tag: str = "p") -> list[str]:
    """``n`` prompts in one file; their custom_ids, sorted."""
    ids = [f"{tag}{i:04d}" for i in range(n)]
    write_prompts(directory, "a.jsonl", [{"custom_id": c, "prompt": f"Review {c}"} for c in ids])
    return ids


def reader(spark: SparkSession, **options: str) -> DataStreamReader:
    """The source with these options only (every other option at its default)."""
    source = spark.readStream.format("dspark-json")
    for key, value in options.items():
        source = source.option(key, value)
    return source


def run(df: DataFrame, name: str) -> list[Row]:
    """``df``'s stream, every prompt (availableNow), into a memory table; its rows."""
    query = df.writeStream.format("memory").queryName(name).trigger(availableNow=True).start()
    query.awaitTermination()
    session = df.sparkSession
    return session.sql(f"select custom_id, _status, _error, _rescued_data from {name}").collect()


def completions(backends: Sequence[SimulatorProcess]) -> list[int]:
    """The chat completions each backend has answered so far (its /stats)."""
    return [b.stats().get("chat_completions", 0) for b in backends]


def problems(rows: Sequence[Row]) -> list[Any]:
    """What keeps rows from being ``ok`` with nothing rescued, for a failure's message."""
    return [
        (r.custom_id, r._status, r._error, r._rescued_data and json.loads(r._rescued_data))
        for r in rows
        if r._status != "ok" or r._rescued_data is not None
    ][:5]
