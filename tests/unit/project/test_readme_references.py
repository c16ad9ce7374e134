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
KIND = r"(?:unit|integration|faults|e2e|real_node|gitops|benchmarks|support)/(?:\w+/){0,2}"
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


def _threat_rows() -> list[tuple[str, str, str]]:
    """(attack, what stops it, shown by) for each row of the threat-model table."""
    lines = THREAT_MODEL.read_text().splitlines()
    start = lines.index("| attack | what stops it | shown by |") + 2  # past the header rule
    rows = []
    for line in lines[start:]:
        if not line.startswith("| "):
            break  # the table ends; later tables (the measured figures) are not the model
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        assert len(cells) == 3, line
        rows.append((cells[0], cells[1], cells[2]))
    return rows


# A cell's test references: `path::test`, a whole test file, or a benchmark script.
TEST_FILE = re.compile(r"`((?:tests/)?(?:unit|integration|benchmarks)/\w+\.py)`")

# The attacks issue 24 names (hostile input at every edge), as the table's first column
# words them: each must keep a row, and that row must name the tests that show the defence.
ISSUE_24_ATTACKS = (
    "make the pre-signature parse quadratic",  # repository_hint rescans per occurrence
    "connections that send headers and then nothing",  # slots held, genuine deliveries 429
    "disconnecting mid-body",  # a traceback per client that goes away
    "one page of tiny JSON objects",  # items unbounded once parsed
    "many pages, or Forgejo's unpaged job list",  # no budget per observation
    "event loop with a large answer",  # parses on the loop
    "Pod churn",  # deleted Pods kept for good
    "large Secrets or ConfigMaps",  # whole Secrets and ConfigMaps kept, expired only when full
    "long repository names",  # the ledger learns any name
    "CA bundle variants",  # a TLS context per text
    "(`db` -> `db-cache`)",  # spec.cache takes over, then deletes, others' objects
    "many quiet cache groups",  # spec.cache re-applied every 120 s
    "unchecked template field",  # 33rd reference, imagePullSecrets, CSI, in-tree secretRef
    "losing a POST's answer",  # non-idempotent POSTs retried
    "huge answer",  # 200 MiB
    "URL that never answers",
)


def test_every_threat_model_row_names_tests_that_exist():
    rows = _threat_rows()
    assert len(rows) > 30
    for attack, _, shown_by in rows:
        named = REFERENCE.findall(shown_by) + TEST_FILE.findall(shown_by)
        assert named, f"the row {attack!r} names no test"
        assert _missing(shown_by) == [], attack
        files = [f for f in TEST_FILE.findall(shown_by) if not _resolve(f).is_file()]
        assert files == [], attack


def test_every_attack_issue_24_names_has_a_row_with_its_tests():
    rows = _threat_rows()
    for phrase in ISSUE_24_ATTACKS:
        matching = [shown for attack, _, shown in rows if phrase in attack]
        assert matching, f"no threat-model row for {phrase!r}"
        assert any(REFERENCE.findall(shown) for shown in matching), phrase
