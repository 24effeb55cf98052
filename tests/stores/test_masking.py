"""Credentials never shown, through the stores' own code (s3://, gs://, az://, abfss://): a
canary in a URI or in option ``storageOptions`` is looked for in the errors, their chains and
the settings' ``repr``. The generic forms (any scheme) are in tests/test_url_credentials.py."""

from __future__ import annotations

import json

import pytest

from dspark_json import fs
from dspark_json.errors import OptionError, mask_uris, short_errors
from dspark_json.load import check_output_directories
from dspark_json.options import Options
from dspark_json.storage import delta_options, delta_uri, parse_settings
from dspark_json.storage.base import split_userinfo

CANARY = "zqStoreCanary5"
BASE = {"endpoint": "http://127.0.0.1:9", "prompts": "/p"}


def _chain(exc: BaseException) -> str:
    """Every text a traceback could show: the exception and its causes and contexts."""
    texts = []
    seen: BaseException | None = exc
    while seen is not None:
        texts.append(f"{type(seen).__name__}: {seen}")
        seen = seen.__cause__ or seen.__context__
    return " <- ".join(texts)


@pytest.mark.parametrize(
    ("uri", "keys"),
    [
        (f"gs://ann:{CANARY}@bucket/dir", "google_service_account"),
        (f"gcs://ann:x/{CANARY}@bucket/dir", "google_service_account"),
        (f"az://ann:{CANARY}@container/dir", "azure_storage_account_key"),
        (f"abfss://ann:{CANARY}@container.dfs.core.windows.net/d", "azure_storage_sas_token"),
    ],
)
def test_a_password_in_a_gcs_or_azure_uri_is_refused_naming_the_keys(uri, keys):
    with pytest.raises(OptionError, match="carries credentials") as caught:
        fs.kind_of(uri, storage=parse_settings("{}", {}))
    assert CANARY not in _chain(caught.value) and keys in str(caught.value)
    assert "storageOptions" in str(caught.value)


def test_a_container_at_an_account_is_no_secret():
    uri = "abfss://cont@acct.dfs.core.windows.net/x"
    assert mask_uris(f"cannot reach {uri}") == f"cannot reach {uri}"
    assert CANARY not in mask_uris(f"abfss://cont:{CANARY}@acct.dfs.core.windows.net/x")


def test_a_message_masked_twice_keeps_the_text_after_a_masked_value():
    # short_errors masks every error an entry point lets out, messages masked already included:
    # the second pass must not take the ')' and the advice after a masked query value.
    once = fs.query_problem("cache", "s3://b/c?sig=CANARY")
    assert once is not None and "CANARY" not in once
    assert mask_uris(once) == once
    assert "?sig=***): file names" in once


def test_azure_errors_pyarrow_raises_without_a_python_type_are_masked_oserrors():
    """A key that is not base64: pyarrow raises ArrowException, which no caller caught."""
    settings = parse_settings(
        json.dumps(
            {
                "azure_storage_account_key": "NOTBASE64!!",
                "azure_storage_endpoint": "http://127.0.0.1:9/acct",
            }
        ),
        {},
    )
    with pytest.raises(OSError) as caught:
        fs.kind_of("az://cont/dir", storage=settings)
    assert "127.0.0.1:9/acct/cont" in str(caught.value)


def test_a_sas_token_in_an_azure_error_is_masked_and_not_chained():
    settings = parse_settings(
        json.dumps(
            {
                "azure_storage_sas_token": f"sv=2021&sig={CANARY}",
                "azure_storage_endpoint": "http://127.0.0.1:9/acct",
            }
        ),
        {},
    )
    with pytest.raises(OSError) as caught:
        fs.kind_of("az://cont/dir", storage=settings)
    assert "sig=***" in str(caught.value)
    assert CANARY not in _chain(caught.value)


def test_an_output_directory_on_azure_is_named_masked_at_load():
    storage = json.dumps(
        {
            "azure_storage_sas_token": f"sig={CANARY}",
            "azure_storage_endpoint": "http://127.0.0.1:9/acct",
        }
    )
    options = Options.parse({**BASE, "journal": "az://cont/j", "storageOptions": storage})
    with pytest.raises(OptionError, match="Option 'journal' names az://cont/j") as caught:
        check_output_directories(options)
    assert CANARY not in _chain(caught.value)


@pytest.mark.parametrize(
    "value",
    [
        json.dumps({"client_email": CANARY, "private_key": "k"}),  # a key's JSON, wrongly placed
        f"/path/{CANARY}@x",
        f"http://{CANARY}@",  # no host
        f"{CANARY}://",
    ],
)
def test_a_plain_key_s_value_that_may_hold_a_secret_is_masked(value):
    settings = parse_settings(json.dumps({"google_service_account": value}), {})
    assert CANARY not in repr(settings)


def test_plain_values_are_still_shown():
    settings = parse_settings(
        json.dumps(
            {"aws_endpoint_url": "http://127.0.0.1:9000/p", "google_service_account": "/k.json"}
        ),
        {},
    )
    assert "http://127.0.0.1:9000/p" in repr(settings) and "/k.json" in repr(settings)


