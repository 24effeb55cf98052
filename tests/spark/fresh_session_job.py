"""A job in a fresh Spark session with no ``dspark_json.register(spark)``: the formats come from
Spark's own lookup of installed ``pyspark_*`` modules (pyspark_dspark_json.py,
pyspark_dspark_delta.py). Run by tests/spark/test_fresh_session.py, which reads its stdout (one
JSON object) and its stderr (the Python workers' log lines).

    python tests/spark/fresh_session_job.py URL WORK
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from dspark_json.dev.local import local_spark
from tests.helpers import REVIEW_SCHEMA, write_prompts

CANARY = "sk-zqCanary7pw"
WRONG_TYPES = "custom_id STRING, parsed STRUCT<sentiment: INT, score: DOUBLE>, _status STRING"


def main(url: str, work: Path) -> dict[str, object]:
    spark = local_spark("dspark-json fresh session")
    prompts = work / "in"
    write_prompts(prompts, "a.jsonl", [{"custom_id": f"r{i}", "prompt": f"p{i}"} for i in range(4)])
    source = (
        spark.read.format("dspark-json")
        .option("endpoint", url)
        .option("prompts", str(prompts))
        .option("responseFormat", json.dumps(REVIEW_SCHEMA))
    )
    out: dict[str, object] = {}
    try:
        source.schema("custom_id STRING, sentiment STRING, score DOUBLE").load().collect()
    except Exception as exc:
        out["flat"] = str(exc)
    rows = source.option("apiKey", CANARY).schema(WRONG_TYPES).load().collect()
    out["wrong_types"] = [[r._status, r.parsed.sentiment, r.parsed.score] for r in rows]
    table = str(work / "table")
    written = spark.createDataFrame(
        [("r0", "ok"), ("r1", "ok")], "custom_id STRING, _status STRING"
    )
    written.write.format("dspark-delta").mode("append").save(table)
    read = spark.read.format("dspark-delta").load(table).where("custom_id = 'r1'").collect()
    out["delta"] = [r.custom_id for r in read]
    spark.stop()
    return out


if __name__ == "__main__":
    sys.stdout.write(json.dumps(main(sys.argv[1], Path(sys.argv[2]))) + "\n")
