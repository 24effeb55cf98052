"""The source against real vLLM (0.32, CPU build, a tiny random-weight model): what a user gets
on a real server, with structured output from guided decoding (xgrammar).

Run by ``make test-vllm`` (it installs vLLM into a cached virtualenv first). A random model
writes nonsense, so these tests check shape and semantics, never words: each prompt lands once,
every row has a status that matches its answer, typed columns hold what the JSON held, errors
carry vLLM's own message.
"""

from __future__ import annotations

import json

import httpx
import pytest

import dspark_json
from tests.helpers import write_prompts

pytestmark = [pytest.mark.vllm, pytest.mark.spark]

SCHEMA = {
    "type": "object",
    "properties": {"word": {"type": "string", "maxLength": 8}, "n": {"type": "integer"}},
    "required": ["word", "n"],
}
#: What the table's _rescued_data may hold from real answers: values that did not fit their
#: column (a random model writes integers beyond a long). Never a documented field.
MISFITS = {"parsed.n", "parsed.word"}


def prompts(n, start=0):
    return [
        {"custom_id": f"q{i:03d}", "prompt": f"Give a word and a number ({i})."}
        for i in range(start, start + n)
    ]


def stream(spark, tmp_path, url, **options):
    reader = spark.readStream.format("dspark-json").option("endpoint", url)
    reader = reader.option("prompts", str(tmp_path / "in")).option("journal", str(tmp_path / "j"))
    for key, value in options.items():
        reader = reader.option(key, value)
    query = dspark_json.write_delta(
        reader.load(),
        str(tmp_path / "t"),
        checkpoint=str(tmp_path / "c"),
        trigger={"availableNow": True},
    )
    query.awaitTermination()
    from deltalake import DeltaTable

    return DeltaTable(str(tmp_path / "t")).to_pyarrow_table().to_pylist()


def rescued_keys(rows):
    return {key for row in rows if row["_rescued_data"] for key in json.loads(row["_rescued_data"])}


def test_stream_into_delta_with_a_response_format(spark, vllm, tmp_path):
    write_prompts(tmp_path / "in", "a.jsonl", prompts(16))
    rows = stream(
        spark, tmp_path, vllm.url,
        responseFormat=json.dumps(SCHEMA), maxTokens="96", seed="7", maxRecordsPerTrigger="8",
    )  # fmt: skip
    assert sorted(r["custom_id"] for r in rows) == [f"q{i:03d}" for i in range(16)]
    assert all(r["model"] == vllm.model for r in rows)
    assert all(r["system_fingerprint"].startswith("vllm-0.32.0-") for r in rows)
    assert rescued_keys(rows) <= MISFITS  # no documented vLLM field is drift
    for row in rows:
        choice = row["choices"][0]
        content = choice["message"]["content"]
        if row["_status"] == "ok":
            value = json.loads(content, strict=False)
            assert row["parsed"]["word"] == value["word"]
            n_fits = -(2**63) <= value["n"] < 2**63
            assert row["parsed"]["n"] == (value["n"] if n_fits else None)
        elif row["_status"] == "truncated":
            assert choice["finish_reason"] == "length"
        elif row["_status"] == "schema_mismatch":  # a number past BIGINT (a random model's)
            value = json.loads(content, strict=False)
            assert not -(2**63) <= value["n"] < 2**63, row
            assert row["parsed"]["n"] is None and "parsed.n" in json.loads(row["_rescued_data"])
        else:
            assert row["_status"] == "corrupt_content", row
    # A random model's n is often past BIGINT: those rows say so (schema_mismatch), never ok.
    assert sum(r["_status"] in ("ok", "schema_mismatch") for r in rows) >= 4


def test_two_choices_and_a_small_max_tokens(spark, vllm, tmp_path):
    write_prompts(tmp_path / "in", "a.jsonl", prompts(6))
    rows = stream(
        spark, tmp_path, vllm.url, responseFormat=json.dumps(SCHEMA), n="2", maxTokens="3"
    )
    assert len(rows) == 6 and all(len(r["choices"]) == 2 for r in rows)
    assert all(c["finish_reason"] == "length" for r in rows for c in r["choices"])
    assert {r["_status"] for r in rows} == {"truncated"}
    assert all(r["usage"]["completion_tokens"] == 6 for r in rows)  # 3 per choice


