from __future__ import annotations

from collections.abc import Iterator

import pytest

import tests.helpers  # noqa: F401  (sets the canary key in the environment first)
from dspark_json.dev.local import SimulatorProcess, local_spark
from dspark_json.parse import gpu, warmup
from dspark_json.parse.cpu import warm_kernels

#: Seconds a Spark test may take (a JVM start, streaming queries, kill -9 restarts) before it
#: counts as hung; the others have pyproject's timeout.
SPARK_TIMEOUT_S = 900


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # By marker, not by keyword: an item's keywords hold the names of the directories above it
    # too, so a checkout in a directory named vllm would lose every test.
    # The tiers of real third-party servers: make test-vllm, make test-gateways.
    for tier in ("vllm", "gateway"):
        if tier not in config.getoption("markexpr"):
            deselected = [item for item in items if item.get_closest_marker(tier)]
            if deselected:
                config.hook.pytest_deselected(items=deselected)
                items[:] = [item for item in items if not item.get_closest_marker(tier)]
    for item in items:
        if item.get_closest_marker("spark") and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(SPARK_TIMEOUT_S))
    reason = gpu.unavailable_reason()
    if reason is None:
        return
    skip = pytest.mark.skip(reason=f"GPU backend unavailable: {reason}")
    for item in items:
        if item.get_closest_marker("gpu") is not None:  # the marker (not tests/parse/gpu/)
            item.add_marker(skip)


def pytest_sessionstart(session: pytest.Session) -> None:
    """The vectorised parser's kernels compiled before any test: small test batches must take
    the vectorised path, not the reference parser that stands in while they compile
    (tests/parse/test_warmup.py checks that path on its own, in a fresh process). Here, not in
    a fixture, so that a cold compile (a fresh checkout, mutmut's copy) never counts against
    the first test's timeout."""
    warmup.wait(warm_kernels)


@pytest.fixture(scope="session")
def simulator() -> Iterator[SimulatorProcess]:
    with SimulatorProcess(seed=7) as server:
        yield server


@pytest.fixture(scope="session")
def spark():
    session = local_spark("dspark-json tests")
    import dspark_json

    dspark_json.register(session)
    yield session
    session.stop()
