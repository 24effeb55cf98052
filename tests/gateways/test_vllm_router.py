"""Through vllm-router itself (tests/gateways/install.sh: vllm-router from PyPI), in front of
two simulator processes: default options land every row ``ok`` with nothing rescued, and with
one backend stopped (its /health 503) ``.load()`` still starts and rows land ``ok``."""

from __future__ import annotations

import time

import httpx
import pytest
from pyspark.errors import AnalysisException

from tests.gateways.conftest import MODEL
from tests.gateways.servers import VllmRouter
from tests.gateways.stream import completions, problems, reader, run, write

pytestmark = [pytest.mark.gateway, pytest.mark.spark]


def test_through_vllm_router_every_row_lands_ok_with_one_backend_stopped_too(
    spark, tmp_path, backends
):
    ids = write(tmp_path / "in")
    later = write(tmp_path / "later", n=100, tag="q")
    with VllmRouter([b.url for b in backends]) as router:
        rows = run(
            reader(spark, endpoint=router.url, model=MODEL, prompts=str(tmp_path / "in")).load(),
            "through_router",
        )
        served = completions(backends)
        backends[1].stop()
        deadline = time.monotonic() + 30
        while httpx.get(f"{router.url}/health", timeout=5).status_code != 503:
            assert time.monotonic() < deadline, "vllm-router's /health never said 503"
            time.sleep(0.5)
        options = {"endpoint": router.url, "model": MODEL, "prompts": str(tmp_path / "later")}
        # Asked for, its /health is the aggregate that fails .load() (the check can fail).
        with pytest.raises(AnalysisException, match="answered HTTP 503"):
            reader(spark, **options, healthPath="/health").load()
        degraded = run(reader(spark, **options).load(), "through_router_degraded")
    assert sorted(r.custom_id for r in rows) == ids
    assert problems(rows) == []  # every row ok, _rescued_data null
    assert all(n > 0 for n in served)  # the router used both
    assert sorted(r.custom_id for r in degraded) == later
    assert problems(degraded) == []
