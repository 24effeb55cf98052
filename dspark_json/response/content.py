"""The content rule: where the JSON document is in a model's message content (or in a tool
call's arguments), stated once, in plain Python.

Models wrap JSON in Markdown fences (```json ... ```), put prose before or after it, or start with
a byte-order mark. The rule, after stripping whitespace and BOMs from both ends:

1. text that is valid JSON, or that starts with ``{`` or ``[``, is taken whole;
2. otherwise, the body of the first fenced block, when it starts with ``{`` or ``[``;
3. otherwise, the text from the first ``{`` to the last ``}``;
4. otherwise there is no JSON: the row's status is ``not_json``.

The stages that read one text at a time (schema inference, validation, tool typing) call
:func:`extract_json`; the parser runs the same rule compiled over whole columns
(``dspark_json.parse.json``'s ``extract_row``), and its conformance suite holds the two equal.
"""

from __future__ import annotations

from dspark_json.response.rules import loads_python

__all__ = ["extract_json"]

#: What the rule strips from both ends: JSON's whitespace and byte-order marks.
_STRIPPED = " \t\n\r\ufeff"


def extract_json(text: str) -> str | None:
    """The JSON candidate inside ``text`` (not necessarily valid), or ``None`` where none."""
    s = text.strip(_STRIPPED)
    if not s:
        return None
    if s[0] in "{[":
        return s
    try:
        loads_python(s.encode("utf-8", "surrogatepass"))
        return s
    except (ValueError, RecursionError):
        pass
    fence = s.find("```")
    if fence >= 0:
        newline = s.find("\n", fence)
        if newline >= 0:
            close = s.find("```", newline + 1)
            body = s[newline + 1 : close if close >= 0 else len(s)].strip(_STRIPPED)
            if body[:1] in ("{", "["):
                return body
    first, last = s.find("{"), s.rfind("}")
    if 0 <= first < last:
        return s[first : last + 1]
    return None
