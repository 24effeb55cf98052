"""Fixtures the HTTP stage's tests share."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def own_readings(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test's /metrics readings shared in a directory of its own (http.readings): tests
    that mock one URL's /metrics one after another must not read each other's."""
    folder = tmp_path_factory.mktemp("readings")
    monkeypatch.setattr("dspark_json.http.readings.directory", lambda: folder)


@pytest.fixture
def no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    """No proxy from the environment the tests run in (it would take the requests elsewhere)."""
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)


def self_signed(tmp_path: Path, name: str) -> tuple[Path, Path]:
    """A certificate for the DNS name ``name`` and its key, made by openssl (the test is skipped
    without it): (cert.pem, key.pem)."""
    if shutil.which("openssl") is None:
        pytest.skip("needs the openssl command")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        [
            *("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"),
            *("-subj", f"/CN={name}", "-addext", f"subjectAltName=DNS:{name}"),
            *("-keyout", str(key), "-out", str(cert)),
        ],
        check=True,
        capture_output=True,
    )
    return cert, key


def request_body(prompt: str) -> bytes:
    """A chat completion request for model ``m`` with one user message."""
    return json.dumps({"model": "m", "messages": [{"role": "user", "content": prompt}]}).encode()
