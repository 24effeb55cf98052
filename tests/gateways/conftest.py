"""The `gateway` tier's fixtures: two simulator processes serving one model name, and the
check that the gateways are installed (the tier is skipped, with the reason, where not)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from dspark_json.dev.local import SimulatorProcess
from tests.gateways.servers import installed

#: The model name both backends serve, and the gateways route.
MODEL = "dspark-sim"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Without the gateways, the tier's tests are skipped, saying why, before Spark starts."""
    why = installed()
    if why is None:
        return
    for item in items:
        if item.get_closest_marker("gateway") is not None:
            item.add_marker(pytest.mark.skip(reason=why))


@pytest.fixture
def backends() -> Iterator[list[SimulatorProcess]]:
    """Two simulator processes (no latency, different seeds) serving :data:`MODEL`."""
    with (
        SimulatorProcess(seed=1, model=MODEL) as first,
        SimulatorProcess(seed=2, model=MODEL) as second,
    ):
        yield [first, second]
