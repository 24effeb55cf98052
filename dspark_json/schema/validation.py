"""Option ``validateSchema``: each answer's JSON checked against the JSON Schema with jsonschema,
the violations listed per row (``_schema_violations``), the rows kept.

jsonschema recurses, several frames per level of the value, so a value nested more than
:data:`~dspark_json.schema.inference.TYPED_NESTING` levels is not handed to it: its row gets one
violation that says so (and, should a schema recurse further still, so does a RecursionError).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import jsonschema

from dspark_json.schema.inference import TYPED_NESTING, contents_of, nesting

__all__ = ["schema_violations"]

_TOO_DEEP = f"$: nested more than {TYPED_NESTING} levels deep, not validated"


def schema_violations(
    json_schema: Mapping[str, Any], bodies: Sequence[str | None]
) -> list[list[str] | None]:
    """Per body: how its content's JSON breaks ``json_schema`` (``[]``: it conforms; ``None``:
    no JSON content to check), as ``"path: message"``."""
    validator = jsonschema.validators.validator_for(json_schema)(json_schema)
    out: list[list[str] | None] = []
    for body in bodies:
        values = contents_of([body])
        if not values:
            out.append(None)
            continue
        if nesting(values[0]) > TYPED_NESTING:
            out.append([_TOO_DEEP])
            continue
        try:
            errors = sorted(validator.iter_errors(values[0]), key=lambda e: list(map(str, e.path)))
        except RecursionError:
            out.append([_TOO_DEEP])
            continue
        out.append([f"{'/'.join(map(str, e.path)) or '$'}: {e.message}" for e in errors])
    return out
