"""Parser throughput: dspark-json's backends next to what a Spark user would do instead.

One seeded corpus of vLLM response bodies (structured output, sizes 1 KB-64 KB, with schema
drift, fenced and prose-wrapped content, truncated and broken bodies), parsed side by side in one
run on the same cores by:

- dspark-json CPU backend (``parse_responses``, in process), and GPU backend when one is there;
- dspark-json inside Spark, two ways: ``parse_dataframe`` over the bodies read as text (Spark
  ships them to the Python workers and the table back, as for any ``mapInArrow``), and the
  source's partition work (``format("dspark-json")`` reading them as recorded answers: the
  Python workers read the file themselves), so Spark's overhead is counted as it is for Spark's
  own readers;
- Spark ``read.json`` (PERMISSIVE, ``_corrupt_record``) + ``from_json`` on the content;
- Spark ``read.text`` + ``from_json`` on the body, then on the content (two passes);
- a Python UDF with ``json.loads``;
- per-row ``orjson`` in Python, alone and with the rows turned into an Arrow table.

Spark contenders are forced to evaluate every column (``write.format("noop")``). Each contender
runs once to warm up, then ``--repeat`` rounds of every contender once each (a noisy spell of the
machine falls on all alike); each one's best time counts. The hand-off alone (Spark to Python and
back, no parse) is measured too: the ceiling of any parser in Python inside Spark.

    .venv/bin/python benchmarks/parser_throughput.py            # 100k bodies, writes results/
    .venv/bin/python benchmarks/parser_throughput.py --smoke    # seconds; used by the tests
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import random
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

RESULTS = Path(__file__).parent / "results"

CONTENT_SCHEMA = {
    "title": "review",
    "type": "object",
    "properties": {
        "sentiment": {"type": "string", "enum": ["positive", "neutral", "negative"]},
        "score": {"type": "number"},
        "stars": {"type": "integer"},
        "summary": {"type": "string"},
        "reviewed_at": {"type": "string", "format": "date-time"},
        "topics": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "name": {"type": "string"},
                    "weight": {"type": "number"},
                    "quotes": {"type": "array", "items": {"type": "string"}},
                },
            },
        },
    },
}
CONTENT_DDL = (
    "sentiment STRING, score DOUBLE, stars BIGINT, summary STRING, reviewed_at TIMESTAMP, "
    "topics ARRAY<STRUCT<name: STRING, weight: DOUBLE, quotes: ARRAY<STRING>>>"
)
#: Spark's read.json baseline reads this narrow envelope (the columns a user would pick by hand);
#: ``parsed`` is from_json of the first choice's content.
ENVELOPE_DDL = (
    "id STRING, object STRING, created BIGINT, model STRING, "
    "choices ARRAY<STRUCT<index: BIGINT, message: STRUCT<role: STRING, content: STRING>, "
    "finish_reason: STRING>>, usage STRUCT<prompt_tokens: BIGINT, completion_tokens: BIGINT, "
    "total_tokens: BIGINT>, _corrupt_record STRING"
)
WORDS = "the product works well but shipping was slow and the price is fair enough overall".split()


#: The corpora: ``review`` (the faults a real run sees, at realistic rates, in the envelope the
#: simulator wrote before vLLM 0.32), ``vllm`` (the same contents in vLLM 0.32's exact envelope:
#: every row carries ``system_fingerprint`` and vLLM's null extras), ``drift`` (vLLM 0.32's
#: envelope, 4 rows in 10 with a field nobody expected: a ``metadata`` block in the envelope or
#: extra keys in the content, all to rescue), ``traffic`` (shaped like a reasoning model's
#: traffic: :func:`traffic_corpus`), ``tools`` (function calling: the JSON is each call's
#: arguments string, :data:`TOOLS`; measured against Spark's from_json of them).
CORPORA = ("review", "vllm", "drift", "traffic", "tools")


def review_object(rng: random.Random) -> dict[str, Any]:
    """One content object of :data:`CONTENT_SCHEMA`, about 1 KB (log-normal, to 64 KB)."""
    target = min(64_000, max(600, int(rng.lognormvariate(6.7, 0.6))))
    topics = []
    size = 0
    while size < target - 450:
        quotes = [" ".join(rng.choices(WORDS, k=rng.randint(3, 12))) for _ in range(2)]
        topic = {"name": rng.choice(WORDS), "weight": round(rng.random(), 4), "quotes": quotes}
        topics.append(topic)
        size += len(json.dumps(topic)) + 2
    return {
        "sentiment": rng.choice(["positive", "neutral", "negative"]),
        "score": round(rng.random(), 6),
        "stars": rng.randint(1, 5),
        "summary": " ".join(rng.choices(WORDS, k=8)) + " \u00e9\u00e8 \U0001f600",
        "reviewed_at": f"2026-11-{rng.randint(1, 28):02d}T{rng.randint(0, 23):02d}:00:00Z",
        "topics": topics,
    }


def traffic_corpus(rows: int, seed: int = 42) -> list[str]:
    """Seeded bodies shaped like a reasoning model's traffic in vLLM 0.32's envelope, the kinds
    issue 38 names at these rates: contents pretty-printed (35 %), in a fence (12 %, some of them
    pretty-printed too), inside prose (6 %), prose answers without JSON (3 %), tool calls with
    no content (5 %), reasoning text before the answer (30 %, 0.3-3 KB), content fields beyond
    the schema (10 %), and envelope metadata that drifts: ``service_tier`` set, usage details
    filled, vLLM's documented extras (``kv_transfer_params``, ``metrics``) with values, and a
    ``metadata`` block nobody expected (2 % each to 15 %); 1 % cut by the length limit."""
    from dspark_json.dev.simulator import vllm_choice, vllm_completion

    rng = random.Random(seed)
    out = []
    for i in range(rows):
        content_obj = review_object(rng)
        if rng.random() < 0.10:  # fields beyond the schema
            content_obj["confidence"] = round(rng.random(), 3)
            content_obj["notes"] = {"lang": rng.choice(["en", "fr"]), "caveats": ["short"]}
        content: str | None = json.dumps(
            content_obj, indent=2 if rng.random() < 0.35 else None, ensure_ascii=False
        )
        finish = "stop"
        tool_calls = None
        roll = rng.random()
        if roll < 0.12:
            content = "```json\n" + content + "\n```"
        elif roll < 0.18:
            content = "Here is the review as JSON:\n\n" + content + "\n\nLet me know if it helps."
        elif roll < 0.21:
            prose = " ".join(rng.choices(WORDS, k=20))
            content = "I could not find a review in that text; " + prose
        elif roll < 0.26:
            arguments = json.dumps({"query": " ".join(rng.choices(WORDS, k=4)), "limit": 5})
            call = {"name": "search_reviews", "arguments": arguments}
            tool_calls = [{"id": f"chatcmpl-tool-{i:x}", "type": "function", "function": call}]
            content, finish = None, "tool_calls"
        elif roll < 0.27:
            content, finish = content[: len(content) // 2], "length"
        choice = vllm_choice(0, content, finish)  # type: ignore[arg-type]
        message = choice["message"]
        if tool_calls is not None:
            message["tool_calls"] = tool_calls
        if rng.random() < 0.30:
            thought = " ".join(rng.choices(WORDS, k=rng.randint(20, 200)))
            message["reasoning"] = "Okay, the user wants a review as JSON. " + thought
        usage: dict[str, Any] = {
            "prompt_tokens": rng.randint(80, 900),
            "completion_tokens": rng.randint(50, 1500),
            "total_tokens": 0,
        }
        usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
        envelope = vllm_completion(
            id=f"chatcmpl-{i:08x}",
            created=1764374400 + i,
            model="Qwen/Qwen3-8B",
            choices=[choice],
            usage=usage,
            fingerprint=f"vllm-0.32.0-{rng.getrandbits(32):08x}",
        )
        if rng.random() < 0.15:
            envelope["service_tier"] = "default"
        if rng.random() < 0.10:
            envelope["usage"]["prompt_tokens_details"] = {"cached_tokens": rng.randint(0, 64)}
        if rng.random() < 0.03:
            envelope["kv_transfer_params"] = {"remote_block_ids": [rng.randint(0, 99)]}
        if rng.random() < 0.03:
            envelope["metrics"] = {"ttft_s": round(rng.random(), 3)}
        if rng.random() < 0.02:
            envelope["metadata"] = {"trace_id": f"t{i}", "queue_ms": rng.randint(0, 99)}
        out.append(json.dumps(envelope, ensure_ascii=rng.random() < 0.5))
    return out


#: The ``tools`` corpus: answers that call two functions (vLLM 0.32's envelope, content null,
#: 1 to 3 calls a body), their arguments JSON strings typed by these parameters.
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string"},
                    "days": {"type": "integer"},
                    "units": {"type": "string", "enum": ["c", "f"]},
                },
                "required": ["city", "days"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "search_products",
            "parameters": {
                "type": "object",
                "properties": {
                    "query": {"type": "string"},
                    "max_price": {"type": "number"},
                    "filters": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "properties": {
                                "name": {"type": "string"},
                                "values": {"type": "array", "items": {"type": "string"}},
                            },
                        },
                    },
                },
                "required": ["query"],
            },
        },
    },
]


def corpus(rows: int, seed: int = 42, kind: str = "review") -> list[str]:
    """Seeded bodies of one of :data:`CORPORA`."""
    if kind == "traffic":
        return traffic_corpus(rows, seed)
    if kind == "tools":
        return tool_corpus(rows, seed)
    rng = random.Random(seed)
    out = []
    for i in range(rows):
        content_obj = review_object(rng)
        roll = rng.random()
        drift = kind == "drift" and rng.random() < 0.4
        if roll < 0.02 or (drift and roll < 0.6):  # drift: fields the schema does not know
            content_obj["confidence"] = rng.random()
            if kind == "drift":
                content_obj["notes"] = {"lang": rng.choice(["en", "fr"]), "tokens": [1, 2, 3]}
        content = json.dumps(content_obj, ensure_ascii=False)
        finish = "stop"
        if 0.02 <= roll < 0.12:
            content = "```json\n" + content + "\n```"
        elif 0.12 <= roll < 0.17:
            content = "Here is the review as JSON: " + content + "\nLet me know if you need more."
        elif 0.17 <= roll < 0.18:
            content, finish = content[: len(content) // 2], "length"
        elif 0.18 <= roll < 0.19:
            content = "I cannot help with that request."
        envelope: dict[str, Any] = {
            "id": f"chatcmpl-{i:08x}",
            "object": "chat.completion",
            "created": 1764374400 + i,
            "model": "Qwen/Qwen2.5-7B-Instruct",
            "choices": [
                {
                    "index": 0,
                    "message": {
                        "role": "assistant",
                        "content": content,
                        "reasoning_content": None,
                        "tool_calls": [],
                    },
                    "logprobs": None,
                    "finish_reason": finish,
                    "stop_reason": None,
                }
            ],
            "usage": {"prompt_tokens": 120, "completion_tokens": 300, "total_tokens": 420},
            "prompt_logprobs": None,
        }
        if kind != "review":
            envelope = vllm_envelope(envelope, rng)
        if 0.19 <= roll < 0.20 or (drift and roll >= 0.6):
            envelope["metadata"] = {"trace_id": f"t{i}", "queue_ms": rng.randint(0, 99)}
        body = json.dumps(envelope, ensure_ascii=rng.random() < 0.5)
        if 0.20 <= roll < 0.205:
            body = body[: rng.randint(1, len(body) - 1)]  # a body cut short
        out.append(body)
    return out


def tool_corpus(rows: int, seed: int = 42) -> list[str]:
    """Seeded answers that call :data:`TOOLS`, in vLLM 0.32's envelope: per call, 2% arguments
    cut short (not JSON), 3% with a key the parameters lack (drift), 1% a function not
    offered."""
    from dspark_json.dev.simulator import vllm_choice, vllm_completion

    rng = random.Random(seed)
    out = []
    for i in range(rows):
        calls = []
        for _ in range(rng.choice([1, 1, 2, 3])):
            name = rng.choice(["get_weather", "search_products"])
            if name == "get_weather":
                value: dict[str, Any] = {
                    "city": " ".join(rng.choices(WORDS, k=2)).title(),
                    "days": rng.randint(1, 7),
                    "units": rng.choice("cf"),
                }
            else:
                filters = [
                    {"name": rng.choice(WORDS), "values": rng.choices(WORDS, k=rng.randint(1, 6))}
                    for _ in range(rng.randint(0, 8))
                ]
                value = {
                    "query": " ".join(rng.choices(WORDS, k=rng.randint(3, 20))) + " \u00e9",
                    "max_price": round(rng.uniform(1, 500), 2),
                    "filters": filters,
                }
            roll = rng.random()
            if roll < 0.03:
                value["confidence"] = round(rng.random(), 3)
            arguments = json.dumps(value, ensure_ascii=rng.random() < 0.5)
            if 0.03 <= roll < 0.05:
                arguments = arguments[: len(arguments) // 2]
            if 0.05 <= roll < 0.06:
                name = "book_flight"
            calls.append(
                {
                    "id": f"chatcmpl-tool-{rng.getrandbits(128):032x}",
                    "type": "function",
                    "function": {"name": name, "arguments": arguments},
                }
            )
        choice = vllm_choice(0, None, "tool_calls")
        message = choice["message"]
        choice["message"] = {
            **{k: v for k, v in message.items() if k != "reasoning"},
            "tool_calls": calls,
            "reasoning": None,
        }
        body = vllm_completion(
            id=f"chatcmpl-{i:08x}",
            created=1764374400 + i,
            model="Qwen/Qwen2.5-7B-Instruct",
            choices=[choice],
            usage={"prompt_tokens": 120, "completion_tokens": 80, "total_tokens": 200},
            fingerprint=f"vllm-0.32.0-{rng.getrandbits(32):08x}",
        )
        out.append(json.dumps(body))
    return out


def tool_contenders(path: Path, args: argparse.Namespace) -> Iterator[Contender]:
    """The ``tools`` corpus: dspark-json's ``tool_calls`` next to Spark's read.json + from_json
    of each function's arguments giving the same columns (:func:`read_same_tool_columns`)."""
    import dspark_json
    from dspark_json.parse import gpu

    bodies = path.read_text().splitlines()
    array = pa.array(bodies, pa.string())
    schema = dspark_json.response_schema(tools=TOOLS)

    def ours(backend: str) -> Callable[[], pa.Table]:
        return lambda: dspark_json.parse_responses(array, schema=schema, backend=backend)

    def with_calls(run: Callable[[], pa.Table]) -> Callable[[], int]:
        return lambda: len(run()) - run().column("tool_calls").null_count

    yield "dspark-json CPU (in process)", ours("cpu"), with_calls(ours("cpu"))
    if gpu.unavailable_reason() is None:
        yield "dspark-json GPU (in process)", ours("gpu"), with_calls(ours("gpu"))
    if args.no_spark:
        return
    spark = spark_session()

    def same() -> Any:
        return read_same_tool_columns(spark, str(path), schema)

    def count(frame: Callable[[], Any]) -> Callable[[], int]:
        return lambda: int(frame().where("tool_calls IS NOT NULL").count())

    yield SPARK_SAME, timed(same), count(same)

    def in_spark() -> Any:
        return dspark_json.parse_dataframe(
            spark.read.text(str(path)), "value", schema=schema, backend="cpu"
        )

    yield "dspark-json parse_dataframe (inside Spark)", timed(in_spark), count(in_spark)


