"""One line per micro-batch on the driver, from the metrics records its tasks wrote: the stream
reader's own methods driven as Spark drives them (driver: offsets, partitions, commit, stop;
"executor": read), against a real simulator process."""

import json
import logging
import shutil

import pytest

from dspark_json.cli import main
from dspark_json.compat import ADMISSION_CONTROL
from dspark_json.dev.local import SimulatorProcess
from dspark_json.metrics import METRICS_SCHEMA, read_records, summary
from dspark_json.source import DSparkJsonDataSource
from tests.helpers import write_prompts


def stream_reader(url, tmp_path, **more):
    options = {
        "endpoint": url,
        "prompts": str(tmp_path / "in"),
        "metrics": str(tmp_path / "metrics"),
        "responseFormat": json.dumps({"type": "object", "properties": {"w": {"type": "string"}}}),
        "maxRecordsPerTrigger": "6",
        "partitionSize": "3",
        **more,
    }
    source = DSparkJsonDataSource(options)
    return source.streamReader(source.schema())


def nine_prompts(tmp_path):
    """Nine prompts in one input file: two micro-batches of at most 6 rows."""
    rows = [{"custom_id": f"c{i:02d}", "prompt": f"Say {i}"} for i in range(9)]
    write_prompts(tmp_path / "in", "a.jsonl", rows)


def latest(reader, start):
    """``latestOffset`` as the Spark in use calls it (4.0 and 4.1: no start, no limit)."""
    if ADMISSION_CONTROL:
        return reader.latestOffset(start, reader.getDefaultReadLimit())
    return reader.latestOffset()


def run_batch(reader, start):
    end = latest(reader, start)
    for partition in reader.partitions(start, end):
        for _ in reader.read(partition):
            pass
    return end


def test_each_micro_batch_gets_one_line_and_its_records_carry_the_batch_id(
    simulator, tmp_path, caplog, capsys
):
    caplog.set_level(logging.INFO, logger="dspark_json")
    nine_prompts(tmp_path)
    reader = stream_reader(simulator.url, tmp_path)
    first = run_batch(reader, reader.initialOffset())
    reader.commit(first)  # Spark tells the source a batch is done
    lines = [r.getMessage() for r in caplog.records if r.name == "dspark_json.batches"]
    assert lines[-1].startswith("batch 0: 6 rows (ok 6); 0 with errors, 0 with rescued data; ")
    assert "6 requests, 0 retries; tokens " in lines[-1] and "latency p95 " in lines[-1]
    assert "parsed on cpu in " in lines[-1] and "(2 partition(s))" in lines[-1]

    # A restart: a new reader takes up the count from the checkpointed offset (Spark gives a
    # source no batch id).
    again = stream_reader(simulator.url, tmp_path)
    if not ADMISSION_CONTROL:  # Spark 4.0 and 4.1 plan an empty range at the checkpoint first
        assert again.partitions(first, first) == []
    second = run_batch(again, first)
    again.stop()  # the last batch before a stop is never committed to the source
    lines = [r.getMessage() for r in caplog.records if r.name == "dspark_json.batches"]
    assert lines[-2].startswith("batch 1: 3 rows (ok 3); ")
    # At the stop, the whole run's line: this reader's run, of one batch.
    assert lines[-1].startswith("run of 1 batch(es): 3 rows (ok 3); ")

    records = read_records(str(tmp_path / "metrics"))
    assert sorted(r["batch"] for r in records) == [0, 0, 1]
    assert {json.dumps(r["offset"], sort_keys=True) for r in records} == {
        json.dumps(first, sort_keys=True),
        json.dumps(second, sort_keys=True),
    }
    assert all(r["label"] is None for r in records)

    # The same lines for a finished run, from the command line.
    assert main(["metrics", str(tmp_path / "metrics")]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in printed[:3]] == ["batch 0", "batch 1", "all 2 batches"]
    assert printed[0] == next(line for line in lines if line.startswith("batch 0"))
    assert printed[2].startswith("all 2 batches: 9 rows (ok 9); ")
    # Then the progress of the last run (the restarted reader's: batch 1), finished.
    assert printed[3].startswith("[") and "3/3 prompts" in printed[3]
    assert "finished" in printed[3]


