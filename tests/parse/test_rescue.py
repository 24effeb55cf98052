"""``_rescued_data`` built in compiled code equals the reference parser's, byte for byte, for
every form a rescued value can take (and the rows that need Python still get it right)."""

from __future__ import annotations

import json
import random

import pyarrow as pa
import pytest

import dspark_json
from dspark_json.parse.cpu import CpuParser
from dspark_json.parse.reference import ReferenceParser

CONTENT = {"type": "object", "properties": {"label": {"type": "string"}}}

VALUES = [
    '"plain"',
    '"caf\\u00e9 \\ud83d\\ude00 \\/ \\" \\\\ \\b\\f\\n\\r\\t \\u0001 \\u001f \\u007f \\u2028"',
    '"raw é 😀 \u2028"',
    "0", "-1", "123456789012345678901234567890", "-0", "0.5", "-0.0", "0.0", "10.0",
    "1.50", "1e5", "1E-3", "0.0001", "0.00001", "3.141592653589793", "0.1234567890123456",
    "1234567890123456.0", "123456789012345.0", "1.5e308", "1e400",
    "true", "false", "null",
    '[1, 2 , [ ] , { } ,"x"]',
    '{ "a" : { "b" : [ 1.25 , "\\n" ] } , "c" : null }',
    " [ ] ",
]  # fmt: skip


def body(content, **extra):
    envelope = {
        "id": "c",
        "object": "chat.completion",
        "created": 1767225600,
        "model": "m",
        "choices": [
            {"index": i, "message": {"role": "assistant", "content": c}, "finish_reason": "stop"}
            for i, c in enumerate(content if isinstance(content, list) else [content])
        ],
    }
    text = json.dumps(envelope)
    for key, raw in extra.items():
        text = text[:-1] + f', "{key}" : {raw}' + "}"
    return text


def assert_same(bodies, schema):
    ours = CpuParser(schema).parse(bodies)
    reference = ReferenceParser(schema).parse(bodies)
    for i, (a, b) in enumerate(
        zip(
            ours.column("_rescued_data").to_pylist(),
            reference.column("_rescued_data").to_pylist(),
            strict=True,
        )
    ):
        assert a == b, f"row {i}: {bodies[i][:200]!r}"
    assert ours.equals(reference)
    return ours


@pytest.mark.parametrize("with_parsed", [True, False])
def test_every_value_form_in_the_envelope_and_in_the_content(with_parsed):
    schema = dspark_json.response_schema(response_format=CONTENT)
    if not with_parsed:
        schema = dspark_json.response_schema(
            schema=type(schema)([f for f in schema.fields if f.name != "parsed"])
        )
    bodies = []
    for value in VALUES:
        bodies.append(body('{"label": "x"}', extra=value))
        bodies.append(body(['{"label": "x", "more": ' + value + "}", '{"z": ' + value + "}"]))
        bodies.append(body('{"label": "x", "k\\u00e9y": ' + value + "}", meta=value))
    out = assert_same(bodies, schema)
    if with_parsed:  # unknown keys holding null are not rescued: the three "null" rows
        assert out.column("_rescued_data").null_count == 3


def test_rows_that_need_python_are_rescued_there():
    schema = dspark_json.response_schema(response_format=CONTENT)
    bodies = [
        body('{"label": "x", "a": 1, "a": 2}'),  # a repeated unknown key: the last value wins
        body('{"label": "x"}', a="1", **{"parsed.a": "2"}),  # an envelope key like a path
        body('{"label": "x", "inner": {"deep": 1}}'),
        body('{"label": "x", "n": 1e400}'),  # beyond a double: kept as text
        body('{"label": "x", "raw": "a\u0012b\nc"}'),  # raw control chars (lenient)
    ]
    assert_same(bodies, schema)


def test_random_documents_rescue_the_same_way():
    rng = random.Random(7)

    def value(depth=0):
        roll = rng.random()
        if depth < 3 and roll < 0.2:
            return {
                f"k{rng.randint(0, 9)}\u00e9": value(depth + 1) for _ in range(rng.randint(0, 3))
            }
        if depth < 3 and roll < 0.35:
            return [value(depth + 1) for _ in range(rng.randint(0, 3))]
        choices = [
            rng.randint(-(10**20), 10**20),
            round(rng.uniform(-1000, 1000), rng.randint(0, 6)),
            rng.random() * 10 ** rng.randint(-8, 20),
            "".join(rng.choice('ab"\\/\n\t\u00e9\u2028😀\x01 ') for _ in range(rng.randint(0, 8))),
            rng.choice([True, False, None]),
        ]
        return rng.choice(choices)

    schema = dspark_json.response_schema(response_format=CONTENT)
    bodies = []
    for _ in range(400):
        extra = {f"x{i}": value() for i in range(rng.randint(1, 3))}
        text = json.dumps(extra, ensure_ascii=rng.random() < 0.5, indent=rng.choice([None, 1]))
        content = '{"label": "y", ' + text[1:]
        bodies.append(body([content, content], meta=json.dumps(value())))
    assert_same(bodies, schema)


def test_the_rescue_keeps_nulls_and_rows_without_extras():
    schema = dspark_json.response_schema(response_format=CONTENT)
    table = CpuParser(schema).parse(
        pa.array([body('{"label": "x"}'), None, body('{"label": "y", "z": 1}')])
    )
    assert table.column("_rescued_data").to_pylist() == [None, None, '{"parsed.z":1}']


