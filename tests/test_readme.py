"""README.md is a front door: short, and every link in it (and in docs/) leads somewhere."""
import re
from pathlib import Path

import pytest
from chapter_scripts import REPO

PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def relative_links(page):
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)  # code blocks hold no links,
    text = re.sub(r"`[^`\n]*`", "", text)  # and neither does inline code
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if not re.match(r"[a-z]+://|#|mailto:", target):
            yield target.split("#")[0]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(REPO).as_posix())
def test_every_relative_link_resolves(page):
    missing = [t for t in relative_links(page) if not (page.parent / t).exists()]
    assert not missing, f"{page.name} links to what does not exist: {missing}"


def test_the_readme_links_every_reference_page():
    linked = {Path(t).name for t in relative_links(REPO / "README.md")}
    pages = {p.name for p in (REPO / "docs").glob("*.md")} - {"version-matrix.md"}
    assert pages <= linked, f"docs/ pages the README does not link: {sorted(pages - linked)}"


def test_the_readme_is_a_front_door():
    size = len((REPO / "README.md").read_bytes())
    assert size < 15_000, f"README.md is {size} bytes: move reference material to docs/"
