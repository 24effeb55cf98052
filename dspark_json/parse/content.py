"""Find the JSON document a model wrote inside its message content.

Models wrap JSON in Markdown fences (```json ... ```), put prose before or after it, or start with
a byte-order mark. The rule, applied in order:

1. Strip a BOM and surrounding whitespace. Text starting with ``{`` or ``[`` is taken whole.
2. Otherwise, the body of the first fenced block, when it starts with ``{`` or ``[``.
3. Otherwise, the text from the first ``{`` to the last ``}``.
4. Otherwise there is no JSON: the row's status is ``not_json``.
"""

from __future__ import annotations

__all__ = ["extract_json"]

_FENCE = "```"
_WHITESPACE = " \t\r\n\ufeff"


def extract_json(text: str) -> str | None:
    """The JSON text inside ``text``, or ``None`` where there is none to find."""
    stripped = text.strip(_WHITESPACE)
    if stripped.startswith(("{", "[")):
        return stripped
    fence = stripped.find(_FENCE)
    if fence >= 0:
        body_start = stripped.find("\n", fence)
        close = stripped.find(_FENCE, body_start + 1) if body_start >= 0 else -1
        if body_start >= 0:
            body = stripped[body_start + 1 : close if close >= 0 else len(stripped)]
            body = body.strip(_WHITESPACE)
            if body.startswith(("{", "[")):
                return body
    first, last = stripped.find("{"), stripped.rfind("}")
    if 0 <= first < last:
        return stripped[first : last + 1]
    return None
