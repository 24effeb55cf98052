"""Issue 53 end to end: a server whose /metrics says +Inf (option maxServerQueue) and a shared
cache whose ``_claims`` is a symbolic link to a home-like directory. Before, the query died
with 0 of 12 rows (the gate's floor was NaN), and every task's sweep deleted the dotfiles and
``*.lease`` files where the link points while the query said all rows were ok."""

import json

import pytest
from deltalake import DeltaTable

import dspark_json
from tests.helpers import home_like, write_prompts
from tests.raw_servers import gauges_server, raw_server

pytestmark = pytest.mark.spark

INF_METRICS = (
    'vllm:num_requests_waiting{engine="0",model_name="m"} 0\n'
    'vllm:num_requests_running{engine="0",model_name="m"} +Inf\n'
    'vllm:kv_cache_usage_perc{engine="0",model_name="m"} +Inf\n'
)
server = gauges_server(INF_METRICS, json.dumps({"answer": "ok"}))


def test_an_inf_gauge_and_a_symlinked_claims_folder_lose_no_row_and_no_file(spark, tmp_path):
    home = tmp_path / "home"
    kept = home_like(home)
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "_claims").symlink_to(home)
    rows = [{"custom_id": f"h{i:02d}", "prompt": f"hostile {i}"} for i in range(12)]
    write_prompts(tmp_path / "in", "a.jsonl", rows)
    with raw_server(server) as model:
        reader = (
            spark.readStream.format("dspark-json")
            .option("endpoint", model.url)
            .option("model", "m")
            .option("prompts", str(tmp_path / "in"))
            .option("maxServerQueue", "2")
            .option("cache", str(cache))
            .option("requestDeadline", "30")
            .option("partitionSize", "6")
        )
        query = dspark_json.write_delta(
            reader.load(),
            str(tmp_path / "out"),
            checkpoint=str(tmp_path / "checkpoint"),
            trigger={"availableNow": True},
        )
        query.awaitTermination()
        metrics_read = model.paths().count("/metrics")
    assert query.exception() is None
    table = DeltaTable(str(tmp_path / "out")).to_pyarrow_table().to_pylist()
    assert sorted(r["custom_id"] for r in table) == [r["custom_id"] for r in rows]
    assert all(r["_status"] == "ok" for r in table)
    assert metrics_read > 0  # the gate read the +Inf gauges
    assert sorted(p.name for p in home.iterdir()) == sorted(p.name for p in kept)
