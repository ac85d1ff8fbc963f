"""The documents say what the code does and point where they claim to.

docs/DESIGN.md holds the summary's definitions verbatim; every relative link in README.md and docs/
reaches an existing file (and, with a #fragment, a heading there); the README stays a first screen.
"""

from __future__ import annotations

import re
from pathlib import Path

from runmodel.summary import definitions_markdown

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
README_MAX_LINES = 300  # issue #27: a README a student reads, not a lab notebook

FENCE = re.compile(r"^(```|~~~).*?^\1", re.S | re.M)
INLINE_CODE = re.compile(r"`[^`\n]*`")
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.M)


def prose(text: str) -> str:
    """The text without code blocks and inline code, where a bracket is not a link."""
    return INLINE_CODE.sub("", FENCE.sub("", text))


def github_anchor(heading: str) -> str:
    """The id GitHub gives a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading id of a Markdown file, with GitHub's -1, -2 suffixes for repeats."""
    seen: dict[str, int] = {}
    out = set()
    for heading in HEADING.findall(FENCE.sub("", path.read_text())):
        slug = github_anchor(heading)
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def relative_links(path: Path) -> list[str]:
    """The file's links that point inside the repository (not http:, https:, mailto:)."""
    links = LINK.findall(prose(path.read_text()))
    return [t for t in links if not re.match(r"[a-z][a-z0-9+.-]*:", t)]


def broken_links(path: Path, root: Path = ROOT) -> list[str]:
    """Relative links of one file whose target file or heading does not exist."""
    broken = []
    for target in relative_links(path):
        file_part, _, fragment = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        if not dest.exists():
            broken.append(f"{target} (no file {dest.relative_to(root)})")
        elif fragment and dest.suffix == ".md" and fragment not in anchors(dest):
            broken.append(f"{target} (no heading #{fragment} in {dest.relative_to(root)})")
    return broken


def test_design_holds_every_summary_definition_as_the_code_has_it():
    design = (ROOT / "docs" / "DESIGN.md").read_text()
    assert definitions_markdown() in design, "regenerate the table: python -m runmodel.summary"


def test_every_relative_link_in_readme_and_docs_resolves():
    found = {p.relative_to(ROOT).as_posix(): broken_links(p) for p in DOCS}
    # README links into docs/, so an empty link list means the parser, not the docs, is wrong
    assert len(relative_links(ROOT / "README.md")) >= 5
    assert {name: links for name, links in found.items() if links} == {}


def test_the_link_check_catches_a_missing_file_and_a_missing_heading(tmp_path):
    """Known answers, so the check above cannot pass by finding no links at all."""
    (tmp_path / "other.md").write_text("# Other\n\n## A `make compare` run (2026-12-03)\n")
    page = tmp_path / "page.md"
    page.write_text(
        "# Page\n[ok](other.md#a-make-compare-run-2026-12-03) [self](#page) "
        "[gone](missing.md) [no heading](other.md#nowhere) [web](https://example.org)\n"
        "`[not a link](missing.md)`\n```\n[nor this](missing.md)\n```\n"
    )
    assert broken_links(page, root=tmp_path) == [
        "missing.md (no file missing.md)",
        "other.md#nowhere (no heading #nowhere in other.md)",
    ]


def test_readme_stays_a_first_screen():
    lines = (ROOT / "README.md").read_text().count("\n")
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines; move detail to docs/"
