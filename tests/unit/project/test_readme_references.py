"""The docs' threat model and promises name the tests that show them; a renamed or removed test
must not leave a promise pointing at nothing. (They lived in the README until the docs site;
the file keeps its name.)"""

import re
from pathlib import Path

from tests.support import REPO_ROOT

ROOT = REPO_ROOT
DOCS = ROOT / "docs"
# `unit/kube/test_x.py::test_y`, `faults/test_x.py::test_y`, `tests/...` or a bare
# `test_x.py::test_y` (then under tests/integration, as the Reliability section writes it).
KIND = r"(?:unit|integration|faults|e2e|real_node|benchmarks|support)/(?:\w+/)?"
REFERENCE = re.compile(rf"`((?:tests/)?(?:{KIND})?test_\w+\.py)::(test_\w+)`")
THREAT_MODEL = DOCS / "security.md"
PROMISES = DOCS / "operations.md"


def _resolve(path: str) -> Path:
    path = path.removeprefix("tests/")
    if "/" not in path:
        path = f"integration/{path}"
    return ROOT / "tests" / path


def _pages() -> list[Path]:
    """Every page of the site, and the README."""
    return [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]


def _section(path: Path, heading: str) -> str:
    return path.read_text().split(heading, 1)[1].split("\n## ", 1)[0]


def _missing(text: str) -> list[str]:
    return [
        f"{path}::{name}"
        for path, name in REFERENCE.findall(text)
        if not (file := _resolve(path)).is_file()
        or not re.search(rf"^(?:async )?def {name}\(", file.read_text(), re.MULTILINE)
    ]


def test_the_threat_model_and_the_promises_name_their_tests():
    threat_model = THREAT_MODEL.read_text()
    promises = _section(PROMISES, "## Reliability: what the operator promises")
    assert len(REFERENCE.findall(threat_model)) > 30  # every attack names the tests showing it
    assert len(REFERENCE.findall(promises)) >= 8  # and so does every promise


def test_every_test_the_docs_name_exists():
    text = "\n".join(page.read_text() for page in _pages())
    assert len(REFERENCE.findall(text)) > 40
    assert _missing(text) == []


def test_every_test_file_the_docs_name_exists():
    text = "\n".join(page.read_text() for page in _pages())
    files = set(re.findall(rf"`((?:tests/)?{KIND}\w+\.py)", text))
    assert files
    assert sorted(f for f in files if not _resolve(f).is_file()) == []
