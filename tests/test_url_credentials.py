"""Credentials in any option that takes a URL (prompts, responses, journal, metrics, cache,
schemaEndpoint; endpoint has its own tests) never show: a canary fed through each is looked for
in the errors .load() raises, the log records and the options' repr. One function masks them
(:func:`dspark_json.fs.mask_uris`, which :func:`dspark_json.http.secrets.redact` uses):
``user:password@`` and SAS-like query parameters."""

from __future__ import annotations

import logging
import pickle

import pytest

from dspark_json.errors import DSparkJsonError, OptionError
from dspark_json.fs import Location, mask_uris
from dspark_json.http.secrets import REDACTION_PATTERN, redact
from dspark_json.inputs.listing import PromptListing
from dspark_json.load import check_output_directories
from dspark_json.options import Options

CANARY = "zqCanary7pw"
#: URLs that carry the canary as a password or as a query parameter's value; none reachable,
#: none slow (an unknown scheme fails at once, as a store that cannot be reached does later).
URLS = [
    f"foo://ann:{CANARY}@store.invalid/answers",
    f"foo://AKIA:wJal/{CANARY}/x@store.invalid/answers",  # AWS secret keys hold a '/'
    f"foo://ann:p@{CANARY}@store.invalid/answers",  # and passwords an '@'
    f"foo://store.invalid/answers?sv=2024&sig={CANARY}",
    f"foo://store.invalid/answers?X-Amz-Signature={CANARY}&X-Amz-Date=1",
    f"foo://store.invalid/answers?a=1&token={CANARY}",
    f"foo://store.invalid/answers?key={CANARY}",
    f"foo://store.invalid/answers?password={CANARY}#x",
    f"foo://store.invalid/answers?secret={CANARY}",
]
BASE = {"endpoint": "http://127.0.0.1:9"}


@pytest.mark.parametrize("url", URLS)
def test_the_one_mask_hides_every_form(url):
    masked = mask_uris(f"could not reach {url}: refused")
    assert CANARY not in masked and "***" in masked
    assert redact(url) == mask_uris(url)
    assert "store.invalid/answers" in masked  # the rest stays, to say which store


@pytest.mark.parametrize("url", URLS)
@pytest.mark.parametrize("option", ["journal", "metrics", "cache"])
def test_an_output_directory_that_cannot_be_reached_is_named_masked(url, option, caplog):
    if "?" in url:  # refused at parse: file names would go after the query
        with pytest.raises(OptionError, match=f"Option '{option}' is a URI with a query") as no:
            Options.parse({**BASE, "prompts": "/p", option: url})
        assert CANARY not in str(no.value) and "store.invalid/answers" in str(no.value)
        assert "storageOptions" in str(no.value)  # the fix
        return
    with caplog.at_level(logging.DEBUG, logger="dspark_json"):
        options = Options.parse({**BASE, "prompts": "/p", option: url})
        assert CANARY not in repr(options)
        with pytest.raises(OptionError, match=f"Option '{option}' names foo://") as caught:
            check_output_directories(options)
    assert CANARY not in str(caught.value)
    assert not [r for r in caplog.records if CANARY in r.getMessage()]


@pytest.mark.parametrize("url", URLS)
@pytest.mark.parametrize("option", ["prompts", "responses"])
def test_an_input_directory_that_cannot_be_reached_is_named_masked(url, option):
    if "?" in url:  # refused at parse: file names would go after the query
        with pytest.raises(OptionError, match=f"Option '{option}' is a URI with a query") as no:
            Options.parse({**BASE, option: url})
        assert CANARY not in str(no.value) and "storageOptions" in str(no.value)
        return
    options = Options.parse({**BASE, option: url})
    assert CANARY not in repr(options)
    listing = PromptListing(getattr(options.input, option), option=option)
    with pytest.raises((DSparkJsonError, OSError, ValueError)) as caught:
        listing.files()
    assert CANARY not in str(caught.value)


def test_a_location_is_the_string_itself_but_its_repr_is_masked():
    location = Location(URLS[0])
    assert location == URLS[0] and f"{location}" == URLS[0]  # used as given
    assert CANARY not in repr(location) and CANARY not in repr([location])
    assert pickle.loads(pickle.dumps(location)) == URLS[0]


def test_a_log_record_with_a_url_is_masked(caplog):
    with caplog.at_level(logging.INFO, logger="dspark_json"):
        sas = next(url for url in URLS if "sig=" in url)
        logging.getLogger("dspark_json").warning("Cannot write to %s: refused", sas)
    assert caplog.records and CANARY not in caplog.records[0].getMessage()
    assert "sig=***" in caplog.records[0].getMessage()


@pytest.mark.parametrize("url", URLS)
def test_spark_redacts_each_in_plans(url):
    import re

    assert re.search(REDACTION_PATTERN, url)


#: storageOptions holding the canary in every secret key a store reads.
STORE_SECRETS = {
    "aws_access_key_id": f"AKIA{CANARY}",
    "aws_secret_access_key": f"wJal/{CANARY}",
    "aws_session_token": CANARY,
    "azure_storage_account_key": CANARY,
    "azure_storage_sas_token": f"sv=2024&sig={CANARY}",
    "google_service_account_key": f'{{"private_key": "{CANARY}"}}',
}


def test_storage_options_never_show(caplog):
    """The values of option storageOptions: not in the options' repr, not in a pickled
    options' repr, not in the error of a path that cannot be written, not in the log."""
    import json
    import re

    text = json.dumps(STORE_SECRETS)
    with caplog.at_level(logging.DEBUG, logger="dspark_json"):
        options = Options.parse(
            {**BASE, "prompts": "/p", "storageOptions": text, "journal": "foo://store/j"}
        )
        assert CANARY not in repr(options) and CANARY not in str(options.storage.settings)
        assert CANARY not in repr(pickle.loads(pickle.dumps(options)))
        with pytest.raises(OptionError, match="Option 'journal' names foo://") as caught:
            check_output_directories(options)
    assert CANARY not in str(caught.value)
    assert not [r for r in caplog.records if CANARY in r.getMessage()]
    assert re.search(REDACTION_PATTERN, "storageOptions")  # Spark's plans hide its value


def test_a_bad_storage_options_value_never_shows():
    for text in ('{"aws_secret_access_key": "' + CANARY, '{"no_such_key": "' + CANARY + '"}'):
        with pytest.raises(OptionError, match="storageOptions") as caught:
            Options.parse({**BASE, "prompts": "/p", "storageOptions": text})
        assert CANARY not in str(caught.value)
