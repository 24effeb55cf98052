"""Schema drift: the keys of ``_rescued_data`` that are new fields of the answers, not the
extras vLLM documents (:func:`dspark_json.response.envelope.is_documented_extra`)."""

from __future__ import annotations

import pyarrow as pa

from dspark_json.parse.json import rescued_keys
from dspark_json.response.envelope import is_documented_extra

__all__ = ["new_fields"]


def new_fields(rescued: pa.Array | pa.ChunkedArray) -> set[str]:
    """The keys of the ``_rescued_data`` objects ``rescued`` that are drift, not documented
    extras; the keys are read without the values
    (:func:`~dspark_json.parse.json.rescue.rescued_keys`)."""
    return {key for key in rescued_keys(rescued) if not is_documented_extra(key)}
