"""Pydantic models as users write them (issue 17): the schema Pydantic sends as response_format
types ``parsed``, and instances dumped by Pydantic come back equal in JSON mode, status ok,
nothing rescued."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import date
from typing import Any

import pytest
from pyspark.sql.types import ArrayType, DataType, MapType, StringType, StructType

import dspark_json
from dspark_json import SchemaError, json_schema_to_spark
from dspark_json.schema.json_schema import as_json_schema

pytest.importorskip("pydantic")

from tests.schema.pydantic_models import ORDERS, Order, Pair, body


def thaw(value: Any, dtype: DataType, like: Any) -> Any:
    """A parsed Arrow value back to JSON-like Python, as Pydantic validates it: maps (pairs) ->
    dicts, tuple structs -> lists, JSON text -> its value where the original is not a string
    (the recursive part of a schema). ``like`` is the original, in JSON mode."""
    if value is None:
        return None
    if isinstance(dtype, StringType) and not isinstance(like, str):
        return json.loads(value)
    if isinstance(dtype, StructType):
        if isinstance(like, list):
            pairs = zip(dtype.fields, like, strict=True)
            return [thaw(value[f.name], f.dataType, x) for f, x in pairs]
        return {f.name: thaw(value[f.name], f.dataType, like.get(f.name)) for f in dtype.fields}
    if isinstance(dtype, MapType):
        return {k: thaw(v, dtype.valueType, like[k]) for k, v in value}
    if isinstance(dtype, ArrayType):
        return [thaw(v, dtype.elementType, x) for v, x in zip(value, like, strict=True)]
    return value


def round_trip(model: type, instances: list) -> list:
    """Parse Pydantic's dumps with response_format=model; check the rows; return the models
    Pydantic validates back from ``parsed``."""
    table = dspark_json.parse_responses(
        [body(m.model_dump_json()) for m in instances], response_format=model, backend="cpu"
    )
    assert table.column("_status").to_pylist() == ["ok"] * len(instances)
    assert table.column("_rescued_data").to_pylist() == [None] * len(instances)
    assert table.column("_corrupt_record").to_pylist() == [None] * len(instances)
    dtype = json_schema_to_spark(model.model_json_schema())
    back = []
    for value, original in zip(table.column("parsed").to_pylist(), instances, strict=True):
        back.append(model.model_validate(thaw(value, dtype, original.model_dump(mode="json"))))
    return back


def test_order_schema_types():
    assert json_schema_to_spark(Order.model_json_schema()).simpleString() == (
        "struct<id:bigint,placed_at:timestamp,ship_on:date,color:string,priority:bigint,"
        "note:string,address:struct<street:string,zip:string>,"
        "previous:array<struct<street:string,zip:string>>,counts:map<string,bigint>,"
        "prices:map<string,double>,by_site:map<string,struct<street:string,zip:string>>,"
        "point:array<double>,window:array<timestamp>,"
        "pet:struct<kind:string,meows:bigint,indoor:boolean,bark_db:double,tricks:array<string>>,"
        "either:struct<kind:string,meows:bigint,indoor:boolean,bark_db:double,tricks:array<string>>,"
        "tree:struct<name:string,weight:double,children:array<string>>>"
    )


def test_pydantic_instances_round_trip_equal_in_json_mode():
    back = round_trip(Order, ORDERS)
    assert [m.model_dump(mode="json") for m in back] == [m.model_dump(mode="json") for m in ORDERS]
    assert back == ORDERS


def test_tuples_of_different_types_round_trip_as_structs():
    assert json_schema_to_spark(Pair.model_json_schema()).simpleString() == (
        "struct<pair:struct<_1:bigint,_2:string>,triple:struct<_1:string,_2:date,_3:boolean>>"
    )
    pairs = [Pair(pair=(1, "one"), triple=("x", date(2026, 1, 2), True)), Pair(pair=(-7, ""))]
    back = round_trip(Pair, pairs)
    assert [m.model_dump(mode="json") for m in back] == [m.model_dump(mode="json") for m in pairs]


def test_a_tuple_with_too_many_items_is_rescued_not_lost():
    table = dspark_json.parse_responses(
        [body('{"pair": [1, "a", 3]}')], response_format=Pair, backend="cpu"
    )
    assert table.column("parsed").to_pylist() == [{"pair": {"_1": 1, "_2": "a"}, "triple": None}]
    assert json.loads(table.column("_rescued_data")[0].as_py()) == {"parsed.pair[2]": 3}


def test_a_model_class_is_taken_where_a_json_schema_is():
    schema = Order.model_json_schema()
    assert as_json_schema(Order) == schema
    assert as_json_schema(schema) is schema and as_json_schema(None) is None
    assert dspark_json.response_schema(response_format=Order) == dspark_json.response_schema(
        response_format=schema
    )
    with pytest.raises(SchemaError, match=r"neither a JSON Schema .* nor a Pydantic model class"):
        as_json_schema(int)
    with pytest.raises(SchemaError, match="nor a Pydantic model class"):
        as_json_schema(Order(**ORDERS[0].model_dump()))  # an instance, not the class


def test_a_class_without_pydantic_installed_says_how_to_fix(monkeypatch):
    monkeypatch.setitem(sys.modules, "pydantic", None)  # import pydantic now fails
    with pytest.raises(SchemaError, match=r"needs pydantic \(pip install 'pydantic>=2'\)"):
        as_json_schema(Order)


def test_pydantic_is_imported_only_when_given_a_model_class():
    code = (
        "import sys, dspark_json;"
        "dspark_json.response_schema(response_format={'properties': {'a': {'type': 'integer'}}});"
        "print('pydantic' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
