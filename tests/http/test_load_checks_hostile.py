"""The checks at .load() against hostile options and servers (issue 53): option healthPath with
a control character, 100 KB of it or a '..' segment refused naming the option; a /v1/models
with a million ids makes a bounded message; many endpoints are checked in parallel within a
bounded total time, each endpoint known down skipped by the later checks."""

from __future__ import annotations

import pytest

from dspark_json.errors import OptionError
from dspark_json.options import Options


def parse(**options: str) -> Options:
    return Options.parse({"endpoint": "http://127.0.0.1:1", "prompts": "/p", **options})


@pytest.mark.parametrize(
    ("path", "said"),
    [
        ("/hea\tlth", "a control character ('\\t')"),
        ("/health\x00", "a control character ('\\x00')"),
        ("/" + "h" * 100_000, "100001 characters long, over 1024"),
        ("/../../../health", "a '.' or '..' segment"),
        ("/v1/%2E%2e/health", "a '.' or '..' segment"),
        ("/./health", "a '.' or '..' segment"),
    ],
)
def test_a_health_path_with_a_control_character_huge_or_escaping_is_refused(path, said):
    with pytest.raises(OptionError) as caught:
        parse(healthPath=path)
    message = str(caught.value)
    assert "Option 'healthPath'" in message and said in message and "'/health'" in message
    assert len(message) < 600


def test_a_health_path_with_dots_inside_a_segment_is_accepted():
    assert parse(healthPath="/health/v1.2..x").http.health_path == "/health/v1.2..x"
