import json
import pickle
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.sql.types import StringType, StructField, StructType

import dspark_json
from dspark_json.delta.sink import DeltaSink
from dspark_json.options import Options, Query
from dspark_json.source import DSparkJsonDataSource

#: What Spark's planning and commit workers (a Python process per call: schema, partitions,
#: latestOffset, commit) need not import: the parser (numba), the HTTP client, jsonschema,
#: Delta's writer, the pipeline (issue 55: imports were 92% of those processes' time).
PLANNING_NEEDS_NONE_OF = (
    "numba",
    "httpx",
    "jsonschema",
    "asyncio",
    "pyarrow.compute",
    "pyarrow.parquet",
    "dspark_json.parse",
    "dspark_json.pipeline",
    "dspark_json.load",
    "dspark_json.http.client",
)


def _modules_after(code: str) -> set[str]:
    """The modules a fresh interpreter holds after running ``code``."""
    probe = f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    run = [sys.executable, "-c", probe]
    out = subprocess.run(run, check=False, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-3000:]
    return set(json.loads(out.stdout.splitlines()[-1]))


def test_import_leaves_gpu_modules_and_deltalake_unimported():
    loaded = _modules_after("import dspark_json")
    for heavy in ("cudf", "cupy", "rmm", "numba.cuda", "deltalake"):
        assert heavy not in loaded, f"import dspark_json imported {heavy}"


@pytest.mark.parametrize(
    "module",
    [
        "dspark_json",
        "dspark_json.source",
        "dspark_json.delta.sink",
        "pyspark_dspark_json",
        "pyspark_dspark_delta",
    ],
)
def test_what_a_planning_worker_unpickles_imports_no_parser_nor_http_client(module):
    loaded = _modules_after(f"import {module}")
    assert module in loaded
    assert sorted(loaded & set(PLANNING_NEEDS_NONE_OF)) == []


def test_the_package_imports_an_export_on_first_use_and_lists_it():
    loaded = _modules_after(
        "import dspark_json\n"
        "assert 'DSparkJsonDataSource' in dir(dspark_json)\n"
        "assert dspark_json.parse_responses.__module__ == 'dspark_json.bodies'"
    )
    assert "dspark_json.bodies" in loaded
    assert set(dspark_json.__all__) <= set(dir(dspark_json))
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        getattr(dspark_json, "nothing")  # noqa: B009  (a name no module defines)


def _pickled(tmp_path: Path, name: str, value: object) -> Path:
    path = tmp_path / name
    path.write_bytes(pickle.dumps(value))
    return path


def test_a_streams_planning_calls_import_no_parser_nor_http_client(tmp_path):
    """The source as Spark's planning workers get it (pickled, the query settled by the driver's
    ``schema()``): ``streamReader``, ``latestOffset``, ``partitions``, ``commit`` and a batch
    read's ``partitions``, each as a fresh process would run it."""
    prompts = tmp_path / "prompts"
    prompts.mkdir()
    (prompts / "a.jsonl").write_text('{"prompt": "one"}\n{"prompt": "two"}\n')
    options = {
        "endpoint": "http://127.0.0.1:9",  # never contacted
        "model": "m",
        "prompts": str(prompts),
        "journal": str(tmp_path / "journal"),
    }
    source = DSparkJsonDataSource(options)
    schema = StructType([StructField("content", StringType())])
    source.__dict__["_query"] = Query(options=Options.parse(options), model="m")
    source.__dict__["_resolved_schema"] = schema
    pickled = _pickled(tmp_path, "source.pickle", (source, schema))
    code = f"""
import pickle
source, schema = pickle.loads(open({str(pickled)!r}, "rb").read())
reader = source.streamReader(schema)
end = reader.latestOffset(reader.initialOffset(), reader.getDefaultReadLimit())
parts = reader.partitions(reader.initialOffset(), end)
assert sum(p.rows for p in parts) == 2, parts
reader.commit(end)
assert source.reader(schema).partitions()
"""
    loaded = _modules_after(code)
    assert sorted(loaded & set(PLANNING_NEEDS_NONE_OF)) == []


def test_the_sinks_commit_imports_no_parser_nor_http_client(tmp_path):
    """A micro-batch's commit as Spark's commit worker runs it: the writer and the tasks'
    messages unpickled, ``commit`` (deltalake's, on use)."""
    checkpoint = tmp_path / "cp"
    checkpoint.mkdir()
    (checkpoint / "metadata").write_text('{"id": "a-query-id"}\n')  # as Spark writes it
    options = {"path": str(tmp_path / "table"), "checkpointLocation": str(checkpoint)}
    schema = StructType([StructField("content", StringType())])
    writer = DeltaSink(options).streamWriter(schema, False)
    batch = pa.record_batch({"content": ["a", "b"]})
    message = writer.write(iter([batch]))
    pickled = _pickled(tmp_path, "commit.pickle", (writer, [message]))
    code = f"""
import pickle
writer, messages = pickle.loads(open({str(pickled)!r}, "rb").read())
writer.commit(messages, 0)
from deltalake import DeltaTable
table = DeltaTable({str(tmp_path / "table")!r})
assert (table.version(), len(table.file_uris())) == (0, 1)
"""
    loaded = _modules_after(code)
    assert "deltalake" in loaded  # the commit ran
    assert sorted(loaded & {"numba", "httpx", "jsonschema", "dspark_json.parse"}) == []


def test_a_task_without_reasks_or_validation_imports_no_jsonschema():
    """A task worker imports the pipeline; jsonschema (and the re-asks that use it) only where
    options repairAttempts or validateSchema ask (issue 55: a worker's start-up)."""
    loaded = _modules_after("import dspark_json.pipeline")
    assert "dspark_json.pipeline" in loaded
    for lazy in ("jsonschema", "dspark_json.reask.rounds", "dspark_json.schema.validation"):
        assert lazy not in loaded, f"import dspark_json.pipeline imported {lazy}"
