"""One stream with every path on an object store, for the store tests: prompts, journal,
metrics, cache and the Delta table under one base URL, reached with one ``storageOptions``
value; run twice (a second table, the same cache) to see the re-run served from the cache."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from dspark_json.dev.local import SimulatorProcess
from dspark_json.storage import (
    StorageSettings,
    delta_options,
    delta_uri,
    filesystem,
    parse_settings,
)
from tests.helpers import REVIEW_SCHEMA

ROWS = 12


@dataclass(frozen=True)
class Committed:
    """A one-file Delta table made by :func:`commit_one_file`: where delta-rs opens it, the
    options it is given, the settings pyarrow used, and the rows written."""

    table_at: str
    options: dict[str, str]
    given: StorageSettings
    data: pa.Table


def commit_one_file(table: str, options: dict[str, Any]) -> Committed:
    """A Parquet file written through pyarrow at ``table``, committed there by delta-rs: both
    ends are given the same ``storageOptions`` value, so the table opens only where they agree
    on the place the URL names."""
    from deltalake import Schema
    from deltalake.transaction import AddAction, create_table_with_add_actions

    given = parse_settings(json.dumps(options), environ={})
    found = filesystem(table, given)
    assert found is not None
    pa_fs, root = found
    data = pa.table({"a": [1, 2, 3]})
    with pa_fs.open_output_stream(f"{root}/part-0.parquet") as sink:
        pq.write_table(data, sink)
    size = pa_fs.get_file_info(f"{root}/part-0.parquet").size
    table_at, at_options = delta_uri(table), delta_options(table, given)
    create_table_with_add_actions(
        table_at,
        Schema.from_arrow(data.schema),
        [AddAction("part-0.parquet", size, {}, 0, True, None)],
        mode="error",
        partition_by=[],
        storage_options=at_options,
    )
    return Committed(table_at, at_options, given, data)


@dataclass(frozen=True)
class Run:
    """What one run left: the table's rows (custom_id, _status, _error), the completions the
    simulator answered during it, and the names under the base URL afterwards."""

    rows: list[tuple[str, str, str | None]]
    completions: int
    names: list[str]


def put_prompts(base: str, options: dict[str, str]) -> None:
    """``ROWS`` prompts as one JSONL file under ``base/prompts``."""
    settings = parse_settings(json.dumps(options), environ={})
    fs, root = filesystem(f"{base}/prompts", settings) or (None, "")
    assert fs is not None
    lines = "".join(
        json.dumps({"custom_id": f"s{i:02d}", "prompt": f"Review {i}"}) + "\n" for i in range(ROWS)
    )
    with fs.open_output_stream(f"{root}/a.jsonl") as sink:
        sink.write(lines.encode())


def names_under(base: str, options: dict[str, str]) -> list[str]:
    """Every object under ``base``, relative to it."""
    settings = parse_settings(json.dumps(options), environ={})
    found = filesystem(base, settings)
    assert found is not None
    fs, root = found
    infos = fs.get_file_info(pafs.FileSelector(root, recursive=True, allow_not_found=True))
    return sorted(i.path[len(root) + 1 :] for i in infos if i.type == pafs.FileType.File)


def run_stream(
    spark: Any,
    server: SimulatorProcess,
    base: str,
    options: dict[str, str],
    *,
    table: str,
    checkpoint: Path,
) -> Run:
    """The stream from ``base/prompts`` into the Delta table ``base/<table>``, journal, metrics
    and cache under ``base``; every path reached with ``options`` alone."""
    from deltalake import DeltaTable

    import dspark_json

    storage = json.dumps(options)
    before = server.stats().get("chat_completions", 0)
    df = (
        spark.readStream.format("dspark-json")
        .option("endpoint", server.url)
        .option("prompts", f"{base}/prompts")
        .option("responseFormat", json.dumps(REVIEW_SCHEMA))
        .option("journal", f"{base}/_journal")
        .option("metrics", f"{base}/metrics")
        .option("cache", f"{base}/cache")
        .option("temperature", "0")  # deterministic requests: the ones the cache keeps
        .option("storageOptions", storage)
        .load()
    )
    query = dspark_json.write_delta(
        df,
        f"{base}/{table}",
        checkpoint=str(checkpoint),
        trigger={"availableNow": True},
        storage_options=options,
    )
    query.awaitTermination()
    completions = server.stats().get("chat_completions", 0) - before
    settings = parse_settings(storage, environ={})
    uri = f"{base}/{table}"
    data = DeltaTable(
        delta_uri(uri), storage_options=delta_options(uri, settings)
    ).to_pyarrow_table()
    rows = sorted(
        zip(
            data.column("custom_id").to_pylist(),
            data.column("_status").to_pylist(),
            data.column("_error").to_pylist(),
            strict=True,
        )
    )
    return Run(rows, completions, names_under(base, options))
