"""The first minute explained (dspark_json/phases.py): one INFO line per phase, once per query
in a process; the first requests' line as a task sends them (the pool's hold:
tests/http/test_gauges.py; the CPU parser's line at INFO: tests/test_fail_early.py)."""

import json
import logging

from dspark_json import pipeline
from dspark_json.options import Options, Query
from dspark_json.phases import PHASES, phase
from dspark_json.records import PromptRecord
from tests.raw_servers import completion, raw_server, response


def test_a_phase_is_one_info_line_per_key(caplog):
    caplog.set_level(logging.INFO, logger=PHASES)
    for _ in range(3):
        phase(("test", "a"), "Phase %s.", "a")
    phase(("test", "b"), "Phase %s.", "b")
    lines = [(r.levelname, r.getMessage()) for r in caplog.records if r.name == PHASES]
    assert lines == [("INFO", "Phase a."), ("INFO", "Phase b.")]


def test_the_first_requests_of_a_query_are_said_once(caplog):
    caplog.set_level(logging.INFO, logger=PHASES)

    def answer(request):
        return response(200, completion(json.dumps({"a": 1})))

    records = [
        PromptRecord(
            custom_id=f"r{i}",
            messages=[{"role": "user", "content": "q"}],
            fields={},
            raw="q",
            where=f"row {i}",
        )
        for i in range(3)
    ]
    with raw_server(answer) as server:
        query = Query(
            options=Options.parse({"endpoint": server.url}, unused=("prompts",)), model="m"
        )
        pipeline.fetch(records, query)
        pipeline.fetch(records, query)  # the same query's next task in this process: no line
        pipeline.fetch(records, Query(options=query.options, model="m"))  # another query
    lines = [r.getMessage() for r in caplog.records if "First requests sent" in r.getMessage()]
    assert lines == ["First requests sent: 3 prompt(s) of this task to model m."] * 2
