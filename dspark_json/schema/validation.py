"""Option ``validateSchema``: each answer's JSON checked against the JSON Schema with jsonschema,
the violations listed per row (``_schema_violations``), the rows kept."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import jsonschema

from dspark_json.schema.inference import contents_of

__all__ = ["schema_violations"]


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
        errors = sorted(validator.iter_errors(values[0]), key=lambda e: list(map(str, e.path)))
        out.append([f"{'/'.join(map(str, e.path)) or '$'}: {e.message}" for e in errors])
    return out
