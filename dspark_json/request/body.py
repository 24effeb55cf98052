"""Request bodies: one prompt row + the query's request options -> chat completion JSON bytes.

The part every request shares (model, response_format with its schema, tools and tool_choice,
sampling options, ``extraBody``) is serialised once (once per model where rows name their own:
a prompt line's ``model``); each row adds only its messages. A row in
the OpenAI batch input format brings its own ``body``, whose fields (its own ``tools`` too) win
over the options.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from dspark_json.http.dedup import is_deterministic
from dspark_json.http.options import RequestOptions
from dspark_json.records import PromptRecord
from dspark_json.schema.tools import tool_choice_body

__all__ = ["RequestBuilder", "response_format_body"]


def response_format_body(schema: Mapping[str, Any]) -> dict[str, Any]:
    """The ``response_format`` object that asks for JSON following ``schema``."""
    title = str(schema.get("title") or "response")
    return {
        "type": "json_schema",
        "json_schema": {
            "name": re.sub(r"[^A-Za-z0-9_-]", "_", title)[:64],
            "schema": schema,
            "strict": True,
        },
    }


class RequestBuilder:
    """Builds the request body of each prompt for one query's request options.

    Parameters
    ----------
    options:
        The request options (responseFormat, tools, toolChoice, sampling, extraBody,
        systemPrompt).
    model:
        The model to ask (the one the driver settled; default: option ``model``).
    """

    def __init__(self, options: RequestOptions, model: str | None = None) -> None:
        shared: dict[str, Any] = {"model": model if model is not None else options.model}
        if options.response_format is not None:
            shared["response_format"] = response_format_body(options.response_format)
        if options.tools is not None:
            shared["tools"] = list(options.tools)
        if options.tool_choice is not None:
            shared["tool_choice"] = tool_choice_body(options.tool_choice, options.tools)
        sampling = {
            "max_tokens": options.max_tokens,
            "temperature": options.temperature,
            "top_p": options.top_p,
            "seed": options.seed,
            "n": options.n,
            "priority": options.priority,
        }
        shared.update({k: v for k, v in sampling.items() if v is not None})
        shared.update({k: v for k, v in (options.extra_body or {}).items() if k != "messages"})
        self.shared = shared
        self.system = options.system_prompt
        # '"model": ..., ...}': what follows each row's messages.
        self._tail = json.dumps(shared, ensure_ascii=False)[1:]
        self._tails: dict[str, str] = {}  # the same for a row's own model (a line's 'model')
        self._deterministic = is_deterministic(shared)

    def messages(self, messages: Sequence[Any]) -> list[Any]:
        """The row's messages, after the system prompt unless the row has its own."""
        if self.system is None or any(
            isinstance(m, dict) and m.get("role") == "system" for m in messages
        ):
            return list(messages)
        return [{"role": "system", "content": self.system}, *messages]

    def deterministic(self, record: PromptRecord) -> bool:
        """Whether ``record``'s request gets the same answer every time (temperature 0 or a
        seed, after the row's own fields: :func:`~dspark_json.http.dedup.is_deterministic`)."""
        if not record.overrides:
            return self._deterministic
        return is_deterministic({**self.shared, **record.overrides})

    def build(self, record: PromptRecord) -> bytes:
        """The JSON body for ``record`` (which must have messages)."""
        assert record.messages is not None
        messages = self.messages(record.messages)
        if record.overrides is not None and record.overrides.keys() == {"model"}:
            tail = self._tails.get(model := record.overrides["model"])
            if tail is None:
                shared = {**self.shared, "model": model}
                tail = self._tails[model] = json.dumps(shared, ensure_ascii=False)[1:]
            head = json.dumps(messages, ensure_ascii=False)
            return f'{{"messages": {head}, {tail}'.encode()
        if record.overrides:
            body = {**self.shared, **record.overrides, "messages": messages}
            return json.dumps(body, ensure_ascii=False).encode("utf-8")
        head = json.dumps(messages, ensure_ascii=False)
        return f'{{"messages": {head}, {self._tail}'.encode()
