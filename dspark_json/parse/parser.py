"""The seam between the stages and the backends: what every parser is (:class:`Parser`). The
pipeline, ``parse_responses`` and ``parse_dataframe`` get one from :func:`~.choice.make_parser`
and use nothing else of it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import pyarrow as pa
from pyspark.sql.types import StructType

from dspark_json.rows import Backend

__all__ = ["Parser"]


class Parser(Protocol):
    """Response bodies -> the response columns of :attr:`schema`, one row per body, in order:
    the envelope, ``parsed``, ``_status``, ``_rescued_data`` and ``_corrupt_record``."""

    #: The columns wanted (envelope, ``parsed``, system columns).
    schema: StructType
    #: Which backend this is (``cpu``, ``gpu``); the metrics report it.
    backend: Backend
    #: How many rows of the last batch the reference parser took (the metrics report it).
    reference_rows: int

    def parse(self, bodies: pa.Array | pa.ChunkedArray | Sequence[str | bytes | None]) -> pa.Table:
        """One row per body, in order, of the Arrow types of :attr:`schema`."""
        ...
