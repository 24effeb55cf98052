"""Tuple structs (``prefixItems`` whose items' types differ: ``struct<_1, _2, ...>``) and the
unions the schema mapping produces, on the kernels' path. A tuple struct takes a JSON array,
item by position (missing items null, items past the fields rescued under ``path[i]``), or an
object (as any struct); the reference parser defines it. Random documents of each, nested in
maps, arrays and each other, with nulls and drift, give the reference's table byte for byte,
and only drift (a value its column cannot hold, an item past a tuple's fields under a map's
key) leaves the kernels' path."""

import json
import random

import pytest

from dspark_json import response_schema
from dspark_json.parse.cpu import CpuParser
from dspark_json.parse.reference import ReferenceParser
from tests.helpers import assert_same_tables, chat

STR, INT, NUM, BOOL = (
    {"type": "string"},
    {"type": "integer"},
    {"type": "number"},
    {"type": "boolean"},
)
FORMAT = {
    "type": "object",
    "properties": {
        "pair": {"type": "array", "prefixItems": [STR, INT], "items": False},
        "open": {"prefixItems": [INT, {"type": "object", "properties": {"x": INT}}, BOOL]},
        "nested": {"prefixItems": [INT, {"prefixItems": [STR, BOOL]}]},
        "free": {"prefixItems": [INT, {}]},
        "listed": {"prefixItems": [STR, {"type": "array", "items": NUM}]},
        "many": {"type": "array", "items": {"prefixItems": [NUM, STR]}},
        "by_key": {"type": "object", "additionalProperties": {"prefixItems": [STR, INT]}},
        # Unions as the mapping gives them: a tuple or an object (one struct of both), objects
        # (one struct, their fields), arrays of different items (array<string>), maps of
        # different values (map<string, string>), scalars (string).
        "tuple_or_object": {
            "anyOf": [{"prefixItems": [STR, INT]}, {"type": "object", "properties": {"_3": NUM}}]
        },
        "objects": {
            "oneOf": [
                {"type": "object", "properties": {"a": INT}},
                {"type": "object", "properties": {"b": STR}},
            ]
        },
        "arrays": {"anyOf": [{"type": "array", "items": INT}, {"type": "array", "items": STR}]},
        "maps": {
            "anyOf": [
                {"type": "object", "additionalProperties": INT},
                {"type": "object", "additionalProperties": BOOL},
            ]
        },
        "scalars": {"type": ["integer", "string", "null"]},
        "n": INT,
    },
}
SCHEMA = response_schema(response_format=FORMAT)


