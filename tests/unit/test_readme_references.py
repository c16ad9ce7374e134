"""The README's promises name the tests that show them; a renamed or removed test must not
leave a promise pointing at nothing."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# `unit/test_x.py::test_y`, `integration/test_x.py::test_y`, `tests/...` or a bare
# `test_x.py::test_y` (then under tests/integration, as the Reliability section writes it).
REFERENCE = re.compile(r"`((?:tests/)?(?:unit/|integration/)?test_\w+\.py)::(test_\w+)`")


def _resolve(path: str) -> Path:
    path = path.removeprefix("tests/")
    if "/" not in path:
        path = f"integration/{path}"
    return ROOT / "tests" / path


def test_every_test_the_readme_names_exists():
    text = (ROOT / "README.md").read_text()
    references = REFERENCE.findall(text)
    assert len(references) > 40  # the threat model and the promises are full of them
    missing = [
        f"{path}::{name}"
        for path, name in references
        if not (file := _resolve(path)).is_file()
        or not re.search(rf"^(?:async )?def {name}\(", file.read_text(), re.MULTILINE)
    ]
    assert missing == []


def test_every_test_file_the_readme_names_exists():
    text = (ROOT / "README.md").read_text()
    files = set(re.findall(r"`((?:tests/)?(?:unit|integration|benchmarks)/\w+\.py)", text))
    assert files
    assert sorted(f for f in files if not _resolve(f).is_file()) == []
