"""Reading the repository's Markdown as the tests need it: sections by heading, code blocks by
language, tables, GitHub's heading anchors, and the list of Markdown files."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"

_FENCE = re.compile(r"^(```|~~~)")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
# Folders that hold no documentation of ours: environments, caches, dependencies, data.
_SKIPPED_DIRS = {"node_modules", "__pycache__", "build", "dist", "results", "mnemosyne-data"}


def markdown_files() -> list[Path]:
    """Every Markdown file of the repository (hidden folders such as .venv and .git excluded)."""
    found = []
    for path in ROOT.rglob("*.md"):
        parts = path.relative_to(ROOT).parts[:-1]
        if any(p.startswith(".") or p in _SKIPPED_DIRS or p.endswith(".egg-info") for p in parts):
            continue
        found.append(path)
    return sorted(found)


def headings(text: str) -> list[tuple[int, str, int]]:
    """(level, title, line index) of every heading outside code blocks."""
    found = []
    fenced = False
    for number, line in enumerate(text.splitlines()):
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced and (match := _HEADING.match(line)):
            found.append((len(match.group(1)), match.group(2), number))
    return found


def section(text: str, title: str) -> str:
    """The text under the heading ``title`` up to the next heading of the same or a higher level."""
    lines = text.splitlines(keepends=True)
    marks = headings(text)
    for i, (level, heading, number) in enumerate(marks):
        if heading == title:
            end = next((n for lvl, _, n in marks[i + 1 :] if lvl <= level), len(lines))
            return "".join(lines[number + 1 : end])
    raise AssertionError(f"no heading {title!r}")


def code_blocks(text: str, language: str) -> list[str]:
    return re.findall(rf"^```{re.escape(language)}\n(.*?)^```", text, flags=re.S | re.M)


def table_rows(text: str) -> list[list[str]]:
    """The cells of every table row of ``text`` (header and separator rows included)."""
    rows = []
    for line in text.splitlines():
        if line.startswith("|") and line.rstrip().endswith("|"):
            rows.append([cell.strip() for cell in line.strip()[1:-1].split(" | ")])
    return rows


def anchor(title: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", title.strip().lower())
    return text.replace(" ", "-")


def anchors(text: str) -> set[str]:
    seen: dict[str, int] = {}
    result = set()
    for _, title, _ in headings(text):
        base = anchor(title)
        count = seen.get(base, 0)
        seen[base] = count + 1
        result.add(base if count == 0 else f"{base}-{count}")
    return result
