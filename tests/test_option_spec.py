"""How an option is declared and converted: what each converter accepts, where its bounds lie, and
a refusal that names the option, the value and what is allowed.

The declarations are built inside the tests, not at import: an option's converter is made when
its stage's dataclass is defined, and these tests are about making them.
"""

import dataclasses
import os

import pytest

from dspark_json.errors import OptionError
from dspark_json.option_spec import (
    boolean,
    choice,
    directory,
    json_object,
    nonempty,
    number,
    option,
    positive,
    specs_of,
)


def refusal(convert, text, name="opt"):
    with pytest.raises(OptionError) as caught:
        convert(name, text)
    return str(caught.value)


def test_an_option_field_defaults_to_its_converted_default_and_carries_its_declaration():
    @dataclasses.dataclass(frozen=True, kw_only=True)
    class Stage:
        chunk: int = option(
            "chunkSize", "Rows per chunk.", "64", convert=positive(int), default="16",
            aliases=("chunk_size", "dspark.chunk"),
        )  # fmt: skip
        label: str | None = option("label", "A label.", "x", convert=nonempty)
        other: str = option(
            "otherThing", "Needed.", "y", convert=nonempty, required=True, empty="-"
        )
        plain: int = 3  # a field that is no option

    assert Stage() == Stage(chunk=16, label=None, other="-", plain=3)
    assert type(Stage().chunk) is int
    chunk, label, other = specs_of("rows", Stage)
    assert (chunk.name, chunk.doc, chunk.example, chunk.default) == (
        "chunkSize", "Rows per chunk.", "64", "16",
    )  # fmt: skip
    assert (chunk.aliases, chunk.required, chunk.stage, chunk.attr) == (
        ("chunk_size", "dspark.chunk"), False, "rows", "chunk",
    )  # fmt: skip
    assert chunk.convert("chunkSize", "5") == 5 and chunk.keyword == "chunk_size"
    assert (label.default, label.required, label.attr, label.aliases) == (None, False, "label", ())
    assert (other.required, other.attr, other.keyword) == (True, "other", "other_thing")


def test_a_default_is_checked_like_a_given_value():
    with pytest.raises(OptionError, match="'chunkSize' must be a whole number above 0, got '0'"):
        option("chunkSize", "Rows per chunk.", "64", convert=positive(int), default="0")


def test_a_bounded_number_accepts_its_bounds_and_names_them_when_refusing():
    whole = number(int, low=1, high=10)
    assert (whole("n", " 1 "), whole("n", "10")) == (1, 10)
    assert type(whole("n", "7")) is int
    for text in ("0", "11", "-3", "1.5", "ten", ""):
        assert refusal(whole, text, "n") == (
            f"Option 'n' must be a whole number from 1 to 10, got {text!r}."
        )


def test_a_number_with_one_bound_or_none():
    from_zero = number(float, low=0)
    assert (from_zero("t", "0"), from_zero("t", "1e9")) == (0.0, 1e9)
    for text in ("-0.5", "nan", "NaN", "x"):
        assert refusal(from_zero, text, "t") == f"Option 't' must be a number from 0, got {text!r}."
    up_to_two = number(float, high=2)
    assert (up_to_two("x", "-7"), up_to_two("x", "2")) == (-7.0, 2.0)
    assert refusal(up_to_two, "2.5", "x") == "Option 'x' must be a number to 2, got '2.5'."
    anything = number(int)
    assert anything("s", "-3") == -3
    assert refusal(anything, "1.5", "s") == "Option 's' must be a whole number, got '1.5'."
    assert refusal(number(float, low=0.25, high=0.5), "1", "f") == (
        "Option 'f' must be a number from 0.25 to 0.5, got '1'."
    )


def test_positive_means_above_zero():
    assert (positive(int)("n", " 1"), positive(float)("t", "0.001")) == (1, 0.001)
    for kind, noun in ((int, "a whole number"), (float, "a number")):
        for text in ("0", "-1", "nan", "many"):
            assert refusal(positive(kind), text, "n") == (
                f"Option 'n' must be {noun} above 0, got {text!r}."
            )


def test_boolean_is_true_or_false_in_any_case():
    assert boolean("b", " TRUE ") is True and boolean("b", "True") is True
    assert boolean("b", "false") is False and boolean("b", "FALSE") is False
    assert refusal(boolean, "yes", "b") == "Option 'b' must be true or false, got 'yes'."


def test_a_choice_maps_spellings_and_lists_each_value_once():
    modes = choice({"auto": "auto", "gpu": "gpu", "gpu-accelerated": "gpu"})
    assert (modes("m", " GPU-Accelerated "), modes("m", "Auto")) == ("gpu", "auto")
    assert refusal(modes, "fast", "m") == "Option 'm' has value 'fast'; allowed values: auto, gpu."
    upper = choice({"PERMISSIVE": "PERMISSIVE", "FAILFAST": "FAILFAST"}, upper=True)
    assert upper("mode", "failFast") == "FAILFAST"
    assert "allowed values: PERMISSIVE, FAILFAST." in refusal(upper, "lenient", "mode")


def test_a_directory_is_made_absolute_unless_it_is_a_uri(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert directory("d", " in ") == str(tmp_path / "in")
    assert directory("d", "~/x") == str(tmp_path / "home" / "x")
    assert directory("d", "s3://bucket/prompts") == "s3://bucket/prompts"
    assert os.path.isabs(directory("d", "."))
    assert refusal(directory, "  ", "d") == "Option 'd' must name a directory, got ''."


def test_nonempty_strips_and_refuses_blank():
    assert nonempty("model", " m ") == "m"
    assert refusal(nonempty, " \t", "model") == (
        "Option 'model' must not be empty; leave it out to use the default."
    )


def test_a_json_object_option():
    assert json_object("extraBody", '{"a": [1, {"b": null}]}') == {"a": [1, {"b": None}]}
    assert refusal(json_object, "[1]", "extraBody") == (
        "Option 'extraBody' must be a JSON object, got a JSON list: '[1]'."
    )
    assert "'extraBody' must be a JSON object" in refusal(json_object, "{nope", "extraBody")
    assert "at column 2 of '{nope'" in refusal(json_object, "{nope", "extraBody")
    deep = '{"a": ' * 600 + "1" + "}" * 600
    assert "'extraBody' must be a usable JSON object" in refusal(json_object, deep, "extraBody")
