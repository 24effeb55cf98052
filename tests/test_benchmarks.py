"""The benchmarks run (tiny sizes) so they cannot rot; their figures live in benchmarks/."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent


def run_smoke(script, out):
    """Run a benchmark script at its --smoke sizes, writing into ``out``."""
    run_script(script, "--smoke", "--out", str(out))


def run_script(script, *args):
    """Run ``benchmarks/<script>`` with ``args``; it must succeed."""
    done = subprocess.run(
        [sys.executable, f"benchmarks/{script}", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]


@pytest.mark.spark
@pytest.mark.slow
def test_parser_benchmark_smoke(tmp_path):
    run_smoke("parser_throughput.py", tmp_path)
    result = json.loads((tmp_path / "parser_throughput.json").read_text())
    assert [run["corpus"] for run in result["corpora"]] == [
        "review",
        "vllm",
        "drift",
        "traffic",
        "tools",
    ]
    for run in result["corpora"]:
        names = [f["name"] for f in run["figures"]]
        assert "dspark-json CPU (in process)" in names
        if run["corpus"] == "tools":  # tool calls: against Spark's from_json of the arguments
            counts = {f["name"]: f["content_parsed"] for f in run["figures"]}
            assert (
                counts["dspark-json CPU (in process)"]
                == counts["Spark read.json + from_json, dspark-json's columns"]
            )
            continue
        assert "Spark read.json + from_json(content)" in names
        assert all(f["records_per_s"] > 0 for f in run["figures"])
        # The hand-off floors carry dspark-json's own output, row for row.
        parsed = {f["name"]: f["content_parsed"] for f in run["figures"]}
        floors = [n for n in names if n.startswith("hand-off alone, no parse")]
        assert len(floors) == 2
        assert {parsed[n] for n in floors} == {parsed["dspark-json CPU (in process)"]}
        # A .schema without _rescued_data (rescue scope parsed) parses the same rows.
        narrow = [n for n in names if n.startswith("dspark-json CPU, Spark's columns")]
        assert len(narrow) == 5 and len({parsed[n] for n in narrow}) == 1
    cold = result["machine"]["cold_start"]
    assert cold["bodies"] == 300 and 0 < cold["first_parse_s"] <= cold["kernels_ready_s"]
    assert result["machine"]["gpu"].startswith(("measured", "not measured"))
    assert (tmp_path / "parser_throughput.png").stat().st_size > 0
    text = (tmp_path / "parser_throughput.md").read_text()
    assert "| contender |" in text and "GPU: " in text and "Cold start" in text
    assert "ceiling inside Spark, the source's path" in text


def test_benchmark_corpus_is_seeded_and_has_every_kind_of_body():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        from parser_throughput import CONTENT_SCHEMA, corpus
    finally:
        sys.path.pop(0)
    first, again = corpus(2000, seed=5), corpus(2000, seed=5)
    assert first == again
    import dspark_json

    table = dspark_json.parse_responses(first, response_format=CONTENT_SCHEMA, backend="cpu")
    statuses = set(table.column("_status").to_pylist())
    assert {"ok", "corrupt_envelope", "not_json", "truncated"} <= statuses
    assert table.column("_rescued_data").null_count < len(first)
    vllm = dspark_json.parse_responses(corpus(2000, kind="vllm"), response_format=CONTENT_SCHEMA)
    drift = dspark_json.parse_responses(corpus(2000, kind="drift"), response_format=CONTENT_SCHEMA)
    # vLLM's documented fields are not drift; the drift corpus rescues about 4 rows in 10.
    assert vllm.column("_rescued_data").null_count > 0.95 * 2000
    assert 0.3 < 1 - drift.column("_rescued_data").null_count / 2000 < 0.5


def test_traffic_corpus_holds_the_kinds_of_traffic_it_names():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        from parser_throughput import CONTENT_SCHEMA, corpus
    finally:
        sys.path.pop(0)
    bodies = corpus(2000, kind="traffic")
    assert bodies == corpus(2000, kind="traffic")
    import dspark_json

    table = dspark_json.parse_responses(bodies, response_format=CONTENT_SCHEMA, backend="cpu")
    statuses = table.column("_status").to_pylist()
    assert 0.85 < statuses.count("ok") / 2000 < 0.95  # prose answers, tool calls, cut ones
    assert statuses.count("truncated") > 0
    messages = [choices[0]["message"] for choices in table.column("choices").to_pylist()]
    assert 0.03 < sum(m["tool_calls"] is not None for m in messages) / 2000 < 0.07
    assert 0.25 < sum(m["reasoning"] is not None for m in messages) / 2000 < 0.35
    assert sum("\n  " in (m["content"] or "") for m in messages) / 2000 > 0.3  # pretty-printed
    rescued = [json.loads(r) for r in table.column("_rescued_data").to_pylist() if r]
    keys = {key for row in rescued for key in row}
    assert {"metadata", "kv_transfer_params", "parsed.confidence", "parsed.notes"} <= keys


def test_the_tool_calls_corpus_is_seeded_and_has_broken_drifting_and_unknown_calls():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        from parser_throughput import TOOLS, corpus
    finally:
        sys.path.pop(0)
    bodies = corpus(2000, kind="tools")
    assert bodies == corpus(2000, kind="tools")
    import dspark_json

    table = dspark_json.parse_responses(bodies, tools=TOOLS, backend="cpu")
    statuses = table.column("_status").to_pylist()
    assert {"ok", "corrupt_content"} == set(statuses)
    assert table.column("tool_calls").null_count == 0
    rescued = [r for r in table.column("_rescued_data").to_pylist() if r]
    assert any(".arguments.confidence" in r for r in rescued)
    assert any("tool_calls.book_flight" in r for r in rescued)


@pytest.mark.spark
@pytest.mark.slow
def test_client_benchmark_smoke(tmp_path):
    run_smoke("client_throughput.py", tmp_path)
    figures = json.loads((tmp_path / "client_throughput.json").read_text())["figures"]
    assert [f["name"] for f in figures["spark"]] == [
        "dspark-json source (requests + typed parse)",
        "Python UDF, requests.post per row (no parse)",
    ]
    assert all(f["requests_per_s"] > 0 for part in figures.values() for f in part)
    fixed, adaptive = figures["capacity"]
    assert fixed["limit_range"] == [32, 32] and adaptive["limit_range"][0] == 8
    assert "| in-flight limit |" in (tmp_path / "client_throughput.md").read_text()


@pytest.mark.spark
@pytest.mark.slow
def test_report_smoke(tmp_path):
    run_smoke("report.py", tmp_path)
    report = json.loads((tmp_path / "report.json").read_text())
    assert {f["rows"] for f in report["parser"]} == {200, 800}
    assert len(report["stream"]) == 4 and all(f["rows_per_s"] > 0 for f in report["stream"])
    assert report["machine"]["cpu_cores"] >= 1
    for name in ("report.md", "report_parser.png", "report_stream.png"):
        assert (tmp_path / name).stat().st_size > 0


@pytest.mark.slow
def test_input_scale_benchmark_smoke(tmp_path):
    run_smoke("input_scale.py", tmp_path)
    result = json.loads((tmp_path / "input_scale.json").read_text())
    assert result["big"]["file_rows"] > 0 and result["big"]["peak_above_baseline_mb"] >= 0
    batches = result["gz"]["batches"]
    assert len(batches) == 4 and all(b["decompressions"] == 1 for b in batches)
    assert result["gz"]["driver_decompressions"] == 1
    assert result["many"]["batches"] == 20 and result["many"]["rows"] == 800
    assert "| input | figure | value |" in (tmp_path / "input_scale.md").read_text()


@pytest.mark.spark
@pytest.mark.slow
def test_repair_benchmark_smoke(tmp_path):
    run_smoke("repair.py", tmp_path)
    result = json.loads((tmp_path / "repair.json").read_text())
    none, two = result["runs"]
    assert (none["repair_attempts"], two["repair_attempts"]) == (0, 2)
    assert none["reasks"] == 0 and two["reasks"] == two["rows_reasked"] > 0
    assert two["right"] == two["rows"] == two["distinct_prompts"] > none["right"]
    assert "| repairAttempts |" in (tmp_path / "repair.md").read_text()


def test_model_time_benchmark_smoke(tmp_path):
    run_smoke("model_time.py", tmp_path)
    result = json.loads((tmp_path / "model_time.json").read_text())
    blocks = {(b["workload"], b.get("endpoints")): b for b in result["workloads"]}
    prefixes = blocks[("(b) long shared prefixes", 1)]
    on, off = prefixes["runs"]
    assert (on["prefixOrder"], off["prefixOrder"]) == ("true", "false")
    assert on["requests"] == off["requests"] == on["rows"]
    assert on["prompt_tokens"] == off["prompt_tokens"] > on["cached_tokens"] > 0
    assert ("(b) long shared prefixes", 2) in blocks
    control = blocks[("(b) control: nothing shared", 1)]
    assert all(run["cached_tokens"] == 0 for run in control["runs"])
    once, every = blocks[("(a) a third repeated", 1)]["runs"]
    assert once["requests"] == once["distinct"] < every["requests"] == every["rows"]
    first, again, uncached = blocks[("(c) same prompts again", 1)]["runs"]
    # The re-run with the cache sends nothing; without it, every distinct request again.
    assert first["requests"] == uncached["requests"] == first["distinct"] > again["requests"] == 0
    assert "| workload |" in (tmp_path / "model_time.md").read_text()


def test_gpu_fit_benchmark_smoke(tmp_path):
    """benchmarks/gpu/fit_throughput.py (device_checks.sh runs it on a device): the CPU column
    here, the GPU columns where a device is."""
    run_smoke("gpu/fit_throughput.py", tmp_path)
    result = json.loads((tmp_path / "gpu_fit_throughput.json").read_text())
    cpu = [f for f in result["figures"] if f["contender"] == "CPU backend"]
    assert {f["corpus"] for f in cpu} == {"whole", "review"}
    assert all(f["rows_per_s"] > 0 and f["gb_per_s"] > 0 for f in cpu)


@pytest.mark.slow
def test_response_cache_benchmark_smoke(tmp_path):
    run_smoke("response_cache.py", tmp_path)
    result = json.loads((tmp_path / "response_cache.json").read_text())
    sent = {r["name"]: r["requests_sent"] for r in result["runs"]}
    rows = result["runs"][0]["rows"]
    assert sent["dedupe off"] == rows == result["distinct"] * 3 // 2
    assert sent["dedupe auto (default)"] == result["distinct"]  # one task: all repeats in it
    assert sent["dedupe auto + cache, re-run"] == 0
    assert result["cache"]["entries"] == result["distinct"]
    assert result["cache"]["bytes_per_entry"] > result["cache"]["header_bytes_per_entry"] > 0
    assert "| dedupe auto + cache, re-run | 0 |" in (tmp_path / "response_cache.md").read_text()


@pytest.mark.spark
@pytest.mark.slow
def test_realworld_inside_spark_reports_each_paths_floor_and_ceiling(tmp_path):
    out = tmp_path / "realworld.json"
    run_script(
        "realworld.py",
        *("--rows", "300", "--repeat", "1", "--schema", "wide_struct", "--inside-spark"),
        *("--json", str(out)),
    )
    (figure,) = json.loads(out.read_text())
    for path, floor in (("parse_dataframe", "floor_map"), ("source", "floor_source")):
        assert figure[f"{floor}_s"] > 0
        ceiling = figure["spark_s"] / figure[f"{floor}_s"]  # of rounded seconds: within 0.01
        assert figure[f"{path}_ceiling"] == pytest.approx(ceiling, abs=0.011)


def test_shared_pool_benchmark_smoke(tmp_path):
    run_smoke("shared_pool.py", tmp_path)
    result = json.loads((tmp_path / "shared_pool.json").read_text())
    names = [s["scenario"] for s in result["scenarios"]]
    assert names == ["alone", "today", "priority", "maxServerQueue", "both"]
    for s in result["scenarios"]:
        assert s["tenant_requests"] > 0 and s["p50_ms"] <= s["p95_ms"] <= s["p99_ms"]
    assert result["scenarios"][1]["stream_per_s"] > 0  # today's stream ran beside the tenant
    assert "| scenario |" in (tmp_path / "shared_pool.md").read_text()
    assert (tmp_path / "shared_pool.png").stat().st_size > 0


def test_shared_pool_runs_the_scenarios_asked_in_turns_with_the_base_tree():
    """--scenarios in its order, a name twice run twice, NAME@base on option --base's tree."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        from shared_pool import MACHINE_SCENARIOS, chosen
    finally:
        sys.path.pop(0)
    told = "both width told"
    picked = chosen(f"alone,{told},{told}@base,{told}@base,{told},nonesuch", MACHINE_SCENARIOS)
    assert [name for name, _ in picked] == ["alone", told, f"{told}, base", f"{told}, base", told]
    assert picked[2][1] == {**(MACHINE_SCENARIOS[told] or {}), "base": 1}
    assert "base" not in (picked[1][1] or {})