def read_same_tool_columns(spark: Any, path: str, schema: Any) -> Any:
    """Spark's read.json + from_json giving dspark-json's columns of ``schema`` with
    ``tool_calls``: the envelope read, then per function the first choice's calls of that name
    (filter), each with its arguments from_json'd (transform), null where none."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType, StructField, StructType

    system = ("tool_calls", "_status", "_rescued_data", "_corrupt_record")
    envelope = StructType(
        [f for f in schema.fields if f.name not in system]
        + [StructField("_corrupt_record", StringType())]
    )
    df = spark.read.schema(envelope).option("mode", "PERMISSIVE").json(path)
    calls = F.col("choices")[0]["message"]["tool_calls"]

    def calls_of(name: str, arguments: Any) -> Any:
        # One-argument lambdas: Spark reads a second parameter as the element's index.
        mine = F.filter(calls, lambda c: c["function"]["name"] == name)
        typed = F.transform(
            mine,
            lambda c: F.struct(
                c["id"].alias("id"),
                F.from_json(c["function"]["arguments"], arguments).alias("arguments"),
            ),
        )
        return F.when(F.size(typed) > 0, typed).alias(name)

    fields = [
        calls_of(f.name, f.dataType.elementType["arguments"].dataType)
        for f in schema["tool_calls"].dataType.fields
    ]
    return df.withColumn("tool_calls", F.when(F.size(calls) > 0, F.struct(*fields)))


def vllm_envelope(review: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    """The body as vLLM 0.32 writes it: its keys, in its order, its null extras."""
    from dspark_json.dev.simulator import vllm_choice, vllm_completion

    choice = review["choices"][0]
    return vllm_completion(
        id=review["id"],
        created=review["created"],
        model=review["model"],
        choices=[vllm_choice(0, choice["message"]["content"], choice["finish_reason"])],
        usage=review["usage"],
        fingerprint=f"vllm-0.32.0-{rng.getrandbits(32):08x}",
    )


def interleaved(repeat: int, runs: list[Callable[[], Any]]) -> list[float]:
    """Each run's best time of ``repeat``, after a warm-up (JIT caches, JVM code paths, page
    cache), taken in rounds: every run once per round, so that a noisy spell of the machine
    falls on all of them alike instead of on whichever ran then."""
    for run in runs:
        run()
    best = [float("inf")] * len(runs)
    for _ in range(repeat):
        for i, run in enumerate(runs):
            started = time.perf_counter()
            run()
            best[i] = min(best[i], time.perf_counter() - started)
    return best


def spark_session() -> Any:
    from dspark_json.dev.local import local_spark

    return local_spark("dspark-json parser benchmark")


Contender = tuple[str, Callable[[], Any], Callable[[], int]]


def contenders(
    bodies: list[str], path: Path, args: argparse.Namespace, scratch: Path
) -> Iterator[Contender]:
    """(name, the timed run, an untimed count of the rows whose content was parsed)."""
    import orjson

    import dspark_json
    from dspark_json.parse import gpu
    from dspark_json.response.convert import arrow_schema

    array = pa.array(bodies, pa.string())
    schema = dspark_json.response_schema(response_format=CONTENT_SCHEMA)

    def ours(backend: str) -> Callable[[], pa.Table]:
        return lambda: dspark_json.parse_responses(array, schema=schema, backend=backend)

    def parsed_rows(run: Callable[[], pa.Table]) -> Callable[[], int]:
        # Rows whose content was parsed: a field every content has is there.
        return lambda: len(run()) - pc.struct_field(run().column("parsed"), "sentiment").null_count

    yield "dspark-json CPU (in process)", ours("cpu"), parsed_rows(ours("cpu"))
    if gpu.unavailable_reason() is None:
        yield "dspark-json GPU (in process)", ours("gpu"), parsed_rows(ours("gpu"))
    narrow = narrow_schema()

    def ours_narrow() -> pa.Table:
        return dspark_json.parse_responses(array, schema=narrow, backend="cpu")

    yield f"{NARROW} (in process)", ours_narrow, parsed_rows(ours_narrow)

    def ours_pruned() -> pa.Table:
        return pruned_parse(array, narrow)

    yield f"{NARROW}, no _rescued_data (in process)", ours_pruned, parsed_rows(ours_pruned)

    def orjson_rows() -> list[dict[str, Any]]:
        rows = []
        for body in bodies:
            try:
                envelope = orjson.loads(body)
                content = envelope["choices"][0]["message"]["content"]
                envelope["parsed"] = orjson.loads(content)
            except (orjson.JSONDecodeError, KeyError, IndexError, TypeError):
                envelope = {"_corrupt_record": body}
            rows.append(envelope)
        return rows

    def orjson_parsed() -> int:
        rows = orjson_rows()
        return sum(isinstance(r.get("parsed"), dict) and "sentiment" in r["parsed"] for r in rows)

    yield "orjson per row (Python objects only)", orjson_rows, orjson_parsed
    target = arrow_schema(schema)

    def orjson_arrow() -> pa.Table:
        rows = orjson_rows()
        for row in rows:
            row["created"] = (
                datetime.fromtimestamp(row["created"], UTC) if "created" in row else None
            )
            parsed = row.get("parsed")
            if isinstance(parsed, dict) and isinstance(parsed.get("reviewed_at"), str):
                parsed["reviewed_at"] = datetime.fromisoformat(parsed["reviewed_at"])
            elif not isinstance(parsed, dict):
                row["parsed"] = None
        return pa.Table.from_pylist(rows, schema=target)

    yield "orjson per row + Arrow table", orjson_arrow, orjson_parsed
    yield from one_core_contenders(array, schema, path, scratch)
    if not args.no_spark:
        yield from spark_contenders(path, schema, args, scratch)


#: One core each (:func:`one_core_contenders`): dspark-json's parser on one thread, DuckDB and
#: polars on one thread, next to orjson (one thread by nature).
ONE_CORE = "dspark-json CPU, one core (in process)"
DUCKDB = "DuckDB read_json + json_transform, one core"
POLARS = "polars read_ndjson + json_decode, one core (clean bodies only)"
#: Bytes a contender read where it is not the whole corpus (polars refuses a file with one
#: malformed line, and a column with one content that is not JSON: it reads the clean bodies).
SUBSET_BYTES: dict[str, int] = {}
#: The content type for DuckDB's ``json_transform`` and polars' ``json_decode``.
DUCKDB_CONTENT = json.dumps(
    {
        "sentiment": "VARCHAR",
        "score": "DOUBLE",
        "stars": "BIGINT",
        "summary": "VARCHAR",
        "reviewed_at": "TIMESTAMP",
        "topics": [{"name": "VARCHAR", "weight": "DOUBLE", "quotes": ["VARCHAR"]}],
    }
)
DUCKDB_ENVELOPE = (
    "{'id': 'VARCHAR', 'object': 'VARCHAR', 'created': 'BIGINT', 'model': 'VARCHAR', "
    "'choices': 'STRUCT(index BIGINT, message STRUCT(role VARCHAR, content VARCHAR), "
    "finish_reason VARCHAR)[]', 'usage': 'STRUCT(prompt_tokens BIGINT, completion_tokens BIGINT, "
    "total_tokens BIGINT)'}"
)


def one_core_contenders(
    array: pa.Array, schema: Any, path: Path, scratch: Path
) -> Iterator[Contender]:
    """dspark-json, DuckDB and polars on one core each, the envelope typed (Spark's narrow
    columns, :data:`ENVELOPE_DDL`, for the other two) and the first choice's content typed
    (:data:`CONTENT_SCHEMA`)."""
    from dspark_json.parse.cpu import CpuParser

    one = CpuParser(schema)
    one.vectorised.threads = 1

    def ours() -> pa.Table:
        return one.parse_vectorised(array)

    def ours_parsed() -> int:
        table = ours()
        return len(table) - pc.struct_field(table.column("parsed"), "sentiment").null_count

    yield ONE_CORE, ours, ours_parsed
    try:
        import duckdb
    except ImportError:
        duckdb = None
    if duckdb is not None:
        con = duckdb.connect()
        con.execute("SET threads = 1")
        query = (
            "SELECT *, try(json_transform(choices[1].message.content, "
            f"'{DUCKDB_CONTENT}')) AS parsed FROM read_json('{path}', "
            f"format = 'newline_delimited', columns = {DUCKDB_ENVELOPE}, ignore_errors = true)"
        )

        def duck() -> pa.Table:
            return con.execute(query).to_arrow_table()

        def duck_parsed() -> int:
            table = duck()
            return len(table) - pc.struct_field(table.column("parsed"), "sentiment").null_count

        yield DUCKDB, duck, duck_parsed
    # polars reads its thread count once, at import: one thread unless the caller chose.
    os.environ.setdefault("POLARS_MAX_THREADS", "1")
    try:
        import polars as pl
    except ImportError:
        return
    import orjson

    clean = []
    for body in array.to_pylist():
        try:
            content = orjson.loads(body)["choices"][0]["message"]["content"]
            if isinstance(orjson.loads(content), dict):
                clean.append(body)
        except (orjson.JSONDecodeError, KeyError, IndexError, TypeError):
            continue
    clean_path = scratch / "clean.jsonl"
    clean_path.write_text("".join(b + "\n" for b in clean))
    SUBSET_BYTES[POLARS] = clean_path.stat().st_size
    content_type = pl.Struct(
        {
            "sentiment": pl.String,
            "score": pl.Float64,
            "stars": pl.Int64,
            "summary": pl.String,
            "reviewed_at": pl.Datetime("us", "UTC"),
            "topics": pl.List(
                pl.Struct({"name": pl.String, "weight": pl.Float64, "quotes": pl.List(pl.String)})
            ),
        }
    )
    envelope = pl.Schema(
        {
            "id": pl.String,
            "object": pl.String,
            "created": pl.Int64,
            "model": pl.String,
            "choices": pl.List(
                pl.Struct(
                    {
                        "index": pl.Int64,
                        "message": pl.Struct({"role": pl.String, "content": pl.String}),
                        "finish_reason": pl.String,
                    }
                )
            ),
            "usage": pl.Struct(
                {"prompt_tokens": pl.Int64, "completion_tokens": pl.Int64, "total_tokens": pl.Int64}
            ),
        }
    )

    def polars_frame() -> Any:
        frame = pl.read_ndjson(clean_path, schema=envelope)
        content = pl.col("choices").list.first().struct.field("message").struct.field("content")
        return frame.with_columns(parsed=content.str.json_decode(content_type))

    def polars_parsed() -> int:
        parsed = polars_frame().get_column("parsed").struct.field("sentiment")
        return int(parsed.is_not_null().sum())

    yield POLARS, lambda: polars_frame().to_arrow(), polars_parsed


#: Spark's baseline: its narrow envelope (:data:`ENVELOPE_DDL`) and from_json of the content.
BASELINE = "Spark read.json + from_json(content)"
#: The name prefix of dspark-json's contenders that yield Spark's narrow columns (plus
#: ``_status``, ``_rescued_data``, ``_corrupt_record``): the same work as Spark's baseline.
NARROW = "dspark-json CPU, Spark's columns"
#: Spark's contender that yields dspark-json's columns: the whole vLLM envelope, ``parsed`` in
#: every choice's message and at the top level.
SPARK_SAME = "Spark read.json + from_json, dspark-json's columns"
#: Spark's hand-off alone, no parse (:func:`handoff_floors`): the ceiling inside Spark.
FLOOR_MAP = "hand-off alone, no parse: mapInArrow, bodies in, dspark-json's columns out"
FLOOR_SOURCE = "hand-off alone, no parse: Python data source, dspark-json's columns out"


def narrow_schema() -> Any:
    """dspark-json's schema for Spark's narrow columns (:data:`ENVELOPE_DDL`, ``created`` a
    timestamp) and ``parsed``: the full schema, pruned."""
    from pyspark.sql.types import ArrayType, StructField, StructType

    import dspark_json

    full = dspark_json.response_schema(response_format=CONTENT_SCHEMA)

    def pruned(struct: Any, *names: str) -> Any:
        return StructType([f for f in struct.fields if f.name in names])

    choice = full["choices"].dataType.elementType
    message = pruned(choice["message"].dataType, "role", "content")
    choice = StructType(
        [StructField(f.name, message) if f.name == "message" else f for f in choice.fields]
    )
    choice = pruned(choice, "index", "message", "finish_reason")
    usage = pruned(full["usage"].dataType, "prompt_tokens", "completion_tokens", "total_tokens")
    replaced = {"choices": ArrayType(choice), "usage": usage}
    top = pruned(full, "id", "object", "created", "model", "choices", "usage", "parsed")
    fields = [StructField(f.name, replaced.get(f.name, f.dataType)) for f in top.fields]
    return dspark_json.response_schema(schema=StructType(fields))


def pruned_parse(array: pa.Array, schema: Any) -> pa.Table:
    """The parse of a user ``.schema`` without ``_rescued_data`` (``schema`` less that column),
    as the source's pipeline does it: the parser asked for rescue scope ``parsed`` (only the
    answer's keys gathered, for the misfit check), the misfits found, the column dropped."""
    from dspark_json.parse import make_parser, new_fields
    from dspark_json.schema.fit import find_misfits

    parser = make_parser(schema, "cpu", rescue="parsed")
    table = parser.parse(array)
    rescued = table.column("_rescued_data")
    find_misfits(rescued, schema["parsed"].dataType, new_fields(rescued))
    return table.drop_columns(["_rescued_data"])


