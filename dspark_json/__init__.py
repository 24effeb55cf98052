"""dspark-json: turn vLLM (OpenAI-compatible) answers into typed Spark tables.

    import dspark_json
    dspark_json.register(spark)
    df = (spark.readStream.format("dspark-json")
          .option("endpoint", "http://vllm:8000")
          .option("prompts", "/data/prompts")
          .option("responseFormat", "/data/schema.json")
          .load())
    dspark_json.write_delta(df, "/data/answers", checkpoint="/data/_checkpoint")

    table = dspark_json.parse_responses(bodies, response_format=schema)  # bodies in hand

Importing this package never imports cuDF, RMM or CUDA; the GPU parser loads them on use. Nor
does it import the parser, the HTTP client or Delta: each name below is imported on first use
(Spark starts a Python process for each planning call, which needs none of them).

``__all__`` is what users call. The rest is internal: importable from its module (the options
as :class:`dspark_json.options.Options` and :data:`dspark_json.options.OPTION_SPECS`, the plan
redaction as :data:`dspark_json.http.secrets.REDACTION_PATTERN`), with no promise across 0.x
releases.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from dspark_json.errors import (
    BackendUnavailable,
    DSparkJsonError,
    OptionError,
    RecordError,
    SchemaError,
    ServerError,
)
from dspark_json.http import secrets as _secrets  # its import masks credentials in our logs

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from dspark_json.bodies import parse_dataframe, parse_responses, response_schema
    from dspark_json.compat import start
    from dspark_json.delta import write_delta
    from dspark_json.delta.sink import DeltaSink
    from dspark_json.generation import generate
    from dspark_json.options import FORMAT
    from dspark_json.progress import show_progress
    from dspark_json.schema.json_schema import json_schema_to_spark
    from dspark_json.source import DSparkJsonDataSource

#: The exported names imported on first use (PEP 562), by the module that defines each: Spark
#: starts a Python process for each planning or commit call of a query, which unpickles the
#: source (importing this package) and needs none of the parser, the HTTP client or Delta's
#: writer (issue 55: imports were 92% of those processes' time).
_LAZY: dict[str, str] = {
    "FORMAT": "dspark_json.options",
    "DSparkJsonDataSource": "dspark_json.source",
    "DeltaSink": "dspark_json.delta.sink",
    "generate": "dspark_json.generation",
    "json_schema_to_spark": "dspark_json.schema.json_schema",
    "parse_dataframe": "dspark_json.bodies",
    "parse_responses": "dspark_json.bodies",
    "response_schema": "dspark_json.bodies",
    "show_progress": "dspark_json.progress",
    "start": "dspark_json.compat",
    "write_delta": "dspark_json.delta",
}

__all__ = [
    "FORMAT",
    "BackendUnavailable",
    "DSparkJsonDataSource",
    "DSparkJsonError",
    "DeltaSink",
    "OptionError",
    "RecordError",
    "SchemaError",
    "ServerError",
    "__version__",
    "generate",
    "json_schema_to_spark",
    "parse_dataframe",
    "parse_responses",
    "register",
    "response_schema",
    "show_progress",
    "start",
    "write_delta",
]

__version__ = "0.2.0"

_REDACTION_CONF = "spark.sql.redaction.options.regex"


def register(spark: SparkSession) -> None:
    """Register the ``dspark-json`` format with ``spark`` (batch and streaming reads) and the
    ``dspark-delta`` sink (Delta tables whose data files the executors write), and make Spark
    redact the secret options (``apiKey``, ``storageOptions``, ``requestHeaders``) and credentials
    in URLs from plans (``explain``) and the UI.

    With the package installed, Spark 4 registers both formats by itself (the top-level modules
    ``pyspark_dspark_json`` and ``pyspark_dspark_delta``); what this call adds then is the
    redaction (without it, a query that passes one of those options gets one WARN) and Delta
    reads' filter pushdown (docs/getting-started/cluster.md), and the cluster's task slots, by
    which the planner sizes a micro-batch's tasks where option ``partitionSize`` is not given
    (:func:`dspark_json.source.session_slots`; docs/guide/performance.md).

    Parameters
    ----------
    spark:
        The session to register the format with (classic or Spark Connect).
    """
    from dspark_json.delta.stream import register_once, register_sink
    from dspark_json.source import DSparkJsonDataSource, session_slots, with_slots

    register_once(spark, with_slots(DSparkJsonDataSource, session_slots(spark)))
    register_sink(spark)
    current = spark.conf.get(_REDACTION_CONF) or "(?i)url"
    if _secrets.REDACTION_PATTERN not in current:
        spark.conf.set(_REDACTION_CONF, f"{current}|{_secrets.REDACTION_PATTERN}")


if not TYPE_CHECKING:  # mypy sees the imports above, and no catch-all attribute

    def __getattr__(name: str) -> object:
        """An exported name's first use: import its module (PEP 562), keep the value here."""
        module = _LAZY.get(name)
        if module is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        globals()[name] = value
        return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
