import json

from dspark_json.inputs.prompts import prompt_record
from dspark_json.options import Options
from dspark_json.request.body import RequestBuilder

BASE = {"endpoint": "http://h:1", "prompts": "/p", "model": "m"}


def body(record, **options):
    return json.loads(RequestBuilder(Options.parse({**BASE, **options}).request).build(record))


def test_prompt_and_request_options_make_the_body():
    record = prompt_record({"custom_id": "a", "prompt": "Hi"}, "", "row 1")
    out = body(
        record,
        systemPrompt="Be terse.",
        maxTokens="64",
        temperature="0",
        topP="0.5",
        seed="7",
        n="2",
        extraBody='{"repetition_penalty": 1.05, "messages": "ignored"}',
        responseFormat='{"title": "my review!", "type": "object"}',
    )
    assert out == {
        "messages": [
            {"role": "system", "content": "Be terse."},
            {"role": "user", "content": "Hi"},
        ],
        "model": "m",
        "response_format": {
            "type": "json_schema",
            "json_schema": {
                "name": "my_review_",
                "schema": {"title": "my review!", "type": "object"},
                "strict": True,
            },
        },
        "max_tokens": 64,
        "temperature": 0.0,
        "top_p": 0.5,
        "seed": 7,
        "n": 2,
        "repetition_penalty": 1.05,
    }


def test_a_row_with_its_own_system_message_keeps_it():
    messages = [{"role": "system", "content": "Mine."}, {"role": "user", "content": "Hi"}]
    record = prompt_record({"messages": messages}, "", "row 1")
    assert body(record, systemPrompt="Theirs.")["messages"] == messages


def test_openai_batch_input_lines_bring_their_own_fields():
    line = {
        "custom_id": "req-1",
        "method": "POST",
        "url": "/v1/chat/completions",
        "body": {"model": "other", "messages": [{"role": "user", "content": "Hi"}], "seed": 3},
    }
    record = prompt_record(line, json.dumps(line), "row 1")
    assert record.problem is None and record.custom_id == "req-1" and record.fields == {}
    out = body(record, seed="9", temperature="0.5")
    assert out["model"] == "other" and out["seed"] == 3 and out["temperature"] == 0.5
    assert out["messages"] == [{"role": "user", "content": "Hi"}]


def test_batch_lines_for_other_endpoints_are_invalid_prompts():
    line = {"custom_id": "e", "method": "POST", "url": "/v1/embeddings", "body": {"input": "x"}}
    record = prompt_record(line, json.dumps(line), "row 4")
    assert record.messages is None
    assert "POST /v1/embeddings" in record.problem and "/v1/chat/completions" in record.problem


TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}
]


def test_tools_and_a_named_tool_choice_are_sent_as_openai_fields(tmp_path):
    record = prompt_record({"prompt": "Hi"}, "", "row 1")
    out = body(record, tools=json.dumps(TOOLS), toolChoice="get_weather")
    assert out["tools"] == TOOLS
    assert out["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}
    # A path works as for responseFormat; a word is sent as it is.
    path = tmp_path / "tools.json"
    path.write_text(json.dumps(TOOLS))
    out = body(record, tools=str(path), toolChoice="REQUIRED")
    assert out["tools"] == TOOLS and out["tool_choice"] == "required"


def test_a_batch_lines_own_tools_win():
    mine = [{"type": "function", "function": {"name": "other"}}]
    line = {
        "custom_id": "r",
        "method": "POST",
        "url": "/v1/chat/completions",
        "body": {"messages": [{"role": "user", "content": "Hi"}], "tools": mine},
    }
    record = prompt_record(line, json.dumps(line), "row 1")
    assert body(record, tools=json.dumps(TOOLS))["tools"] == mine


def test_a_line_s_model_is_asked_and_its_column_kept():
    record = prompt_record({"prompt": "Hi", "model": "coder"}, "", "row 1")
    assert record.problem is None and record.fields["model"] == "coder"  # column input_model
    builder = RequestBuilder(Options.parse({**BASE, "temperature": "0"}).request)
    out = json.loads(builder.build(record))
    assert out["model"] == "coder" and out["temperature"] == 0.0
    plain = json.loads(builder.build(prompt_record({"prompt": "Hi"}, "", "row 2")))
    assert plain["model"] == "m"
    assert {k: v for k, v in out.items() if k != "model"} == {
        k: v for k, v in plain.items() if k != "model"
    }
    assert builder.deterministic(record)


def test_a_line_s_model_that_names_nothing_is_an_invalid_prompt():
    for model in (None, "", 7, ["a"]):
        record = prompt_record({"prompt": "Hi", "model": model}, "", "row 3")
        assert record.problem is not None and "'model' must name the model" in record.problem
    line = {"url": "/v1/chat/completions", "body": {"model": 7, "messages": [{"role": "user"}]}}
    assert "'model' must name" in (prompt_record(line, "", "row 4").problem or "")


def test_a_line_s_huge_model_value_is_cut_in_the_problem():
    record = prompt_record({"prompt": "Hi", "model": ["x" * 10_000]}, "", "row 5")
    assert record.problem is not None and len(record.problem) < 300
    assert "..." in record.problem