@pytest.mark.parametrize("seed", range(3))
def test_rows_that_repeat_a_shapes_static_unknown_keys_rescue_as_the_reference(seed):
    # A field the schema leaves out of the message ("hints", as tool_calls under a narrow
    # schema): every row rescues "hints": [] deep down. Rows an envelope shape matched share
    # one rendering; rows with more (their content's keys, other keys, other values) are
    # rendered on their own.
    rng = random.Random(seed)
    schema = dspark_json.response_schema(response_format=CONTENT)
    bodies = []
    for i in range(400):
        content = rng.choice(['{"label": "a"}', '{"label": "b", "more": 1}', '{"label": "c"}'])
        envelope = json.loads(body(content))
        envelope["id"] = f"c{i}"
        message = envelope["choices"][0]["message"]
        message["hints"] = rng.choice([[], [], [], {}, [1], None])
        if rng.random() < 0.1:
            envelope["usage_extra"] = rng.choice([[], {"n": 2}])
        bodies.append(json.dumps(envelope, ensure_ascii=rng.random() < 0.5))
    assert_same(bodies, schema)
    rescued = CpuParser(schema).parse(bodies).column("_rescued_data").to_pylist()
    assert sum(text == '{"choices[0].message.hints":[]}' for text in rescued) > 100


@pytest.mark.parametrize(
    "value",
    [
        '{"x": [], "x": {}}',
        '{"x": 1, "x": 2}',
        '{"x": "a", "y": 0, "x": "b"}',
        '[{"k": 1, "k": 2}, {"k": 3}]',
        '{"a": {"x": 1}, "b": {"x": 2}}',  # the same key in two objects: no repeat
        '{"a": {"x": 1, "x": 2}, "x": 3}',
        '{"\\u0078": 1, "x": 2}',  # one key, two spellings
        "{" + ", ".join(f'"k{i}": {i}' for i in range(100)) + "}",
        '{"a": ' * 70 + "1" + "}" * 70,  # deeper than the compiled rescue holds
    ],
)
def test_a_rescued_object_that_repeats_a_key_keeps_pythons_last_value(value):
    # A hostile review found the compiled rescue copying {"x":1,"x":2} as written, where the
    # reference (json.loads) keeps {"x":2}.
    schema = dspark_json.response_schema(response_format=CONTENT)
    content = json.dumps({"label": "a", "more": json.loads(value)})
    bodies = [body(f'{{"label": "a", "more": {value}}}', w=value), body(content)]
    assert_same(bodies, schema)


@pytest.mark.parametrize(
    "text",
    [
        '{"id":"a","choices":[],"z":1,"z":null}',
        '{"id":"a","choices":[{"index":0,"z":[],"z":null}]}',
        '{"id":"a","choices":[{"index":0,"w":[]}],"w":null}',  # the name elsewhere: same result
        '{"id":"a","choices":[],"z":null,"z":1}',
        '{"id":"a","choices":[{"index":0,"message":{"content":"{\\"label\\":\\"a\\",\\"m\\":1,\\"m\\":null}"}}]}',
    ],
)
def test_an_unknown_key_repeated_with_null_last_rescues_as_the_reference(text):
    # A hostile review found "z":1,"z":null rescuing {"z":1}: the scans do not record a null,
    # so the repeat went unseen; the reference (last value wins, nulls are not rescued) gives
    # nothing.
    schema = dspark_json.response_schema(response_format=CONTENT)
    assert_same([text, text], schema)


def _random_value(rng: random.Random, depth: int = 0):
    pick = rng.randrange(8 if depth < 3 else 5)
    if pick == 0:
        return rng.choice([None, True, False])
    if pick == 1:
        return rng.choice([0, -7, 12345678901234, 0.5, -1e-7, 1e300])
    if pick in (2, 3, 4):
        return rng.choice(["", "x", 'q"uote', "b\\ack", "{[,:]}", "é😀", "\n\t", "\u0001"])
    if pick in (5, 6):
        return {_random_key(rng): _random_value(rng, depth + 1) for _ in range(rng.randrange(3))}
    return [_random_value(rng, depth + 1) for _ in range(rng.randrange(3))]


def _random_key(rng: random.Random) -> str:
    return rng.choice(["a", "metadata", "choices[0].x", 'k"q', "k\\b", "é", "{", "", "a.b"])


def test_rescued_keys_are_every_top_level_key_in_the_order_first_met():
    """What the metrics' new_fields and failOnNewColumns read: the keys of every object, by
    one compiled pass, as json.loads reads them; the formats any writer might use."""
    from dspark_json.parse.convert import dump_json
    from dspark_json.parse.json.rescue import rescued_keys

    rng = random.Random(9)
    for _ in range(300):
        objects = [
            {_random_key(rng): _random_value(rng) for _ in range(rng.randrange(4))}
            for _ in range(rng.randrange(1, 6))
        ]
        writers = [
            dump_json,
            json.dumps,
            lambda o: json.dumps(o, indent=1),
            lambda o: " " + json.dumps(o, ensure_ascii=True) + "\n",
        ]
        texts = [rng.choice(writers)(o) if o or rng.random() < 0.5 else None for o in objects]
        texts.append("[1, 2]" if rng.random() < 0.1 else None)  # not an object: no keys
        expected = {}
        for text in texts:
            value = json.loads(text) if text else {}
            expected.update(dict.fromkeys(value if isinstance(value, dict) else ()))
        for array in (
            pa.array(texts, pa.string()),
            pa.chunked_array([pa.array(texts, pa.large_string())]),
        ):
            assert rescued_keys(array) == list(expected), texts
