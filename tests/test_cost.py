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
