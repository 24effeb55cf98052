import json
from datetime import UTC, datetime

import pyarrow as pa
from deltalake import DeltaTable

from dspark_json.delta import _DeltaBatchWriter


class ArrowBatch:
    """What foreachBatch hands the writer, reduced to the one method it calls."""

    def __init__(self, table: pa.Table) -> None:
        self.table = table
        self.materialised = 0

    def toArrow(self) -> pa.Table:  # Spark's name
        self.materialised += 1
        return self.table


def test_a_replayed_batch_id_is_committed_once(tmp_path):
    checkpoint = tmp_path / "_ckpt"
    checkpoint.mkdir()
    (checkpoint / "metadata").write_text(json.dumps({"id": "query-1"}))
    tz = "America/New_York"
    table = pa.table(
        {
            "custom_id": ["a", "b"],
            "created": pa.array([datetime(2026, 1, 1, tzinfo=UTC)] * 2, pa.timestamp("us", tz=tz)),
            "parsed": pa.array(
                [{"at": datetime(2026, 1, 1, tzinfo=UTC)}] * 2,
                pa.struct([("at", pa.timestamp("us", tz=tz))]),
            ),
        }
    )
    writer = _DeltaBatchWriter(str(tmp_path / "table"), str(checkpoint))
    first = ArrowBatch(table)
    writer(first, 0)
    replay = ArrowBatch(table)
    writer(replay, 0)
    writer(ArrowBatch(table), 1)
    delta = DeltaTable(str(tmp_path / "table"))
    assert delta.to_pyarrow_table().num_rows == 4
    assert delta.transaction_version("dspark-json:query-1") == 1
    assert first.materialised == 1 and replay.materialised == 0
    schema = delta.to_pyarrow_table().schema
    assert schema.field("created").type == pa.timestamp("us", tz="UTC")
    assert schema.field("parsed").type.field("at").type == pa.timestamp("us", tz="UTC")


def test_partition_columns_are_kept(tmp_path):
    checkpoint = tmp_path / "_ckpt"
    checkpoint.mkdir()
    (checkpoint / "metadata").write_text(json.dumps({"id": "query-2"}))
    table = pa.table({"custom_id": ["a", "b", "c"], "lang": ["en", "de", "en"]})
    writer = _DeltaBatchWriter(str(tmp_path / "table"), str(checkpoint), ["lang"])
    writer(ArrowBatch(table), 0)
    delta = DeltaTable(str(tmp_path / "table"))
    assert delta.metadata().partition_columns == ["lang"]
    assert sorted((tmp_path / "table").glob("lang=*")) == [
        tmp_path / "table" / "lang=de",
        tmp_path / "table" / "lang=en",
    ]
