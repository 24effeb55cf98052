"""Credentials as values: a key that never prints, where it comes from, which keys can be sent,
the user:password taken out of a URL, and every echo of them masked whole."""

import pickle

import pytest

from dspark_json.errors import OptionError
from dspark_json.http.secrets import ApiKey, Secret, check_header_value, redact, split_credentials

KEY = "zq-canary-7f3a9c"


def test_a_secret_compares_and_hashes_by_value_and_travels_pickled():
    key = Secret(KEY)
    assert key == Secret(KEY) and key != Secret(KEY + "x") and key != KEY
    assert hash(key) == hash(Secret(KEY)) and hash(key) != hash(Secret("other"))
    assert len({key, Secret(KEY), Secret("other")}) == 2
    copy = pickle.loads(pickle.dumps(key))
    assert copy == key and copy.reveal() == KEY
    assert KEY not in repr(key) + str(key) + f"{key}"


def test_the_key_itself_wins_over_the_variable(monkeypatch):
    monkeypatch.setenv("ZQ_KEY", "from-env")
    assert ApiKey(Secret(KEY), "ZQ_KEY").resolve() == Secret(KEY)
    assert ApiKey(None, "ZQ_KEY").resolve() == Secret("from-env")
    monkeypatch.setenv("ZQ_KEY", " \n")
    assert ApiKey(None, "ZQ_KEY").resolve() is None
    monkeypatch.delenv("ZQ_KEY")
    assert ApiKey(None, "ZQ_KEY").resolve() is None
    assert ApiKey().resolve() is None


def test_a_key_that_cannot_be_a_header_value_is_refused_by_where_it_came_from(monkeypatch):
    with pytest.raises(OptionError) as caught:
        ApiKey(Secret("sk abc")).resolve()
    assert str(caught.value) == (
        "Option 'apiKey' cannot be sent in an HTTP header: character 3 is a space or tab (the "
        "value is not shown). Give the key alone, without spaces or line breaks."
    )
    monkeypatch.setenv("ZQ_KEY", "sk\x7fabc")
    with pytest.raises(OptionError) as caught:
        ApiKey(None, "ZQ_KEY").resolve()
    assert str(caught.value) == (
        "The environment variable 'ZQ_KEY' (option 'apiKeyEnv') cannot be sent in an HTTP "
        "header: character 3 is a control character (the value is not shown). Set ZQ_KEY to the "
        "key alone."
    )


@pytest.mark.parametrize(
    ("key", "position", "kind"),
    [
        ("\nabc", 1, "a line break (CR or LF), which would start a new header"),
        ("ab\rc", 3, "a line break (CR or LF), which would start a new header"),
        ("abc\t", 4, "a space or tab"),
        ("a b", 2, "a space or tab"),
        ("a\x00", 2, "a control character"),
        ("a\x7f", 2, "a control character"),
        ("a\x80", 2, "a non-ASCII character"),
        ("clé", 3, "a non-ASCII character"),
    ],
    ids=repr,
)
def test_each_kind_of_bad_character_is_named_with_its_position(key, position, kind):
    with pytest.raises(OptionError) as caught:
        check_header_value(Secret(key), "Option 'apiKey'", fix="Fix it.")
    assert str(caught.value) == (
        f"Option 'apiKey' cannot be sent in an HTTP header: character {position} is {kind} (the "
        "value is not shown). Fix it."
    )


def test_every_printable_ascii_character_can_be_sent():
    check_header_value(Secret("".join(map(chr, range(0x21, 0x7F)))), "Option 'apiKey'")


def test_credentials_are_taken_out_of_the_url_whole():
    assert split_credentials("http://h:1/v1") == ("http://h:1/v1", None)
    assert split_credentials("http://ann:p%40ss:x@h:1/v1?a=b") == (
        "http://h:1/v1?a=b",
        Secret("ann:p@ss:x"),
    )
    # An "@" left unencoded in the password: the host is after the last one.
    assert split_credentials("https://ann:p@ss@h") == ("https://h", Secret("ann:p@ss"))
    assert split_credentials("http://token@h") == ("http://h", Secret("token"))


def test_credentials_that_are_not_utf8_are_refused_without_showing_them():
    with pytest.raises(OptionError) as caught:
        split_credentials("http://ann:zq%FFcanary@h:1")
    assert str(caught.value) == (
        "The credentials in option 'endpoint' are not valid UTF-8 once percent-decoded (the value "
        "is not shown). Percent-encode the UTF-8 bytes of the user and password."
    )


@pytest.mark.parametrize(
    ("secret", "echo"),
    [
        ('ann:pä"ss1', 'ann:pä\\"ss1'),  # in a JSON string written as UTF-8
        ("zq\\canary", "zq\\\\canary"),  # in a Python repr
        ("zq'canary\x01", "zq'canary\\x01"),  # in a Python repr
        ("a/b:p/ss1", "a%2Fb:p%2Fss1"),  # user:password, each percent-encoded
        ("ann:pa:ss99", "pa:ss99"),  # a password holding a colon, alone
        ("ann:abcd", "abcd"),  # a password of 4 characters, alone
        ("ann:p/ss", "p%2Fss"),  # a password alone, percent-encoded
    ],
    ids=repr,
)
def test_an_echo_is_masked_whole(secret, echo):
    assert redact(f"got <{echo}> back", [Secret(secret)]) == "got <***> back"


def test_a_short_password_is_not_masked_alone_and_empty_secrets_mask_nothing():
    assert redact("abc and ann:abc", [Secret("ann:abc")]) == "abc and ***"
    assert redact("abc", [None, Secret("")]) == "abc"
