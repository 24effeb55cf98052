"""String columns that take any JSON value (free-form ``{}``/``true`` values, grab-bag
``additionalProperties: {}`` objects, unions of scalars: the schema mapping gives them all
``string``) hold a non-string as its JSON text, in the reference parser's canonical form. The
kernels take them (no row goes to the reference parser for it), byte for byte the reference's."""

import random

import pytest

from dspark_json import response_schema
from dspark_json.parse.cpu import CpuParser
from dspark_json.parse.reference import ReferenceParser
from tests.helpers import assert_same_tables, chat

FORMAT = {
    "type": "object",
    "properties": {
        "free": {},
        "union": {"type": ["string", "integer", "boolean"]},
        "many": {"type": "array", "items": {}},
        "bag": {
            "type": "object",
            "properties": {"settings": {"type": "object", "additionalProperties": {}}},
        },
        "items": {
            "type": "array",
            "items": {"type": "object", "properties": {"v": {}, "n": {"type": "integer"}}},
        },
        "n": {"type": "integer"},
    },
}
SCHEMA = response_schema(response_format=FORMAT)

#: Numbers as a model writes them: some in Python's canonical form, some not (an exponent, a
#: trailing zero, -0, 16-17 digits, past a double's range, past a long's).
NUMBERS = [
    "0", "-0", "7", "-12", "1.5", "1.50", "1e5", "2E-3", "0.1", "0.30000000000000004",
    "0.1234567890123456", "1e400", "12345678901234567890", "-0.0", "100.0", "0.00001",
]  # fmt: skip
STRINGS = ['"a"', '"\\u00e9\\/"', '"tab\\there"', '"\\"q\\""', '"\\ud83d\\ude00"', '""', '"\u00e9"']


def value(rng: random.Random, depth: int = 0) -> str:
    """A random JSON value's text, with random whitespace, repeated and escaped keys now and
    then."""
    ws = rng.choice(["", " ", "\n  "])
    roll = rng.random()
    if depth > 3 or roll < 0.45:
        return rng.choice([*NUMBERS, *STRINGS, "true", "false", "null"])
    if roll < 0.75:
        keys = [rng.choice(['"k"', '"x"', '"\\u0041"', '"y"']) for _ in range(rng.randint(0, 3))]
        if rng.random() < 0.8:
            keys = list(dict.fromkeys(keys))  # mostly no repeated key
        items = [f"{k}{ws}:{ws}{value(rng, depth + 1)}" for k in keys]
        return "{" + ws + ("," + ws).join(items) + ws + "}"
    items = [value(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    return "[" + ws + ("," + ws).join(items) + ws + "]"


def content(rng: random.Random) -> tuple[str, bool]:
    """A content object's text, and whether it drifts (a value the schema cannot hold)."""
    drift = rng.random() < 0.1
    fields = {
        "free": value(rng),
        "union": rng.choice([value(rng), '"text"', "3", "true"]),
        "many": "[" + ",".join(value(rng) for _ in range(rng.randint(0, 3))) + "]",
        "bag": '{"settings": {'
        + ",".join(f'"s{i}": {value(rng)}' for i in range(rng.randint(0, 3)))
        + "}}",
        "items": "["
        + ",".join(f'{{"v": {value(rng)}, "n": {rng.randint(0, 9)}}}' for _ in range(2))
        + "]",
        "n": '"three"' if drift else str(rng.randint(0, 99)),
    }
    kept = [f'"{k}": {v}' for k, v in fields.items() if rng.random() < 0.85 or k == "n"]
    return "{" + ", ".join(kept) + "}", drift


@pytest.mark.parametrize("seed", range(4))
def test_json_text_columns_on_the_kernels_path_are_the_reference_parsers_bytes(seed):
    rng = random.Random(seed)
    bodies, drifting = [], 0
    for _ in range(300):
        first, drift = content(rng)
        second, drift_2 = content(rng)
        bodies.append(chat(first, second) if rng.random() < 0.2 else chat(first))
        drifting += drift or (drift_2 and bodies[-1].count('"index"') == 2)
    parser = CpuParser(SCHEMA)
    ours = parser.parse_vectorised(bodies)
    reference = ReferenceParser(SCHEMA).parse(bodies)
    assert_same_tables(ours, reference, bodies)
    # Only drift (an integer column given text) and repeated or escaped keys in typed objects
    # leave the kernels' path: never a JSON-text value.
    assert set(parser.reference_reasons) <= {"content_misfit"}
    assert parser.reference_rows == drifting


def test_a_content_that_is_a_json_text_column_itself_takes_any_value():
    """A ``parsed`` column of type string (a free-form schema: ``{}``)."""
    schema = response_schema(response_format={})
    bodies = [chat(text) for text in ['{"a": [1, 2.50]}', "[true]", '"s"', "3", "1e400", "-0"]]
    parser = CpuParser(schema)
    ours = parser.parse_vectorised(bodies)
    assert ours.equals(ReferenceParser(schema).parse(bodies))
    assert ours.column("parsed").to_pylist()[:2] == ['{"a":[1,2.5]}', "[true]"]
    assert parser.reference_rows == 0


MAPS = {
    "type": "object",
    "properties": {
        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
        "counts": {
            "type": "object",
            "additionalProperties": {"type": "object", "additionalProperties": {"type": "integer"}},
        },
        "objs": {
            "type": "array",
            "items": {
                "type": "object",
                "additionalProperties": {
                    "type": "object",
                    "properties": {"x": {"type": "integer"}},
                },
            },
        },
        "n": {"type": "integer"},
    },
}


def map_content(rng: random.Random) -> str:
    def keys() -> list[str]:
        ks = [rng.choice(['"a"', '"b"', '"app.kubernetes.io/name"', '"\\u0041"', '"A"'])]
        ks += [f'"k{i}"' for i in range(rng.randint(0, 4))]
        return ks if rng.random() < 0.02 else list(dict.fromkeys(ks))  # now and then a repeat

    def entries(value) -> str:
        if rng.random() < 0.1:
            return "null"
        return "{" + ", ".join(f"{k}: {value()}" for k in keys()) + "}"

    labels = entries(lambda: value(rng) if rng.random() < 0.2 else '"v"')
    counts = entries(
        lambda: entries(lambda: '"x"' if rng.random() < 0.01 else rng.choice(["1", "-2", "null"]))
    )
    objs = (
        "["
        + ", ".join(
            entries(
                lambda: rng.choice(
                    ['{"x": 1}', '{"x": null}', "{}", '{"x": 2, "y": 3}'][
                        : 3 + (rng.random() < 0.02)
                    ]
                )
            )
            for _ in range(rng.randint(0, 2))
        )
        + "]"
    )
    return f'{{"labels": {labels}, "counts": {counts}, "objs": {objs}, "n": 1}}'


@pytest.mark.parametrize("seed", range(3))
def test_maps_on_the_kernels_path_are_the_reference_parsers(seed):
    """map<string, T> of any value type (strings taking any JSON, maps of maps, structs),
    nested in arrays, with nulls, repeated keys and drift: the reference's table, and only
    drift and repeated keys leave the kernels' path."""
    rng = random.Random(seed)
    schema = response_schema(response_format=MAPS)
    bodies = [chat(map_content(rng)) for _ in range(300)]
    parser = CpuParser(schema)
    ours = parser.parse_vectorised(bodies)
    reference = ReferenceParser(schema).parse(bodies)
    assert_same_tables(ours, reference, bodies)
    assert "column_types" not in parser.reference_reasons
    assert parser.reference_rows < len(bodies) // 2