class Doc:
    """One content document's text, built at random; ``drift``: it holds a value its column
    cannot take, or an item past a tuple's fields under a map's key (both the reference's)."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.drift = False
        self.ws = rng.choice(["", " ", "\n  "])

    def join(self, items: list[str], brackets: str = "[]") -> str:
        ws = self.ws
        return brackets[0] + ws + ("," + ws).join(items) + ws + brackets[1]

    def scalar(self, kind: str) -> str:
        rng = self.rng
        if rng.random() < 0.1:
            return "null"
        if rng.random() < 0.005:  # a value the item's column cannot hold
            self.drift = self.drift or kind not in ("str", "any")
            return rng.choice(['"x"', "[1]", "{}"]) if kind != "str" else "1.5"
        if kind == "str":
            return rng.choice(['"a"', '"\\u00e9t\\u00e9"', '""', '"tab\\t"'])
        if kind == "int":
            return str(rng.randint(-9, 99))
        if kind == "num":
            return rng.choice(["1.5", "-0.25", "3", "1e3"])
        if kind == "bool":
            return rng.choice(["true", "false"])
        return rng.choice(["1", '"s"', "[true, null]", '{"k": 1.50}', "false"])  # any

    def part(self, write) -> tuple[str, bool]:
        """What ``write()`` writes, and whether it drifts (not yet counted: it may be left out)."""
        before, self.drift = self.drift, False
        text, drift = write(), self.drift
        self.drift = before
        return text, drift

    def kept(self, parts: list[tuple[str, bool]]) -> list[str]:
        """The texts of the parts a document keeps, their drift counted."""
        self.drift = self.drift or any(drift for _, drift in parts)
        return [text for text, _ in parts]

    def tuple(self, items: list, *, under_map: bool = False) -> str:
        """A tuple of ``items`` (each a kind or a function writing a value): null, an object by
        field name now and then, else an array, now and then short or with items past the
        fields (rescued; under a map's key, the reference's)."""
        rng = self.rng
        roll = rng.random()
        if roll < 0.08:
            return "null"
        parts = [
            self.part(item if callable(item) else lambda kind=item: self.scalar(kind))
            for item in items
        ]
        if roll < 0.14:
            values = self.kept(parts)
            return self.join([f'"_{i + 1}":{self.ws}{v}' for i, v in enumerate(values)], "{}")
        if roll < 0.24:
            return self.join(self.kept(parts[: rng.randint(0, len(parts) - 1)]))
        values = self.kept(parts)
        if roll < 0.36:
            extra = [rng.choice(["null", "7", '"more"', "[1, 2]", '{"k": null}', "1.50"])]
            extra += ["null"] * rng.randint(0, 1)
            values += extra
            self.drift = self.drift or (under_map and any(v != "null" for v in extra))
        return self.join(values)

    def object_x(self) -> str:
        if self.rng.random() < 0.1:
            return "null"
        return f'{{"x": {self.scalar("int")}}}'

    def num_list(self) -> str:
        if self.rng.random() < 0.1:
            return "null"
        return self.join([self.scalar("num") for _ in range(self.rng.randint(0, 3))])

    def text(self) -> str:
        rng = self.rng
        writers = {
            "pair": lambda: self.tuple(["str", "int"]),
            "open": lambda: self.tuple(["int", self.object_x, "bool"]),
            "nested": lambda: self.tuple(["int", lambda: self.tuple(["str", "bool"])]),
            "free": lambda: self.tuple(["int", "any"]),
            "listed": lambda: self.tuple(["str", self.num_list]),
            "many": lambda: self.join(
                [self.tuple(["num", "str"]) for _ in range(rng.randint(0, 3))]
            ),
            "by_key": lambda: self.join(
                [
                    f'"k{i}": {self.tuple(["str", "int"], under_map=True)}'
                    for i in range(rng.randint(0, 3))
                ],
                "{}",
            ),
            "tuple_or_object": lambda: (
                self.tuple(["str", "int", "num"])
                if rng.random() < 0.6
                else rng.choice(['{"_3": 2.5}', '{"_1": "a", "_3": 1}'])
            ),
            "objects": lambda: rng.choice(['{"a": 1}', '{"b": "x"}', '{"a": 2, "b": "y"}', "null"]),
            "arrays": lambda: rng.choice(["[1, 2]", '["a", "b"]', "[]", '[1, "a", null]']),
            "maps": lambda: rng.choice(['{"a": 1, "b": true}', '{"c": false}', "{}"]),
            "scalars": lambda: rng.choice(["1", '"one"', "null"]),
            "n": lambda: str(rng.randint(0, 9)),
        }
        fields = {name: self.part(write) for name, write in writers.items()}
        kept = [(k, v) for k, v in fields.items() if rng.random() < 0.9 or k == "n"]
        texts = self.kept([v for _, v in kept])
        return "{" + ", ".join(f'"{k}": {v}' for (k, _), v in zip(kept, texts, strict=True)) + "}"


@pytest.mark.parametrize("seed", range(4))
def test_tuples_and_unions_on_the_kernels_path_are_the_reference_parsers(seed):
    rng = random.Random(seed)
    bodies, drifting = [], 0
    for _ in range(300):
        docs = [Doc(rng) for _ in range(2 if rng.random() < 0.2 else 1)]
        bodies.append(chat(*(doc.text() for doc in docs)))
        drifting += any(doc.drift for doc in docs)
    parser = CpuParser(SCHEMA)
    ours = parser.parse_vectorised(bodies)
    reference = ReferenceParser(SCHEMA).parse(bodies)
    assert_same_tables(ours, reference, bodies)
    assert set(parser.reference_reasons) <= {"content_misfit"}
    assert parser.reference_rows == drifting


@pytest.mark.parametrize(
    ("text", "parsed", "rescued"),
    [
        ('["a", 1]', {"_1": "a", "_2": 1}, None),
        ('["a"]', {"_1": "a", "_2": None}, None),
        ("[]", {"_1": None, "_2": None}, None),
        ('["a", 1, null]', {"_1": "a", "_2": 1}, None),
        ('["a", 1, [2, 3], null, 4]', {"_1": "a", "_2": 1}, {"parsed[2]": [2, 3], "parsed[4]": 4}),
        ('{"_2": 5}', {"_1": None, "_2": 5}, None),
    ],
    ids=["whole", "short", "empty", "a null past the fields", "items past the fields", "object"],
)
def test_a_tuple_content_by_position_with_items_past_its_fields_rescued(text, parsed, rescued):
    """A ``parsed`` column that is a tuple itself: the kernels fill it by position and rescue
    the items past its fields under ``parsed[i]``, as the reference parser does."""
    schema = response_schema(response_format={"prefixItems": [STR, INT]})
    bodies = [chat(text)]
    parser = CpuParser(schema)
    ours = parser.parse_vectorised(bodies)
    assert ours.equals(ReferenceParser(schema).parse(bodies))
    assert ours.column("parsed").to_pylist() == [parsed]
    row = ours.column("_rescued_data").to_pylist()[0]
    assert (json.loads(row) if row else None) == rescued
    assert parser.reference_rows == 0


def envelope_tuple_schema():
    """A user's envelope schema with tuple structs: one at the top level, one in each choice
    holding another."""
    from pyspark.sql.types import ArrayType, LongType, StringType, StructField, StructType

    pair = StructType([StructField("_1", LongType()), StructField("_2", StringType())])
    span = StructType([StructField("_1", StringType()), StructField("_2", pair)])
    message = StructType([StructField("role", StringType()), StructField("content", StringType())])
    choice = StructType(
        [
            StructField("index", LongType()),
            StructField("message", message),
            StructField("finish_reason", StringType()),
            StructField("span", span),
        ]
    )
    fields = [
        StructField("id", StringType()),
        StructField("choices", ArrayType(choice)),
        StructField("window", pair),
        StructField("parsed", StructType([StructField("_1", StringType())])),  # a tuple too
    ]
    return response_schema(schema=StructType(fields))


@pytest.mark.parametrize("seed", range(2))
def test_tuples_in_the_envelope_are_on_the_kernels_path(seed):
    """Tuple structs in a user's envelope schema take arrays by position as in the content:
    items past the fields rescued (``window[2]``, ``choices[0].span[1][2]``), no row on the
    reference parser's path."""
    rng = random.Random(seed)

    pairs = ['[1, "a"]', "[2]", "[]", '[3, "b", 7]', '[4, "c", null, {"k": 1.5}]', '{"_2": "x"}']

    def pair():
        return rng.choice([*pairs, "null"])

    bodies = []
    for i in range(200):
        span = rng.choice([f'["s", {pair()}]', '["t"]', '["u", [1, "z"], 5]', "null"])
        choice = (
            '{"index": 0, "message": {"role": "assistant", "content": "[\\"p\\", 2]"}, '
            f'"finish_reason": "stop", "span": {span}}}'
        )
        bodies.append(f'{{"id": "c{i}", "choices": [{choice}], "window": {pair()}}}')
    schema = envelope_tuple_schema()
    parser = CpuParser(schema)
    ours = parser.parse_vectorised(bodies)
    assert_same_tables(ours, ReferenceParser(schema).parse(bodies), bodies)
    assert parser.reference_rows == 0
    rescued = {k for r in ours.column("_rescued_data").to_pylist() if r for k in json.loads(r)}
    assert {"window[2]", "window[3]", "choices[0].span[2]", "choices[0].span[1][2]"} <= rescued
    assert {"parsed[1]"} <= rescued
