"""The Markdown of the repository only sends a reader to what is in the repository: every relative
link resolves to a file (and its anchor to a heading), no text points at documents outside it,
every test named as the proof of a promise exists, and the docs carry no times of day."""

from __future__ import annotations

import re
from pathlib import Path

from tests.docs_support import DOCS, README, ROOT, anchors, markdown_files

LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
OUTSIDE = re.compile(r"\.\./shared|shared/seeds|seeds/|\bseed 00\d|\bseeds? §", re.I)
# `tests/x.py::test_name`, then `::other_name` in the same line for the same file.
TEST_REF = re.compile(r"`(tests/[\w/]+\.py)((?:::[\w\[\].-]+)?)`|`::([\w\[\].-]+)`")
# `test_name` alone, its file named elsewhere in the sentence (or not at all): some test file has it.
BARE_TEST = re.compile(r"`(test_\w+)`")
# "07:31Z", "2026-11-30T07:32:00Z", "(on|measured) 30 Nov 2026": when a number was measured is not
# what a reader needs; the command that produced it is.
TIME_OF_DAY = re.compile(
    r"\b\d{1,2}:\d{2}(?::\d{2})?Z\b|\b20\d\d-\d\d-\d\dT\d"
    r"|\b(?:on|measured|run)\s+\d{1,2} (?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)[a-z]* 20\d\d\b",
    re.I,
)


def _without_code(text: str) -> str:
    """Fenced code blocks removed (a shell comment is not a link)."""
    return re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)


def test_the_markdown_files_are_found() -> None:
    found = {p.relative_to(ROOT).as_posix() for p in markdown_files()}
    assert {"README.md", "CHANGELOG.md", "deploy/README.md", "docs/architecture.md", "docs/operations.md"} <= found
    assert not any(".venv" in name or "node_modules" in name for name in found)


def test_every_relative_link_resolves_inside_the_repository() -> None:
    broken = []
    for path in markdown_files():
        text = path.read_text(encoding="utf-8")
        for target in LINK.findall(_without_code(text)):
            if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
                continue
            file_part, _, fragment = target.partition("#")
            resolved = (path.parent / file_part).resolve() if file_part else path
            where = f"{path.relative_to(ROOT)} -> {target}"
            if not resolved.is_relative_to(ROOT) or not resolved.exists():
                broken.append(f"{where}: no such file in the repository")
            elif (
                fragment and resolved.suffix == ".md" and fragment not in anchors(resolved.read_text(encoding="utf-8"))
            ):
                broken.append(f"{where}: no heading with that anchor")
    assert not broken, "\n".join(broken)


def test_no_text_points_outside_the_repository() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in markdown_files()
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if OUTSIDE.search(line)
    ]
    assert not found, "\n".join(found)


def test_every_test_named_in_the_docs_exists() -> None:
    missing = []
    defined = {
        name
        for test_file in (ROOT / "tests").rglob("*.py")
        for name in re.findall(r"def (test_\w+)\(", test_file.read_text(encoding="utf-8"))
    }
    for path in markdown_files():
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            current: Path | None = None
            for file_name, test, follow_on in TEST_REF.findall(line):
                names = []
                if file_name:
                    current = ROOT / file_name
                    if not current.is_file():
                        missing.append(f"{path.relative_to(ROOT)}:{number}: {file_name} does not exist")
                        current = None
                        continue
                    if test:
                        names.append(test[2:])
                elif current is not None:
                    names.append(follow_on)
                if current is None:  # no file named yet on this line (a row under one naming it): some file has it
                    if follow_on and follow_on.split("[")[0] not in defined:
                        missing.append(f"{path.relative_to(ROOT)}:{number}: no test file has {follow_on}")
                    continue
                for name in names:
                    name = name.split("[")[0]
                    if not re.search(rf"def {re.escape(name)}\(", current.read_text(encoding="utf-8")):
                        missing.append(f"{path.relative_to(ROOT)}:{number}: {current.relative_to(ROOT)} has no {name}")
            missing += [
                f"{path.relative_to(ROOT)}:{number}: no test file has {name}"
                for name in BARE_TEST.findall(line)
                if name not in defined
            ]
    assert not missing, "\n".join(missing)


def test_the_docs_carry_no_times_of_day() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in [README, *sorted(DOCS.glob("*.md"))]
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if TIME_OF_DAY.search(line)
    ]
    assert not found, "\n".join(found)
