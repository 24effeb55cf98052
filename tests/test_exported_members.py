import re
import types
from pathlib import Path

import dspark_json


def _isort_style(name: str) -> tuple[int, str]:
    """The order ruff's RUF022 keeps: SCREAMING_CASE, then CamelCase, then the rest."""
    if name.isupper():
        return (0, name)
    if name[0].isupper():
        return (1, name)
    return (2, name)


def test_all_is_sorted():
    assert dspark_json.__all__ == sorted(dspark_json.__all__, key=_isort_style)


def test_all_lists_every_public_name():
    # dir(), not vars(): the package imports most names on first use (PEP 562)
    public = {
        name
        for name in dir(dspark_json)
        if not name.startswith("_")
        and not isinstance(getattr(dspark_json, name), types.ModuleType)
        and name not in {"annotations", "TYPE_CHECKING"}
    }
    assert public | {"__version__"} == set(dspark_json.__all__)


def _readme_names(text: str) -> set[str]:
    """The names the docs use on the package, ``dspark_json.<name>``, submodules left out."""
    import importlib.util

    names = set(re.findall(r"(?<![\w.])dspark_json\.(\w+)", text))
    package = Path(dspark_json.__file__).parent
    code = "\n".join(p.read_text() for p in package.rglob("*.py"))
    loggers = set(re.findall(r"getLogger\(\"dspark_json\.(\w+)\"\)", code))  # names, not modules
    return {n for n in names - loggers if importlib.util.find_spec(f"dspark_json.{n}") is None}


def test_every_name_the_readme_and_the_docs_call_on_the_package_is_exported():
    root = Path(__file__).resolve().parents[1]
    pages = [root / "README.md", *sorted((root / "docs").rglob("*.md"))]
    text = "\n".join(p.read_text() for p in pages)
    blocks = "\n".join(re.findall(r"```python\n(.*?)```", text, flags=re.S))
    assert {"generate", "parse_responses", "register"} <= _readme_names(blocks)
    assert _readme_names(text) - set(dspark_json.__all__) == set()


def test_the_readme_check_sees_a_name_that_is_not_exported():
    unexported = "dspark_json." + "Options.parse"  # split: no dangling reference in this file
    text = f"dspark_json.register(spark); dspark_json.compat.start(w); {unexported}"
    assert _readme_names(text) - set(dspark_json.__all__) == {"Options"}
