"""The output schema: pass-through columns, ``custom_id``, the response envelope typed from vLLM's
documented shape, ``parsed``, and the system columns of the row contract (:mod:`dspark_json.rows`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.types import (
    ArrayType,
    DataType,
    DoubleType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from dspark_json.parse.json import rescued_keys
from dspark_json.rows import ATTEMPT_TYPE, PARSER_COLUMNS, SYSTEM_FIELDS
from dspark_json.schema.json_schema import json_schema_to_spark
from dspark_json.schema.tools import TOOL_CALLS, tool_calls_type, tool_parameters

__all__ = [
    "DOCUMENTED_EXTRAS",
    "ENVELOPE_COLUMNS",
    "RESPONSE_COLUMNS",
    "drift_keys",
    "envelope_fields",
    "is_documented_extra",
    "new_fields",
    "output_schema",
    "response_fields",
    "tool_arguments",
]


#: Fields vLLM (0.32) documents in its answers that are not columns: null unless a request asks
#: for them (``extraBody``: ``return_token_ids``, ``prompt_logprobs``, ...). Null, they are
#: dropped; with a value, they are kept in ``_rescued_data`` but are not schema drift (the
#: metrics' ``new_fields`` and ``schemaEvolutionMode=failOnNewColumns`` ignore them).
DOCUMENTED_EXTRAS = frozenset(
    {
        "prompt_logprobs",
        "prompt_token_ids",
        "prompt_text",
        "kv_transfer_params",
        "ec_transfer_params",
        "metrics",
    }
    | {f"choices[0].{name}" for name in ("token_ids", "routed_experts")}
    | {f"choices[0].message.{name}" for name in ("annotations", "audio", "function_call")}
)


def is_documented_extra(path: str) -> bool:
    """Whether a ``_rescued_data`` key is a documented field rather than drift (any choice)."""
    if path in DOCUMENTED_EXTRAS:
        return True
    head, _, rest = path.partition("].")
    return head.startswith("choices[") and f"choices[0].{rest}" in DOCUMENTED_EXTRAS


def new_fields(rescued: pa.Array | pa.ChunkedArray) -> set[str]:
    """The keys of the ``_rescued_data`` objects ``rescued`` that are drift, not documented
    extras (:func:`is_documented_extra`); the keys are read without the values
    (:func:`~dspark_json.parse.json.rescue.rescued_keys`)."""
    return {key for key in rescued_keys(rescued) if not is_documented_extra(key)}


def drift_keys(rescued: str | None) -> list[str]:
    """The keys of one ``_rescued_data`` object that are drift, not documented extras."""
    if not rescued:
        return []
    return [key for key in json.loads(rescued) if not is_documented_extra(key)]


def _logprob_entry(top: bool) -> StructType:
    fields = [
        StructField("token", StringType()),
        StructField("logprob", DoubleType()),
        StructField("bytes", ArrayType(LongType())),
    ]
    if top:
        nested = ArrayType(_logprob_entry(top=False))
        fields.append(StructField("top_logprobs", nested))
    return StructType(fields)


def envelope_fields(parsed: DataType | None) -> list[StructField]:
    """The chat completion envelope, typed from what vLLM and OpenAI document, not guessed:
    every field a user may want as a column; vLLM's own extras are :data:`DOCUMENTED_EXTRAS`."""
    tool_call = StructType(
        [
            StructField("id", StringType()),
            StructField("type", StringType()),
            StructField(
                "function",
                StructType(
                    [StructField("name", StringType()), StructField("arguments", StringType())]
                ),
            ),
        ]
    )
    message = [
        StructField("role", StringType()),
        StructField("content", StringType()),
        StructField("refusal", StringType()),
        StructField("reasoning", StringType()),  # vLLM >= 0.10
        StructField("reasoning_content", StringType()),  # older vLLM, DeepSeek
        StructField("tool_calls", ArrayType(tool_call)),
    ]
    if parsed is not None:
        message.append(StructField("parsed", parsed))
    logprobs = StructType(
        [
            StructField("content", ArrayType(_logprob_entry(top=True))),
            StructField("refusal", ArrayType(_logprob_entry(top=True))),
        ]
    )
    choice = StructType(
        [
            StructField("index", LongType()),
            StructField("message", StructType(message)),
            StructField("logprobs", logprobs),
            StructField("finish_reason", StringType()),
            StructField("stop_reason", StringType()),
        ]
    )
    usage = StructType(
        [
            StructField("prompt_tokens", LongType()),
            StructField("completion_tokens", LongType()),
            StructField("total_tokens", LongType()),
            StructField(
                "prompt_tokens_details",
                StructType(
                    [
                        StructField("cached_tokens", LongType()),
                        StructField("audio_tokens", LongType()),
                        # vLLM's, with --enable-prompt-tokens-details (0.32: both always sent).
                        StructField("created_cache_tokens", LongType()),
                        StructField("multimodal_tokens", LongType()),
                    ]
                ),
            ),
            StructField(
                "completion_tokens_details",
                StructType(
                    [
                        StructField("reasoning_tokens", LongType()),
                        StructField("audio_tokens", LongType()),
                        StructField("accepted_prediction_tokens", LongType()),
                        StructField("rejected_prediction_tokens", LongType()),
                    ]
                ),
            ),
        ]
    )
    return [
        StructField("id", StringType()),
        StructField("object", StringType()),
        StructField("created", TimestampType()),
        StructField("model", StringType()),
        StructField("choices", ArrayType(StructType(choice.fields))),
        StructField("usage", usage),
        StructField("system_fingerprint", StringType()),
        StructField("service_tier", StringType()),
    ]


