import json

import httpx
import jsonschema
import pytest

from tests.helpers import REVIEW_SCHEMA


def chat(url, messages, **extra):
    return httpx.post(
        f"{url}/v1/chat/completions",
        json={"model": "dspark-sim", "messages": messages, **extra},
        timeout=10,
    )


def test_health_and_models(simulator):
    assert httpx.get(f"{simulator.url}/health").status_code == 200
    models = httpx.get(f"{simulator.url}/v1/models").json()
    assert models["object"] == "list"
    assert [m["id"] for m in models["data"]] == ["dspark-sim"]


def test_structured_output_conforms_and_is_deterministic(simulator):
    rf = {"type": "json_schema", "json_schema": {"name": "review", "schema": REVIEW_SCHEMA}}
    messages = [{"role": "user", "content": "Review: fine kettle"}]
    first = chat(simulator.url, messages, response_format=rf).json()
    second = chat(simulator.url, messages, response_format=rf).json()
    content = first["choices"][0]["message"]["content"]
    jsonschema.validate(json.loads(content), REVIEW_SCHEMA)
    assert content == second["choices"][0]["message"]["content"]
    assert first["object"] == "chat.completion" and first["model"] == "dspark-sim"
    assert set(first["usage"]) >= {"prompt_tokens", "completion_tokens", "total_tokens"}
    assert first["choices"][0]["finish_reason"] == "stop"


def test_n_choices_and_prose_without_schema(simulator):
    out = chat(simulator.url, [{"role": "user", "content": "hi"}], n=3).json()
    assert [c["index"] for c in out["choices"]] == [0, 1, 2]
    assert out["choices"][0]["message"]["content"].startswith("Here is my answer")


@pytest.mark.parametrize(
    ("payload", "status", "message"),
    [
        (
            {"model": "other", "messages": []},
            404,
            "The model `other` does not exist. Valid aliases: dspark-sim.",
        ),
        (
            {"model": "dspark-sim"},
            400,
            "1 validation error:\n  {'type': 'missing', 'loc': 'body.messages', 'msg': "
            "'Field required', 'input': None}",
        ),
    ],
)
def test_errors_use_vllm_error_shape(simulator, payload, status, message):
    response = httpx.post(f"{simulator.url}/v1/chat/completions", json=payload)
    assert response.status_code == status
    assert response.json()["error"]["message"] == message


def test_stats_count_completions(simulator):
    before = simulator.stats().get("chat_completions", 0)
    chat(simulator.url, [{"role": "user", "content": "count me"}])
    assert simulator.stats()["chat_completions"] == before + 1


def _sim_chat(url, content, **headers):
    return httpx.post(
        f"{url}/v1/chat/completions",
        json={"model": "dspark-sim", "messages": [{"role": "user", "content": content}]},
        headers=headers,
        timeout=10,
    )


def test_faults_are_seeded_and_shaped_like_vllm():
    from dspark_json.dev.local import SimulatorProcess
    from dspark_json.dev.simulator import Faults

    faults = Faults(
        error_rates={429: 0.3, 500: 0.2},
        error_shape="flat",
        retry_after="2",
        retry_after_ms=150,
        api_key="zq-canary-7f3a9c",
    )
    runs = []
    for _ in range(2):
        with SimulatorProcess(seed=3, faults=faults) as server:
            assert _sim_chat(server.url, "x").status_code == 401
            auth = {"authorization": "Bearer zq-canary-7f3a9c"}
            replies = [_sim_chat(server.url, f"p{i % 20}", **auth) for i in range(60)]
            runs.append([r.status_code for r in replies])
            stats = server.stats()
    assert runs[0] == runs[1]  # same seed, same faults
    codes = runs[0]
    assert {200, 429, 500} <= set(codes)
    limited = replies[codes.index(429)]
    assert limited.headers["retry-after"] == "2" and limited.headers["retry-after-ms"] == "150"
    assert limited.json()["object"] == "error" and limited.json()["type"] == "RateLimitError"
    assert stats["status_429"] == codes.count(429) and stats["status_401"] == 1


def test_transport_faults_reset_truncate_and_malformed():
    from dspark_json.dev.local import SimulatorProcess
    from dspark_json.dev.simulator import Faults

    kinds = []
    with SimulatorProcess(
        faults=Faults(reset_rate=0.3, truncate_rate=0.3, malformed_rate=0.5)
    ) as s:
        for i in range(40):
            try:
                reply = _sim_chat(s.url, f"q{i}")
                kinds.append(reply.json()["choices"][0]["finish_reason"])
            except httpx.RemoteProtocolError:
                kinds.append("cut")
        stats = s.stats()
    assert {"cut", "length", "stop"} <= set(kinds)
    assert stats["reset"] + stats["truncate"] == kinds.count("cut")


def test_capacity_makes_latency_grow_like_a_queue():
    import asyncio
    import time

    from dspark_json.dev.local import SimulatorProcess
    from dspark_json.dev.simulator import Faults

    async def burst(url, n):
        async with httpx.AsyncClient(timeout=30) as client:
            body = {"model": "dspark-sim", "messages": [{"role": "user", "content": "x"}]}
            started = time.perf_counter()
            await asyncio.gather(
                *(client.post(f"{url}/v1/chat/completions", json=body) for _ in range(n))
            )
            return time.perf_counter() - started

    with SimulatorProcess(latency=0.1, faults=Faults(capacity=2)) as server:
        elapsed = asyncio.run(burst(server.url, 8))
    assert elapsed >= 0.4  # 8 requests, 2 at a time, 0.1 s each


