"""The storage settings without Spark: option storageOptions over the environment variables,
the keys each store reads and hands to pyarrow and delta-rs, masking, the query-string rule,
and (against moto's S3 server) writes that need no rename."""

from __future__ import annotations

import json
import logging
import pickle

import pyarrow.fs as pafs
import pytest

from dspark_json import fs
from dspark_json.errors import OptionError
from dspark_json.options import Options
from dspark_json.storage import (
    StorageSettings,
    delta_options,
    missing_credentials,
    parse_settings,
    store_of,
)
from dspark_json.storage.settings import in_effect, parsing

SECRET = "zqStoreSecret9"
BASE = {"endpoint": "http://127.0.0.1:9", "prompts": "/p"}


def test_the_option_is_laid_over_the_environment():
    environ = {
        "AWS_ACCESS_KEY_ID": "from-env",
        "AWS_SECRET_ACCESS_KEY": "env-secret",
        "AWS_DEFAULT_REGION": "eu-west-1",
        "AWS_ENDPOINT_URL": "http://env.invalid:9000",
        "HOME": "/root",  # not a store's: not taken
    }
    given = json.dumps({"AWS_ACCESS_KEY_ID": "from-option", "aws_default_region": "us-east-2"})
    settings = parse_settings(given, environ)
    assert settings.get("aws_access_key_id") == "from-option"  # the option wins, any case
    assert settings.get("aws_region") == "us-east-2"  # an alias folds to its key
    assert settings.get("aws_secret_access_key") == "env-secret"  # the rest from the env
    assert settings.get("aws_endpoint_url") == "http://env.invalid:9000"
    assert "home" not in dict(settings.values)
    assert settings.given == frozenset({"aws_access_key_id", "aws_region"})


def test_aws_region_outranks_aws_default_region_in_the_environment():
    settings = parse_settings(None, {"AWS_DEFAULT_REGION": "b", "AWS_REGION": "a"})
    assert settings.get("aws_region") == "a"


def test_values_are_masked_but_harmless_ones_and_survive_pickling():
    given = {
        "aws_secret_access_key": SECRET,
        "aws_access_key_id": SECRET,
        "aws_region": "eu-west-1",
        "aws_endpoint_url": "http://127.0.0.1:9000",
    }
    settings = parse_settings(json.dumps(given), {})
    shown = repr(settings)
    assert SECRET not in shown and SECRET not in str(settings)
    assert "eu-west-1" in shown and "127.0.0.1:9000" in shown
    again = pickle.loads(pickle.dumps(settings))
    assert again == settings and again.get("aws_secret_access_key") == SECRET


def test_bad_option_text_is_refused_naming_the_option_never_the_value():
    for text, problem in (
        ('{"aws_secret_access_key": "' + SECRET, "must be a JSON object"),
        (f'["{SECRET}"]', "got a JSON array"),
        (f'{{"aws_secret_acess_key": "{SECRET}"}}', "which no store reads"),
        (f'{{"aws_region": ["{SECRET}"]}}', "must be a string, number or boolean"),
    ):
        with pytest.raises(OptionError, match="storageOptions") as caught:
            Options.parse({**BASE, "storageOptions": text})
        assert problem in str(caught.value) and SECRET not in str(caught.value)


def test_hostile_option_text_gets_an_error_naming_the_option_and_what_is_wrong():
    for text, problem in (
        ("[" * 100_000, "nests arrays or objects too deep"),
        ('{"aws_region": ' + "1" * 5_000 + "}", "holds a number of 5000 digits"),
        ('{"aws_region": "' + "x" * (1 << 20) + '"}', "over 1048576"),
    ):
        with pytest.raises(OptionError, match="storageOptions") as caught:
            Options.parse({**BASE, "storageOptions": text})
        assert problem in str(caught.value)


@pytest.mark.parametrize(
    "key",
    [
        "AKIAIOSFODNN7EXAMPLE",  # an AWS access key id
        "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",  # an AWS secret key
        "ghp_16C7e42F292c6912E7710c838347Ae178B4a",  # a GitHub token
        "sk-proj-4f9aT3BlbkFJx8",
        "https://user:pass@host",
        "a" * 65,
    ],
)
def test_a_secret_pasted_as_a_key_is_never_shown(key):
    with pytest.raises(OptionError, match="not shown") as caught:
        Options.parse({**BASE, "storageOptions": json.dumps({key: "x"})})
    assert key not in str(caught.value) and f"of {len(key)} character(s)" in str(caught.value)


@pytest.mark.parametrize(
    "key", ["aws_regoin", "AWS_REGOIN", "google.service-account", "s3_Region2"]
)
def test_a_misspelt_setting_s_name_is_shown(key):
    with pytest.raises(OptionError, match="which no store reads") as caught:
        Options.parse({**BASE, "storageOptions": json.dumps({key: "x"})})
    assert repr(key) in str(caught.value)


