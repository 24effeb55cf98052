"""A corpus of real-world-shaped schemas for the parser benchmark: the JSON Schemas people write,
in the style of Kubernetes objects (``labels``/``annotations`` maps), configuration files
(grab-bag ``additionalProperties: {}`` objects, free-form values), event schemas (unions of
scalars, tuples), deep nesting and wide structs; each with seeded vLLM bodies whose content is a
valid instance (with nulls, missing keys and a little drift).

    .venv/bin/python benchmarks/realworld.py --rows 5000 --repeat 3      # in process
    .venv/bin/python benchmarks/realworld.py --rows 5000 --spark         # and Spark's path
    .venv/bin/python benchmarks/realworld.py --rows 100000 --inside-spark  # and ours in Spark

Per schema it prints the rows/s of dspark-json's CPU backend, how many rows took the reference
parser and why (the parser's ``reference_reasons``), and, with ``--spark``, Spark's
``read.json`` + ``from_json`` for the same columns (the very type dspark-json maps the schema
to) and the ratio; with ``--inside-spark``, dspark-json inside Spark as well
(``parse_dataframe`` over ``read.text``, and the source on the bodies as recorded answers), timed
in rounds with Spark's path (``parser_throughput.interleaved``).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from parser_throughput import WORDS, interleaved, vllm_envelope

_STR = {"type": "string"}
_INT = {"type": "integer"}
_NUM = {"type": "number"}
_MAP_OF_STRINGS = {"type": "object", "additionalProperties": _STR}

SCHEMAS: dict[str, dict[str, Any]] = {
    "k8s_deployment": {
        "type": "object",
        "properties": {
            "apiVersion": _STR,
            "kind": _STR,
            "metadata": {
                "type": "object",
                "properties": {
                    "name": _STR,
                    "namespace": _STR,
                    "labels": _MAP_OF_STRINGS,
                    "annotations": _MAP_OF_STRINGS,
                },
            },
            "spec": {
                "type": "object",
                "properties": {
                    "replicas": _INT,
                    "selector": {
                        "type": "object",
                        "properties": {"matchLabels": _MAP_OF_STRINGS},
                    },
                    "containers": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "properties": {
                                "name": _STR,
                                "image": _STR,
                                "env": {
                                    "type": "array",
                                    "items": {
                                        "type": "object",
                                        "properties": {"name": _STR, "value": _STR},
                                    },
                                },
                                "resources": {
                                    "type": "object",
                                    "properties": {
                                        "limits": _MAP_OF_STRINGS,
                                        "requests": _MAP_OF_STRINGS,
                                    },
                                },
                            },
                        },
                    },
                },
            },
        },
    },
    "config_grab_bag": {
        "type": "object",
        "properties": {
            "name": _STR,
            "version": _STR,
            "settings": {"type": "object", "additionalProperties": {}},
            "plugins": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {"id": _STR, "options": {}},
                },
            },
            "enabled": {"type": "boolean"},
        },
    },
    "event_unions": {
        "type": "object",
        "properties": {
            "event": {"type": "string", "enum": ["click", "view", "purchase"]},
            "user_id": {"type": ["string", "integer"]},
            "value": {"anyOf": [_NUM, _STR, {"type": "boolean"}]},
            "at": {"type": "string", "format": "date-time"},
            "position": {"type": "array", "prefixItems": [_STR, _INT], "items": False},
            "context": {"type": "object", "additionalProperties": _NUM},
        },
    },
    "deep_nesting": {
        "type": "object",
        "properties": {
            "a": {
                "type": "object",
                "properties": {
                    "b": {
                        "type": "object",
                        "properties": {
                            "c": {
                                "type": "array",
                                "items": {
                                    "type": "object",
                                    "properties": {
                                        "d": {
                                            "type": "object",
                                            "properties": {"e": _STR, "f": _INT},
                                        },
                                        "g": {"type": "array", "items": _NUM},
                                    },
                                },
                            },
                            "h": _STR,
                        },
                    }
                },
            }
        },
    },
    "wide_struct": {
        "type": "object",
        "properties": {
            **{f"s{i}": _STR for i in range(20)},
            **{f"n{i}": _INT for i in range(10)},
            **{f"x{i}": _NUM for i in range(10)},
        },
    },
}


def _word(rng: random.Random) -> str:
    return rng.choice(WORDS)


def _words(rng: random.Random, k: int = 4) -> str:
    return " ".join(rng.choices(WORDS, k=k))


def _labels(rng: random.Random, most: int = 6) -> dict[str, str]:
    keys = ["app", "tier", "team", "env", "app.kubernetes.io/name", "version", "region"]
    return {k: _word(rng) for k in rng.sample(keys, rng.randint(0, most))}


def _k8s(rng: random.Random) -> dict[str, Any]:
    containers = [
        {
            "name": _word(rng),
            "image": f"registry.local/{_word(rng)}:{rng.randint(1, 9)}.{rng.randint(0, 20)}",
            "env": [{"name": _word(rng).upper(), "value": _words(rng, 2)} for _ in range(3)],
            "resources": {
                "limits": {"cpu": f"{rng.randint(1, 8)}", "memory": f"{rng.randint(1, 64)}Gi"},
                "requests": {"cpu": f"{rng.randint(100, 900)}m"},
            },
        }
        for _ in range(rng.randint(1, 3))
    ]
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": _word(rng),
            "namespace": rng.choice(["default", "prod", None]),
            "labels": _labels(rng),
            "annotations": _labels(rng, 3) if rng.random() < 0.7 else None,
        },
        "spec": {
            "replicas": rng.randint(1, 12),
            "selector": {"matchLabels": _labels(rng, 2)},
            "containers": containers,
        },
    }


def _free(rng: random.Random, depth: int = 0) -> Any:
    roll = rng.random()
    if depth > 2 or roll < 0.3:
        return rng.choice(
            [True, False, rng.randint(-5, 500), _word(rng), None, round(rng.random(), 3)]
        )
    if roll < 0.65:
        return {_word(rng): _free(rng, depth + 1) for _ in range(rng.randint(0, 4))}
    return [_free(rng, depth + 1) for _ in range(rng.randint(0, 3))]


def _config(rng: random.Random) -> dict[str, Any]:
    return {
        "name": _word(rng),
        "version": f"{rng.randint(0, 3)}.{rng.randint(0, 9)}",
        "settings": {_word(rng): _free(rng, 1) for _ in range(rng.randint(1, 6))},
        "plugins": [{"id": _word(rng), "options": _free(rng)} for _ in range(rng.randint(0, 3))],
        "enabled": rng.random() < 0.8,
    }


def _event(rng: random.Random) -> dict[str, Any]:
    return {
        "event": rng.choice(["click", "view", "purchase"]),
        "user_id": rng.choice([f"u{rng.randint(1, 10**6)}", rng.randint(1, 10**6)]),
        "value": rng.choice([round(rng.random() * 100, 2), _word(rng), True, None]),
        "at": f"2026-11-{rng.randint(1, 28):02d}T{rng.randint(0, 23):02d}:00:00Z",
        "position": [_word(rng), rng.randint(0, 99)],
        "context": {_word(rng): round(rng.random(), 4) for _ in range(rng.randint(0, 4))},
    }


def _deep(rng: random.Random) -> dict[str, Any]:
    items = [
        {
            "d": {"e": _words(rng, 3), "f": rng.randint(0, 999)},
            "g": [round(rng.random(), 5) for _ in range(rng.randint(0, 5))],
        }
        for _ in range(rng.randint(1, 6))
    ]
    return {"a": {"b": {"c": items, "h": _word(rng)}}}


def _wide(rng: random.Random) -> dict[str, Any]:
    value: dict[str, Any] = {f"s{i}": _words(rng, 2) for i in range(20)}
    value |= {f"n{i}": rng.randint(-(10**6), 10**6) for i in range(10)}
    value |= {f"x{i}": round(rng.uniform(-100, 100), 4) for i in range(10)}
    return value


INSTANCES: dict[str, Callable[[random.Random], dict[str, Any]]] = {
    "k8s_deployment": _k8s,
    "config_grab_bag": _config,
    "event_unions": _event,
    "deep_nesting": _deep,
    "wide_struct": _wide,
}


def bodies(name: str, rows: int, seed: int = 7) -> list[str]:
    """Seeded vLLM bodies whose content is an instance of schema ``name``: compact or
    pretty-printed, a few in fences, 2 % with a key the schema lacks."""
    rng = random.Random(seed)
    out = []
    for i in range(rows):
        value = INSTANCES[name](rng)
        if rng.random() < 0.02:
            value["note"] = _words(rng, 3)
        content = json.dumps(value, indent=2 if rng.random() < 0.3 else None)
        if rng.random() < 0.05:
            content = "```json\n" + content + "\n```"
        choice = {"message": {"content": content}, "finish_reason": "stop"}
        envelope = {
            "id": f"chatcmpl-{i:08x}",
            "created": 1764374400 + i,
            "model": "Qwen/Qwen2.5-7B-Instruct",
            "choices": [choice],
            "usage": {"prompt_tokens": 120, "completion_tokens": 300, "total_tokens": 420},
        }
        out.append(json.dumps(vllm_envelope(envelope, rng)))
    return out


def main(argv: list[str] | None = None) -> int:
    import pyarrow as pa

    import dspark_json
    from dspark_json.parse import warmup
    from dspark_json.parse.cpu import CpuParser, warm_kernels

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=5000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--schema", choices=sorted(SCHEMAS), action="append")
    parser.add_argument("--spark", action="store_true", help="also Spark's read.json + from_json")
    parser.add_argument(
        "--inside-spark",
        action="store_true",
        help="also dspark-json inside Spark (parse_dataframe, the source); implies --spark",
    )
    parser.add_argument("--json", type=Path, help="write the figures here")
    args = parser.parse_args(argv)
    spark = None
    if args.spark or args.inside_spark:
        from parser_throughput import spark_session

        spark = spark_session()
    warmup.wait(warm_kernels)  # the kernels compiled: no batch takes the cold path
    figures = []
    for name in args.schema or SCHEMAS:
        texts = bodies(name, args.rows)
        array = pa.array(texts, pa.string())
        schema = dspark_json.response_schema(response_format=SCHEMAS[name])
        cpu = CpuParser(schema)
        cpu.parse(array)  # compiles, then warm
        figure: dict[str, Any] = {
            "schema": name,
            "rows": args.rows,
            "mb": round(sum(len(t) for t in texts) / 1e6, 2),
        }
        with tempfile.TemporaryDirectory() as scratch:
            path = Path(scratch) / "bodies" / "bodies.jsonl"  # alone: the source reads the folder
            path.parent.mkdir()
            path.write_text("\n".join(texts) + "\n")
            runs: dict[str, Callable[[], Any]] = {"cpu": lambda: cpu.parse(array)}  # noqa: B023
            if spark is not None:
                runs |= _spark_runs(spark, schema, SCHEMAS[name], path, args, scratch=Path(scratch))
            seconds = dict(zip(runs, interleaved(args.repeat, list(runs.values())), strict=True))
        for key, took in seconds.items():
            figure[f"{key}_s"] = round(took, 4)
            figure[f"{key}_rows_per_s"] = round(args.rows / took)
        figure["reference_rows"] = cpu.reference_rows
        figure["reference_reasons"] = dict(getattr(cpu, "reference_reasons", {}))
        if "spark" in seconds:
            for key in ("cpu", "parse_dataframe", "source"):
                if key in seconds:
                    label = "ratio" if key == "cpu" else f"{key}_ratio"
                    figure[label] = round(seconds["spark"] / seconds[key], 2)
            for ours, floor in _CEILINGS.items():
                if floor in seconds:
                    figure[f"{ours}_ceiling"] = round(seconds["spark"] / seconds[floor], 2)
        figures.append(figure)
        print(json.dumps(figure), flush=True)
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1) + "\n")
    return 0


#: Each of our paths inside Spark, and the run of its hand-off floor: Spark's seconds over the
#: floor's are the ceiling of that path, what any parser in Python could reach there.
_CEILINGS = {"parse_dataframe": "floor_map", "source": "floor_source"}


def _spark_runs(
    spark: Any,
    schema: Any,
    response_format: dict[str, Any],
    path: Path,
    args: Any,
    *,
    scratch: Path,
) -> dict[str, Callable[[], Any]]:
    """Spark's read.json + from_json for dspark-json's columns of ``schema`` (the very type the
    schema maps to), evaluated whole; with ``--inside-spark``, dspark-json inside Spark too:
    ``parse_dataframe`` over the bodies read as text, and the source reading them as recorded
    answers (one partition per core), as ``parser_throughput.py`` measures them, and each
    path's hand-off floor (``parser_throughput.handoff_floors``: Spark's hand-off to Python and
    back alone, our output computed beforehand)."""
    from parser_throughput import FLOOR_MAP, FLOOR_SOURCE, handoff_floors, read_same_columns, timed

    import dspark_json

    runs = {"spark": timed(lambda: read_same_columns(spark, str(path), schema))}
    if not args.inside_spark:
        return runs

    def in_spark() -> Any:
        frame = spark.read.text(str(path))
        return dspark_json.parse_dataframe(frame, "value", schema=schema, backend="cpu")

    dspark_json.register(spark)
    cores = spark.sparkContext.defaultParallelism

    def source() -> Any:
        return (
            spark.read.format("dspark-json")
            .option("responses", str(path.parent))
            .option("responseFormat", json.dumps(response_format))
            .option("partitionSize", str(-(-args.rows // cores)))
            .option("parseMode", "cpu")
            .load()
        )

    runs |= {"parse_dataframe": timed(in_spark), "source": timed(source)}
    keys = {FLOOR_MAP: "floor_map", FLOOR_SOURCE: "floor_source"}
    floors = handoff_floors(spark, path, schema, source, cores=cores, scratch=scratch)
    return runs | {keys[label]: run for label, run, _count in floors}


if __name__ == "__main__":
    # Measured with freed memory kept in the process, the deployer's choice (README "Memory");
    # DSPARK_JSON_KEEP_MEMORY=0 measures without it. Set before Spark starts its workers.
    os.environ.setdefault("DSPARK_JSON_KEEP_MEMORY", "1")
    raise SystemExit(main())
