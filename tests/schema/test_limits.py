"""Hostile schemas: a JSON Schema maps or is refused within a budget whatever its shape (each
definition mapped once, unions of recursive definitions folded), and a deep schemaHints DDL is an
OptionError, never a RecursionError."""

from __future__ import annotations

import json
import logging

import pytest

from dspark_json.errors import OptionError, SchemaError
from dspark_json.schema import json_schema as module
from dspark_json.schema.ddl import parse_hints
from dspark_json.schema.inference import TYPED_NESTING
from dspark_json.schema.json_schema import json_schema_to_spark


def router(definitions: int = 7, extra: int = 36) -> dict:
    """Like the router configuration schema of the issue (13.5 KB): definitions that refer to
    each other through anyOf unions of six $refs, with a few properties of their own."""
    names = [f"Rule{i}" for i in range(definitions)]
    defs = {}
    for i, name in enumerate(names):
        others = [{"$ref": f"#/$defs/{other}"} for other in names if other != name]
        props: dict = {f"field{i}_{k}": {"type": "string"} for k in range(extra)}
        props["weight"] = {"type": "number"}
        props["then"] = {"anyOf": others}
        props["routes"] = {"type": "array", "items": {"anyOf": others}}
        props["fallback"] = {"anyOf": [*others, {"type": "null"}]}
        defs[name] = {"type": "object", "properties": props, "required": ["then"]}
    return {
        "$defs": defs,
        "type": "object",
        "properties": {"router": {"anyOf": [{"$ref": f"#/$defs/{n}"} for n in names[:6]]}},
    }


def test_the_router_schema_maps_with_each_definition_once(monkeypatch, caplog):
    schema = router()
    assert len(json.dumps(schema)) > 13_000
    # Far under the default budget: it took minutes and 11 GB before each definition was
    # mapped once.
    monkeypatch.setattr(module, "_MAX_STEPS", 5_000)
    with caplog.at_level(logging.INFO, logger="dspark_json"):
        mapped = json_schema_to_spark(schema)
    router_type = mapped["router"].dataType
    assert {"weight", "then", "routes", "fallback", "field0_0", "field5_0"} <= set(
        router_type.names
    )
    assert "The JSON Schema is recursive" in caplog.text
    assert caplog.text.count("from_json") <= 21  # at most 20 places listed, then "and N more"


def test_a_schema_past_the_step_budget_is_refused_naming_the_part(monkeypatch):
    monkeypatch.setattr(module, "_MAX_STEPS", 50)
    with pytest.raises(SchemaError, match=r"more than 50 steps, stopped at parsed\.router"):
        json_schema_to_spark(router())


def test_a_wide_union_is_refused_by_the_default_budget():
    branches = [
        {"type": "object", "properties": {f"p{b}_{k}": {"type": "integer"} for k in range(600)}}
        for b in range(400)
    ]
    with pytest.raises(SchemaError, match=r"more than 200000 steps, stopped at parsed\.anyOf"):
        json_schema_to_spark({"anyOf": branches})


def test_a_type_too_big_is_refused_at_the_definition_that_makes_it():
    defs: dict = {"D0": {"type": "integer"}}
    for i in range(1, 40):
        below = {"$ref": f"#/$defs/D{i - 1}"}
        defs[f"D{i}"] = {"properties": {"a": below, "b": below}}
    with pytest.raises(SchemaError, match=r"of 131071 fields in #/\$defs/D16 \(reached at"):
        json_schema_to_spark({"$defs": defs, "$ref": "#/$defs/D39"})


@pytest.mark.parametrize(
    ("opening", "closing"),
    [("ARRAY<", ">"), ("MAP<STRING, ", ">"), ("STRUCT<a: ", ">")],
)
def test_a_deep_hint_is_an_option_error(opening, closing):
    levels = 100_000
    with pytest.raises(OptionError, match=f"types nested more than {TYPED_NESTING} deep"):
        parse_hints(f"parsed.x {opening * levels}INT{closing * levels}")
    fits = TYPED_NESTING - 1
    ((_, dtype),) = parse_hints(f"x {opening * fits}INT{closing * fits}")
    assert dtype.json().count('"integer"') == 1  # Spark's own code goes through it


def test_a_long_column_path_is_an_option_error_and_many_hints_parse():
    with pytest.raises(OptionError, match=f"a column path of more than {TYPED_NESTING} names"):
        parse_hints(".".join(["a"] * 10_000) + " INT")
    hints = parse_hints(", ".join(f"c{i} BIGINT" for i in range(50_000)) + "   ")
    assert len(hints) == 50_000


def test_the_message_about_a_hostile_hint_stays_short():
    with pytest.raises(OptionError) as caught:
        parse_hints("x " + "ARRAY<" * 100_000 + "INT" + ">" * 100_000)
    assert len(str(caught.value)) < 500
