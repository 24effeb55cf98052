"""The row contract: the words every stage uses about a row, each defined once.

Rows out = prompts in. Every row carries ``_status`` (a :class:`Status`); a row without a
response says why in ``_error`` (a :class:`RowError`); the system columns are registered once
in :data:`COLUMNS` (name, type, the option that adds it, the stage that fills it;
:data:`SYSTEM_FIELDS` are those every output has; the envelope's, typed from vLLM's documents, are
:func:`dspark_json.response.envelope.envelope_fields`); the record mode (:data:`RECORD_MODES`)
decides what happens to malformed rows, applied by :func:`apply_mode` for every entry point (the
source, ``generate``, ``parse_responses``, ``parse_dataframe``). No JSON document deeper than
:data:`MAX_NESTING` is read by any stage: it is a row with a status, never a crash.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re
from collections.abc import Callable, Mapping, Sequence
from enum import StrEnum
from typing import Any, Literal, TypedDict

import numpy as np
from pyspark.sql.types import (
    ArrayType,
    DataType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from dspark_json.errors import RecordError

__all__ = [
    "ATTEMPTS",
    "ATTEMPT_TYPE",
    "BACKENDS",
    "COLUMNS",
    "CORRUPT_RECORD",
    "ERROR",
    "ERROR_TYPE",
    "ERROR_TYPES",
    "MALFORMED",
    "MAX_NESTING",
    "OPTIONAL_COLUMNS",
    "PARSER_COLUMNS",
    "PARSE_MODES",
    "RECORD_MODES",
    "RESCUED_DATA",
    "SCHEMA_VIOLATIONS",
    "STATUS",
    "STATUSES",
    "SYSTEM_COLUMNS",
    "SYSTEM_FIELDS",
    "Attempt",
    "Backend",
    "ParseMode",
    "RecordMode",
    "RowError",
    "Status",
    "SystemColumn",
    "apply_mode",
    "data_fields",
    "exceeds_nesting",
    "load_json",
    "row_error",
    "status_of_error",
]

logger = logging.getLogger("dspark_json")

#: The deepest JSON any stage reads (arrays and objects inside each other): prompt lines,
#: recorded lines, response bodies, the JSON in their content, the JSON Schema. A deeper
#: document is an ``invalid_prompt`` / ``corrupt_*`` row, never a crash: Python's json module
#: recurses and gives up near 1000 levels. The parse kernels use the same number.
MAX_NESTING = 512

# A JSON string, escapes included (possessive: no backtracking on long strings).
_JSON_STRING = re.compile(rb'"(?:[^"\\]++|\\.)*+"', re.DOTALL)
# Byte -> change of nesting depth: +1 for [ and {, -1 for ] and }.
_BRACKET_STEP = np.zeros(256, np.int8)
_BRACKET_STEP[[91, 123]], _BRACKET_STEP[[93, 125]] = 1, -1


class Status(StrEnum):
    """``_status``: one word per row saying what happened to it (each member's
    :attr:`meaning`). A member is its word (``Status.OK == "ok"``), in Arrow and Spark too."""

    meaning: str

    def __new__(cls, word: str, meaning: str) -> Status:
        member = str.__new__(cls, word)
        member._value_ = word
        member.meaning = meaning
        return member

    OK = "ok", "the answer was fetched and parsed (its content typed where it held JSON)"
    HTTP_ERROR = "http_error", "the request failed for good; _error says why"
    INVALID_PROMPT = "invalid_prompt", "the prompt line could not be sent; _error says why"
    CORRUPT_ENVELOPE = (
        "corrupt_envelope",
        "the response body is not JSON, or not the chat completion shape",
    )
    CORRUPT_CONTENT = (
        "corrupt_content",
        "the content looked like JSON but did not parse or fit its type",
    )
    NOT_JSON = "not_json", "the content holds no JSON (prose)"
    SCHEMA_MISMATCH = (
        "schema_mismatch",
        "the content is JSON of parsed's type, but a value in it does not fit its field's type: "
        "that field is null in parsed, the value in _rescued_data under its path "
        "(parsed.score)",
    )
    TRUNCATED = "truncated", "finish_reason is length and the content is incomplete"
    EMPTY = "empty", "the answer has no choices"
    INVALID_UTF8 = (
        "invalid_utf8",
        "the response body is not UTF-8; _corrupt_record has it, bad bytes as \\xNN",
    )


#: Each ``_status`` word -> what it means (:class:`Status`, as a mapping for the docs).
STATUSES: Mapping[str, str] = {status.value: status.meaning for status in Status}
#: Statuses of rows that DROPMALFORMED drops and FAILFAST fails on.
MALFORMED = frozenset(
    {
        Status.INVALID_PROMPT,
        Status.CORRUPT_ENVELOPE,
        Status.CORRUPT_CONTENT,
        Status.NOT_JSON,
        Status.SCHEMA_MISMATCH,
        Status.TRUNCATED,
        Status.INVALID_UTF8,
    }
)

RecordMode = Literal["PERMISSIVE", "DROPMALFORMED", "FAILFAST"]
#: The record modes, as in Spark's JSON source.
RECORD_MODES: tuple[RecordMode, ...] = ("PERMISSIVE", "DROPMALFORMED", "FAILFAST")

ParseMode = Literal["auto", "cpu", "gpu"]
#: Spellings of option ``parseMode`` (GPUStack's 'gpu-accelerated' included) -> the mode.
PARSE_MODES: Mapping[str, ParseMode] = {
    "auto": "auto",
    "cpu": "cpu",
    "gpu": "gpu",
    "gpu-accelerated": "gpu",
}
Backend = Literal["cpu", "gpu"]
#: The parser backends that can run (``auto`` picks one of them).
BACKENDS: tuple[Backend, ...] = ("cpu", "gpu")


class RowError(TypedDict):
    """The ``_error`` column: why a row has no response."""

    status: int | None  # the HTTP status, or null (no answer at all, a bad prompt)
    type: str  # see ERROR_TYPES
    message: str  # the server's message or ours; never holds a credential
    attempts: int | None  # requests sent for the row (0: none; null: unknown, recorded)


class Attempt(TypedDict):
    """One element of the ``_attempts`` column: one answer to a row and what was wrong."""

    status: str  # the answer's _status
    reason: str | None  # what was wrong, and what was done about it (null: nothing wrong)
    prompt_tokens: int | None  # its usage (null: no answer, or none reported)
    completion_tokens: int | None


#: ``_error.type``: ours, below; otherwise the server's own type (``NotFoundError``,
#: ``BadRequestError``...), or ``http_<status>`` where the body names none.
ERROR_TYPES: Mapping[str, str] = {
    "invalid_prompt": "the prompt line is not JSON, not an object, or has no prompt/messages",
    "timeout": "no complete answer within requestTimeout / readTimeout; or held back by "
    "maxServerQueue, maxTokensPerMinute or maxTokensInFlight until requestDeadline",
    "connect_timeout": "no connection within connectTimeout",
    "endpoint_unavailable": "every endpoint rested (failing /v1/models), or option endpointsFile "
    "listed none (a pool scaled to zero), until requestDeadline",
    "model_unavailable": "no endpoint served the row's model (/v1/models) until requestDeadline; "
    "no request was sent for it",
    "batch_error": "a recorded batch-output line holds an error without a type",
    "response_too_large": "the body is larger than maxResponseBytes, as received or decompressed",
    "headers_too_large": "the response has more header lines or bytes than the transport reads",
    "invalid_utf8": "the body of a 200 answer is not UTF-8 (the row's _status says so too)",
    "DecodingError": "the body's Content-Encoding is not one read here, or its data is not valid "
    "for it",
    "<transport error>": "httpx's exception name: ConnectError, ReadError, RemoteProtocolError...",
}

#: The ``_error`` column's Spark type.
ERROR_TYPE = StructType(
    [
        StructField("status", IntegerType()),
        StructField("type", StringType()),
        StructField("message", StringType()),
        StructField("attempts", IntegerType()),
    ]
)

#: The ``_attempts`` column's Spark type (option ``repairAttempts``): each answer to a row that
#: needed a re-ask, first answer included; null where the first answer was right.
ATTEMPT_TYPE = ArrayType(
    StructType(
        [
            StructField("status", StringType()),
            StructField("reason", StringType()),
            StructField("prompt_tokens", LongType()),
            StructField("completion_tokens", LongType()),
        ]
    )
)


@dataclasses.dataclass(frozen=True)
class SystemColumn:
    """One system column, defined once: its name and Spark type, the option that adds it
    (``None``: every output has it) and the stage that fills it."""

    name: str
    type: DataType
    #: Who fills it: ``parse`` (from the response body), ``request`` (the row's request),
    #: ``validation`` (option validateSchema), ``reask`` (option repairAttempts).
    stage: Literal["parse", "request", "validation", "reask"]
    #: The option that adds the column (its documented spelling) when its value is true
    #: (``validateSchema=true``, ``repairAttempts`` > 0); ``None``: always there.
    option: str | None = None

    @property
    def field(self) -> StructField:
        """The column as a Spark field."""
        return StructField(self.name, self.type)


#: ``_status``: one :class:`Status` word per row.
STATUS = SystemColumn("_status", StringType(), stage="parse")
#: ``_rescued_data``: the JSON object of what the schema does not know.
RESCUED_DATA = SystemColumn("_rescued_data", StringType(), stage="parse")
#: ``_corrupt_record``: the text of a malformed row.
CORRUPT_RECORD = SystemColumn("_corrupt_record", StringType(), stage="parse")
#: ``_error``: why a row has no response (:class:`RowError`).
ERROR = SystemColumn("_error", ERROR_TYPE, stage="request")
#: ``_schema_violations``: how an answer breaks the JSON Schema (option validateSchema).
SCHEMA_VIOLATIONS = SystemColumn(
    "_schema_violations", ArrayType(StringType()), stage="validation", option="validateSchema"
)
#: ``_attempts``: each answer to a row that needed a re-ask (option repairAttempts).
ATTEMPTS = SystemColumn("_attempts", ATTEMPT_TYPE, stage="reask", option="repairAttempts")

#: The column registry: every system column, in the output's order (the optional ones last).
#: A new column is one entry here plus the code that fills it.
COLUMNS: tuple[SystemColumn, ...] = (
    STATUS,
    RESCUED_DATA,
    CORRUPT_RECORD,
    ERROR,
    SCHEMA_VIOLATIONS,
    ATTEMPTS,
)
#: The system columns an option adds (after :data:`SYSTEM_FIELDS`, in this order).
OPTIONAL_COLUMNS = tuple(c for c in COLUMNS if c.option is not None)
#: The columns the source adds about each row, besides the response: the row contract's own
#: (those of the registry that every output has).
SYSTEM_FIELDS = tuple(c.field for c in COLUMNS if c.option is None)
SYSTEM_COLUMNS = tuple(f.name for f in SYSTEM_FIELDS)
#: The system columns the parser fills from a response body (``_error`` is the request's).
PARSER_COLUMNS = tuple(c.name for c in COLUMNS if c.stage == "parse")


def data_fields(schema: StructType) -> StructType:
    """``schema`` without the system columns: the columns a response's data fills."""
    return StructType([f for f in schema.fields if f.name not in SYSTEM_COLUMNS])


