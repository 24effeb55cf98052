import pytest

from dspark_json.parse.content import extract_json as compiled
from dspark_json.response.content import extract_json as stated


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"a": 1}', '{"a": 1}'),
        ('  \n{"a": 1}\n ', '{"a": 1}'),
        ('\ufeff{"a": 1}', '{"a": 1}'),
        ("[1, 2]", "[1, 2]"),
        ('```json\n{"a": 1}\n```', '{"a": 1}'),
        ('Sure!\n```\n{"a": 1}\n```\nAnything else?', '{"a": 1}'),
        ('```json\n{"a": 1', '{"a": 1'),
        ('Here you go: {"a": {"b": 2}} hope it helps', '{"a": {"b": 2}}'),
        ("No JSON here, sorry.", None),
        ("", None),
        ("} backwards {", None),
        ('"just a string"', '"just a string"'),
        ("42", "42"),
        ('{"a": 1} and {"b": 2}', '{"a": 1} and {"b": 2}'),
    ],
    ids=[
        "bare",
        "whitespace",
        "bom",
        "array",
        "fence",
        "fence-in-prose",
        "unclosed-fence",
        "prose",
        "no-json",
        "empty",
        "backwards",
        "json-string",
        "json-number",
        "starts-with-brace-taken-whole",
    ],
)
@pytest.mark.parametrize("extract_json", [compiled, stated], ids=["compiled", "stated"])
def test_extract_json(extract_json, text, expected):
    """The rule as the parser runs it (compiled) and as the schema stages run it (stated in
    Python, :mod:`dspark_json.response.content`) give the same candidate."""
    assert extract_json(text) == expected
