"""A fresh Spark session without ``dspark_json.register(spark)``: Spark registers both formats
by itself (pyspark_dspark_json.py, pyspark_dspark_delta.py); a schema that would lose answers
fails before any prompt is sent, naming the fix; answers that do not fit ``parsed``'s types are
``schema_mismatch`` rows with one WARN; an API key passed without register gets one WARN. One
process (tests/spark/fresh_session_job.py), one JVM, for all of it."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.spark.fresh_session_job import CANARY

pytestmark = pytest.mark.spark

JOB = Path(__file__).with_name("fresh_session_job.py")
ROOT = Path(__file__).resolve().parents[2]


def test_a_fresh_session_reads_and_writes_without_register(simulator, tmp_path):
    sent = simulator.stats().get("chat_completions", 0)
    environment = {**os.environ, "PYTHONPATH": str(ROOT)}  # Spark's lookup scans sys.path
    environment.pop("PYSPARK_PYTHON", None)
    done = subprocess.run(
        [sys.executable, str(JOB), simulator.url, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env=environment,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.splitlines()[-1])
    log = done.stderr
    # The flat schema a Spark user writes first: refused, naming the columns and the fix.
    assert (
        "sentiment (a field of the answers' JSON is in column parsed: parsed.sentiment)"
        in (out["flat"])
    )
    assert (
        'Write .schema("custom_id STRING, parsed STRUCT<sentiment: STRING, score: DOUBLE>'
        in (out["flat"])
    )
    assert simulator.stats().get("chat_completions", 0) == sent + 4  # only the second read sent any
    # A parsed type that does not fit: every row says so; one WARN names field, type, value.
    assert all(status == "schema_mismatch" for status, _, _ in out["wrong_types"])
    assert all(
        sentiment is None and score is not None for _, sentiment, score in out["wrong_types"]
    )
    mismatch = [
        line for line in log.splitlines() if "Answers do not fit the type of `parsed`" in line
    ]
    assert len(mismatch) == 1, log[-3000:]
    assert 'parsed.sentiment is int, the answer holds "' in mismatch[0]
    # apiKey without register: one WARN that Spark shows it in plans; never the key itself.
    unredacted = [line for line in log.splitlines() if "hold a secret" in line]
    assert len(unredacted) == 1 and "dspark_json.register(spark)" in unredacted[0], log[-3000:]
    assert CANARY not in log
    # dspark-delta: written and read back (filters applied by Spark, no pushdown needed).
    assert out["delta"] == ["r1"]