def test_batch_ids_survive_a_restart_and_a_replay_without_the_metrics_records(
    simulator, tmp_path, caplog
):
    """The count is held by the offsets Spark checkpoints, not rebuilt from option 'metrics'
    (an optional output): its records gone, a restarted reader still numbers on, and a batch
    planned again keeps its id."""
    caplog.set_level(logging.INFO, logger="dspark_json")
    nine_prompts(tmp_path)
    reader = stream_reader(simulator.url, tmp_path)
    start = reader.initialOffset()
    first = run_batch(reader, start)
    reader.commit(first)
    assert first["batches"] == 1
    shutil.rmtree(tmp_path / "metrics")  # the optional output gone (or never there)
    (tmp_path / "metrics").mkdir()

    again = stream_reader(simulator.url, tmp_path)
    if not ADMISSION_CONTROL:  # Spark 4.0 and 4.1 plan an empty range at the checkpoint first
        assert again.partitions(first, first) == []
    for partition in again.partitions(start, first):  # batch 0 replayed after the restart
        for _ in again.read(partition):
            pass
    second = run_batch(again, first)
    again.stop()
    assert second["batches"] == 2
    records = read_records(str(tmp_path / "metrics"))
    assert sorted(r["batch"] for r in records) == [0, 0, 1]
    lines = [r.getMessage() for r in caplog.records if r.name == "dspark_json.batches"]
    assert [line.split(":")[0] for line in lines] == [
        "batch 0",
        "batch 0",
        "batch 1",
        "run of 2 batch(es)",
    ]
    # Nothing new: the same offset, so Spark runs no batch.
    assert latest(again, second) == second


