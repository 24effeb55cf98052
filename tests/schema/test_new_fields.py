"""new_fields: the drift keys of a ``_rescued_data`` column (the metrics' ``new_fields`` and
``schemaEvolutionMode=failOnNewColumns``)."""

import json
import random

import pyarrow as pa
import pytest

from dspark_json.parse import new_fields
from dspark_json.response.envelope import is_documented_extra


def _in_python(texts):
    return {k for t in texts if t for k in json.loads(t) if not is_documented_extra(k)}


@pytest.mark.parametrize(
    ("texts", "expected"),
    [
        ([None, None], set()),
        ([], set()),
        (
            ['{"metadata":{"a":1}}', None, '{"parsed.x":1.5,"metadata":{"a":2}}'],
            {"metadata", "parsed.x"},
        ),
        (
            ['{"prompt_token_ids":[1,2]}', '{"choices[1].token_ids":[3]}', '{"k\\nq":"v"}'],
            {"k\nq"},  # documented extras (any choice) are not drift
        ),
        # one key's values of different types, nested arrays of mixed types, a huge number
        (['{"a":{"b":1}}', '{"a":"text"}', '{"c":[1,"x"]}', '{"d":1e400}'], {"a", "c", "d"}),
        (
            ['{"é😀":null}', '{"":0}', '{"x":"line\\u2028"}', '{"a\\u0062":1}'],
            {"é😀", "", "x", "ab"},
        ),
    ],
)
def test_new_fields_are_the_keys_python_reads(texts, expected):
    assert new_fields(pa.array(texts, pa.string())) == expected == _in_python(texts)


def test_new_fields_of_a_chunked_sliced_column_with_many_rows():
    rng = random.Random(7)
    keys = ["metadata", "parsed.notes", "prompt_logprobs", "choices[2].audio", "x.y", "z"]
    texts = [
        None if rng.random() < 0.3 else json.dumps({k: rng.random() for k in rng.sample(keys, 2)})
        for _ in range(5000)
    ]
    column = pa.chunked_array([pa.array(texts[:2000]), pa.array(texts[2000:])]).slice(10)
    assert new_fields(column) == _in_python(texts[10:])
    assert new_fields(column) >= {"metadata", "z"}


def test_new_fields_of_many_distinct_keys():
    """Found by a hostile review: reading the objects as one table (pyarrow's JSON reader)
    costs rows x distinct keys (16,000 invented keys: 12 s and 2.8 GB)."""
    texts = [json.dumps({f"parsed.k{i}": "v", "metadata": i}) for i in range(20_000)]
    assert new_fields(pa.array(texts)) == {f"parsed.k{i}" for i in range(20_000)} | {"metadata"}