def test_booleans_and_numbers_become_text():
    settings = parse_settings('{"aws_allow_http": true, "aws_region": 1}', {})
    assert settings.get("aws_allow_http") == "true" and settings.flag("aws_allow_http")


def test_options_carry_the_settings_to_every_stage_that_reads_a_path():
    options = Options.parse({**BASE, "storageOptions": '{"aws_region": "eu-west-3"}'})
    assert options.storage.settings.get("aws_region") == "eu-west-3"
    assert options.http.storage is options.storage.settings  # endpointsFile is read with them


def test_a_file_option_is_read_with_the_settings_being_parsed():
    settings = parse_settings('{"aws_region": "eu-west-3"}', {})
    assert in_effect().values == ()
    with parsing(settings):
        assert in_effect() is settings
    assert in_effect().values == ()  # scoped to the parse: nothing process-wide


@pytest.mark.parametrize(
    ("uri", "store"),
    [
        ("s3://b/k", "S3"),
        ("s3a://b/k", "S3"),
        ("gs://b/k", "GCS"),
        ("gcs://b/k", "GCS"),
        ("abfss://c@a.dfs.core.windows.net/k", "Azure"),
        ("abfs://c@a.dfs.core.windows.net/k", "Azure"),
        ("az://c/k", "Azure"),
        ("azure://c/k", "Azure"),
    ],
)
def test_each_scheme_names_its_store(uri, store):
    found = store_of(uri)
    assert found is not None and found.name == store


@pytest.mark.parametrize("uri", ["/data/x", "file:///data/x", "hdfs://nn/x"])
def test_local_and_hdfs_are_pyarrows_own(uri):
    assert store_of(uri) is None and delta_options(uri, StorageSettings()) == {}


def test_s3_keys_become_pyarrow_arguments_and_delta_rs_options():
    given = {
        "aws_access_key_id": "id",
        "aws_secret_access_key": "secret",
        "aws_endpoint_url": "http://127.0.0.1:9000",
    }
    settings = parse_settings(json.dumps(given), {})
    filesystem, path = fs.resolve("s3a://bucket/some/dir/", settings)
    assert isinstance(filesystem, pafs.S3FileSystem) and path == "bucket/some/dir"
    delta = delta_options("s3://bucket/t", settings)
    assert delta["aws_endpoint_url"] == "http://127.0.0.1:9000" and delta["aws_secret_access_key"]
    assert delta["aws_allow_http"] == "true"  # an http endpoint: delta-rs needs the flag
    https = parse_settings('{"aws_endpoint_url": "https://s3.example"}', {})
    assert "aws_allow_http" not in delta_options("s3://bucket/t", https)


def test_a_key_without_its_secret_is_named_at_load():
    settings = parse_settings('{"aws_access_key_id": "id"}', {})
    missing = missing_credentials("s3://b/k", settings)
    assert missing is not None and "aws_secret_access_key" in missing
    with pytest.raises(OptionError, match="Option 'journal' names s3://b/j: S3: aws_access_key_id"):
        from dspark_json.load import check_storage

        check_storage(
            Options.parse(
                {**BASE, "journal": "s3://b/j", "storageOptions": '{"aws_access_key_id": "x"}'}
            )
        )


@pytest.mark.parametrize("option", ["prompts", "responses", "journal", "metrics", "cache"])
def test_a_directory_uri_with_a_query_string_is_refused_at_parse(option):
    raw = {"endpoint": "http://127.0.0.1:9", option: f"s3://b/dir?sig={SECRET}"}
    if option != "prompts" and option != "responses":
        raw["prompts"] = "/p"
    with pytest.raises(OptionError, match=f"Option '{option}' is a URI with a query string"):
        try:
            Options.parse(raw)
        except OptionError as exc:
            assert SECRET not in str(exc) and "storageOptions" in str(exc)
            raise