def test_a_truncated_answer_is_repaired_with_more_tokens(spark, vllm, tmp_path):
    write_prompts(tmp_path / "in", "a.jsonl", prompts(6))
    rows = stream(
        spark,
        tmp_path,
        vllm.url,
        responseFormat=json.dumps(SCHEMA),
        maxTokens="3",
        repairAttempts="4",
        repairMaxTokens="96",
    )
    assert len(rows) == 6
    for row in rows:
        first, *reasks = row["_attempts"]
        assert first["status"] == "truncated" and first["completion_tokens"] == 3
        assert first["reason"].endswith("re-asked with max_tokens=6")
        assert reasks and reasks[-1]["status"] == row["_status"]
    # Guided decoding closes the JSON once it has room: with more tokens, the answers parse.
    fixed = [r for r in rows if r["_status"] == "ok"]
    assert fixed, [r["_attempts"] for r in rows]
    assert all(r["_attempts"][-1]["completion_tokens"] > 3 for r in fixed)


def test_a_prompt_beyond_max_model_len_keeps_its_row_with_vllms_error(spark, vllm, tmp_path):
    long = {"custom_id": "long", "prompt": "word " * 5000}
    write_prompts(tmp_path / "in", "a.jsonl", [long, *prompts(2)])
    rows = {r["custom_id"]: r for r in stream(spark, tmp_path, vllm.url, maxTokens="4")}
    error = rows["long"]["_error"]
    assert rows["long"]["_status"] == "http_error"
    assert error["status"] == 400 and error["type"] == "BadRequestError"
    assert "maximum context length is 2048 tokens" in error["message"]
    assert error["attempts"] == 1  # a 400 is not retried
    assert rows["q000"]["_status"] in ("ok", "not_json") and rows["q000"]["_error"] is None


def test_a_wrong_model_fails_the_load_naming_it(spark, vllm, tmp_path):
    write_prompts(tmp_path / "in", "a.jsonl", prompts(1))
    reader = (
        spark.readStream.format("dspark-json")
        .option("endpoint", vllm.url)
        .option("prompts", str(tmp_path / "in"))
        .option("model", "gpt-4o")
    )
    with pytest.raises(Exception, match=r"Model 'gpt-4o' is not served .*it serves: tiny-random"):
        reader.load()


def test_the_schema_is_inferred_from_real_answers(spark, vllm, tmp_path):
    write_prompts(tmp_path / "in", "a.jsonl", prompts(6))
    # Guided decoding asked through extraBody: the source does not know the schema, so it
    # samples answers at .load() to infer `parsed` (a schema whose answers end quickly).
    small = {
        "type": "object",
        "properties": {"word": {"type": "string", "maxLength": 6}, "flag": {"type": "boolean"}},
        "required": ["word", "flag"],
    }
    extra = {"structured_outputs": {"json": small}, "max_tokens": 64, "seed": 3}
    df = (
        spark.read.format("dspark-json")
        .option("endpoint", vllm.url)
        .option("prompts", str(tmp_path / "in"))
        .option("extraBody", json.dumps(extra))
        .option("inferSchemaSamples", "6")
        .load()
    )
    parsed = df.schema["parsed"].dataType
    assert parsed.simpleString() == "struct<word:string,flag:boolean>"
    rows = df.select("custom_id", "_status", "parsed").collect()
    assert len(rows) == 6 and any(r["_status"] == "ok" for r in rows)


def test_generate_and_validate_schema(spark, vllm):
    df = spark.createDataFrame(
        [(f"g{i}", f"A word and a number ({i})") for i in range(6)],
        "custom_id string, question string",
    )
    out = dspark_json.generate(
        df, "question", endpoint=vllm.url, response_format=SCHEMA,
        max_tokens=96, seed=5, validate_schema=True,
    ).collect()  # fmt: skip
    assert len(out) == 6
    for row in out:
        assert row["_status"] in ("ok", "truncated", "corrupt_content")
        if row["_status"] == "ok":
            # Guided decoding keeps to the schema: nothing to report.
            assert row["_schema_violations"] == [] and row["parsed"]["word"] is not None