def test_shared_pool_summarises_a_trace(tmp_path):
    """--summarise-trace: the figures docs/explanation/gate.md quotes, from a scenario's trace
    (two tasks at one replica over a 1-second window, after a start that queued 40)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        from shared_pool import summarise_trace
    finally:
        sys.path.pop(0)
    url = "http://r0"
    loads = [[100 - 5, 16, 40], [100.5, 10, 0], [100.9, 12, 2]]
    window = {"t0": 100.0, "t1": 101.0, "urls": [url], "loads": {url: loads}}
    (tmp_path / "window.json").write_text(json.dumps(window))
    for task, (in_flight, target) in enumerate([(2, 2.0), (0, 5.0)]):
        samples = [
            [100 + i / 10 + 0.01, url, target, in_flight, in_flight, 2, 3] for i in range(10)
        ]
        (tmp_path / f"{task}.json").write_text(json.dumps({"samples": samples, "readings": []}))
    summary = summarise_trace(tmp_path)
    assert summary["tasks"] == 2 and summary["in_flight_per_task"] == [0.0, 2.0]
    replica = summary["replica 0"]
    assert replica["stream_in_flight"] == 2.0 and replica["targets_summed"] == 7.0
    assert replica["running"] == 11.0 and replica["waiting"] == 1.0
    assert replica["held_at_its_gates"] == 6.0 and replica["most_waiting_10s_before"] == 40


def test_answer_reads_benchmark_smoke(tmp_path):
    """benchmarks/answer_reads.py: both reads timed, their results asserted equal in the run."""
    run_smoke("answer_reads.py", tmp_path)
    result = json.loads((tmp_path / "answer_reads.json").read_text())
    assert len(result["figures"]) == 6 and result["wrong_rows"] > 0
    assert "the parser's table (now)" in (tmp_path / "answer_reads.md").read_text()


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_contract_before_after_benchmark_smoke(tmp_path):
    """benchmarks/contract_before_after.py: this tree on both sides, in turns, then the pair
    with freed memory kept and without."""
    run_smoke("contract_before_after.py", tmp_path)
    result = json.loads((tmp_path / "contract_before_after.json").read_text())
    parser = result["benchmarks"]["parser"]
    assert [r["side"] for r in parser["runs"]] == ["before", "after"]
    rows = {row["name"]: row for row in parser["summary"]}
    assert rows["dspark-json CPU (in process)"]["before"]["cpu_s"]["median"] > 0
    sides = [r["side"] for r in parser["default_memory_runs"]]
    assert sides == ["after, memory kept", "after, default"]
    assert "| figure | before CPU s |" in (tmp_path / "contract_before_after.md").read_text()


def test_contract_before_after_refuses_a_tree_dspark_json_is_not_imported_from(tmp_path):
    """A side whose checkout is not what ``import dspark_json`` finds fails, naming both."""
    done = subprocess.run(
        [
            *(sys.executable, "benchmarks/contract_before_after.py", "--smoke"),
            *("--before", str(tmp_path), "--out", str(tmp_path)),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode != 0
    assert f"not from {tmp_path}" in done.stderr
    assert not (tmp_path / "contract_before_after.json").exists()


@pytest.mark.spark
@pytest.mark.slow
def test_end_to_end_cpu_smoke(tmp_path):
    """benchmarks/end_to_end_cpu.py: every prompt reaches the Delta table, journal on and off,
    and the CPU seconds counted are our processes' (some, and not the simulator's alone)."""
    run_smoke("end_to_end_cpu.py", tmp_path)
    result = json.loads((tmp_path / "end_to_end_cpu.json").read_text())
    figures = result["figures"]
    assert sorted(f["journal"] for f in figures) == [False, True]
    for f in figures:
        assert f["rows"] == f["prompts"] == 200
        assert f["cpu_s_by_process"]["Spark JVM"] > 0
        assert f["cpu_s_by_process"]["Python workers"] > 0
    assert "rows per CPU-second" in (tmp_path / "end_to_end_cpu.md").read_text()


def test_end_to_end_cpu_stage_shares(tmp_path):
    """The profile's shares leave the simulator and idle waits out, and put a sample in the
    innermost stage its stack passes through (imports before all)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from end_to_end_cpu import stage_shares

    collapsed = tmp_path / "stacks.txt"
    worker = 'process 2:"python -m pyspark.daemon pyspark.worker"'
    collapsed.write_text(
        "\n".join(
            [
                f"{worker};main (pyspark/worker.py:1);"
                "partition (dspark_json/pipeline.py:9);parse (dspark_json/parse/cpu.py:3) 3",
                f"{worker};main (pyspark/worker.py:1);send (httpx/_client.py:5) 1",
                f"{worker};<module> (dspark_json/__init__.py:1);"
                "_find_and_load (<frozen importlib._bootstrap>:1) 4",
                'process 3:"python -m dspark_json simulate --port 0";_chat (dev/simulator.py:1) 50',
                f"{worker};manager (pyspark/daemon.py:1) 20",
            ]
        )
        + "\n"
    )
    shares, top, samples = stage_shares(collapsed)
    assert samples == 8
    assert shares == {
        "Python start-up (imports)": 0.5,
        "parse (bodies -> Arrow)": 0.375,
        "HTTP client (httpx, h11, sockets)": 0.125,
    }
    assert top[0] == ("_find_and_load (<frozen importlib._bootstrap>)", 0.5)


@pytest.mark.slow
def test_parser_fixed_cost_benchmark_smoke(tmp_path):
    """benchmarks/parser_fixed_cost.py: this tree on both sides, each batch size timed."""
    run_script("parser_fixed_cost.py", "--smoke", "--base", ".", "--out", str(tmp_path / "fc"))
    figures = json.loads((tmp_path / "fc.json").read_text())["figures"]
    assert set(figures) == {"before", "after"}
    assert all(f["batch_256_ms"] > 0 and f["batch_1_ms"] > 0 for f in figures.values())
    assert "| fixed cost a batch |" in (tmp_path / "fc.md").read_text()