def test_help_is_plain_text_and_lists_every_command(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    text = capsys.readouterr().out
    assert "``" not in text
    for command in ("simulate", "demo", "schema", "metrics"):
        assert command in text.split("positional arguments")[1]
    assert main(["metrics", "/nonexistent/metrics"]) == 2
    assert "no metrics records in /nonexistent/metrics" in capsys.readouterr().err


@pytest.mark.spark
def test_records_read_back_with_maps_as_maps(spark, simulator, tmp_path):
    write_prompts(tmp_path / "in", "a.jsonl", [{"custom_id": "x", "prompt": "Hi"}])
    reader = stream_reader(simulator.url, tmp_path)
    run_batch(reader, reader.initialOffset())
    m = spark.read.schema(METRICS_SCHEMA).json(str(tmp_path / "metrics"))
    types = dict(m.dtypes)
    assert types["batch"] == "bigint"
    assert types["http_status"] == types["rows"] == "map<string,bigint>"
    (record,) = m.collect()
    assert record.batch == 0 and record.rows == {"ok": 1} and record.http_status == {"200": 1}
    assert record.offset.file == "a.jsonl" and record.offset.row == 1


def test_what_is_missing_is_said_once_per_run_by_the_process_that_drives_the_batches(
    simulator, tmp_path, caplog
):
    caplog.set_level(logging.INFO, logger="dspark_json")
    write_prompts(tmp_path / "in", "a.jsonl", [{"custom_id": "x", "prompt": "Hi"}])
    options = {"endpoint": simulator.url, "prompts": str(tmp_path / "in")}
    source = DSparkJsonDataSource(options)
    reader = source.streamReader(source.schema())  # also built where Spark plans: says nothing
    assert "without option 'journal'" not in caplog.text
    for _ in range(2):
        latest(reader, reader.initialOffset())
    assert caplog.text.count("Streaming without option 'journal'") == 1
    assert caplog.text.count("No line per micro-batch: set option 'metrics'") == 1


def test_the_line_counts_the_re_asks_and_the_reference_parser_rows_where_there_are_any():
    def record(**parts):
        return {"rows": {"ok": 2}, "requests": 2, "backend": "cpu", "parse_seconds": 0.01} | parts

    def repair(reasks, fixed, over_budget=0):
        return {
            "reasks": reasks,
            "rows": reasks,
            "fixed": fixed,
            "prompt_tokens": 30 * reasks,
            "completion_tokens": 10 * reasks,
            "budget": None,
            "over_budget": over_budget,
        }

    plain = [record(), record(repair=None, reference_rows=None, reference_reasons=None)]
    assert "re-asked" not in summary(plain, "b") and "row by row" not in summary(plain, "b")
    line = summary(
        [
            record(repair=repair(2, 1), reference_rows=3, reference_reasons={"content_misfit": 3}),
            record(
                repair=repair(1, 1, over_budget=2),
                reference_rows=2,
                reference_reasons={"content_misfit": 1, "values_to_convert": 1},
            ),
            record(repair=None),
        ],
        "batch 4",
    )
    assert (
        "tokens 0 in, 0 out; re-asked 3 (fixed 2, tokens 90 in / 30 out, 2 over budget); " in line
    )
    assert line.endswith(
        "(3 partition(s)); 5 rows parsed row by row (content_misfit 4, values_to_convert 1)"
    )
    shared = [record(repair=repair(1, 1) | {"budget": b}) for b in (203, 200, 100)]
    shared[0]["repair"]["over_budget"] = 4
    assert "out of a budget of 503, 4 over budget)" in summary(shared, "b")  # the batch's
    # A server without usage: what the budget counted is said to be estimated (issue 45).
    bare = [record(repair=repair(1, 0) | {"budget": 1, "spent_tokens": 90, "estimated_tokens": 90})]
    assert (
        "out of a budget of 1 (90 counted, 90 of them estimated from the answers' length: no "
        "usage reported))" in summary(bare, "b")
    )
    alone = summary([record(repair=repair(1, 0), reference_rows=1)], "b")
    assert "re-asked 1 (fixed 0, tokens 30 in / 10 out); " in alone
    assert alone.endswith("; 1 rows parsed row by row")
    # A new worker's first seconds are said as what they are, not as a fault of the fast path.
    warming = summary(
        [record(reference_rows=3, reference_reasons={"kernels_compiling": 3})], "batch 0"
    )
    assert warming.endswith("; 3 rows parsed row by row (3 while a new worker's kernels compiled)")
    assert "reference parser" not in warming and "kernels_compiling" not in warming


def test_the_line_says_how_many_cache_hits_another_task_was_sending():
    def record(hits, misses, waits):
        return {"rows": {"ok": 2}, "requests": misses, "cache_hits": hits} | {
            "cache_misses": misses,
            "cache_waits": waits,
        }

    assert "cache 5 hit(s) (4 waited for) / 3 miss(es)" in summary(
        [record(2, 1, 1), record(3, 2, 3)], "b"
    )
    assert "cache 2 hit(s) / 1 miss(es)" in summary([record(2, 1, 0)], "b")


def test_the_line_counts_rows_deduplicated_and_cache_hits(simulator, tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="dspark_json")
    # Two tasks of 3 rows asking two prompts at temperature 0: the first task sends 2 requests
    # for 3 rows; the second (run after it here) finds both answers in the cache.
    rows = [{"custom_id": f"d{i:02d}", "prompt": f"Dedupe {i % 2}"} for i in range(6)]
    write_prompts(tmp_path / "in", "a.jsonl", rows)
    before = simulator.stats().get("chat_completions", 0)
    reader = stream_reader(simulator.url, tmp_path, temperature="0", cache=str(tmp_path / "c"))
    reader.commit(run_batch(reader, reader.initialOffset()))
    lines = [r.getMessage() for r in caplog.records if r.name == "dspark_json.batches"]
    assert lines[-1].startswith("batch 0: 6 rows (ok 6); ")
    assert (
        "; 2 requests, 0 retries, 2 row(s) deduplicated, cache 2 hit(s) / 2 miss(es); tokens "
        in lines[-1]
    )
    assert simulator.stats()["chat_completions"] - before == 2
    records = read_records(str(tmp_path / "metrics"))
    assert sorted((r["deduplicated"], r["cache_hits"], r["cache_misses"]) for r in records) == [
        (1, 0, 2),
        (1, 2, 0),
    ]


def test_the_line_breaks_the_figures_down_by_model_only_where_several_are_in_play(
    simulator, tmp_path
):
    write_prompts(tmp_path / "in", "a.jsonl", [{"custom_id": "x", "prompt": "Hi"}])
    reader = stream_reader(simulator.url, tmp_path)
    run_batch(reader, reader.initialOffset())
    (record,) = read_records(str(tmp_path / "metrics"))
    assert record["models"] is None  # one model: the record and the line stay short
    assert "by model" not in summary([record], "batch 0")

    def part(alpha_p95, beta_rows):
        figures = {"prompt_tokens": 10, "completion_tokens": 5}
        return record | {
            "models": {
                "alpha": {"rows": 2, "requests": 3, "latency_p95_ms": alpha_p95, **figures},
                "beta": {"rows": beta_rows, "requests": 0, "latency_p95_ms": None, **figures},
            }
        }

    line = summary([part(12.0, 1), part(30.4, 2)], "batch 0")
    assert line.endswith(
        "; by model: alpha 4 rows, 6 requests, tokens 20 in / 10 out, p95 30 ms; "
        "beta 3 rows, 0 requests, tokens 20 in / 10 out, no latency measured"
    )


def test_a_batch_whose_records_land_late_gets_its_line_later(simulator, tmp_path, caplog):
    """The driver looked for a batch's records before they were there: its line used to be
    dropped for good; it is logged at a later call once they are."""
    caplog.set_level(logging.INFO, logger="dspark_json")
    nine_prompts(tmp_path)
    reader = stream_reader(simulator.url, tmp_path)
    start = reader.initialOffset()
    first = latest(reader, start)
    partitions = reader.partitions(start, first)
    reader.commit(first)  # the driver looks before any task wrote its record
    lines = [r.getMessage() for r in caplog.records if r.name == "dspark_json.batches"]
    assert not [line for line in lines if line.startswith("batch 0")]
    for partition in partitions:
        for _ in reader.read(partition):
            pass
    reader.stop()
    lines = [r.getMessage() for r in caplog.records if r.name == "dspark_json.batches"]
    assert [line for line in lines if line.startswith("batch 0: 6 rows (ok 6)")]


def test_the_by_model_line_quotes_odd_names_and_names_ten_models_at_most():
    from dspark_json.metrics import _models_line

    def figures(rows):
        return {"rows": rows, "requests": rows, "prompt_tokens": 1, "completion_tokens": 1}

    odd = "evil\nbatch 9: 0 rows; x"
    line = _models_line([{"models": {"Qwen/Qwen3-8B": figures(2), odd: figures(1)}}])
    assert "\n" not in line and "Qwen/Qwen3-8B 2 rows" in line
    assert repr(odd) + " 1 rows" in line
    many = {f"m{i:02d}": figures(i) for i in range(25)}
    line = _models_line([{"models": many}])
    assert line.count(" rows, ") == 10 and line.endswith("; 15 more model(s)")
    assert line.startswith("; by model: m24 24 rows")  # the most rows first
    long = "x" * 200 + " y"
    cut = _models_line([{"models": {long: figures(1), "b": figures(1)}}])
    assert "'" + "x" * 77 + "...' 1 rows" in cut and "x" * 78 not in cut


def test_a_url_like_model_s_credentials_are_masked_in_the_line_and_the_records(tmp_path, caplog):
    """A prompt line's model named like a URL with user:password@ and a token=: the batch line
    and the metrics records show it masked (the driver's line is logged by a child logger,
    which the filter on logger 'dspark_json' does not cover)."""
    caplog.set_level(logging.INFO, logger="dspark_json")
    secret = "https://alice:hunter22@models.example/m?token=tok987654"
    rows = [{"custom_id": "a", "prompt": "Hi", "model": secret}, {"custom_id": "b", "prompt": "Yo"}]
    write_prompts(tmp_path / "in", "a.jsonl", rows)
    with SimulatorProcess(model=f"dspark-sim,{secret}") as server:
        reader = stream_reader(server.url, tmp_path, model="dspark-sim")
        reader.commit(run_batch(reader, reader.initialOffset()))
        reader.stop()
    lines = [r.getMessage() for r in caplog.records if r.name == "dspark_json.batches"]
    (line,) = [line for line in lines if line.startswith("batch 0")]
    assert "by model: " in line and "https://***@models.example/m?token=***" in line
    records = json.dumps(read_records(str(tmp_path / "metrics")))
    assert "models.example" in records
    for leaked in ("hunter22", "tok987654"):
        assert leaked not in line and leaked not in records
        assert not [r for r in caplog.records if leaked in r.getMessage()]


def test_a_metrics_record_of_the_wrong_types_is_skipped_with_a_warning(tmp_path, caplog, capsys):
    """A file edited by hand or another program's JSON in the metrics directory (a list where
    latency goes, a string count, NaN): skipped with a WARN naming it, and the CLI, the report
    and the driver's lines read the others (they failed with a traceback)."""
    good = {"batch": 0, "partition": 0, "prompts": 2, "requests": 2, "rows": {"ok": 2},
            "latency_ms": {"p50": 5.0, "p95": 9.0}}  # fmt: skip
    (tmp_path / "batch-a-part-00000.json").write_text(json.dumps(good))
    bad = [
        {**good, "latency_ms": [1]},
        {**good, "rows": {"ok": "x"}},
        {**good, "inflight_limit": [2]},
        {**good, "models": {"m": {"rows": "1"}}},
    ]
    for i, record in enumerate(bad, start=1):
        (tmp_path / f"batch-a-part-{i:05d}.json").write_text(json.dumps(record))
    (tmp_path / "batch-a-part-00009.json").write_text('{"batch": 0, "requests": NaN}')
    with caplog.at_level(logging.WARNING, logger="dspark_json"):
        records = read_records(str(tmp_path))
    assert [r["partition"] for r in records] == [0]
    assert caplog.text.count("is not a metrics record") == 5
    assert main(["metrics", str(tmp_path)]) == 0
    assert "2 rows (ok 2)" in capsys.readouterr().out
    assert main(["report", str(tmp_path), "-o", str(tmp_path / "r.html")]) == 0


def test_a_long_runs_records_folded_give_the_same_whole_run_line():
    """The driver keeps a long run's records folded (bounded memory): the whole-run line of the
    folded records is the line of the records, whatever was folded when."""
    from dspark_json.metrics import fold_records

    def record(i, **more):
        return {
            "batch": i, "rows": {"ok": 5 + i, "truncated": i % 2}, "dropped": i % 3,
            "error_rows": i, "rescued_rows": 1, "requests": 9 + i, "retries": i, "shed": i % 2,
            "deduplicated": 2, "cache_hits": i, "cache_misses": 1, "cache_waits": i % 2,
            "prompt_tokens": 100 * i, "cached_tokens": 10, "completion_tokens": 7 * i,
            "cost_usd": 0.01 * i if i else None, "held_seconds": 0.5 * i,
            "latency_ms": {"p50": 3.0, "p95": 10.0 + i}, "backend": "gpu" if i == 3 else "cpu",
            "parse_seconds": 0.125 * i, "reference_rows": i % 2,
            "reference_reasons": {"kernels_compiling": i % 2},
            "models": {
                "a": {"rows": 3, "requests": 3, "prompt_tokens": 30, "completion_tokens": 9,
                      "cost_usd": 0.002, "latency_p95_ms": 8.0 + i},
                "b": {"rows": 2 + i, "requests": 6, "prompt_tokens": 40, "completion_tokens": 1,
                      "latency_p95_ms": None},
            },
            "repair": {"reasks": i, "fixed": i // 2, "prompt_tokens": 5, "completion_tokens": 2,
                       "over_budget": 1, "spent_tokens": 7, "estimated_tokens": i % 2,
                       "budget": 50},
            **more,
        }  # fmt: skip

    records = [record(i) for i in range(6)]
    line = summary(records, "run of 6 batch(es)")
    assert "cpu/gpu" in line and "(6 partition(s))" in line and "by model: " in line
    assert summary([fold_records(records)], "run of 6 batch(es)") == line
    folded = [fold_records(records[:2]), *records[2:4]]
    assert summary([fold_records([fold_records(folded), *records[4:]])], "run of 6 batch(es)") == (
        line
    )
    no_repair = [record(i, repair=None, cost_usd=None) for i in range(3)]
    assert summary([fold_records(no_repair)], "x") == summary(no_repair, "x")


def test_a_stream_of_many_batches_keeps_its_progress_folded(simulator, tmp_path, monkeypatch):
    """The stream reader's own planning folds the older batches' progress (and its whole-run
    line its records) as the batches go: a snapshot still counts every prompt once."""
    from dspark_json import progress, source

    monkeypatch.setattr(source, "_FOLD_PAST", 3)
    rows = [{"custom_id": f"c{i:02d}", "prompt": f"Say {i}"} for i in range(12)]
    write_prompts(tmp_path / "in", "a.jsonl", rows)
    reader = stream_reader(simulator.url, tmp_path, maxRecordsPerTrigger="1")
    start = reader.initialOffset()
    for _ in range(12):
        end = run_batch(reader, start)
        reader.commit(end)
        start = end
    reader.stop()
    shot = progress.snapshot(str(tmp_path / "metrics"))
    assert shot["prompts"]["done"] == 12 and shot["batches"] == 12 and shot["ok"] == 12
    names = {p.name for p in (tmp_path / "metrics" / "_progress").iterdir()}
    assert "rollup.json" in names and "batch-000000.json" not in names
    assert len(reader._run_records) <= 4  # folded past 3


def test_a_compressed_files_parts_are_all_in_its_batch_line(simulator, tmp_path, caplog):
    """A compressed file's rows are read as the parts of one partition, each with a metrics
    record of its own: the driver reads every part's record (by name) for the batch line."""
    import gzip

    caplog.set_level(logging.INFO, logger="dspark_json")
    nine_prompts(tmp_path)
    plain = tmp_path / "in" / "a.jsonl"
    (tmp_path / "in" / "a.jsonl.gz").write_bytes(gzip.compress(plain.read_bytes()))
    plain.unlink()
    reader = stream_reader(simulator.url, tmp_path, maxRecordsPerTrigger="9")
    end = run_batch(reader, reader.initialOffset())
    reader.commit(end)
    reader.stop()
    planned = [p for p in reader.partitions(reader.initialOffset(), end)]
    assert any(p.parts for p in planned)  # parts, or this test tests nothing new
    lines = [r.getMessage() for r in caplog.records if r.name == "dspark_json.batches"]
    assert lines[0].startswith("batch 0: 9 rows (ok 9); ")
