"""The command-line reference is written by hand; its defaults must be the parser's.

`--workers` went from 4 to 16 in the parser while docs/reference/command-line.md still said
4: a default written twice drifts. This reads every table row, pairs each flag with the
default written beside it, and compares the two where the page states a literal value.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from gitea_runner_operator.cli import build_parser

PAGE = Path(__file__).resolve().parents[3] / "docs" / "reference" / "command-line.md"
# Words the page uses for a default that is not a literal value.
_NOT_LITERAL = {"none": None, "any": None}


def _rows() -> list[tuple[list[str], list[str]]]:
    rows = []
    for line in PAGE.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 3 or not cells[0].startswith("`--"):
            continue
        flags = re.findall(r"`(--[a-z0-9-]+)", cells[0])
        rows.append((flags, [d.strip() for d in cells[1].split(",")]))
    return rows


def _parser_defaults() -> dict[str, object]:
    out: dict[str, object] = {}
    for action in build_parser()._actions:
        for option in action.option_strings:
            if option.startswith("--"):
                out[option] = action.default
    return out


def test_every_flag_of_the_parser_is_on_the_page() -> None:
    documented = set(re.findall(r"`(--[a-z0-9-]+)", PAGE.read_text()))
    parser = {f for f, d in _parser_defaults().items() if d is not argparse.SUPPRESS}
    assert parser - documented == set()


def test_each_literal_default_on_the_page_is_the_parsers() -> None:
    defaults = _parser_defaults()
    compared = 0
    for flags, written in _rows():
        if len(written) != len(flags):
            continue  # a default described in words, e.g. "in-cluster, else ..."
        for flag, value in zip(flags, written, strict=True):
            actual = defaults[flag]
            if value in _NOT_LITERAL:
                assert actual in (None, [], ()), (flag, actual)
            elif re.fullmatch(r"[0-9.]+|`[^`]+`", value):
                value = value.strip("`")
                same = str(actual) == value or (
                    isinstance(actual, int | float) and float(actual) == float(value)
                )
                assert same, f"{flag}: the page says {value}, the parser {actual}"
            else:
                continue
            compared += 1
    assert compared >= 8  # the page's table was read at all