def test_a_named_function_call_lands_in_typed_columns(spark, vllm, tmp_path):
    """tool_choice naming a function: vLLM (guided decoding, no server flag needed) answers
    with a call of it, whose arguments JSON string lands typed in tool_calls.<name>."""
    tools = [{"type": "function", "function": {"name": "give_word", "parameters": SCHEMA}}]
    write_prompts(tmp_path / "in", "a.jsonl", prompts(12))
    rows = stream(
        spark, tmp_path, vllm.url,
        tools=json.dumps(tools), toolChoice="give_word", inferSchemaSamples="0",
        maxTokens="96", seed="7",
    )  # fmt: skip
    assert sorted(r["custom_id"] for r in rows) == [f"q{i:03d}" for i in range(12)]
    assert [r["_error"] for r in rows if r["_error"] is not None] == []
    assert rescued_keys(rows) <= {"tool_calls.give_word[0].arguments.n"}  # a long too large
    called = 0
    for row in rows:
        calls = row["choices"][0]["message"]["tool_calls"] or []
        if not calls:  # no call at all: the content decides, as without tools
            assert row["tool_calls"] is None, row
            continue
        called += 1
        assert [c["function"]["name"] for c in calls] == ["give_word"], row
        typed = row["tool_calls"]["give_word"]
        assert [t["id"] for t in typed] == [c["id"] for c in calls]
        arguments = calls[0]["function"]["arguments"]
        if row["_status"] == "ok":
            value = json.loads(arguments, strict=False)
            assert typed[0]["arguments"]["word"] == value["word"]
            n_fits = -(2**63) <= value["n"] < 2**63
            assert typed[0]["arguments"]["n"] == (value["n"] if n_fits else None)
        elif row["_status"] == "truncated":
            assert row["choices"][0]["finish_reason"] == "length"
            assert row["_corrupt_record"] == arguments
        else:
            assert row["_status"] == "corrupt_content", row
            assert row["_corrupt_record"] == arguments
    assert called == len(rows)  # a named tool_choice always answers with its call


def _prefix_hits(url):
    """vLLM's /metrics counter of prompt tokens found in its prefix cache."""
    for line in httpx.get(f"{url}/metrics", timeout=30).text.splitlines():
        if line.startswith("vllm:prefix_cache_hits_total{"):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError("no vllm:prefix_cache_hits_total in /metrics")


def test_the_cpu_build_caches_prefixes_and_says_so_in_usage(vllm):
    """The tier's server runs with --enable-prefix-caching and --enable-prompt-tokens-details:
    a long prompt sent twice is mostly cached the second time (whole blocks: 128 tokens on the
    CPU), usage.prompt_tokens_details says so, /metrics counts it, and the parser types it."""
    system = " ".join(f"example {i} says the answer is {i * 7}." for i in range(50))
    body = {
        "model": vllm.model,
        "messages": [{"role": "system", "content": system}, {"role": "user", "content": "Go."}],
        "max_tokens": 2,
    }
    hits = _prefix_hits(vllm.url)
    answers = [
        httpx.post(f"{vllm.url}/v1/chat/completions", json=body, timeout=120).text for _ in range(2)
    ]
    usage = [json.loads(a)["usage"] for a in answers]
    prompt = usage[0]["prompt_tokens"]
    cached = usage[1]["prompt_tokens_details"]["cached_tokens"]
    assert prompt > 600 and cached % 128 == 0 and prompt - 256 < cached < prompt
    assert _prefix_hits(vllm.url) - hits >= cached
    table = dspark_json.parse_responses(answers, backend="cpu")
    details = table.column("usage").combine_chunks().field("prompt_tokens_details")
    assert details.field("cached_tokens").to_pylist()[1] == cached
    assert table.column("_rescued_data").to_pylist() == [None, None]
