"""The seam between the stages and the backends: what every parser is (:class:`Parser`). The
pipeline, ``parse_responses`` and ``parse_dataframe`` get one from :func:`~.choice.make_parser`
and use nothing else of it."""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum
from typing import Literal, Protocol

import pyarrow as pa
from pyspark.sql.types import StructType

from dspark_json.rows import Backend

__all__ = ["Parser", "Reason", "RescueScope"]

#: What a parser gathers into ``_rescued_data`` (:func:`~.choice.make_parser`'s ``rescue``):
#: ``all``, every key and value the schema does not know (the column the user reads); or
#: ``parsed``, for a caller whose output has no ``_rescued_data`` column and reads only what is
#: rescued under ``parsed`` (the schema-misfit check, :mod:`dspark_json.schema.fit`): the
#: answer's keys are gathered as with ``all``, the envelope's unknown keys are not, on the
#: kernels' path (rows the reference parser or a walk in Python takes rescue everything; the
#: keys under ``parsed`` are the same either way).
RescueScope = Literal["all", "parsed"]


class Reason(StrEnum):
    """Why a row took the row-by-row reference parser instead of the kernels' path: the
    counter :attr:`Parser.reference_reasons` (the partition metrics and the parse log line show
    it). Each member is its word and carries its ``meaning``."""

    meaning: str

    def __new__(cls, word: str, meaning: str) -> Reason:
        member = str.__new__(cls, word)
        member._value_ = word
        member.meaning = meaning
        return member

    COLD = (
        "kernels_compiling",
        "a small batch in a process whose kernels were still compiling (the same rules in plain "
        "Python: parse/warmup.py)",
    )
    COLUMN_TYPES = (
        "column_types",
        "the schema is beyond the kernels' path (no choices column; a parsed column of two "
        "types): every row. On the GPU backend a schema beyond cuDF's JSON lines reader (a map, "
        "a tuple struct) is not: the CPU kernels take it, and the log says so",
    )
    ENVELOPE = (
        "envelope_misfit",
        "the body does not fit the envelope type as the kernels check it (a value of another "
        "type, a repeated or escaped key, a number past the kernels' range, a parsed key)",
    )
    CONTENT = (
        "content_misfit",
        "a choice's content does not fit the content type as the kernels check it (a value of "
        "another type to rescue: drift deeper than the fast rescue; a repeated or escaped key; "
        "a number past the kernels' range)",
    )
    TOOLS = (
        "tool_calls_misfit",
        "a tool call the kernels do not type: a function not offered, arguments null or "
        "holding a value of another type than its column; or rescue from the calls and from "
        "the envelope or content at once",
    )
    VALUES = (
        "values_to_convert",
        "a value the kernels read needs Python to convert it (timestamp or date text), or a "
        "map repeats a key (Python's dict keeps one entry)",
    )
    CHOICES = (
        "extra_choices",
        "more than one choice where only the first has a parsed column (the others' values are "
        "rescued)",
    )
    READER_RULES = (
        "reader_rules",
        "the row fits, but holds what the GPU backend's reader (cuDF) may read otherwise than "
        "the CPU rules: an integer of more than 15 digits (cuDF's int64 parse of those is "
        "unverified), a \\u escape of a surrogate pair or of U+0000 (parse/gpu/fit.py "
        "reader_hazards). Doubles are not: cuDF reads them as text and the device converts "
        "them with the CPU's rules (parse/gpu/doubles.py)",
    )
    READER = "reader_rejected", "the JSON lines reader (the GPU backend's cuDF) rejected the chunk"


class Parser(Protocol):
    """Response bodies -> the response columns of :attr:`schema`, one row per body, in order:
    the envelope, ``parsed``, ``_status``, ``_rescued_data`` and ``_corrupt_record``."""

    #: The columns wanted (envelope, ``parsed``, system columns).
    schema: StructType
    #: Which backend this is (``cpu``, ``gpu``); the metrics report it.
    backend: Backend
    #: How many rows of the last batch the reference parser took (the metrics report it).
    reference_rows: int
    #: Those rows by :class:`Reason` (word -> rows; reasons with no row left out).
    reference_reasons: dict[str, int]

    def parse(self, bodies: pa.Array | pa.ChunkedArray | Sequence[str | bytes | None]) -> pa.Table:
        """One row per body, in order, of the Arrow types of :attr:`schema`."""
        ...
