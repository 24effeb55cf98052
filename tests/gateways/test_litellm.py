"""Through LiteLLM's proxy itself (tests/gateways/install.sh: litellm[proxy] from PyPI), in
front of two simulator processes that serve one model name: default options land every row
``ok`` with nothing rescued, under its rpm limit too, and ``.load()`` sends no completion."""

from __future__ import annotations

import json
import time

import pytest

from tests.gateways.conftest import MODEL
from tests.gateways.servers import MASTER_KEY, LiteLLMProxy
from tests.gateways.stream import ROWS, completions, problems, reader, run, write
from tests.helpers import REVIEW_SCHEMA

pytestmark = [pytest.mark.gateway, pytest.mark.spark]


def test_through_litellm_load_sends_no_completion_and_every_row_lands_ok(spark, tmp_path, backends):
    ids = write(tmp_path / "in")
    with LiteLLMProxy([b.url for b in backends], MODEL) as gateway:
        options = {
            "endpoint": gateway.url,
            "model": MODEL,
            "apiKey": MASTER_KEY,
            "prompts": str(tmp_path / "in"),
        }
        schema = json.dumps(REVIEW_SCHEMA)  # given, nothing is sampled: .load() only checks
        before = completions(backends)
        reader(spark, **options, responseFormat=schema).load()
        after_load = completions(backends)
        # The count sees a completion where one is sent: LiteLLM's /health, asked for, sends
        # one to each deployment.
        reader(spark, **options, responseFormat=schema, healthPath="/health").load()
        after_health = completions(backends)
        rows = run(reader(spark, **options).load(), "through_litellm")  # default options
        after = completions(backends)
    assert after_load == before, "the default .load() sent completions through LiteLLM"
    assert [b - a for a, b in zip(after_load, after_health, strict=True)] == [1, 1]
    assert sorted(r.custom_id for r in rows) == ids
    assert problems(rows) == []  # every row ok, _rescued_data null
    assert all(b > a for a, b in zip(after_health, after, strict=True))  # both deployments


#: Each deployment's rpm: two windows (LiteLLM's are calendar minutes) hold fewer than ROWS
#: prompts, so the stream meets the limit whenever it starts, and waits out a window at least.
RPM = 60


def test_through_litellm_under_its_rpm_limit_every_row_lands_ok_with_default_options(
    spark, tmp_path, backends
):
    ids = write(tmp_path / "in")
    with LiteLLMProxy([b.url for b in backends], MODEL, rpm=RPM) as gateway:
        df = reader(
            spark,
            endpoint=gateway.url,
            model=MODEL,
            apiKey=MASTER_KEY,
            prompts=str(tmp_path / "in"),
        ).load()
        started = time.monotonic()
        rows = run(df, "through_litellm_rate_limited")
        took = time.monotonic() - started
    assert 2 * 2 * RPM < ROWS  # the premise: two windows are not enough
    assert sorted(r.custom_id for r in rows) == ids
    assert problems(rows) == []  # every row ok, _rescued_data null
    assert took > 60, f"{took:.0f} s: the rpm limit was never met"
