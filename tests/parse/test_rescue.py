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
    from dspark_json.parse.json.rescue import rescued_keys
    from dspark_json.response.convert import dump_json

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


NESTED_CONTENT = {
    "type": "object",
    "properties": {
        "label": {"type": "string"},
        "meta": {"type": "object", "properties": {"a": {"type": "integer"}}},
        "items": {
            "type": "array",
            "items": {"type": "object", "properties": {"t": {"type": "string"}}},
        },
    },
}


def pruned_schema():
    """A user's narrow schema: the envelope cut to a few columns (as the parser benchmark's
    ``narrow_schema``), so that the server's other fields, at every depth, are drift."""
    from pyspark.sql.types import ArrayType, StructField, StructType

    full = dspark_json.response_schema(response_format=NESTED_CONTENT)

    def kept(struct, *names):
        return StructType([f for f in struct.fields if f.name in names])

    choice = full["choices"].dataType.elementType
    message = kept(choice["message"].dataType, "role", "content")
    choice = kept(
        StructType([StructField(f.name, message) if f.name == "message" else f for f in choice]),
        "index",
        "message",
        "finish_reason",
    )
    usage = kept(full["usage"].dataType, "prompt_tokens")
    replaced = {"choices": ArrayType(choice), "usage": usage}
    top = kept(full, "id", "created", "choices", "usage", "parsed")
    return dspark_json.response_schema(
        schema=StructType([StructField(f.name, replaced.get(f.name, f.dataType)) for f in top])
    )


def drifting_body(rng):
    """A body whose drift sits at every depth: in a choice, in its message, in usage, at the
    top level, in the content and in the content's nested objects and array elements."""
    content = {"label": "x"}
    if rng.random() < 0.5:
        content["meta"] = {"a": 1, "b": rng.choice(["caf\u00e9", 1.25, [1, {"c": None}]])}
    if rng.random() < 0.3:
        content["items"] = [{"z": i} for i in range(rng.randint(0, 2))]
    if rng.random() < 0.2:
        content["extra"] = '\n\t"q"'
    message = {"role": "assistant", "content": json.dumps(content, indent=rng.choice([None, 2]))}
    if rng.random() < 0.5:
        message["reasoning"] = 'think \u00e9 "quoted" \\ ' * rng.randint(1, 3)
    if rng.random() < 0.2:
        message["tool_calls"] = [{"id": "t", "function": {"name": "f", "arguments": "{}"}}]
    choice = {"index": 0, "message": message, "finish_reason": "stop", "logprobs": None}
    if rng.random() < 0.2:
        choice["stop_reason"] = rng.choice([7, "eos"])
    usage = {"prompt_tokens": 3, "completion_tokens": 4}
    if rng.random() < 0.3:
        usage["prompt_tokens_details"] = {"cached_tokens": rng.randint(0, 9)}
    envelope = {"id": "c", "object": "chat.completion", "created": 1767225600, "model": "m"}
    envelope |= {"choices": [choice] * rng.choice([1, 1, 2]), "usage": usage}
    if rng.random() < 0.3:
        envelope["service_tier"] = "default"
    return json.dumps(envelope, ensure_ascii=rng.random() < 0.5)


@pytest.fixture
def in_python(monkeypatch):
    """The rows the CPU parser rescues in Python, in the order it does (counted, not changed)."""
    from dspark_json.parse.rescued import Rescued

    rows = []
    original = Rescued._rescued_in_python

    def counted(self, texts, row, *args, **kwargs):
        rows.append(row)
        return original(self, texts, row, *args, **kwargs)

    monkeypatch.setattr(Rescued, "_rescued_in_python", counted)
    return rows


def test_drift_at_every_depth_is_rescued_in_compiled_code(in_python):
    """Unknown keys below the top level (a message's ``reasoning``, ``usage``'s details, a
    content's nested objects and elements) are written in compiled code, as the reference
    parser writes them: no row is rescued in Python."""
    rng = random.Random(3)
    bodies = [drifting_body(rng) for _ in range(300)]
    out = assert_same(bodies, pruned_schema())
    rescued = [json.loads(r) for r in out.column("_rescued_data").to_pylist() if r]
    keys = {k for r in rescued for k in r}
    assert {
        "choices[0].message.reasoning",
        "choices[1].stop_reason",
        "usage.prompt_tokens_details",
        "usage.completion_tokens",
        "parsed.meta.b",
        "parsed.items[0].z",
        "service_tier",
        "object",
    } <= keys
    assert in_python == []


