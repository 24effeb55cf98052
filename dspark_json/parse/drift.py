"""Schema drift: the keys of ``_rescued_data`` that are new fields of the answers, not the
extras vLLM documents (:func:`dspark_json.response.envelope.is_documented_extra`)."""

from __future__ import annotations

import json

import pyarrow as pa

from dspark_json.parse import warmup
from dspark_json.parse.json import rescued_keys
from dspark_json.response.envelope import is_documented_extra

__all__ = ["new_fields"]


def new_fields(rescued: pa.Array | pa.ChunkedArray) -> set[str]:
    """The keys of the ``_rescued_data`` objects ``rescued`` that are drift, not documented
    extras; the keys are read without the values
    (:func:`~dspark_json.parse.json.rescue.rescued_keys`), or, for a small batch while the
    kernels still compile in the background (:mod:`.warmup`), by Python's json: a compiled call
    would wait for the compiler that thread holds (seconds on an empty numba cache)."""
    if warmup.ready() or len(rescued) >= warmup.SMALL_BATCH:
        keys = rescued_keys(rescued)
    else:
        keys = _keys_by_python(rescued)
    return {key for key in keys if not is_documented_extra(key)}


def _keys_by_python(rescued: pa.Array | pa.ChunkedArray) -> list[str]:
    """:func:`~dspark_json.parse.json.rescue.rescued_keys` by Python's json, object by object
    (a text of whitespace alone holds no keys, as there)."""
    found: dict[str, None] = {}
    for text in rescued.to_pylist():
        if text is not None and text.strip(" \t\r\n"):
            value = json.loads(text)
            found.update(dict.fromkeys(value if isinstance(value, dict) else ()))
    return list(found)