def without_rescued(schema: Any) -> Any:
    """``schema`` less ``_rescued_data``: a user's ``.schema`` of Spark's columns."""
    return type(schema)([f for f in schema.fields if f.name != "_rescued_data"])


def spark_same_columns(schema: Any) -> tuple[Any, Any]:
    """What a Spark user writes to get dspark-json's columns of ``schema``: the envelope to
    read (no ``parsed``, ``created`` as a timestamp, plus ``_corrupt_record``), and the column
    expression of ``choices`` with ``message.parsed`` from_json'd in every choice."""
    from pyspark.sql.types import ArrayType, StringType, StructField, StructType

    choices = schema["choices"].dataType
    choice = choices.elementType
    message = choice["message"].dataType
    bare = StructType([f for f in message.fields if f.name != "parsed"])
    choice = StructType([StructField(f.name, bare) if f.name == "message" else f for f in choice])
    envelope = StructType(
        [
            StructField("choices", ArrayType(choice)) if f.name == "choices" else f
            for f in schema.fields
            if f.name not in ("parsed", "_status", "_rescued_data", "_corrupt_record")
        ]
        + [StructField("_corrupt_record", StringType())]
    )
    return envelope, message["parsed"].dataType


def read_same_columns(spark: Any, path: str, schema: Any) -> Any:
    """Spark's read.json + from_json giving dspark-json's columns of ``schema`` (the frame of
    ``spark_same_columns``), for the JSON lines at ``path``."""
    from pyspark.sql import functions as F

    envelope, content = spark_same_columns(schema)
    df = spark.read.schema(envelope).option("mode", "PERMISSIVE").json(path)
    choices = F.transform(
        "choices",
        lambda c: c.withField("message.parsed", F.from_json(c["message"]["content"], content)),
    )
    df = df.withColumn("choices", choices)
    return df.withColumn("parsed", F.col("choices")[0]["message"]["parsed"])


