from pathlib import Path

from dspark_json.options import options_table

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_options_table_is_the_generated_one():
    text = README.read_text(encoding="utf-8")
    start = text.index("<!-- options-table")
    start = text.index("\n", start) + 1
    end = text.index("<!-- end options-table -->")
    assert text[start:end].strip() == options_table(), (
        "README's options table is stale: paste dspark_json.options.options_table() into it"
    )