def output_schema(
    *,
    passthrough: Iterable[StructField] = (),
    response_format: Mapping[str, Any] | None = None,
    parsed: DataType | None = None,
    tools: Mapping[str, DataType] | None = None,
    violations: bool = False,
    attempts: bool = False,
) -> StructType:
    """Pass-through prompt columns, ``custom_id``, the envelope, ``parsed`` (typed by ``parsed``,
    else from ``response_format``), ``tool_calls`` (``tools``: function name -> the type of its
    arguments, :func:`tool_arguments`) and the system columns (``_schema_violations`` too when
    ``violations``, ``_attempts`` when ``attempts``)."""
    if parsed is None and response_format is not None:
        parsed = json_schema_to_spark(response_format)
    fields = [*passthrough, StructField("custom_id", StringType())]
    fields += envelope_fields(parsed)
    if parsed is not None:
        fields.append(StructField("parsed", parsed))
    if tools:
        fields.append(StructField(TOOL_CALLS, tool_calls_type(tools)))
    fields += SYSTEM_FIELDS
    if violations:
        fields.append(StructField("_schema_violations", ArrayType(StringType())))
    if attempts:
        fields.append(StructField("_attempts", ATTEMPT_TYPE))
    return StructType(fields)


def tool_arguments(
    tools: Sequence[Mapping[str, Any]], inferred: Mapping[str, DataType] | None = None
) -> dict[str, DataType]:
    """Function name -> the type of its arguments: from its ``parameters`` JSON Schema (as
    ``responseFormat`` types ``parsed``), else ``inferred``'s, else string (their JSON text)."""
    out: dict[str, DataType] = {}
    for name, parameters in tool_parameters(tools).items():
        if parameters is not None:
            out[name] = json_schema_to_spark(parameters)
        else:
            out[name] = (inferred or {}).get(name) or StringType()
    return out


#: Top-level columns of the chat completion envelope (:func:`envelope_fields`' names).
ENVELOPE_COLUMNS = tuple(f.name for f in envelope_fields(None))
#: The columns the parser fills from a response body: the envelope, ``parsed``, ``tool_calls`` and
#: :data:`~dspark_json.rows.PARSER_COLUMNS`.
RESPONSE_COLUMNS = frozenset({*ENVELOPE_COLUMNS, "parsed", TOOL_CALLS, *PARSER_COLUMNS})


def response_fields(schema: StructType) -> StructType:
    """The columns of ``schema`` that the parser fills (:data:`RESPONSE_COLUMNS`), in order."""
    return StructType([f for f in schema.fields if f.name in RESPONSE_COLUMNS])
