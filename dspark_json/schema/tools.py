"""Function calling (options ``tools`` and ``toolChoice``): the tool definitions, as OpenAI's
``tools`` field sends them, and the ``tool_calls`` column that types each call's arguments.

The column (:func:`tool_calls_type`) is a struct with one field per function name, each the
list of that function's calls in the first choice, in order (null where it made none: ``[0]`` is
then null in SQL, where an empty list's fails under ANSI mode), each call a struct of its ``id``
and its ``arguments`` typed from the function's ``parameters`` JSON Schema (the same mapping as
``responseFormat``)::

    tool_calls struct<get_weather: array<struct<id string, arguments struct<city string, ...>>>,
                      get_time:    array<struct<id string, arguments struct<zone string>>>>

so that SQL reads ``tool_calls.get_weather[0].arguments.city`` with no ``from_json`` and no
filter on the name. A struct of lists rather than one list of calls with the union of every
function's fields: two functions' ``city`` may be of two types, a union would hold neither, and
a list of calls needs a filter on the name before each field read. The raw calls (name,
arguments text) stay in the envelope's ``choices[].message.tool_calls``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypeAlias

from pyspark.sql.types import ArrayType, DataType, StringType, StructField, StructType

from dspark_json.errors import OptionError
from dspark_json.response.answers import first_message
from dspark_json.response.content import extract_json
from dspark_json.rows import load_json
from dspark_json.schema.inference import infer_type

__all__ = [
    "CALL_FIELDS",
    "Tool",
    "ToolChoice",
    "arguments_of",
    "as_tools",
    "call_type",
    "dumps_tools",
    "inferred_arguments",
    "tool_calls_type",
    "tool_choice_body",
    "tool_names",
    "tool_parameters",
]

#: The fields of one call in :data:`TOOL_CALLS`, besides ``arguments``.
CALL_FIELDS = ("id",)

#: What the Python API takes for one tool: an OpenAI tool definition (a dict), or a Pydantic
#: model class (its name is the function's, its JSON Schema the parameters, its docstring the
#: description).
Tool: TypeAlias = Mapping[str, Any] | type
#: ``toolChoice``: ``auto``, ``required``, ``none``, or the name of the function to call.
ToolChoice: TypeAlias = str

_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


def _definition(item: Any, where: str) -> dict[str, Any]:
    """One tool as OpenAI's ``tools`` holds it: ``{"type": "function", "function": {...}}``."""
    if isinstance(item, type):
        item = _pydantic_tool(item, where)
    if not isinstance(item, Mapping):
        raise OptionError(
            f"{where} must be a tool definition (a JSON object such as "
            '{"type": "function", "function": {"name": "get_weather", "parameters": {...}}}), '
            f"got a {type(item).__name__}."
        )
    function = item.get("function") if item.get("type", "function") == "function" else None
    if function is None and "name" in item:
        function = item  # the bare function, as some clients write it
    if not isinstance(function, Mapping):
        raise OptionError(
            f"{where} is not a function tool: give "
            '{"type": "function", "function": {"name": ..., "parameters": {...}}}; '
            f"got keys {sorted(item)}."
        )
    name = function.get("name")
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise OptionError(
            f"{where} has function name {name!r}: it must be 1 to 64 letters, digits, _ or - "
            "(OpenAI's rule, which vLLM follows)."
        )
    parameters = function.get("parameters")
    if parameters is not None and not isinstance(parameters, Mapping):
        raise OptionError(
            f"{where} (function {name!r}) has parameters of type {type(parameters).__name__}; "
            "they must be a JSON Schema object, or left out (then the arguments' type is "
            "inferred from sample answers)."
        )
    return {"type": "function", "function": dict(function)}


def _pydantic_tool(model: type, where: str) -> dict[str, Any]:
    try:
        from pydantic import BaseModel
    except ImportError as exc:
        raise OptionError(
            f"{where} is the class {model.__name__}, which needs pydantic (pip install "
            "'pydantic>=2'); or pass its tool definition as a dict."
        ) from exc
    if not issubclass(model, BaseModel):
        raise OptionError(
            f"{where} is the class {model.__name__}, which is not a Pydantic model; pass a "
            "Pydantic model class or a tool definition (a dict)."
        )
    function: dict[str, Any] = {"name": model.__name__, "parameters": model.model_json_schema()}
    if model.__doc__:
        function["description"] = model.__doc__.strip()
    return {"type": "function", "function": function}


