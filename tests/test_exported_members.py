import types

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
    public = {
        name
        for name, value in vars(dspark_json).items()
        if not name.startswith("_")
        and not isinstance(value, types.ModuleType)
        and name not in {"annotations", "TYPE_CHECKING", "FORMAT"}
    }
    assert public | {"__version__"} == set(dspark_json.__all__)
