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

from dspark_json.parse.content import extract_json
from dspark_json.rows import load_json
from dspark_json.schema.inference import TYPED_NESTING, contents_of, nesting
from dspark_json.schema.tools import tool_parameters

__all__ = ["schema_violations", "tool_violations"]

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


def tool_violations(
    tools: Sequence[Mapping[str, Any]], bodies: Sequence[str | None]
) -> list[list[str] | None]:
    """Per body: how the arguments of each call in its first choice break their function's
    ``parameters`` (``[]``: they conform; ``None``: no call to check), as
    ``"tool_calls.<name>[i].arguments/path: message"``. Functions without parameters, and
    arguments that are not JSON (their row's status says so), are not checked."""
    validators = {
        name: jsonschema.validators.validator_for(schema)(schema)
        for name, schema in tool_parameters(tools).items()
        if schema is not None
    }
    out: list[list[str] | None] = []
    for body in bodies:
        calls = _calls(body)
        if not calls:
            out.append(None)
            continue
        found: list[str] = []
        seen: dict[str, int] = {}
        for name, value in calls:
            index = seen.get(name, 0)
            seen[name] = index + 1
            validator = validators.get(name)
            if validator is None or value is None:
                continue
            where = f"tool_calls.{name}[{index}].arguments"
            if nesting(value) > TYPED_NESTING:
                found.append(f"{where}/{_TOO_DEEP}")
                continue
            try:
                errors = sorted(validator.iter_errors(value), key=lambda e: list(map(str, e.path)))
            except RecursionError:
                found.append(f"{where}/{_TOO_DEEP}")
                continue
            found += [f"{where}/{'/'.join(map(str, e.path)) or '$'}: {e.message}" for e in errors]
        out.append(found)
    return out


def _calls(body: str | None) -> list[tuple[str, Any]]:
    """(name, arguments' JSON value or None) of each call in the body's first choice."""
    try:
        calls = load_json(body or "")["choices"][0]["message"]["tool_calls"]
    except (ValueError, KeyError, IndexError, TypeError):
        return []
    out: list[tuple[str, Any]] = []
    for call in calls if isinstance(calls, list) else ():
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict):
            continue
        text = function.get("arguments")
        found = extract_json(text) if isinstance(text, str) else None
        try:
            value = load_json(found, strict=False) if found is not None else None
        except ValueError:
            value = None
        out.append((str(function.get("name")), value))
    return out
