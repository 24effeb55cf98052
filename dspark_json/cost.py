"""What tokens cost: option ``pricing``, prices in USD per million tokens by model, and the one
formula every figure of cost uses (the metrics records, the lines, the progress, the report,
``dspark-json plan``).

The option is a JSON object: each model's prices, ``input``, ``output`` and (optional)
``cached_input`` (the prompt tokens the server's prefix cache held; ``input`` where not given),
and ``"*"`` for any model not named::

    {"Qwen/Qwen2.5-7B-Instruct": {"input": 0.2, "output": 0.6, "cached_input": 0.05},
     "*": {"input": 0.5, "output": 1.5}}

A model without a price (and no ``"*"``) has no cost: ``None``, never 0.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass

from dspark_json.errors import OptionError

__all__ = ["MAX_PRICE", "Price", "Pricing", "cost_usd", "parse_pricing"]


@dataclass(frozen=True)
class Price:
    """USD per million tokens: prompt tokens not cached, completion tokens, cached ones."""

    input: float
    output: float
    cached_input: float


class Pricing(dict[str, Price]):
    """Model -> :class:`Price` (``"*"``: every other model)."""

    def of(self, model: str | None) -> Price | None:
        if model is not None and model in self:
            return self[model]
        return self.get("*")


#: The highest price taken, in USD per million tokens (a dollar a token): one above is a
#: mistake (a price per token given per million tokens times a million, say), and its cost
#: would overflow to infinity, which no JSON record can hold.
MAX_PRICE = 1_000_000.0

_EXAMPLE = '{"my-model": {"input": 0.2, "output": 0.6, "cached_input": 0.05}}'


def parse_pricing(name: str, text: str) -> Pricing:
    """Option ``pricing``'s value, checked: an error names the option, the value and the fix."""

    def bad(why: str) -> OptionError:
        return OptionError(
            f"Option {name!r} ({text[:200]!r}): {why}. Give a JSON object of each model's USD "
            f'per million tokens, e.g. {_EXAMPLE} ("*" for any other model).'
        )

    def unique(pairs: list[tuple[str, object]]) -> dict[str, object]:
        names = [name for name, _ in pairs]
        twice = sorted({name for name in names if names.count(name) > 1})
        if twice:
            raise bad(f"{', '.join(map(repr, twice))} given twice (the last would win)")
        return dict(pairs)

    try:
        given = json.loads(text, object_pairs_hook=unique)
    except json.JSONDecodeError as exc:
        raise bad(f"not JSON ({exc.msg} at character {exc.pos})") from None
    if not isinstance(given, dict) or not given:
        raise bad("not a JSON object of models")
    pricing = Pricing()
    for model, prices in given.items():
        if not isinstance(prices, dict):
            raise bad(f"model {model!r} has {prices!r}, not an object of prices")
        unknown = sorted(set(prices) - {"input", "output", "cached_input"})
        if unknown:
            raise bad(
                f"model {model!r} has {', '.join(map(repr, unknown))}: the prices are 'input', "
                "'output' and 'cached_input'"
            )
        for part in ("input", "output"):
            if part not in prices:
                raise bad(f"model {model!r} has no {part!r} price")
        values = {}
        for part, value in prices.items():
            if (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or not math.isfinite(value)
                or not 0 <= value <= MAX_PRICE
            ):
                raise bad(
                    f"model {model!r}'s {part!r} price is {value!r}, not a number >= 0 and "
                    f"<= {MAX_PRICE:g} (USD per million tokens, not per token)"
                )
            values[part] = float(value)
        values.setdefault("cached_input", values["input"])
        pricing[str(model)] = Price(**values)
    return pricing


def cost_usd(
    pricing: Mapping[str, Price] | None,
    model: str | None,
    input_tokens: int,
    output_tokens: int,
    cached_tokens: int = 0,
) -> float | None:
    """The cost of tokens of ``model`` in USD: the prompt tokens not cached at ``input``, the
    cached ones at ``cached_input``, the completion tokens at ``output``; ``None`` where the
    model has no price."""
    if pricing is None:
        return None
    price = pricing.of(model) if isinstance(pricing, Pricing) else pricing.get(model or "*")
    if price is None:
        return None
    cached = min(cached_tokens, input_tokens)
    total = (
        (input_tokens - cached) * price.input
        + cached * price.cached_input
        + output_tokens * price.output
    ) / 1_000_000
    return round(total, 6)
