"""A kind of report page: how its title, status and facts are read off its view, and its callout and
section functions in page order.

A view is what one kind of run looks like to the report (report/run.py: RunView for a compare run,
IncastView for an incast sweep). A callout function takes the view and returns a Callout or None, a
section function a Section or None (None: nothing to say for this run, so no empty panel). The pages
themselves are listed once, in report/sections/__init__.py.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from report.doc import Callout, Document, Section

V = TypeVar("V")


@dataclass(frozen=True)
class Page(Generic[V]):
    """One kind of page: title, status ("complete" or "incomplete") and the facts line of a view, then
    its callouts and sections in page order."""

    title: Callable[[V], str]
    status: Callable[[V], str]
    facts: Callable[[V], list[str]]
    callouts: Sequence[Callable[[V], Callout | None]]
    sections: Sequence[Callable[[V], Section | None]]

    def document(
        self,
        view: V,
        sections: Sequence[Callable[[V], Section | None]] | None = None,
        callouts: Sequence[Callable[[V], Callout | None]] | None = None,
    ) -> Document:
        """The page of a view: every callout and section function that has something to say (`sections`
        and `callouts` replace the page's own lists, e.g. to try a new section)."""
        doc = Document(title=self.title(view), status=self.status(view), facts=self.facts(view))
        for make in self.callouts if callouts is None else callouts:
            if (c := make(view)) is not None:
                doc.callouts.append(c)
        for make_section in self.sections if sections is None else sections:
            if (s := make_section(view)) is not None:
                doc.sections.append(s)
        return doc
