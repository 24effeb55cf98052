"""How a reader option is declared: its name, spellings, default, converter and meaning, once.

Each stage declares the options it reads as fields of its own frozen dataclass, with
:func:`option`; :mod:`dspark_json.options` gathers them into the one table that parses Spark's
options, checks them and generates the options reference of the docs. A default is written
once, as the text a user would write, and converted by the same converter as a given value.

A converter takes ``(spelling used, text)`` and returns the value, or raises
:class:`~dspark_json.errors.OptionError` naming the option, the value and what is allowed.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from dspark_json.errors import OptionError
from dspark_json.fs import Location, is_remote_uri, query_problem
from dspark_json.rows import load_json

__all__ = [
    "Converter",
    "OptionSpec",
    "boolean",
    "choice",
    "directory",
    "json_object",
    "nonempty",
    "number",
    "option",
    "positive",
    "specs_of",
]

Converter = Callable[[str, str], Any]


@dataclass(frozen=True, kw_only=True)
class OptionSpec:
    """One reader option."""

    name: str  # the documented spelling (camelCase)
    doc: str
    example: str
    convert: Converter
    default: str | None = None  # as text, converted like a given value
    aliases: tuple[str, ...] = ()
    required: bool = False
    stage: str = ""  # the stage that reads it: http, request, input, schema, rows
    attr: str = ""  # its field in that stage's options
    #: The name the Python API takes: the snake_case of ``name`` (``responseFormat`` ->
    #: ``response_format``) unless the option says otherwise.
    keyword: str = ""

    def __post_init__(self) -> None:
        if not self.keyword:
            snake = "".join(f"_{c.lower()}" if c.isupper() else c for c in self.name)
            object.__setattr__(self, "keyword", snake)


def option(
    name: str,
    doc: str,
    example: str,
    *,
    convert: Converter,
    default: str | None = None,
    aliases: tuple[str, ...] = (),
    required: bool = False,
    empty: Any = None,
    keyword: str = "",
) -> Any:
    """A dataclass field that is a reader option. Its default is ``convert(name, default)``, or
    ``empty`` where the option has no default (``None`` unless given). ``keyword``: the Python
    API's name for it, where that is not the snake_case of ``name``."""
    spec = OptionSpec(
        name=name,
        doc=doc,
        example=example,
        convert=convert,
        default=default,
        aliases=aliases,
        required=required,
        keyword=keyword,
    )
    value = convert(name, default) if default is not None else empty
    return dataclasses.field(default=value, metadata={"option": spec})


def specs_of(stage: str, cls: type) -> tuple[OptionSpec, ...]:
    """The options a stage's dataclass declares, in field order."""
    return tuple(
        dataclasses.replace(f.metadata["option"], stage=stage, attr=f.name)
        for f in dataclasses.fields(cls)
        if "option" in f.metadata
    )


# --- converters: (spelling used, text) -> value -------------------------------------------------


def number(
    kind: type[int] | type[float], *, low: float | None = None, high: float | None = None
) -> Converter:
    """A whole number (``int``) or a number (``float``), within ``[low, high]`` where given."""

    def convert(name: str, text: str) -> int | float:
        try:
            value = kind(text.strip())
        except ValueError:
            value = None
        if (
            value is None
            or math.isnan(value)
            or (low is not None and value < low)
            or (high is not None and value > high)
        ):
            noun = "a whole number" if kind is int else "a number"
            bounds = "".join(
                [
                    f" from {low:g}" if low is not None else "",
                    f" to {high:g}" if high is not None else "",
                ]
            )
            raise OptionError(f"Option {name!r} must be {noun}{bounds}, got {text!r}.")
        return value

    return convert


def positive(kind: type[int] | type[float]) -> Converter:
    """A whole number or a number above 0."""

    def convert(name: str, text: str) -> int | float:
        try:
            value = kind(text.strip())
        except ValueError:
            value = 0
        if not value > 0:  # NaN too
            noun = "a whole number" if kind is int else "a number"
            raise OptionError(f"Option {name!r} must be {noun} above 0, got {text!r}.")
        return value

    return convert


def boolean(name: str, text: str) -> bool:
    key = text.strip().lower()
    if key not in ("true", "false"):
        raise OptionError(f"Option {name!r} must be true or false, got {text!r}.")
    return key == "true"


def choice(allowed: Mapping[str, str], *, upper: bool = False) -> Converter:
    """One of ``allowed`` (spelling -> value), matched case-insensitively."""

    def convert(name: str, text: str) -> str:
        key = text.strip().upper() if upper else text.strip().lower()
        if key not in allowed:
            raise OptionError(
                f"Option {name!r} has value {text!r}; allowed values: "
                f"{', '.join(dict.fromkeys(allowed.values()))}."
            )
        return allowed[key]

    return convert


def directory(name: str, text: str) -> str:
    """A directory: a URI as given, a local path made absolute; a :class:`Location` (its
    credentials masked in its ``repr``). A URI with a query string is refused (file names are
    appended to it: :func:`~dspark_json.fs.query_problem`)."""
    path = text.strip()
    if not path:
        raise OptionError(f"Option {name!r} must name a directory, got ''.")
    problem = query_problem(name, path)
    if problem:
        raise OptionError(problem + ".")
    return Location(path if is_remote_uri(path) else os.path.abspath(os.path.expanduser(path)))


def nonempty(name: str, text: str) -> str:
    if not text.strip():
        raise OptionError(f"Option {name!r} must not be empty; leave it out to use the default.")
    return text.strip()


def json_object(name: str, text: str) -> Mapping[str, Any]:
    try:
        value = load_json(text)
    except json.JSONDecodeError as exc:
        raise OptionError(
            f"Option {name!r} must be a JSON object, e.g. '{{\"repetition_penalty\": 1.05}}'; "
            f"{exc.msg} at column {exc.colno} of {text!r}."
        ) from exc
    except ValueError as exc:  # nested too deep, or an integer beyond Python's digit limit
        raise OptionError(f"Option {name!r} must be a usable JSON object: {exc}.") from exc
    if not isinstance(value, dict):
        raise OptionError(
            f"Option {name!r} must be a JSON object, got a JSON {type(value).__name__}: {text!r}."
        )
    return value
