"""A prompt line's ``model`` checked at ``.load()`` against the models the endpoints serve
(:func:`dspark_json.http.preflight.check_line_models`): data whose ``model`` field means
something else (a car's model) fails at once, naming the values, the models served and the
fix, instead of every row waiting ``requestDeadline`` to end ``model_unavailable``; some models
not served get one WARN. Against a raw server on 127.0.0.1, no Spark."""

import json
import logging
from pathlib import Path

import pytest

from dspark_json.errors import ServerError
from dspark_json.load import prepare
from dspark_json.options import Options
from tests.raw_servers import Request, alive, raw_server, response


def serves_m(request: Request) -> bytes | None:
    return alive(request) or response(200, {})


def lines(directory: Path, models: list[str | None]) -> None:
    rows = [
        {"prompt": f"describe it {i}", **({"model": m} if m is not None else {})}
        for i, m in enumerate(models)
    ]
    (directory / "a.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def load(server_url: str, prompts: Path):
    return prepare(Options.parse({"endpoint": server_url, "prompts": str(prompts), "model": "m"}))


def test_a_model_field_that_names_no_served_model_fails_load_naming_values_and_fix(tmp_path):
    long = "Land Cruiser " + "x" * 200
    secret = "https://user:s3cret@cars.example/specs"
    lines(tmp_path, ["Corolla", "Civic", long, secret] + ["Corolla"] * 20)
    with raw_server(serves_m) as server, pytest.raises(ServerError) as caught:
        load(server.url, tmp_path)
    message = str(caught.value)
    assert "'Corolla'" in message and "'Civic'" in message
    assert "'m'" in message  # what the endpoints serve
    assert "rename it in the data" in message and "serve those models" in message
    assert "in 24 of the lines sampled" in message
    assert "s3cret" not in message  # values are masked
    assert "x" * 80 not in message and "Land Cruiser " + "x" * 60 in message  # and cut


def test_some_lines_naming_a_model_not_served_get_one_warning(tmp_path, caplog):
    lines(tmp_path, ["m", "ghost", "m", "ghost", None])
    with raw_server(serves_m) as server, caplog.at_level(logging.WARNING, "dspark_json"):
        query = load(server.url, tmp_path)
    assert query.model == "m"
    warnings = [r.getMessage() for r in caplog.records if "no endpoint serves" in r.getMessage()]
    assert len(warnings) == 1 and "'ghost'" in warnings[0] and "'m'" in warnings[0]


def test_lines_without_a_model_or_naming_served_ones_cost_no_more_requests(tmp_path, caplog):
    lines(tmp_path, [None, None])
    with raw_server(serves_m) as server, caplog.at_level(logging.WARNING, "dspark_json"):
        load(server.url, tmp_path)
        plain = server.paths().count("/v1/models")
    lines(tmp_path, ["m", "m"])
    with raw_server(serves_m) as server, caplog.at_level(logging.WARNING, "dspark_json"):
        load(server.url, tmp_path)
        served = server.paths().count("/v1/models")
    assert plain == 1  # as before: the lines name no model, nothing more is asked
    assert served == 2  # one more look, and nothing to say
    assert not [r for r in caplog.records if "no endpoint serves" in r.getMessage()]