@pytest.mark.parametrize(
    "key", ["aws_endpoint_url", "aws_endpoint", "google_base_url", "azure_storage_endpoint"]
)
def test_user_info_in_an_endpoint_is_refused_at_parse(key):
    with pytest.raises(OptionError, match=f"'{key}' carries user info") as caught:
        parse_settings(json.dumps({key: f"http://u:{CANARY}@127.0.0.1:9000"}), {})
    assert CANARY not in str(caught.value)


def test_a_file_option_naming_a_uri_with_a_password_is_named_masked():
    storage = json.dumps({"google_base_url": "http://127.0.0.1:9"})
    with pytest.raises(OptionError, match="Option 'tools'") as caught:
        Options.parse(
            {**BASE, "tools": f"gs://ann:{CANARY}@bucket/tools.json", "storageOptions": storage}
        )
    assert CANARY not in _chain(caught.value)


def test_an_at_sign_in_an_s3_key_is_not_user_info():
    assert split_userinfo("s3://bkt/users/a@b.com") == (None, "bkt/users/a@b.com")
    assert split_userinfo("s3://k:se/cr@bkt/x") == ("k:se/cr", "bkt/x")
    assert split_userinfo("s3://k:s@bkt/x") == ("k:s", "bkt/x")


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ('{"aws_region": null}', "got a JSON null"),
        ('{"aws_region": NaN}', "got nan"),
        ('{"aws_region": Infinity}', "got inf"),
        ('{"aws_default_region": "a", "aws_region": "b"}', "gives 'aws_region' twice"),
    ],
)
def test_bad_values_are_named_in_json_s_words(text, problem):
    with pytest.raises(OptionError, match="storageOptions") as caught:
        parse_settings(text, {})
    assert problem in str(caught.value)


def test_a_data_source_entry_point_masks_every_error_it_lets_out():
    """delta-rs and our own messages quote a table URI whole (reader, sink): the entry points'
    decorator masks them, and chains nothing unmasked."""

    class DeltaLikeError(Exception):
        pass

    @short_errors
    def ours() -> None:
        raise OptionError(f"There is no Delta table at 's3://k:{CANARY}@bkt/t'")

    @short_errors
    def theirs() -> None:
        raise DeltaLikeError(f"Generic S3 error at s3://k:{CANARY}@bkt/t/_delta_log")

    with pytest.raises(OptionError) as caught:
        ours()
    assert CANARY not in _chain(caught.value) and "bkt/t" in str(caught.value)
    with pytest.raises(OSError, match="DeltaLikeError") as other:
        theirs()
    assert CANARY not in _chain(other.value) and "bkt/t" in str(other.value)


def test_an_s3_table_uri_s_credentials_go_to_delta_rs_as_keys():
    uri = "s3://AKIA:se%2Fcret@bkt/table"
    assert delta_uri(uri) == "s3://bkt/table"
    found = delta_options(uri, parse_settings('{"aws_region": "eu-west-1"}', {}))
    assert found["aws_access_key_id"] == "AKIA" and found["aws_secret_access_key"] == "se/cret"
    assert found["aws_region"] == "eu-west-1"


@pytest.mark.parametrize(
    ("uri", "path"),
    [
        ("s3://bkt/dir/a?b#c.jsonl", "bkt/dir/a?b#c.jsonl"),
        ("gs://bkt/dir/a?b#c.jsonl", "bkt/dir/a?b#c.jsonl"),
        ("az://cont/dir/a?b#c.jsonl", "cont/dir/a?b#c.jsonl"),
        ("abfss://cont@acct.dfs.core.windows.net/a#b?c", "cont/a#b?c"),
    ],
)
def test_a_listed_object_s_name_is_taken_as_written(uri, path):
    """An object named ``a?b#c`` (listed in a directory) is that object, not ``a``."""
    settings = parse_settings(
        json.dumps(
            {
                "aws_region": "eu-west-1",
                "google_base_url": "http://127.0.0.1:9",
                "azure_storage_account_name": "acct",
            }
        ),
        {},
    )
    assert fs.resolve(uri, settings)[1] == path


def test_a_fragment_in_a_directory_option_is_refused_like_a_query():
    with pytest.raises(OptionError, match="query string or fragment") as caught:
        Options.parse({**BASE, "journal": f"s3://bkt/j#{CANARY}"})
    assert "storageOptions" in str(caught.value)


def test_a_file_option_s_uri_with_a_query_has_its_own_message():
    with pytest.raises(OptionError, match="names a file by a URI with a query") as caught:
        Options.parse({**BASE, "tools": f"s3://bkt/tools.json?sig={CANARY}"})
    assert CANARY not in str(caught.value) and "appended" not in str(caught.value)


def test_the_environment_is_not_read_while_gcs_lends_its_variable():
    """parse_settings waits for the lock GCS holds while GOOGLE_APPLICATION_CREDENTIALS is lent
    (one query's file must not become another query's setting)."""
    import threading

    from dspark_json.storage import gcs

    done = threading.Event()
    with gcs.ENVIRONMENT_LOCK:
        reader = threading.Thread(target=lambda: (parse_settings(None, {}), done.set()))
        reader.start()
        assert not done.wait(0.3)  # blocked while the variable may be lent
    assert done.wait(5)
    reader.join()
