"""The chat completion envelope, defined once: its Spark type (:func:`envelope_fields`, hence
its Arrow type through :func:`dspark_json.response.convert.arrow_schema`), vLLM's documented
extras (and a gateway's), the paths to the content (``choices[].message``, its ``parsed``), the
paths the stages read of an answer (``*_PATH``, read by :mod:`.answers`) and the typed tool
calls' column name (:data:`TOOL_CALLS`). The output schema, the parsers and the simulator's
answers are all built from these."""

from __future__ import annotations

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

__all__ = [
    "CALLS_PATH",
    "CALL_ARGUMENTS_PATH",
    "CALL_NAME_PATH",
    "CHOICE_EXTRAS",
    "COMPLETION_TOKENS_PATH",
    "CONTENT_PATH",
    "DOCUMENTED_EXTRAS",
    "ENVELOPE_COLUMNS",
    "FINISH_REASON_PATH",
    "GATEWAY_EXTRAS",
    "MESSAGE_EXTRAS",
    "MESSAGE_PATH",
    "PROMPT_TOKENS_PATH",
    "REFUSAL_PATH",
    "TOOL_CALLS",
    "TOP_EXTRAS",
    "content_type",
    "envelope_fields",
    "gateway_fields",
    "is_documented_extra",
    "message_type",
    "tool_types",
]

#: The column of the typed tool calls: one field per function name, each the list of that
#: function's calls in the first choice (``struct<id, arguments>``;
#: :mod:`dspark_json.schema.tools`).
TOOL_CALLS = "tool_calls"


#: vLLM's extras at the top of an answer, in the order it writes them.
TOP_EXTRAS = (
    "prompt_logprobs",
    "prompt_token_ids",
    "prompt_text",
    "kv_transfer_params",
    "ec_transfer_params",
    "metrics",
)
#: vLLM's extras in each choice, in its order.
CHOICE_EXTRAS = ("token_ids", "routed_experts")
#: vLLM's extras in each message, in its order.
MESSAGE_EXTRAS = ("annotations", "audio", "function_call")
#: What a gateway adds to each choice and each message: LiteLLM's ``provider_specific_fields``
#: (an object of the fields its OpenAI type lacks). Typed (:func:`gateway_fields`) with the
#: fields of vLLM's that move there: a choice's ``stop_reason`` (so the choice's own
#: ``stop_reason`` is null behind LiteLLM, and ``provider_specific_fields.stop_reason`` holds
#: it), a message's ``reasoning`` (and ``refusal``); its other keys are null (vLLM's
#: :data:`CHOICE_EXTRAS`, dropped) or, with a value, documented extras (never drift).
GATEWAY_EXTRAS = ("provider_specific_fields",)
#: Fields vLLM (0.32) documents in its answers that are not columns: null unless a request asks
#: for them (``extraBody``: ``return_token_ids``, ``prompt_logprobs``, ...), and a gateway's
#: (:data:`GATEWAY_EXTRAS`, on every answer). Null, they are dropped; with a value, they are
#: kept in ``_rescued_data`` but are not schema drift (the metrics' ``new_fields`` and
#: ``schemaEvolutionMode=failOnNewColumns`` ignore them); ``schemaHints`` makes one a column
#: (``choices[].message.provider_specific_fields STRING``).
DOCUMENTED_EXTRAS = frozenset(
    {
        *TOP_EXTRAS,
        *(f"choices[0].{name}" for name in (*CHOICE_EXTRAS, *GATEWAY_EXTRAS)),
        *(f"choices[0].message.{name}" for name in (*MESSAGE_EXTRAS, *GATEWAY_EXTRAS)),
    }
)


def is_documented_extra(path: str) -> bool:
    """Whether a ``_rescued_data`` key is a documented field rather than drift (any choice;
    anything inside a gateway's :data:`GATEWAY_EXTRAS` too)."""
    if path in DOCUMENTED_EXTRAS:
        return True
    head, _, rest = path.partition("].")
    if not head.startswith("choices["):
        return False
    inner = f"choices[0].{rest}"
    return inner in DOCUMENTED_EXTRAS or any(
        inner.startswith(f"{extra}.") or inner.startswith(f"{extra}[")
        for extra in DOCUMENTED_EXTRAS
        if extra.endswith(GATEWAY_EXTRAS)
    )


def gateway_fields(*names: str) -> StructField:
    """A gateway's ``provider_specific_fields`` (:data:`GATEWAY_EXTRAS`) in a choice or a
    message, typed with the fields of vLLM's that LiteLLM moves there (``names``, strings
    as the fields they stand for): null ones then rescue nothing, so an answer through
    LiteLLM has ``_rescued_data`` null as one from vLLM has."""
    return StructField(
        GATEWAY_EXTRAS[0], StructType([StructField(name, StringType()) for name in names])
    )


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
        gateway_fields("reasoning", "refusal"),
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
            gateway_fields("stop_reason"),
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


#: Top-level columns of the chat completion envelope (:func:`envelope_fields`' names).
ENVELOPE_COLUMNS = tuple(f.name for f in envelope_fields(None))

# Where the stages read an answer (:mod:`.answers`): field names from the envelope's top, a list
# before the path ends standing for its first element (``choices``: the first choice).
#: The first choice's message.
MESSAGE_PATH = ("choices", "message")
#: Its text.
CONTENT_PATH = (*MESSAGE_PATH, "content")
#: Why the model refused (not empty: a refusal).
REFUSAL_PATH = (*MESSAGE_PATH, "refusal")
#: Its tool calls (the list: every call).
CALLS_PATH = (*MESSAGE_PATH, "tool_calls")
#: In one tool call: the function's name, and its arguments' text.
CALL_NAME_PATH = ("function", "name")
CALL_ARGUMENTS_PATH = ("function", "arguments")
#: Why the first choice ended.
FINISH_REASON_PATH = ("choices", "finish_reason")
#: The usage's token counts.
PROMPT_TOKENS_PATH = ("usage", "prompt_tokens")
COMPLETION_TOKENS_PATH = ("usage", "completion_tokens")


def message_type(schema: StructType) -> StructType | None:
    """The type of ``choices[].message``, or None where ``schema`` has no such struct."""
    if "choices" not in schema.names:
        return None
    choices = schema["choices"].dataType
    if not (isinstance(choices, ArrayType) and isinstance(choices.elementType, StructType)):
        return None
    choice = choices.elementType
    if "message" not in choice.names or not isinstance(choice["message"].dataType, StructType):
        return None
    return choice["message"].dataType


def content_type(schema: StructType) -> DataType | None:
    """The type of the parsed content, from ``parsed`` or ``choices[].message.parsed``."""
    if "parsed" in schema.names:
        return schema["parsed"].dataType
    message = message_type(schema)
    if message is not None and "parsed" in message.names:
        return message["parsed"].dataType
    return None


def tool_types(schema: StructType) -> dict[str, DataType] | None:
    """Function name -> the type of its calls' arguments, from column ``tool_calls`` (None
    where ``schema`` has no such column, or it is not a struct of lists of calls)."""
    if TOOL_CALLS not in schema.names:
        return None
    dtype = schema[TOOL_CALLS].dataType
    if not isinstance(dtype, StructType):
        return None
    out: dict[str, DataType] = {}
    for f in dtype.fields:
        call = f.dataType.elementType if isinstance(f.dataType, ArrayType) else None
        if not isinstance(call, StructType) or "arguments" not in call.names:
            return None
        out[f.name] = call["arguments"].dataType
    return out
