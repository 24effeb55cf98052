"""Every schema of JSON-Schema-Test-Suite (draft2020-12, draft7) maps to a Spark type or is
refused with a SchemaError for a stated reason; none crashes (tests/data/json-schema-test-suite)."""

import json
import re
from collections import Counter
from pathlib import Path

import pytest

from dspark_json import SchemaError, json_schema_to_spark

CORPUS = Path(__file__).parents[1] / "data" / "json-schema-test-suite" / "schemas.jsonl"
CASES = [json.loads(line) for line in CORPUS.read_text(encoding="utf-8").splitlines()]
#: The documents the suite serves from its remotes/ folder, and the meta-schemas.
REMOTE = ("http://localhost:1234/", "https://json-schema.org/", "http://json-schema.org/")


def outcome(schema) -> str:
    """The Spark type, or why it is refused (only a SchemaError may come out)."""
    try:
        return json_schema_to_spark(schema).simpleString()
    except SchemaError as exc:
        message = str(exc)
        remote = re.search(r"points outside this schema \(to '([^']*)'\)", message)
        if remote:
            assert remote.group(1).startswith(REMOTE), message  # a document not given
            return "refused: remote $ref"
        if "allows no value at all" in message:
            return "refused: unsatisfiable"
        return f"refused: {message}"


def test_the_suite_loads_but_for_remote_refs_and_unsatisfiable_schemas():
    assert len(CASES) == 634
    outcomes = [outcome(case["schema"]) for case in CASES]
    counts = Counter(o if o.startswith("refused") else "loaded" for o in outcomes)
    assert counts == {
        "loaded": 589,
        "refused: remote $ref": 33,  # refRemote.json and friends: other documents
        "refused: unsatisfiable": 12,  # false, allOf [true, false], anyOf [false, false]...
    }


@pytest.mark.parametrize(
    ("draft", "case", "expected"),
    [
        ("draft2020-12", "escaped pointer ref", "struct<tilde:bigint,slash:bigint,percent:bigint>"),
        ("draft2020-12", "Location-independent identifier", "bigint"),
        ("draft2020-12", "root pointer ref", "struct<foo:string>"),
        ("draft2020-12", "relative pointer ref to array", "array<bigint>"),
        ("draft2020-12", "URN base URI with URN and anchor ref", "struct<foo:string>"),
        (
            "draft2020-12",
            "Recursive references between schemas",
            "struct<meta:string,nodes:array<struct<value:double,subtree:string>>>",
        ),
        ("draft2020-12", "a schema given for prefixItems", "struct<_1:bigint,_2:string>"),
        ("draft2020-12", "additionalProperties can exist by itself", "map<string,boolean>"),
        ("draft2020-12", "$dynamicRef points to a boolean schema", "struct<true:string>"),
        ("draft7", "a schema given for items", "array<bigint>"),
        ("draft7", "$ref to boolean schema true", "string"),
        ("draft7", "refs with quote", 'struct<foo"bar:double>'),
    ],
)
def test_suite_cases(draft, case, expected):
    (schema,) = [c["schema"] for c in CASES if c["draft"] == draft and c["case"] == case][:1]
    assert outcome(schema) == expected