def test_writes_on_s3_need_no_rename(s3, caplog):
    """On an object store the final name is written at once (one PUT): no temporary object,
    no copy (S3's rename), so a store without a rename (a flat Azure account) works too."""
    settings = parse_settings(s3.options_json, {})
    directory = f"s3://{s3.bucket}/journal"
    with caplog.at_level(logging.INFO, logger="werkzeug"):  # moto's request log
        fs.check_writable(directory, storage=settings)
        fs.write_atomic(directory, "a.json", b"{}", storage=settings)
        fs.write_atomic(directory, "a.json", b'{"again": 1}', storage=settings)  # replaced
    written = {  # the object names written (PUT, or a multipart upload's POST)
        line.split()[1].split("?")[0].rsplit("/", 1)[-1]
        for line in (r.getMessage().split('"', 2)[1] for r in caplog.records)
        if line.split()[0] in ("PUT", "POST") and "/journal/" in line
    }
    assert not [name for name in written if name.endswith(".tmp")], written
    assert "a.json" in written and len(written - {"a.json", ""}) == 1  # and the probe
    listed = fs.list_files(directory, suffixes=(".json",), storage=settings)
    assert [e.name for e in listed] == ["a.json"]  # no probe or temporary file left
    assert fs.read_text(listed[0].path, storage=settings) == '{"again": 1}'
    assert fs.kind_of(directory, storage=settings) == "directory"


def test_s3_without_the_settings_is_not_reached(s3):
    """Proof the settings are what reach the emulator: the same bucket, without them, is
    another (unreachable) store."""
    wrong = parse_settings(
        json.dumps({**s3.options, "aws_endpoint_url": "http://127.0.0.1:9", "aws_region": "x"}),
        {},
    )
    with pytest.raises(OSError):
        fs.check_writable(f"s3://{s3.bucket}/journal", storage=wrong)


def test_a_write_the_store_cannot_do_is_logged_and_the_rows_go_on(tmp_path, monkeypatch, caplog):
    """A store without what a write needs (pyarrow's ArrowNotImplementedError, e.g. a rename
    where there is none) costs the journal entry or the cache entry (the metrics record
    alike), never the answers: each is logged, and nothing is raised."""
    import pyarrow as pa

    from dspark_json.http import cache as cache_module
    from dspark_json.inputs import journal as journal_module
    from dspark_json.inputs.journal import Journal
    from dspark_json.inputs.listing import Position, Segment
    from dspark_json.records import Outcome, Outcomes

    def not_implemented(*args, **kwargs):
        raise pa.ArrowNotImplementedError("Move() not implemented")

    for module in (journal_module, cache_module):
        monkeypatch.setattr(module, "write_atomic", not_implemented)
    journal = Journal(str(tmp_path))
    key = journal.key([Segment("/in/a.jsonl", 0, 1)])
    with caplog.at_level(logging.WARNING, logger="dspark_json"):
        assert not journal.save(key, Position("a.jsonl", 1), Outcomes.of([Outcome(body="{}")]))
        body = '{"object": "chat.completion", "choices": []}'
        assert not cache_module.ResponseCache(str(tmp_path), "m").put(b"{}", body)
    messages = " ".join(r.getMessage() for r in caplog.records)
    assert "journal" in messages and "cache" in messages and "Move()" in messages


def test_a_table_uri_with_a_query_string_is_refused_by_the_sink_and_the_reader():
    from pyspark.sql.types import LongType, StructField, StructType

    from dspark_json.delta.reader import snapshot
    from dspark_json.delta.sink import _target

    table = f"s3://b/t?sig={SECRET}"
    schema = StructType([StructField("x", LongType())])
    for call in (
        lambda: _target({"path": table}, schema, streaming=False),
        lambda: snapshot({"path": table}, format_name="dspark-delta"),
    ):
        with pytest.raises(OptionError, match="'path' is a URI with a query string") as caught:
            call()
        assert SECRET not in str(caught.value) and "storageOptions" in str(caught.value)


def test_an_s3_uri_s_own_credentials_reach_pyarrow_and_not_its_path():
    """``s3://key:secret@bucket/...`` (as pyarrow's from_uri reads it, the secret URL-encoded):
    the key and secret become the filesystem's, the path is the bucket's."""
    endpoint = parse_settings('{"aws_endpoint_url": "http://127.0.0.1:9"}', {})
    filesystem, path = fs.resolve("s3://AKIA:se%2Fcret@bucket/k", endpoint)
    arguments = filesystem.__reduce__()[1][0]  # what the filesystem was built with
    assert (arguments["access_key"], arguments["secret_key"], path) == (
        "AKIA",
        "se/cret",
        "bucket/k",
    )


def test_the_docs_store_table_lists_every_store_s_environment_variables():
    from pathlib import Path

    from dspark_json.storage.settings import STORES

    page = Path(__file__).resolve().parents[2] / "docs" / "guide" / "object-stores.md"
    text = page.read_text(encoding="utf-8")
    rows = {line.split("|")[1].strip(): line for line in text.splitlines() if line.count("|") > 4}
    for store in STORES:
        row = next(line for name, line in rows.items() if name.startswith(store.name))
        missing = [v for v in store.environment if f"`{v}`" not in row.split("|")[4]]
        assert not missing, f"docs/guide/object-stores.md's {store.name} row lacks {missing}"
