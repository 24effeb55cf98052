"""Option ``priority``: sent as the request's ``priority``, and checked at ``.load()`` with one
request, so that a server without priority scheduling fails the query before any prompt."""

import json

import pytest

from dspark_json.dev.local import SimulatorProcess
from dspark_json.dev.simulator import Faults
from dspark_json.errors import OptionError, ServerError
from dspark_json.inputs.prompts import prompt_record
from dspark_json.load import prepare
from dspark_json.options import Options
from dspark_json.request.body import RequestBuilder

BASE = {"endpoint": "http://h:1", "prompts": "/p", "model": "dspark-sim"}


def test_priority_is_sent_in_each_request_and_absent_by_default():
    record = prompt_record({"prompt": "hi"}, "", "row 1")
    with_it = RequestBuilder(Options.parse({**BASE, "priority": "10"}).request).build(record)
    without = RequestBuilder(Options.parse(BASE).request).build(record)
    assert json.loads(with_it)["priority"] == 10
    assert "priority" not in json.loads(without)


def test_priority_must_be_a_whole_number():
    with pytest.raises(OptionError, match="'priority'"):
        Options.parse({**BASE, "priority": "high"})


def test_load_refuses_priority_on_a_fcfs_server_before_any_prompt(tmp_path):
    with SimulatorProcess() as server:
        options = Options.parse({**BASE, "endpoint": server.url, "priority": "10"})
        with pytest.raises(ServerError) as caught:
            prepare(options)
        stats = server.stats()
    message = str(caught.value)
    assert "Option 'priority'=10" in message and server.url in message
    assert "--scheduling-policy priority" in message
    assert "Got priority 10 but Priority scheduling is not enabled." in message
    # The one probe was refused: nothing was answered.
    assert stats.get("completions_ok", 0) == 0 and stats["status_400"] == 1


def test_load_accepts_priority_on_a_priority_server():
    faults = Faults(scheduling_policy="priority")
    with SimulatorProcess(faults=faults) as server:
        query = prepare(Options.parse({**BASE, "endpoint": server.url, "priority": "10"}))
        stats = server.stats()
    assert query.model == "dspark-sim" and stats["completions_ok"] == 1  # the probe


def test_no_probe_without_priority():
    with SimulatorProcess() as server:
        prepare(Options.parse({**BASE, "endpoint": server.url, "priority": "0"}))
        assert server.stats().get("chat_completions", 0) == 0
