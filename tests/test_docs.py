from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"
SIMULATOR = README.parent / "docs" / "reference" / "simulator.md"


ARCHITECTURE = README.parent / "docs" / "ARCHITECTURE.md"
PACKAGE = README.parent / "dspark_json"


def test_the_architecture_page_names_every_module():
    text = ARCHITECTURE.read_text(encoding="utf-8")
    missing = [
        str(path.relative_to(PACKAGE))
        for path in sorted(PACKAGE.rglob("*.py"))
        if path.stem not in ("__init__", "__main__") and path.stem not in text
    ]
    assert not missing, f"docs/ARCHITECTURE.md does not say where these live: {missing}"


def test_no_document_points_outside_the_repository():
    docs = README.parent / "docs"
    for path in [README, *docs.rglob("*.md"), *docs.glob("*.py"), *PACKAGE.rglob("*.py")]:
        assert "../shared" not in path.read_text(encoding="utf-8"), path


def test_the_simulator_page_names_every_flag_of_dspark_json_simulate():
    import argparse

    from dspark_json.cli import build_parser

    (commands,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    flags = {
        flag
        for action in commands.choices["simulate"]._actions
        for flag in action.option_strings
        if flag.startswith("--") and flag != "--help"
    }
    text = SIMULATOR.read_text(encoding="utf-8")
    assert {"--vary", "--drift-after", "--served-schema"} <= flags
    missing = sorted(f for f in flags if f not in text)
    assert not missing, f"docs/reference/simulator.md does not name {missing}"


def test_every_flag_of_every_command_says_what_it_is_for():
    """The CLI reference is generated from argparse's help: a flag without one is an empty cell."""
    import argparse

    from dspark_json.cli import build_parser

    (commands,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    silent = sorted(
        f"{name} {action.option_strings[0]}"
        for name, command in commands.choices.items()
        for action in command._actions
        if action.option_strings and action.option_strings[0] != "-h" and not action.help
    )
    assert len(commands.choices) >= 6
    assert not silent, f"flags with no help= in dspark_json/cli.py: {silent}"
