"""Azure: every URL spelling read into one (account, container, key) for pyarrow and handed to
delta-rs as written; against Azurite (a flat-namespace account, started here from npm): files,
listings and Delta commits through one storageOptions value, no rename, a SAS token never shown,
and the whole stream end to end."""

from __future__ import annotations

import json
import logging
import os
import traceback
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest

from dspark_json import fs
from dspark_json.errors import OptionError
from dspark_json.load import check_output_directories
from dspark_json.options import Options
from dspark_json.storage import StorageSettings, delta_options, filesystem, parse_settings
from dspark_json.storage.azure import locate
from tests.helpers import write_prompts
from tests.stores.emulators import (
    AZURITE_ACCOUNT,
    AZURITE_KEY,
    AzureStore,
    account_sas,
    azurite,
    install_azurite,
)
from tests.stores.stream import ROWS, commit_one_file, put_prompts, run_stream

ACCOUNT = AZURITE_ACCOUNT
#: Every spelling of one place: container "dspark", key "t/x".
SPELLINGS = [
    "az://dspark/t/x",
    "azure://dspark/t/x",
    "abfs://dspark/t/x",
    "abfss://dspark/t/x",
    f"abfss://dspark@{ACCOUNT}.dfs.core.windows.net/t/x",
    f"abfs://dspark@{ACCOUNT}.blob.core.windows.net/t/x",
]


def settings(**values: str) -> StorageSettings:
    return parse_settings(json.dumps(values), environ={})


@pytest.mark.parametrize("uri", SPELLINGS)
def test_every_spelling_names_one_place(uri):
    assert locate(uri, settings(azure_storage_account_name=ACCOUNT)) == (ACCOUNT, "dspark", "t/x")


def test_the_account_comes_from_the_url_the_option_or_the_emulator():
    assert locate("abfss://c@acct.dfs.core.windows.net/k", settings())[0] == "acct"
    assert locate("az://c/k", settings(azure_storage_use_emulator="true"))[0] == ACCOUNT
    endpoint = settings(azure_storage_endpoint="http://127.0.0.1:1/someacct")
    assert locate("az://c/k", endpoint)[0] == "someacct"


def test_a_url_without_account_or_container_names_the_fix():
    with pytest.raises(OptionError, match="azure_storage_account_name"):
        locate("az://c/k", settings())
    with pytest.raises(OptionError, match="names no container"):
        locate("abfss://@acct.dfs.core.windows.net/k", settings())
    with pytest.raises(OptionError, match="make them agree"):
        locate("abfss://c@one.dfs.core.windows.net/k", settings(azure_storage_account_name="two"))


def test_delta_rs_gets_the_keys_and_allow_http_for_an_http_endpoint():
    given = settings(
        azure_storage_account_name=ACCOUNT,
        azure_storage_sas_key="sv=1&sig=zqSasCanary",  # an alias, folded
        azure_endpoint="http://127.0.0.1:10000/devstoreaccount1",
    )
    assert delta_options("az://c/k", given) == {
        "azure_storage_account_name": ACCOUNT,
        "azure_storage_sas_token": "sv=1&sig=zqSasCanary",
        "azure_storage_endpoint": "http://127.0.0.1:10000/devstoreaccount1",
        "allow_http": "true",
    }
    assert "zqSasCanary" not in repr(given)


@pytest.fixture(scope="module")
def store() -> Iterator[AzureStore]:
    reason = install_azurite()
    if reason is not None:
        pytest.skip(f"Azurite unavailable: {reason}")
    with azurite() as running:
        yield running


@pytest.mark.parametrize("uri", SPELLINGS)
def test_pyarrow_and_delta_rs_reach_one_place_by_any_spelling(store, uri):
    """A Parquet file written through pyarrow, committed by delta-rs at the same URL, read back
    by delta-rs: both ends agree on where the URL points."""
    from deltalake import DeltaTable

    table = uri.replace("/t/x", f"/spell/{SPELLINGS.index(uri)}")
    made = commit_one_file(table, store.options())
    assert made.table_at == table  # delta-rs is given the URL as written
    opened = DeltaTable(made.table_at, storage_options=made.options)
    assert opened.to_pyarrow_table() == made.data
    given = made.given
    assert fs.list_files(table, storage=given, suffixes=(".parquet",))[0].name == "part-0.parquet"


def test_writes_need_no_rename_on_a_flat_account(store):
    """Azurite has no hierarchical namespace: pyarrow's move() is not implemented there, so
    the journal's and metrics' writes and .load()'s probe must not rename."""
    given = parse_settings(json.dumps(store.options()), environ={})
    base = "az://dspark/flat"
    found = filesystem(base, given)
    assert found is not None
    pa_fs, root = found
    with pa_fs.open_output_stream(f"{root}/a") as sink:
        sink.write(b"x")
    with pytest.raises(pa.ArrowNotImplementedError):  # the store this test is about
        pa_fs.move(f"{root}/a", f"{root}/b")
    fs.check_writable(base, storage=given)
    fs.write_atomic(base, "m.json", b"{}", storage=given)
    fs.write_atomic(base, "m.json", b"{1}", storage=given)  # replaced
    assert fs.read_text(f"{base}/m.json", storage=given) == "{1}"
    assert [e.name for e in fs.list_files(base, storage=given, suffixes=(".json",))] == ["m.json"]


