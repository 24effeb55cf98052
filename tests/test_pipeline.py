"""The source's partition work in process: what it hands to Spark."""

import json

import pyarrow as pa

from dspark_json import pipeline
from dspark_json.source import DSparkJsonDataSource

CONTENT = {"type": "object", "properties": {"n": {"type": "integer"}}}


def _body(n: int) -> str:
    message = {"role": "assistant", "content": json.dumps({"n": n})}
    return json.dumps({"id": f"r{n}", "choices": [{"index": 0, "message": message}]})


def test_a_partition_is_handed_on_in_batches_of_at_most_batch_rows_in_order(tmp_path, monkeypatch):
    """Spark takes a large partition faster in batches of its own size (10,000 rows)."""
    monkeypatch.setattr(pipeline, "SPARK_BATCH_ROWS", 4)
    (tmp_path / "r.jsonl").write_text("".join(_body(n) + "\n" for n in range(10)))
    source = DSparkJsonDataSource(
        {"responses": str(tmp_path), "responseFormat": json.dumps(CONTENT), "parseMode": "cpu"}
    )
    reader = source.reader(source.schema())
    (partition,) = reader.partitions()
    batches = list(reader.read(partition))
    assert [b.num_rows for b in batches] == [4, 4, 2]
    table = pa.Table.from_batches(batches)
    assert table.column("parsed").to_pylist() == [{"n": n} for n in range(10)]
    assert table.column("id").to_pylist() == [f"r{n}" for n in range(10)]