def row_error(*, status: int | None, type: str, message: str, attempts: int | None) -> RowError:
    """An ``_error`` value (every stage builds them with this)."""
    return {"status": status, "type": type, "message": message, "attempts": attempts}


def status_of_error(error: RowError) -> Status:
    """The ``_status`` of a row whose request ended in ``error`` (an ``_error`` value): a 200
    answer that is not UTF-8 is ``invalid_utf8``; every other error is ``http_error``."""
    return Status.INVALID_UTF8 if error["type"] == "invalid_utf8" else Status.HTTP_ERROR


def apply_mode(
    mode: RecordMode,
    statuses: Sequence[str],
    *,
    describe: Callable[[int], str],
    detail: Callable[[int], str] | None = None,
    errors: Mapping[int, RowError] | None = None,
) -> list[bool] | None:
    """Apply the record mode to rows with these statuses.

    Parameters
    ----------
    mode:
        PERMISSIVE keeps every row (returns ``None``); DROPMALFORMED returns which rows to keep
        (malformed ones dropped, counted in the log); FAILFAST raises :class:`RecordError` at the
        first failed or malformed row.
    statuses:
        Each row's ``_status``.
    describe:
        Row index -> how to point a user at the row (``custom_id 'a' (file row 3)``).
    detail:
        Row index -> what to add after a malformed row's status (its problem or its text).
    errors:
        The rows' ``_error`` by row (those that have one), to quote a failed request's status
        and message.
    """
    if mode == "PERMISSIVE":
        return None
    if mode == "FAILFAST":
        for i, status in enumerate(statuses):
            error = errors.get(i) if errors is not None else None
            if status == Status.HTTP_ERROR and error is not None:
                raise RecordError(
                    f"mode=FAILFAST: the request for {describe(i)} failed after "
                    f"{error['attempts']} attempt(s): HTTP {error['status']}, {error['type']}: "
                    f"{error['message']}. Use mode=PERMISSIVE to keep such rows with _error."
                )
            if status in MALFORMED:
                more = detail(i) if detail is not None else ""
                # A mismatch keeps its value in _rescued_data; the others, their text.
                kept = RESCUED_DATA if status == Status.SCHEMA_MISMATCH else CORRUPT_RECORD
                raise RecordError(
                    f"mode=FAILFAST: {describe(i)} is malformed ({status}{more}). Use "
                    f"mode=PERMISSIVE to keep such rows with {kept.name}, or DROPMALFORMED to "
                    "drop them."
                )
        return None
    keep = [status not in MALFORMED for status in statuses]
    dropped = len(keep) - sum(keep)
    if dropped:
        logger.info("mode=DROPMALFORMED dropped %d malformed row(s) of %d", dropped, len(keep))
    return keep


def exceeds_nesting(raw: str | bytes, limit: int = MAX_NESTING) -> bool:
    """Whether the JSON text ``raw`` opens more than ``limit`` arrays/objects inside each other
    (brackets inside strings do not count). No recursion, and no Python loop over the text:
    a count when there are few brackets, else string removal and a cumulative sum."""
    data = raw if isinstance(raw, bytes) else raw.encode("utf-8", "surrogatepass")
    if data.count(b"[") + data.count(b"{") <= limit:
        return False
    steps = _BRACKET_STEP[np.frombuffer(_JSON_STRING.sub(b"", data), np.uint8)]
    return bool(np.cumsum(steps, dtype=np.int32).max(initial=0) > limit)


def load_json(raw: str | bytes, **kwargs: Any) -> Any:
    """``json.loads`` for text from elsewhere: a document nested more than
    :data:`MAX_NESTING` levels is a ``ValueError`` (checked first, without recursing)."""
    if exceeds_nesting(raw):
        raise ValueError(f"nested more than {MAX_NESTING} levels deep")
    return json.loads(raw, **kwargs)
