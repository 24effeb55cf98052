"""A Pydantic model's schema through Spark (issue 17): recorded answers read by the source, maps
reachable by key in SQL, the recursive part read back with from_json / variant_get, and
parse_dataframe given the model class."""

import json

import pytest

import dspark_json
from dspark_json import json_schema_to_spark
from tests.helpers import write_prompts

pytestmark = pytest.mark.spark
pytest.importorskip("pydantic")

from tests.schema.pydantic_models import ORDERS, Node, Order, body  # noqa: E402

CHILD = "name STRING, weight DOUBLE, children ARRAY<STRING>"
FIRST = "get(parsed.tree.children, 0)"  # the JSON text of the first child


def test_source_reads_a_pydantic_schema_with_maps_unions_and_recursion(spark, tmp_path):
    answers = [json.loads(body(o.model_dump_json())) for o in ORDERS]
    write_prompts(tmp_path, "answers.jsonl", answers)
    df = (
        spark.read.format("dspark-json")
        .option("responses", str(tmp_path))
        .option("responseFormat", json.dumps(Order.model_json_schema()))
        .load()
    )
    assert df.schema["parsed"].dataType == json_schema_to_spark(Order.model_json_schema())
    rows = df.selectExpr(
        "_status",
        "_rescued_data",
        "parsed.counts['a'] AS a",
        "parsed.by_site['work'].zip AS work_zip",
        "parsed.pet.kind AS kind",
        "parsed.pet.meows AS meows",
        "parsed.pet.bark_db AS bark_db",
        "parsed.ship_on AS ship_on",
        f"from_json({FIRST}, '{CHILD}').name AS first_child",
        f"variant_get(parse_json({FIRST}), '$.children[1].name', 'string') AS a2",
        f"size(from_json({FIRST}, '{CHILD}').children) AS grandchildren",
    ).collect()
    assert [r._status for r in rows] == ["ok", "ok"]
    assert [r._rescued_data for r in rows] == [None, None]
    assert [r.a for r in rows] == [1, None]
    assert [r.work_zip for r in rows] == ["1", None]
    assert [(r.kind, r.meows, r.bark_db) for r in rows] == [("cat", 3, None), ("dog", None, 1.0)]
    assert [str(r.ship_on) for r in rows] == ["2026-03-09", "None"]
    assert [(r.first_child, r.a2, r.grandchildren) for r in rows] == [("a", "a2", 2), (None,) * 3]


def test_parse_dataframe_takes_the_model_class(spark):
    bodies = spark.createDataFrame([(body(o.model_dump_json()),) for o in ORDERS], "value STRING")
    out = dspark_json.parse_dataframe(bodies, response_format=Order).collect()
    assert [r._status for r in out] == ["ok", "ok"]
    assert out[0].parsed.counts == {"a": 1, "b": -2, "\u00fc": 3}
    assert out[1].parsed.prices == {"only": 3.0}
    assert json.loads(out[0].parsed.tree.children[1]) == {
        "name": "b",
        "weight": None,
        "children": [],
    }


def test_generate_takes_the_model_class_and_answers_a_recursive_schema(spark, simulator):
    df = spark.createDataFrame([(f"Tree {i}",) for i in range(6)], "prompt STRING")
    out = dspark_json.generate(df, endpoint=simulator.url, response_format=Node).collect()
    assert out and [r._status for r in out] == ["ok"] * 6
    assert all(r.parsed.name for r in out)
    children = [json.loads(c) for r in out for c in r.parsed.children or [] if c is not None]
    assert children and all("name" in c for c in children)  # each child: a Node's JSON text
