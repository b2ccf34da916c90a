"""Every link in the README and docs/ stays inside the repository and lands somewhere.

A user's clone is all they have: a link to a file outside it (a design document next to the
repository, say) or to a heading that was renamed is a dead end in the first hour.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(30)

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
_LINK = re.compile(r"\]\(([^)\s]+)\)")
_HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*$", re.MULTILINE)
_FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)


def anchors(page: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens."""
    text = _FENCE.sub("", page.read_text())
    found = set()
    for heading in _HEADING.findall(text):
        plain = re.sub(r"[`*_]|\[([^\]]*)\]\([^)]*\)", r"\1", heading).strip().lower()
        found.add(re.sub(r"[^\w\- ]", "", plain).replace(" ", "-"))
    return found


def links(page: Path) -> list[str]:
    return _LINK.findall(_FENCE.sub("", page.read_text()))


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_every_link_stays_in_the_repository_and_resolves(page: Path) -> None:
    problems = []
    for target in links(page):
        if re.match(r"[a-z]+:", target):
            continue  # a web address (https:, mailto:): not a file of ours
        path_part, _, anchor = target.partition("#")
        resolved = (page.parent / path_part).resolve() if path_part else page
        if ROOT not in resolved.parents and resolved != ROOT:
            problems.append(f"{target}: leaves the repository")
        elif not resolved.exists():
            problems.append(f"{target}: no such file")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            problems.append(f"{target}: no heading #{anchor} in {resolved.relative_to(ROOT)}")
    assert not problems, problems


def test_no_page_names_a_design_document_outside_the_repository() -> None:
    named = [str(page.relative_to(ROOT)) for page in PAGES if re.search(r"\.\./shared|DESIGN\.md|STYLE\.md", page.read_text())]
    assert not named
