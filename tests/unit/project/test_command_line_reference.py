"""The command-line reference is written by hand; its defaults must be the parser's.

`--workers` went from 4 to 16 in the parser while docs/reference/command-line.md still said
4: a default written twice drifts. This reads every table row, pairs each flag with the
default written beside it, and compares the two where the page states a literal value.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from gitea_runner_operator.cli import SUBCOMMANDS, build_parser, main
from gitea_runner_operator.commands import uninstall, why

PAGE = Path(__file__).resolve().parents[3] / "docs" / "reference" / "command-line.md"
# Words the page uses for a default that is not a literal value.
_NOT_LITERAL = {"none": None, "any": None}


def _sections() -> dict[str, str]:
    """The page's text by ``##`` heading: the operator's own flags under "Running the
    operator", each command's under its name (the heading's first word in backquotes)."""
    out: dict[str, str] = {}
    name = ""
    for line in PAGE.read_text().splitlines():
        if line.startswith("## "):
            found = re.match(r"## `([a-z-]+)", line)
            name = found.group(1) if found else line[3:]
        out[name] = out.get(name, "") + line + "\n"
    return out


def _rows(text: str) -> list[tuple[list[str], list[str]]]:
    rows = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 3 or not cells[0].startswith("`--"):
            continue
        flags = re.findall(r"`(--[a-z0-9-]+)", cells[0])
        rows.append((flags, [d.strip() for d in cells[1].split(",")]))
    return rows


def _command_parser(name: str) -> argparse.ArgumentParser:
    if name == "why":
        return why.build_parser()
    (commands,) = [
        a for a in uninstall.build_parser()._actions if isinstance(a, argparse._SubParsersAction)
    ]
    parser: argparse.ArgumentParser = commands.choices[name]
    return parser


# What the page documents: the operator's flags, then each command's, each in its section.
def _parsers() -> dict[str, argparse.ArgumentParser]:
    return {
        "Running the operator": build_parser(),
        **{name: _command_parser(name) for name in SUBCOMMANDS},
    }


def _parser_defaults(parser: argparse.ArgumentParser) -> dict[str, object]:
    out: dict[str, object] = {}
    for action in parser._actions:
        for option in action.option_strings:
            if option.startswith("--"):
                out[option] = action.default
    return out


def test_every_command_is_in_help_and_on_the_page_with_one_line() -> None:
    shown = build_parser().format_help()
    table = _sections()[""]  # the page's head, above its first section
    for name, line in SUBCOMMANDS.items():
        assert re.search(rf"^  {re.escape(name)} +{re.escape(line)}$", shown, re.MULTILINE)
        assert f"| `{name}` |" in table
        assert name in _sections(), f"the page has no section for {name}"
    assert set(SUBCOMMANDS) == {"why", "drain-groups", "detach-groups", "release-finalizers"}


def test_each_command_is_dispatched_to_its_own_parser(capsys) -> None:
    for name in SUBCOMMANDS:
        with pytest.raises(SystemExit) as stop:
            main([name, "--help"])
        assert stop.value.code == 0
        assert "--kubeconfig" in capsys.readouterr().out


def test_every_flag_of_each_parser_is_on_the_page_in_its_section() -> None:
    sections = _sections()
    for name, parser in _parsers().items():
        documented = set(re.findall(r"`(--[a-z0-9-]+)", sections[name]))
        flags = {f for f, d in _parser_defaults(parser).items() if d is not argparse.SUPPRESS}
        assert flags - documented == set(), name


def test_each_literal_default_on_the_page_is_the_parsers() -> None:
    sections = _sections()
    compared = 0
    for name, parser in _parsers().items():
        defaults = _parser_defaults(parser)
        for flags, written in _rows(sections[name]):
            if len(written) != len(flags):
                continue  # a default described in words, e.g. "in-cluster, else ..."
            for flag, value in zip(flags, written, strict=True):
                actual = defaults[flag]
                if value in _NOT_LITERAL:
                    assert actual in (None, [], ()), (name, flag, actual)
                elif re.fullmatch(r"[0-9.]+|`[^`]+`", value):
                    value = value.strip("`")
                    same = str(actual) == value or (
                        isinstance(actual, int | float) and float(actual) == float(value)
                    )
                    assert same, f"{name} {flag}: the page says {value}, the parser {actual}"
                else:
                    continue
                compared += 1
    assert compared >= 12  # the page's tables were read at all
