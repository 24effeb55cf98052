"""Option ``validateSchema``: each answer's JSON checked against the JSON Schema with jsonschema,
the violations listed per row (``_schema_violations``), the rows kept. The answers' content texts
and tool calls come from the parser's table (:func:`dspark_json.response.answers.read_answers`);
only their own JSON is decoded here.

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

from dspark_json.response.answers import Call
from dspark_json.response.content import extract_json
from dspark_json.rows import MAX_NESTING, exceeds_nesting, load_json
from dspark_json.schema.inference import TYPED_NESTING, nesting
from dspark_json.schema.tools import tool_parameters

__all__ = ["NOT_VALIDATED", "schema_violations", "tool_violations"]

#: What an entry for JSON that could not be read says after its place (``<where>: not
#: validated: <why>``): not a violation of the schema, a reason it was not checked.
NOT_VALIDATED = ": not validated: "
_TOO_DEEP = f"$: nested more than {TYPED_NESTING} levels deep, not validated"


def schema_violations(
    json_schema: Mapping[str, Any], contents: Sequence[str | None]
) -> list[list[str] | None]:
    """Per answer, from its first choice's content text (:class:`~dspark_json.response.answers.
    Answer`'s ``content``): how the content's JSON breaks ``json_schema`` (``[]``: it conforms;
    ``None``: no JSON content to check), as ``"path: message"``."""
    validator = jsonschema.validators.validator_for(json_schema)(json_schema)
    out: list[list[str] | None] = []
    for content in contents:
        found = _json_in(content)
        if found is None:
            out.append(None)
            continue
        value, unread = found
        if unread is not None:
            out.append([f"${NOT_VALIDATED}{unread}"])
            continue
        out.append(_checked(validator, value, ""))
    return out


def tool_violations(
    tools: Sequence[Mapping[str, Any]], calls: Sequence[Sequence[Call]]
) -> list[list[str] | None]:
    """Per answer, from its first choice's tool calls (:class:`~dspark_json.response.answers.
    Call`): how the arguments of each call break their function's ``parameters`` (``[]``: they
    conform; ``None``: no call to check), as ``"tool_calls.<name>[i].arguments/path: message"``.
    Functions without parameters are not checked; arguments that could not be read, and calls
    of a function not offered, get an entry ``... not validated: <why>`` (the row's status says
    the same), never ``[]``."""
    offered = tool_parameters(tools)
    validators = {
        name: jsonschema.validators.validator_for(schema)(schema)
        for name, schema in offered.items()
        if schema is not None
    }
    out: list[list[str] | None] = []
    for made in calls:
        if not made:
            out.append(None)
            continue
        found: list[str] = []
        seen: dict[str, int] = {}
        for call in made:
            name = str(call.name)
            index = seen.get(name, 0)
            seen[name] = index + 1
            where = f"tool_calls.{name}[{index}].arguments"
            if name not in offered:
                found.append(f"tool_calls.{name}[{index}]{NOT_VALIDATED}{_UNKNOWN}")
                continue
            read = _json_in(call.arguments)
            if read is None or read[1] is not None:
                found.append(f"{where}{NOT_VALIDATED}{read[1] if read else _NOT_JSON}")
                continue
            validator = validators.get(name)
            if validator is None:
                continue  # a function without parameters: nothing to check
            found += _checked(validator, read[0], f"{where}/")
        out.append(found)
    return out


_UNKNOWN = "the tools offer no function of that name"
_NOT_JSON = "the arguments are not JSON"


def _checked(validator: Any, value: Any, where: str) -> list[str]:
    """How ``value`` breaks the validator's schema, each entry prefixed by ``where``."""
    if nesting(value) > TYPED_NESTING:
        return [f"{where}{_TOO_DEEP}"]
    try:
        errors = sorted(validator.iter_errors(value), key=lambda e: list(map(str, e.path)))
    except RecursionError:
        return [f"{where}{_TOO_DEEP}"]
    return [f"{where}{'/'.join(map(str, e.path)) or '$'}: {e.message}" for e in errors]


def _json_in(text: str | None) -> tuple[Any, str | None] | None:
    """The JSON value the content rule finds in ``text`` and ``None``, or ``None`` and why it
    could not be read; ``None`` where there is none (no text, prose). Read as the parser reads
    content (allowUnquotedControlChars): models write raw control characters inside strings."""
    found = extract_json(text) if text is not None else None
    if found is None:
        return None
    try:
        return load_json(found, strict=False), None
    except ValueError:
        return None, _unreadable(found)


def _unreadable(text: str) -> str:
    """Why the JSON text could not be read (it could not: the caller tried)."""
    if exceeds_nesting(text):
        return f"the JSON is nested more than {MAX_NESTING} levels deep"
    try:
        load_json(text, strict=False)
    except ValueError as exc:
        return f"the JSON could not be read ({str(exc)[:120]})"
    return "the JSON could not be read"
