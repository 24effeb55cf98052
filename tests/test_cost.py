"""Option pricing: checked at .load() with the option, the value and the fix named; the one
formula of cost."""

import pytest

from dspark_json.cost import cost_usd, parse_pricing
from dspark_json.errors import OptionError
from dspark_json.options import Options


def test_cost_is_tokens_times_prices_per_million():
    pricing = parse_pricing("pricing", '{"a": {"input": 2, "output": 10, "cached_input": 1}}')
    assert cost_usd(pricing, "a", 1_000_000, 100_000, 400_000) == pytest.approx(
        0.6 * 2 + 0.4 * 1 + 0.1 * 10
    )
    assert cost_usd(pricing, "b", 10, 10) is None  # no price for b, no "*"


def test_star_prices_every_other_model_and_cached_defaults_to_input():
    pricing = parse_pricing("pricing", '{"*": {"input": 1, "output": 1}}')
    assert cost_usd(pricing, "any", 500_000, 0, 500_000) == pytest.approx(0.5)


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("{nope", "not JSON"),
        ("[]", "not a JSON object of models"),
        ('{"a": 3}', "not an object of prices"),
        ('{"a": {"input": 1}}', "no 'output' price"),
        ('{"a": {"input": 1, "output": -1}}', "not a number >= 0"),
        ('{"a": {"input": 1, "output": 1, "cache": 1}}', "'cache'"),
    ],
)
def test_bad_pricing_fails_at_load_naming_option_value_and_fix(text, said):
    with pytest.raises(OptionError) as caught:
        Options.parse({"endpoint": "http://x", "prompts": "/tmp/p", "pricing": text})
    message = str(caught.value)
    assert "Option 'pricing'" in message and said in message
    assert "USD per million tokens" in message and "cached_input" in message  # the fix


def test_prometheus_port_needs_metrics():
    with pytest.raises(OptionError, match="needs option 'metrics'"):
        Options.parse({"endpoint": "http://x", "prompts": "/tmp/p", "prometheusPort": "9464"})


def test_a_record_is_priced_by_model_and_the_lines_carry_cost_and_hold():
    from dspark_json.metrics import priced, summary

    pricing = parse_pricing(
        "pricing", '{"a": {"input": 1, "output": 2}, "b": {"input": 3, "output": 4}}'
    )
    record = {
        "prompt_tokens": 300,
        "completion_tokens": 70,
        "cached_tokens": 0,
        "held_seconds": 2.5,
        "rows": {"ok": 3},
        "models": {
            "a": {"rows": 2, "requests": 2, "prompt_tokens": 200, "completion_tokens": 50},
            "b": {"rows": 1, "requests": 1, "prompt_tokens": 100, "completion_tokens": 20},
        },
    }
    priced(record, None, pricing)
    assert record["models"]["a"]["cost_usd"] == pytest.approx((200 * 1 + 50 * 2) / 1e6)
    assert record["models"]["b"]["cost_usd"] == pytest.approx((100 * 3 + 20 * 4) / 1e6)
    assert record["cost_usd"] == pytest.approx(680 / 1e6)
    line = summary([record], "batch 0")
    assert "cost $0.0007" in line and "held by the pool 2.5s" in line
    assert "; by model: a 2 rows" in line


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ('{"a": {"input": 1e308, "output": 1e308}}', "<= 1e+06"),
        ('{"a": {"input": 1, "output": 1}, "a": {"input": 2, "output": 2}}', "'a' given twice"),
    ],
)
def test_a_price_past_a_dollar_a_token_or_a_model_given_twice_is_refused(text, said):
    """1e308 per million tokens made every cost infinite (no JSON record holds that); a model
    given twice silently took the last price."""
    with pytest.raises(OptionError) as caught:
        Options.parse({"endpoint": "http://x", "prompts": "/tmp/p", "pricing": text})
    assert said in str(caught.value)


def test_pricing_without_the_query_model_warns_at_load(caplog):
    from dspark_json.load import check_priced

    options = Options.parse(
        {
            "endpoint": "http://x",
            "prompts": "/tmp/p",
            "pricing": '{"Qwen": {"input": 1, "output": 1}}',
        }
    )
    with caplog.at_level("WARNING", logger="dspark_json"):
        check_priced(options, "Qwen/Qwen2.5-7B-Instruct")
        check_priced(options, "Qwen")  # priced: no word
    warned = [r.getMessage() for r in caplog.records]
    assert len(warned) == 1 and "'Qwen/Qwen2.5-7B-Instruct'" in warned[0] and "'Qwen'" in warned[0]