def timed(frame: Callable[[], Any]) -> Callable[[], None]:
    """Evaluate every column of the frame (Spark's noop sink)."""
    return lambda: frame().write.format("noop").mode("overwrite").save()


def counted(frame: Callable[[], Any]) -> Callable[[], int]:
    """The rows with content parsed. from_json yields a struct of nulls for text it cannot
    parse: count a field every content has."""
    return lambda: int(frame().where("parsed.sentiment IS NOT NULL").count())


def spark_contenders(
    path: Path, schema: Any, args: argparse.Namespace, scratch: Path
) -> Iterator[Contender]:
    from pyspark.sql import functions as F
    from pyspark.sql.types import StructType

    import dspark_json

    spark = spark_session()
    envelope_ddl = ENVELOPE_DDL
    content_type = StructType.fromDDL(CONTENT_DDL)
    partitions = args.partitions

    def read_json() -> Any:
        df = spark.read.schema(envelope_ddl).option("mode", "PERMISSIVE").json(str(path))
        df = df.repartition(partitions) if partitions else df
        content = F.col("choices")[0]["message"]["content"]
        return df.withColumn("parsed", F.from_json(content, content_type))

    yield BASELINE, timed(read_json), counted(read_json)

    def read_json_same() -> Any:
        return read_same_columns(spark, str(path), schema)

    yield SPARK_SAME, timed(read_json_same), counted(read_json_same)

    def text_from_json() -> Any:
        lines = spark.read.text(str(path))
        env = lines.select(
            F.from_json("value", StructType.fromDDL(envelope_ddl)).alias("e"), "value"
        )
        content = F.col("e.choices")[0]["message"]["content"]
        return env.select("e.*", F.from_json(content, content_type).alias("parsed"))

    yield "Spark read.text + from_json x2", timed(text_from_json), counted(text_from_json)

    @F.udf(returnType=content_type)
    def loads(body: str) -> Any:
        try:
            value = json.loads(json.loads(body)["choices"][0]["message"]["content"])
        except (ValueError, KeyError, IndexError, TypeError):
            return None
        if isinstance(value, dict) and isinstance(value.get("reviewed_at"), str):
            value["reviewed_at"] = datetime.fromisoformat(value["reviewed_at"])
        return value if isinstance(value, dict) else None

    def udf_frame() -> Any:
        return spark.read.text(str(path)).select(loads("value").alias("parsed"))

    yield "Spark Python UDF json.loads", timed(udf_frame), counted(udf_frame)

    def in_spark() -> Any:
        return dspark_json.parse_dataframe(
            spark.read.text(str(path)), "value", schema=schema, backend="cpu"
        )

    yield "dspark-json parse_dataframe (inside Spark)", timed(in_spark), counted(in_spark)
    narrow = narrow_schema()

    def in_spark_narrow() -> Any:
        return dspark_json.parse_dataframe(
            spark.read.text(str(path)), "value", schema=narrow, backend="cpu"
        )

    name = f"{NARROW}, parse_dataframe (inside Spark)"
    yield name, timed(in_spark_narrow), counted(in_spark_narrow)

    # The source's partition work: the bodies as recorded answers (option responses), read,
    # parsed and handed to Spark by the Python data source, one partition per core.
    dspark_json.register(spark)
    cores = spark.sparkContext.defaultParallelism

    def source(columns: Any = None) -> Any:
        reader = spark.read.format("dspark-json")
        if columns is not None:
            reader = reader.schema(columns)
        return (
            reader.option("responses", str(path.parent))
            .option("responseFormat", json.dumps(CONTENT_SCHEMA))
            .option("partitionSize", str(-(-args.rows // cores)))
            .option("parseMode", "cpu")
            .load()
        )

    yield "dspark-json source, recorded answers (inside Spark)", timed(source), counted(source)

    def source_narrow() -> Any:
        return source(narrow)

    name = f"{NARROW}, source on recorded answers (inside Spark)"
    yield name, timed(source_narrow), counted(source_narrow)

    def source_pruned() -> Any:
        return source(without_rescued(narrow))

    name = f"{NARROW}, no _rescued_data, source on recorded answers (inside Spark)"
    yield name, timed(source_pruned), counted(source_pruned)
    yield from handoff_floors(spark, path, schema, source, cores=cores, scratch=scratch)


def handoff_floors(
    spark: Any, path: Path, schema: Any, source: Callable[[], Any], *, cores: int, scratch: Path
) -> Iterator[Contender]:
    """What Spark's hand-off to and from Python costs alone: the ceiling of any parser that
    runs in Python inside Spark. Both yield dspark-json's own output, computed beforehand and
    memory-mapped from Arrow files, so nothing is read or parsed in the timed run:

    - :data:`FLOOR_MAP`: ``parse_dataframe``'s path without the parse (``mapInArrow`` over the
      bodies read as text: they go to Python, a table of the same columns comes back);
    - :data:`FLOOR_SOURCE`: the source's path without reading or parsing (a Python data source
      yielding the source's output, one partition per core)."""
    from pyspark import TaskContext
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    import dspark_json

    bodies = pa.array(path.read_text().split("\n")[:-1])
    parsed = dspark_json.parse_responses(bodies, schema=schema, backend="cpu")
    frame = source()  # one frame: its rows and its Spark schema
    recorded = frame.toArrow()
    files = {"map": str(scratch / "map.arrow"), "source": str(scratch / "source.arrow")}
    for key, table in (("map", parsed), ("source", recorded)):
        with pa.OSFile(files[key], "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
            writer.write_table(table, max_chunksize=10_000)
    rows = len(bodies)

    def mapped(key: str) -> pa.Table:
        return pa.ipc.open_file(pa.memory_map(files[key])).read_all()

    splits = spark.read.text(str(path)).rdd.getNumPartitions()

    def same_width(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        table = mapped("map")
        context = TaskContext.get()
        # About the rows of this split (Spark splits the file by bytes): the same width.
        at = context.partitionId() * rows // splits if context else 0
        for batch in batches:
            if at + batch.num_rows > rows:
                at = 0
            yield from table.slice(at, batch.num_rows).to_batches()
            at += batch.num_rows

    out_type = dspark_json.parse_dataframe(
        spark.read.text(str(path)), "value", schema=schema, backend="cpu"
    ).schema

    def floor_map() -> Any:
        return spark.read.text(str(path)).mapInArrow(same_width, out_type)

    class _Part(InputPartition):
        def __init__(self, lo: int, hi: int) -> None:
            self.lo, self.hi = lo, hi

    class _Reader(DataSourceReader):
        def partitions(self) -> list[InputPartition]:
            cuts = [rows * k // cores for k in range(cores + 1)]
            return [_Part(lo, hi) for lo, hi in itertools.pairwise(cuts)]

        def read(self, partition: Any) -> Iterator[pa.RecordBatch]:
            table = mapped("source").slice(partition.lo, partition.hi - partition.lo)
            yield from table.to_batches(max_chunksize=10_000)

    recorded_schema = frame.schema

    class _Floor(DataSource):
        @classmethod
        def name(cls) -> str:
            return "dspark-bench-handoff"

        def schema(self) -> Any:
            return recorded_schema

        def reader(self, schema: Any) -> DataSourceReader:
            return _Reader()

    spark.dataSource.register(_Floor)

    def floor_source() -> Any:
        return spark.read.format("dspark-bench-handoff").load()

    yield FLOOR_MAP, timed(floor_map), counted(floor_map)
    yield FLOOR_SOURCE, timed(floor_source), counted(floor_source)


def machine() -> dict[str, Any]:
    import numba
    import pyspark

    return {
        "date": datetime.now(UTC).strftime("%Y-%m-%d"),
        "cpu_cores": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "pyarrow": pa.__version__,
        "pyspark": pyspark.__version__,
        "numba": numba.__version__,
    }


def cold_start(rows: int = 300) -> dict[str, float]:
    """A fresh process with an empty numba cache (a new machine): seconds to import, to parse
    the first ``rows`` bodies, and until the vectorised kernels are compiled."""
    script = textwrap.dedent(
        f"""
        import json, sys, time
        started = time.perf_counter()
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from parser_throughput import corpus, CONTENT_SCHEMA
        import dspark_json
        from dspark_json.parse import warmup
        from dspark_json.parse.cpu import warm_kernels
        imported = time.perf_counter()
        bodies = corpus({rows}, kind="vllm")
        first = time.perf_counter()
        dspark_json.parse_responses(bodies, response_format=CONTENT_SCHEMA, backend="cpu")
        parsed = time.perf_counter()
        warmup.wait(warm_kernels)
        ready = time.perf_counter()
        print(json.dumps({{"import_s": imported - started, "first_parse_s": parsed - first,
                           "kernels_ready_s": ready - started}}))
        """
    )
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "NUMBA_CACHE_DIR": cache}
        done = subprocess.run(
            [sys.executable, "-c", script], check=True, capture_output=True, text=True, env=env
        )
    figures: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return {k: round(v, 3) for k, v in figures.items()}


def _figure(figures: list[dict[str, Any]], name: str) -> dict[str, Any] | None:
    return next((f for f in figures if f["name"] == name), None)


def like_for_like(runs: list[dict[str, Any]]) -> list[tuple[str, dict[str, float]]]:
    """Per corpus, our contenders against Spark's for the same columns (Spark's seconds / ours):
    dspark-json's own columns against :data:`SPARK_SAME`, Spark's narrow columns against
    :data:`BASELINE`. Empty without the Spark contenders."""
    pairs = {
        "in process, dspark-json's columns": ("dspark-json CPU (in process)", SPARK_SAME),
        "in process, Spark's columns": (f"{NARROW} (in process)", BASELINE),
        "in process, Spark's columns, no _rescued_data": (
            f"{NARROW}, no _rescued_data (in process)",
            BASELINE,
        ),
        "parse_dataframe, dspark-json's columns": (
            "dspark-json parse_dataframe (inside Spark)",
            SPARK_SAME,
        ),
        "parse_dataframe, Spark's columns": (
            f"{NARROW}, parse_dataframe (inside Spark)",
            BASELINE,
        ),
        "source, dspark-json's columns": (
            "dspark-json source, recorded answers (inside Spark)",
            SPARK_SAME,
        ),
        "source, Spark's columns": (
            f"{NARROW}, source on recorded answers (inside Spark)",
            BASELINE,
        ),
        "source, Spark's columns, no _rescued_data": (
            f"{NARROW}, no _rescued_data, source on recorded answers (inside Spark)",
            BASELINE,
        ),
        "ceiling inside Spark, parse_dataframe's path": (FLOOR_MAP, SPARK_SAME),
        "ceiling inside Spark, the source's path": (FLOOR_SOURCE, SPARK_SAME),
    }
    out = []
    for run in runs:
        ratios = {}
        for label, (ours, theirs) in pairs.items():
            mine, spark = _figure(run["figures"], ours), _figure(run["figures"], theirs)
            if mine is not None and spark is not None:
                ratios[label] = spark["seconds"] / mine["seconds"]
        if ratios:
            out.append((run["corpus"], ratios))
    return out


def write_results(runs: list[dict[str, Any]], meta: dict[str, Any], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "parser_throughput.json").write_text(
        json.dumps({"machine": meta, "corpora": runs}, indent=2) + "\n"
    )
    cold = meta["cold_start"]
    lines = [
        f"Parser throughput, {meta['cpu_cores']} cores, {meta['date']}. "
        f"Command: `{meta['command']}`",
        "",
        f"GPU: {meta['gpu']}.",
        "",
        f"Cold start (a fresh process, empty numba cache, {cold['bodies']} vLLM-shaped bodies): "
        f"import {cold['import_s']:.2f} s, first parse {cold['first_parse_s']:.2f} s (by the "
        f"kernels' rules in plain Python while the kernels compile in the background), kernels "
        f"ready after {cold['kernels_ready_s']:.1f} s.",
    ]
    like = like_for_like(runs)
    if like:
        lines += [
            "",
            "Like for like (each ratio: Spark's seconds / ours, in the same run, for the same "
            "columns: dspark-json's whole output against Spark reading the same envelope with "
            "`parsed` in every choice; Spark's narrow columns against Spark's narrow read). "
            "The two ceilings: Spark's seconds / those of Spark's hand-off to Python and back "
            "alone, the same output computed beforehand, nothing read or parsed: what any "
            "parser in Python inside Spark could reach at best on this machine):",
            "",
            "| corpus | " + " | ".join(like[0][1]) + " |",
            "|---|" + "---:|" * len(like[0][1]),
        ]
        lines += [
            f"| {corpus} | " + " | ".join(f"{r:.2f}x" for r in ratios.values()) + " |"
            for corpus, ratios in like
        ]
    for run in runs:
        figures = run["figures"]
        base = _figure(figures, BASELINE)
        same = _figure(figures, SPARK_SAME)
        lines += [
            "",
            f"### Corpus `{run['corpus']}`: {run['rows']:,} bodies, {run['megabytes']:.0f} MB "
            f"(mean {run['mean_kb']:.1f} KB)",
            "",
            "| contender | seconds | records/s | MB/s | vs Spark read.json + from_json "
            "| vs Spark, dspark-json's columns | rows with content parsed |",
            "|---|---:|---:|---:|---:|---:|---:|",
        ]
        for f in figures:
            ratio = f"{base['seconds'] / f['seconds']:.2f}x" if base else "-"
            versus_same = f"{same['seconds'] / f['seconds']:.2f}x" if same else "-"
            lines.append(
                f"| {f['name']} | {f['seconds']:.2f} | {f['records_per_s']:,.0f} | "
                f"{f['mb_per_s']:.0f} | {ratio} | {versus_same} | {f['content_parsed']:,} |"
            )
    lines += [
        "",
        "Corpora: `review` (the faults a real run sees: fenced and prose-wrapped contents, cut "
        "bodies, a little drift), `vllm` (the same in vLLM 0.32's exact envelope), `drift` (vLLM "
        "0.32's envelope, 4 rows in 10 with unexpected fields to rescue). Rows with content "
        "parsed: of the bodies, how many came out with a typed `parsed` value; only dspark-json "
        "finds the JSON in fences and prose, and it also keeps the rest: `_corrupt_record`, "
        "`_rescued_data`, `_status`. `traffic` (vLLM 0.32's envelope, shaped like a reasoning "
        "model's traffic): contents pretty-printed, fenced or in prose, prose answers, tool "
        "calls, reasoning text, content fields beyond the schema, drifting envelope metadata.",
    ]
    (out / "parser_throughput.md").write_text("\n".join(lines) + "\n")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(runs), 1, figsize=(9, 3.2 * len(runs)), squeeze=False)
    for ax, run in zip(axes[:, 0], runs, strict=True):
        figures = run["figures"]
        names = [f["name"] for f in figures][::-1]
        speeds = [f["mb_per_s"] for f in figures][::-1]
        colors = ["#2a7" if n.startswith("dspark") else "#999" for n in names]
        ax.barh(names, speeds, color=colors)
        ax.set_title(f"corpus {run['corpus']}: {run['rows']:,} bodies (MB/s, higher is better)")
    title = f"Parser throughput, {meta['cpu_cores']} cores; GPU: {meta['gpu']}"
    fig.suptitle(textwrap.fill(title, 90))
    fig.tight_layout()
    fig.savefig(out / "parser_throughput.png", dpi=110, bbox_inches="tight")
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--corpus", choices=CORPORA, action="append", help="default: all")
    parser.add_argument("--partitions", type=int, default=0, help="repartition Spark's input")
    parser.add_argument("--no-spark", action="store_true", help="skip the Spark contenders")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, for the test suite")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    if args.smoke:
        args.rows, args.repeat = 300, 1
    from dspark_json.parse import gpu

    reason = gpu.unavailable_reason()
    meta = {
        **machine(),
        "command": "python benchmarks/parser_throughput.py " + " ".join(argv or sys.argv[1:]),
        "gpu": "measured" if reason is None else f"not measured: no device ({reason})",
        "cold_start": {"bodies": 300, **cold_start(300)},
    }
    runs = []
    for kind in args.corpus or CORPORA:
        bodies = corpus(args.rows, kind=kind)
        size = sum(len(b.encode()) for b in bodies)
        figures = []
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "bodies" / "bodies.jsonl"  # alone: the source reads the folder
            path.parent.mkdir()
            path.write_text("".join(b + "\n" for b in bodies))
            (Path(tmp) / "scratch").mkdir()
            entries = list(
                tool_contenders(path, args)
                if kind == "tools"
                else contenders(bodies, path, args, Path(tmp) / "scratch")
            )
            times = interleaved(args.repeat, [run for _, run, _ in entries])
            for (name, _, count), seconds in zip(entries, times, strict=True):
                figures.append(
                    {
                        "name": name,
                        "seconds": seconds,
                        "records_per_s": args.rows / seconds,
                        "mb_per_s": SUBSET_BYTES.get(name, size) / 1e6 / seconds,
                        "content_parsed": count(),
                    }
                )
                print(f"{kind:7s} {name:45s} {seconds:8.3f}s", flush=True)
        runs.append(
            {
                "corpus": kind,
                "rows": args.rows,
                "megabytes": size / 1e6,
                "mean_kb": size / len(bodies) / 1e3,
                "figures": figures,
            }
        )
    write_results(runs, meta, args.out)
    print((args.out / "parser_throughput.md").read_text())
    return 0


if __name__ == "__main__":
    # Measured with freed memory kept in the process, the deployer's choice (README "Memory");
    # DSPARK_JSON_KEEP_MEMORY=0 measures without it. Set before Spark starts its workers.
    os.environ.setdefault("DSPARK_JSON_KEEP_MEMORY", "1")
    sys.exit(main())