def test_a_path_written_twice_in_a_row_is_rescued_in_python(in_python):
    """A key that reads like another key's path, or a repeated key below the top level:
    Python's dict keeps one entry, so the row is rescued in Python, as the reference does."""
    schema = pruned_schema()
    nested = '"usage": {"prompt_tokens": 1, "prompt_tokens_details": {"cached_tokens": 1}}'
    bodies = [
        body('{"label": "x"}', **{"usage.prompt_tokens_details": "2"})[:-1] + ", " + nested + "}",
        body('{"label": "x", "meta": {"b": 1, "b": 2}}'),
        body('{"label": "x", "meta": {"b": 1}}', **{"parsed.meta.b": "3"}),
        body('{"label": "x", "meta": {"b": 1, "\\u0062": 2}}'),  # two spellings of one key
    ]
    assert_same(bodies, schema)
    assert {0, 1, 2} <= set(in_python)  # the last row: the reference parser's (an escaped key)


def test_a_key_beside_the_first_choices_parsed_is_rescued_not_dropped():
    """The first choice's content is rescued once, under ``parsed``: only keys at or under
    ``choices[0].message.parsed`` are left out, not a message key that begins with the same
    letters (``parsed_note`` was dropped by the reference parser, kept by the kernels)."""
    schema = dspark_json.response_schema(response_format=CONTENT)
    envelope = json.loads(body('{"label": "a", "extra": 1}'))
    envelope["choices"][0]["message"]["parsed_note"] = "x"
    bodies = [json.dumps(envelope)]
    assert_same(bodies, schema)
    rescued = json.loads(ReferenceParser(schema).parse(bodies).column("_rescued_data")[0].as_py())
    assert rescued == {"choices[0].message.parsed_note": "x", "parsed.extra": 1}


def test_a_parsed_rescue_scope_gathers_the_answers_keys_alone():
    """Rescue scope ``parsed`` (the pipeline's where the output has no ``_rescued_data``): the
    other columns and the misfits found are those of scope ``all``; a row whose answer rescues
    nothing rescues nothing (its envelope's unknown keys are not gathered), and the keys under
    ``parsed`` are those of ``all``."""
    from dspark_json.schema.fit import find_misfits

    content = {
        "type": "object",
        "properties": {"label": {"type": "string"}, "score": {"type": "integer"}},
    }
    schema = dspark_json.response_schema(response_format=content)
    usage = '{"prompt_tokens": 3, "details": {"cached": 1}}'
    bodies = [
        body('{"label": "x", "score": 1}', reasoning='"why"', usage_more=usage),  # envelope only
        body('{"label": "x", "score": 1}'),  # nothing to rescue
        body('{"label": "x", "score": "high"}', reasoning='"why"'),  # a misfit value
        body('{"label": "x", "more": [1, {"a": 2}]}', reasoning='"why"'),  # answer drift
        body('{"label": "x", "deep": {"a": {"b": {"c": {"d": 1}}}}}', extra="[1]"),
        body(['{"label": "x"}', '{"z": 1}'], extra="2"),  # a second choice
        body("not json", extra="2"),
        None,
    ]
    whole = CpuParser(schema).parse(bodies)
    scoped = CpuParser(schema, rescue="parsed").parse(bodies)
    others = [name for name in whole.column_names if name != "_rescued_data"]
    assert scoped.select(others).equals(whole.select(others))

    def under_parsed(text):
        kept = {k: v for k, v in json.loads(text or "{}").items() if k.startswith("parsed")}
        return kept or None

    rescued = scoped.column("_rescued_data").to_pylist()
    assert rescued[0] is None  # the envelope's keys alone: not gathered
    assert [under_parsed(t) for t in rescued] == [
        under_parsed(t) for t in whole.column("_rescued_data").to_pylist()
    ]
    parsed = schema["parsed"].dataType
    found = find_misfits(scoped.column("_rescued_data"), parsed)
    assert found == find_misfits(whole.column("_rescued_data"), parsed)
    assert list(found) == [2]