def test_a_sas_token_reaches_the_store_and_never_shows(store, caplog):
    """A token with every permission writes; a read-only one fails the write, and the error
    (pyarrow's quotes the request URL, the token's ``sig`` in it) and the log show no part of
    the signature."""
    full = account_sas(store.account, AZURITE_KEY, permissions="racwdl")
    read_only = account_sas(store.account, AZURITE_KEY, permissions="rl")
    options = {k: v for k, v in store.options().items() if k != "azure_storage_account_key"}
    base = "az://dspark/sas"
    writer = parse_settings(json.dumps({**options, "azure_storage_sas_token": full}), {})
    fs.write_atomic(base, "a.json", b"{}", storage=writer)
    assert fs.read_text(f"{base}/a.json", storage=writer) == "{}"
    reader = parse_settings(json.dumps({**options, "azure_storage_sas_token": read_only}), {})
    assert fs.read_text(f"{base}/a.json", storage=reader) == "{}"
    signature = read_only.split("sig=")[1]
    options = Options.parse(
        {
            "endpoint": "http://127.0.0.1:9",
            "prompts": "/p",
            "journal": base,
            "storageOptions": json.dumps({**options, "azure_storage_sas_token": read_only}),
        }
    )
    with caplog.at_level(logging.DEBUG), pytest.raises(OptionError) as refused:
        check_output_directories(options)
    shown = "".join(traceback.format_exception(refused.value))  # what Spark shows: the chain
    assert "Option 'journal'" in shown and "AuthorizationPermissionMismatch" in shown
    for text in (shown, caplog.text, repr(options)):
        assert signature not in text and signature[:12] not in text


@pytest.mark.spark
def test_the_stream_on_azurite_with_one_storage_options_value(spark, simulator, store, tmp_path):
    """Prompts, journal, metrics, cache and the Delta table on Azurite, every path reached by
    ``storageOptions`` alone (no environment variable); every row ok; a second run into a new
    table is served from the cache, no completion sent."""
    assert not any(k.startswith("AZURE_") for k in os.environ)
    options = store.options()
    base = "abfss://dspark@devstoreaccount1.dfs.core.windows.net/stream"
    put_prompts(base, options)
    first = run_stream(spark, simulator, base, options, table="t1", checkpoint=tmp_path / "c1")
    assert [r[1] for r in first.rows] == ["ok"] * ROWS, first.rows
    assert first.completions == ROWS
    assert any(n.startswith("metrics/") for n in first.names)
    assert any(n.startswith("cache/") for n in first.names), first.names
    assert not [n for n in first.names if ".tmp" in n]  # nothing left half-renamed
    again = run_stream(spark, simulator, base, options, table="t2", checkpoint=tmp_path / "c2")
    assert [r[1] for r in again.rows] == ["ok"] * ROWS
    assert again.completions == 0  # served from the cache on Azurite


@pytest.mark.spark
def test_load_with_a_read_only_sas_names_the_option_and_never_the_token(spark, store, tmp_path):
    """Through Spark: the journal cannot be written with a read-only SAS token; ``.load()``
    says so naming option 'journal', and its error (Python's traceback in Spark's) shows no
    part of the token's signature."""
    read_only = account_sas(store.account, AZURITE_KEY, permissions="rl")
    signature = read_only.split("sig=")[1]
    options = {k: v for k, v in store.options().items() if k != "azure_storage_account_key"}
    write_prompts(tmp_path / "in", "a.jsonl", [{"prompt": "x"}])

    def reader(token: str, journal: str) -> Any:
        return (
            spark.readStream.format("dspark-json")
            .option("endpoint", "http://127.0.0.1:9")
            .option("healthPath", "")
            .option("prompts", str(tmp_path / "in"))
            .option("journal", journal)
            .option("storageOptions", json.dumps({**options, "azure_storage_sas_token": token}))
        )

    with pytest.raises(Exception) as refused:
        reader(read_only, "az://dspark/ro/_journal").load()
    assert "Option 'journal'" in str(refused.value)
    assert signature not in str(refused.value) and signature[:12] not in str(refused.value)


def test_an_endpoint_becomes_pyarrows_authority_host_or_path_style():
    from dspark_json.storage.azure import _authority

    assert _authority("https://acct.blob.core.windows.net", "acct") == (
        ".blob.core.windows.net",
        "https",
    )
    assert _authority("http://127.0.0.1:10000/acct", "acct") == ("127.0.0.1:10000", "http")


def test_use_emulator_reaches_azurite_where_its_variable_says(store, monkeypatch):
    """``azure_storage_use_emulator`` alone: Azurite's account and key, at
    ``AZURITE_BLOB_STORAGE_URL`` (object_store's variable) for pyarrow and delta-rs alike."""
    from deltalake import DeltaTable, write_deltalake

    monkeypatch.setenv("AZURITE_BLOB_STORAGE_URL", store.endpoint)
    given = parse_settings(json.dumps({"azure_storage_use_emulator": True}), environ={})
    fs.write_atomic("az://dspark/emulated", "a.json", b"{}", storage=given)
    assert fs.read_text("az://dspark/emulated/a.json", storage=given) == "{}"
    table = "az://dspark/emulated/table"
    write_deltalake(table, pa.table({"a": [1]}), storage_options=delta_options(table, given))
    assert DeltaTable(table, storage_options=delta_options(table, given)).version() == 0
