"""Object store emulators on 127.0.0.1, started by the tests: moto's S3 server here (the
``test`` extra installs ``moto[server]``); each test that needs one skips, naming why, where it
cannot be started."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass

import pytest


@dataclass(frozen=True)
class S3:
    """A running S3 emulator and the storageOptions that reach its bucket ``bucket``."""

    endpoint: str
    bucket: str

    @property
    def options(self) -> dict[str, str]:
        return {
            "aws_endpoint_url": self.endpoint,
            "aws_access_key_id": "AKIAEMULATOR",
            "aws_secret_access_key": "emulator/secret",
            "aws_region": "us-east-1",
        }

    @property
    def options_json(self) -> str:
        return json.dumps(self.options)


@pytest.fixture(scope="session")
def s3_server() -> Iterator[str]:
    """The endpoint of a moto S3 server on 127.0.0.1 (a free port), for the session."""
    try:
        from moto.server import ThreadedMotoServer
    except ImportError as exc:  # the test extra not installed
        pytest.skip(f"moto[server] cannot be imported ({exc}): pip install -e '.[test]'")
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()


@pytest.fixture
def s3(s3_server: str, request: pytest.FixtureRequest) -> S3:
    """A new, empty bucket on the session's S3 emulator."""
    import boto3

    name = "t-" + "".join(c if c.isalnum() else "-" for c in request.node.name.lower())[:50]
    name = name.strip("-")
    boto3.client(
        "s3",
        endpoint_url=s3_server,
        aws_access_key_id="AKIAEMULATOR",
        aws_secret_access_key="emulator/secret",
        region_name="us-east-1",
    ).create_bucket(Bucket=name)
    return S3(s3_server, name)