def test_first_answer_faults_are_seeded_per_prompt_and_fixed_by_the_right_re_ask():
    from dspark_json.dev.local import SimulatorProcess
    from dspark_json.dev.simulator import Faults

    schema = {
        "type": "object",
        "properties": {"word": {"type": "string"}, "n": {"type": "integer"}},
        "required": ["word", "n"],
    }
    faults = Faults(
        first_truncated_rate=0.25,
        first_broken_rate=0.25,
        first_prose_rate=0.25,
        first_invalid_rate=0.25,
    )

    def ask(url, prompt, *, max_tokens=32, more=()):
        body = {
            "model": "dspark-sim",
            "messages": [{"role": "user", "content": prompt}, *more],
            "max_tokens": max_tokens,
            "response_format": {"type": "json_schema", "json_schema": {"schema": schema}},
        }
        choice = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=10).json()
        return choice["choices"][0]

    def kind(choice):
        content = choice["message"]["content"]
        if choice["finish_reason"] == "length":
            return "truncated"
        try:
            value = json.loads(content)
        except ValueError:
            return "broken" if content.startswith("{") else "prose"
        return "ok" if set(value) == {"word", "n"} else "invalid"

    runs = []
    for _ in range(2):
        with SimulatorProcess(seed=4, faults=faults) as server:
            first = {f"q{i}": ask(server.url, f"q{i}") for i in range(24)}
            kinds = {p: kind(c) for p, c in first.items()}
            again = {p: kind(ask(server.url, p)) for p in first}  # the same request: no fix
            fixed = {}
            for prompt, choice in first.items():
                said = {"role": "assistant", "content": choice["message"]["content"]}
                if kinds[prompt] == "truncated":
                    fixed[prompt] = kind(ask(server.url, prompt, max_tokens=64))
                elif kinds[prompt] == "invalid":
                    vague = {"role": "user", "content": "That is wrong; try again."}
                    assert kind(ask(server.url, prompt, more=[said, vague])) == "invalid"
                    named = {"role": "user", "content": "$: 'n' is a required property"}
                    fixed[prompt] = kind(ask(server.url, prompt, more=[said, named]))
                else:
                    retry = {"role": "user", "content": "Answer with the JSON only."}
                    fixed[prompt] = kind(ask(server.url, prompt, more=[said, retry]))
            stats = server.stats()
        runs.append(kinds)
        assert set(kinds.values()) == {"truncated", "broken", "prose", "invalid"}
        assert again == kinds
        assert set(fixed.values()) == {"ok"}
        assert stats["reasks"] == len(first) + sum(1 for k in kinds.values() if k == "invalid")
    assert runs[0] == runs[1]  # seeded


TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                "required": ["city", "days"],
            },
        },
    },
    {"type": "function", "function": {"name": "ping"}},
]


def test_tool_calls_are_answered_as_vllm_does(simulator):
    named = chat(
        simulator.url,
        [{"role": "user", "content": "Weather?"}],
        tools=TOOLS,
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
    ).json()["choices"][0]
    assert named["finish_reason"] == "stop" and named["message"]["content"] == ""
    keys = list(named["message"])
    assert keys.index("tool_calls") == keys.index("function_call") + 1
    [call] = named["message"]["tool_calls"]
    assert call["id"].startswith("chatcmpl-tool-") and call["type"] == "function"
    assert call["function"]["name"] == "get_weather"
    arguments = json.loads(call["function"]["arguments"])
    jsonschema.validate(arguments, TOOLS[0]["function"]["parameters"])
    auto = chat(simulator.url, [{"role": "user", "content": "Hi"}], tools=TOOLS).json()["choices"][
        0
    ]
    assert auto["finish_reason"] == "tool_calls" and auto["message"]["content"] is None
    assert {c["function"]["name"] for c in auto["message"]["tool_calls"]} <= {"get_weather", "ping"}
    none = chat(simulator.url, [{"role": "user", "content": "Hi"}], tools=TOOLS, tool_choice="none")
    assert "tool_calls" not in none.json()["choices"][0]["message"]


def test_tool_call_faults_are_seeded_per_call():
    from dspark_json.dev.local import SimulatorProcess
    from dspark_json.dev.simulator import Faults

    faults = Faults(tool_broken_rate=0.2, tool_drift_rate=0.2, tool_unknown_rate=0.2)
    with SimulatorProcess(seed=3, faults=faults) as server:
        seen = {"broken": 0, "drift": 0, "unknown": 0, "fine": 0}
        for i in range(40):
            answer = chat(
                server.url, [{"role": "user", "content": f"q{i}"}], tools=TOOLS[:1]
            ).json()
            for call in answer["choices"][0]["message"]["tool_calls"]:
                function = call["function"]
                try:
                    value = json.loads(function["arguments"])
                except ValueError:
                    seen["broken"] += 1
                    continue
                if function["name"] != "get_weather":
                    seen["unknown"] += 1
                elif "confidence" in value:
                    seen["drift"] += 1
                else:
                    seen["fine"] += 1
    assert all(seen.values()), seen
    assert Faults(tool_drift_rate=0.5).to_args()[-1] == "--tool-drift-rate=0.5"
