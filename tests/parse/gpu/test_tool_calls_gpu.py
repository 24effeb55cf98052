"""The GPU backend's tool calls without a GPU: the arguments' fit decided by the device kernel
(numba's CUDA simulator here, conftest.py), read by the stub reader; the table is the reference
parser's, row for row."""

import random

from dspark_json.parse.gpu.parser import GpuParser
from dspark_json.parse.reference import ReferenceParser
from tests.parse.gpu.stub import StandInLines
from tests.parse.test_tool_calls import SCHEMA, body, random_body


def test_tool_calls_on_the_gpu_backend_equal_the_reference():
    rng = random.Random(3)
    bodies = [random_body(rng) for _ in range(40)]
    bodies.append(body(("get_weather", '{"city": "Oslo", "days": 2, "wind": 1}')))
    table = GpuParser(SCHEMA, lines=StandInLines()).parse(bodies)
    want = ReferenceParser(SCHEMA).parse(bodies)
    assert repr(table.to_pylist()) == repr(want.to_pylist())
