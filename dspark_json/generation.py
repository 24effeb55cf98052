"""``generate``: the source's client as a DataFrame transform, for prompts that live in tables or
Kafka. Each batch of rows is sent and parsed on the executors (``mapInArrow``) by the same code
as the ``dspark-json`` source, into the same columns."""

from __future__ import annotations

import difflib
import json
import time
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql.types import ArrayType, StringType, StructType

from dspark_json.buffers.arrow import contiguous_table
from dspark_json.errors import OptionError, SchemaError, short_errors
from dspark_json.load import prepare, query_schema
from dspark_json.options import OPTION_SPECS, Options
from dspark_json.parse import select_backend
from dspark_json.pipeline import fetch, run_partition
from dspark_json.records import PromptRecord, PromptRows
from dspark_json.rows import ParseMode, RecordMode
from dspark_json.schema.json_schema import ResponseFormat, as_json_schema
from dspark_json.schema.output import tool_arguments
from dspark_json.schema.tools import as_tools

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = ["generate"]

#: Options of the source that a transform has no use for.
_NOT_FOR_GENERATE = (
    "prompts",
    "responses",
    "journal",
    "partitionSize",
    "maxRecordsPerTrigger",
    "maxFilesPerTrigger",
)


#: The Python API's keyword (snake_case, ``backend`` for ``parseMode``) -> the option.
_KEYWORDS = {spec.keyword: spec.name for spec in OPTION_SPECS}
#: Keywords of 0.1 that 0.2 renamed (docs/changelog.md) -> today's.
_RENAMED = {"prompt_col": "column", "parse_mode": "backend"}


@short_errors  # as the source's entry points: a URI's credentials masked in every error
def generate(
    df: DataFrame,
    column: str = "prompt",
    *,
    endpoint: str,
    response_format: ResponseFormat | None = None,
    backend: ParseMode = "auto",
    mode: RecordMode = "PERMISSIVE",
    **options: Any,
) -> DataFrame:
    """``df`` plus the model's answer to each row's prompt, typed as the source types it.

        answers = dspark_json.generate(prompts_df, "question",
                                       endpoint="http://vllm:8000", response_format=schema)

    Parameters
    ----------
    df:
        The prompts, batch or streaming; a ``custom_id`` column, where there is one, names rows
        in FAILFAST errors.
    column:
        The column holding the prompt text (string) or the chat messages (array of
        ``struct<role, content>``).
    endpoint:
        The model server(s), as option ``endpoint``.
    response_format:
        The JSON Schema the model must follow (types ``parsed``), or a Pydantic model class, as
        in ``parse_responses``.
    backend:
        The parser: ``auto``, ``cpu`` or ``gpu``, as in ``parse_responses`` (option
        ``parseMode``).
    mode:
        PERMISSIVE, DROPMALFORMED or FAILFAST, as in ``parse_responses``.
    options:
        Any other option of the source, by its snake_case name (``max_concurrency=16``,
        ``api_key_env="VLLM_API_KEY"``, ``temperature=0``...); ``tools`` takes Pydantic model
        classes as well as tool definitions (a function without parameters: its arguments'
        JSON text, nothing is inferred here).
    """
    if options.get("tools") is not None:  # Pydantic model classes become their definitions
        options["tools"] = list(as_tools(options["tools"]))
    given: dict[str, Any] = {
        "response_format": as_json_schema(response_format),
        "backend": backend,
        "mode": mode,
        **options,
    }
    raw = {"endpoint": endpoint}
    for keyword, value in given.items():
        if value is None:
            continue
        if keyword not in _KEYWORDS:
            close = [_RENAMED[keyword]] if keyword in _RENAMED else []
            usable = [k for k, name in _KEYWORDS.items() if name not in _NOT_FOR_GENERATE]
            close = close or difflib.get_close_matches(keyword, usable, n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            raise OptionError(
                f"generate: unknown keyword {keyword!r}.{hint} Options are given by their "
                "snake_case names (response_format=, max_concurrency=, api_key_env=...)."
            )
        raw[_KEYWORDS[keyword]] = _option_text(value)
    query = prepare(Options.parse(raw, unused=_NOT_FOR_GENERATE))
    if column not in df.columns:
        raise OptionError(
            f"generate: column {column!r} is not a column of the DataFrame (columns: "
            f"{', '.join(df.columns)}). Pass the column that holds the prompts."
        )
    kind = df.schema[column].dataType
    if not isinstance(kind, StringType | ArrayType):
        raise SchemaError(
            f"generate: column {column!r} is {kind.simpleString()}; it must hold the prompt "
            "text (string) or chat messages (array<struct<role:string,content:string>>)."
        )
    tools = query.options.request.tools
    full = query_schema(query, tools=tool_arguments(tools) if tools is not None else None)
    answers_schema = StructType([f for f in full.fields if f.name != "custom_id"])
    clash = sorted(set(df.columns) & set(answers_schema.names))
    if clash:
        raise SchemaError(
            f"generate: the DataFrame already has column(s) {', '.join(clash)}, which the answer "
            "brings too. Rename or drop them first."
        )
    out = StructType([*df.schema.fields, *answers_schema.fields])
    prompt_index = df.columns.index(column)
    id_index = df.columns.index("custom_id") if "custom_id" in df.columns else None

    def send(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        # parseMode=gpu without a usable GPU fails here, before the prompts are sent (and paid
        # for), as the source's partitions do.
        select_backend(query.options.rows.parse_mode)
        for number, batch in enumerate(batches):
            ids = batch.column(id_index).to_pylist() if id_index is not None else None
            records = [
                _record(value, None if ids is None else ids[i], f"row {i} of batch {number}")
                for i, value in enumerate(batch.column(prompt_index).to_pylist())
            ]
            started = time.perf_counter()
            fetched = fetch(records, query)
            # Named by stage and task: stable across a task's retries, distinct across
            # micro-batches (each runs its own stage) and across tasks.
            task = TaskContext.get()
            where = f"stage {task.stageId()} task {task.partitionId()}" if task else "driver"
            kept = run_partition(
                PromptRows.of(records),
                query,
                answers_schema,
                fetched,
                started=started,
                batch=f"generate {where}",
                partition=number,
                what=f"generate {where} batch {number}",
                leading=pa.Table.from_batches([batch]),
            )
            yield from contiguous_table(kept).to_batches()

    return df.mapInArrow(send, out)


def _option_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Mapping | list):
        return json.dumps(value)
    return str(value)


def _record(value: Any, custom_id: Any, where: str) -> PromptRecord:
    cid = None if custom_id is None else str(custom_id)
    raw = value if isinstance(value, str) else json.dumps(value, default=str)
    row: dict[str, Any] = {"custom_id": cid, "fields": {}, "raw": raw, "where": where}
    if isinstance(value, str) and value:
        return PromptRecord(**row, messages=[{"role": "user", "content": value}])
    if isinstance(value, list) and value:
        return PromptRecord(**row, messages=value)
    return PromptRecord(**row, messages=None, problem="the prompt is null or empty")
