from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.vllm.server import MODEL, VllmServer, installed


class Running:
    """A vLLM server the tier talks to: ``url`` and ``model``."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.model = MODEL


@pytest.fixture(scope="session")
def vllm() -> Iterator[Running]:
    """Real vLLM: started for the session (DSPARK_VLLM_URL: use one already running)."""
    given = os.environ.get("DSPARK_VLLM_URL")
    if given:
        yield Running(given)
        return
    why = installed()
    if why is not None:
        pytest.fail(why)
    with VllmServer() as server:
        yield Running(server.url)
