"""Option ``validateSchema``: each answer's JSON checked against the JSON Schema with jsonschema,
the violations listed per row (``_schema_violations``), the rows kept.

One rule for every path (content, each tool call's arguments): ``[]`` means every JSON value
of the answer was validated and conforms, and nothing else does.

- ``None``: nothing to validate: no answer, no content and no call, or content with no JSON in
  it at all (prose: the row is ``not_json``);
- an entry ``<where>: not validated: <why>``: JSON that could not be read (cut, broken, nested
  more than :data:`~dspark_json.rows.MAX_NESTING` levels: the row is ``corrupt_content`` or
  ``truncated``), arguments that are not JSON, a call of a function the tools do not offer;
- jsonschema recurses, several frames per level of the value, so a value nested more than
  :data:`~dspark_json.schema.inference.TYPED_NESTING` levels is not handed to it: its row gets
  one violation that says so (and, should a schema recurse further still, so does a
  RecursionError).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import jsonschema

from dspark_json.response.content import extract_json
from dspark_json.response.envelope import first_message
from dspark_json.rows import MAX_NESTING, exceeds_nesting, load_json
from dspark_json.schema.inference import TYPED_NESTING, contents_of, nesting
from dspark_json.schema.tools import tool_parameters

__all__ = ["NOT_VALIDATED", "schema_violations", "tool_violations"]

#: What an entry for JSON that could not be read says after its place (``<where>: not
#: validated: <why>``): not a violation of the schema, a reason it was not checked.
NOT_VALIDATED = ": not validated: "
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
            unread = _unread_content(body)
            out.append(None if unread is None else [f"${NOT_VALIDATED}{unread}"])
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
    ``"tool_calls.<name>[i].arguments/path: message"``. Functions without parameters are not
    checked; arguments that could not be read, and calls of a function not offered, get an
    entry ``... not validated: <why>`` (the row's status says the same), never ``[]``."""
    offered = tool_parameters(tools)
    validators = {
        name: jsonschema.validators.validator_for(schema)(schema)
        for name, schema in offered.items()
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
        for name, value, unread in calls:
            index = seen.get(name, 0)
            seen[name] = index + 1
            where = f"tool_calls.{name}[{index}].arguments"
            if name not in offered:
                found.append(f"tool_calls.{name}[{index}]{NOT_VALIDATED}{_UNKNOWN}")
                continue
            if unread is not None:
                found.append(f"{where}{NOT_VALIDATED}{unread}")
                continue
            validator = validators.get(name)
            if validator is None:
                continue  # a function without parameters: nothing to check
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


_UNKNOWN = "the tools offer no function of that name"


def _unread_content(body: str | None) -> str | None:
    """Why the JSON in the body's content could not be read; ``None`` where there is none to
    read (no answer, no content, prose)."""
    message = first_message(body)
    content = message.get("content") if isinstance(message, dict) else None
    found = extract_json(content) if isinstance(content, str) else None
    return None if found is None else _unreadable(found)


def _unreadable(text: str) -> str:
    """Why the JSON text could not be read (it could not: the caller tried)."""
    if exceeds_nesting(text):
        return f"the JSON is nested more than {MAX_NESTING} levels deep"
    try:
        load_json(text, strict=False)
    except ValueError as exc:
        return f"the JSON could not be read ({str(exc)[:120]})"
    return "the JSON could not be read"


def _calls(body: str | None) -> list[tuple[str, Any, str | None]]:
    """(name, arguments' JSON value, why they could not be read or ``None``) of each call in
    the body's first choice."""
    message = first_message(body)
    calls = message.get("tool_calls") if isinstance(message, dict) else None
    out: list[tuple[str, Any, str | None]] = []
    for call in calls if isinstance(calls, list) else ():
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict):
            continue
        text = function.get("arguments")
        found = extract_json(text) if isinstance(text, str) else None
        name = str(function.get("name"))
        if found is None:
            out.append((name, None, "the arguments are not JSON"))
            continue
        try:
            out.append((name, load_json(found, strict=False), None))
        except ValueError:
            out.append((name, None, _unreadable(found)))
    return out