def as_tools(value: Any, name: str = "tools") -> tuple[dict[str, Any], ...]:
    """``value`` (a list of tool definitions or Pydantic model classes, or its JSON text) as
    OpenAI's ``tools``: each ``{"type": "function", "function": {...}}``; names unique."""
    if isinstance(value, str | bytes):
        try:
            value = load_json(value)
        except ValueError as exc:
            raise OptionError(
                f"Option {name!r} does not hold valid JSON ({exc}). It must be a JSON list of "
                "tool definitions."
            ) from exc
    if isinstance(value, Mapping | type):
        value = [value]  # one tool
    if not isinstance(value, Sequence) or isinstance(value, str | bytes) or not value:
        raise OptionError(
            f"Option {name!r} must be a non-empty list of tool definitions, got "
            f"{type(value).__name__}. Example: "
            '[{"type": "function", "function": {"name": "get_weather", "parameters": '
            '{"type": "object", "properties": {"city": {"type": "string"}}}}}].'
        )
    tools = tuple(_definition(item, f"Option {name!r} item {i}") for i, item in enumerate(value))
    names = [tool["function"]["name"] for tool in tools]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise OptionError(
            f"Option {name!r} names function(s) {repeated} more than once; each function's "
            "calls get one column, so give each function once."
        )
    by_fold: dict[str, list[str]] = {}
    for each in names:
        by_fold.setdefault(each.casefold(), []).append(each)
    clashes = [group for group in by_fold.values() if len(group) > 1]
    if clashes:
        pairs = "; ".join(" and ".join(repr(n) for n in group) for group in clashes)
        raise OptionError(
            f"Option {name!r} names functions that differ only in case ({pairs}): each "
            "function's calls are a field of the tool_calls struct, and Spark cannot hold two "
            "fields whose names differ only in case. Rename one of them (the name is what the "
            "model calls)."
        )
    return tools


def tool_names(tools: Iterable[Mapping[str, Any]]) -> list[str]:
    """The function names of ``tools`` (OpenAI definitions), in order."""
    return [tool["function"]["name"] for tool in tools]


def tool_parameters(tools: Iterable[Mapping[str, Any]]) -> dict[str, Mapping[str, Any] | None]:
    """Function name -> its ``parameters`` JSON Schema (None where a tool gives none)."""
    return {tool["function"]["name"]: tool["function"].get("parameters") for tool in tools}


def tool_choice_body(choice: str, tools: Sequence[Mapping[str, Any]] | None) -> Any:
    """OpenAI's ``tool_choice`` for option ``toolChoice``: the word, or the named function."""
    if choice in ("auto", "required", "none"):
        return choice
    names = tool_names(tools or ())
    if choice not in names:
        raise OptionError(
            f"Option 'toolChoice' is {choice!r}: it must be auto, required, none or the name of "
            f"one of option 'tools' functions ({', '.join(names) or 'none given'})."
        )
    return {"type": "function", "function": {"name": choice}}


def call_type(arguments: DataType) -> StructType:
    """One call of a function whose arguments are of type ``arguments``."""
    return StructType(
        [
            *(StructField(name, StringType()) for name in CALL_FIELDS),
            StructField("arguments", arguments),
        ]
    )


def tool_calls_type(arguments: Mapping[str, DataType]) -> StructType:
    """The :data:`TOOL_CALLS` column's type: function name -> the list of its calls."""
    return StructType(
        [StructField(name, ArrayType(call_type(dtype))) for name, dtype in arguments.items()]
    )


def arguments_of(bodies: Iterable[str | None], name: str) -> list[Any]:
    """The JSON values of the arguments of every call of function ``name`` in the first choice
    of each body (by the content rule), for inferring their type; others skipped."""
    values = []
    for body in bodies:
        message = first_message(body)
        calls = message.get("tool_calls") if isinstance(message, dict) else None
        for call in calls if isinstance(calls, list) else ():
            function = call.get("function") if isinstance(call, dict) else None
            if not isinstance(function, dict) or function.get("name") != name:
                continue
            text = function.get("arguments")
            found = extract_json(text) if isinstance(text, str) else None
            try:
                values.append(load_json(found, strict=False)) if found is not None else None
            except ValueError:
                continue
    return values


def inferred_arguments(bodies: Sequence[str | None], name: str) -> DataType:
    """The arguments' type of function ``name`` from sample answers (string, their JSON text,
    where no sample holds a call of it)."""
    values = arguments_of(bodies, name)
    return infer_type(values) if values else StringType()


def dumps_tools(tools: Sequence[Mapping[str, Any]]) -> str:
    """``tools`` as the text option ``tools`` takes."""
    return json.dumps(list(tools))
