"""The report page as a reader sees it: its status badges, read from the markup, not its text.

Every report.html inlines the stylesheet, which names both `.status.complete` and
`.status.incomplete`, so a substring search for "incomplete" is true of any report. The badge is the
`<span class="status ...">` element in the title; a report has exactly one.
"""

from __future__ import annotations

from html.parser import HTMLParser


class _Badges(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.badges: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        classes = (dict(attrs).get("class") or "").split()
        if tag == "span" and "status" in classes:
            self.badges += [c for c in classes if c != "status"]


def status_badges(html: str) -> list[str]:
    """The status badges of a report page, in order: ["complete"] or ["incomplete"] when well formed."""
    parser = _Badges()
    parser.feed(html)
    return parser.badges
