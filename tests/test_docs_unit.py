"""The documents say what the code does: docs/DESIGN.md holds the summary's definitions verbatim."""

from __future__ import annotations

from pathlib import Path

from runmodel.summary import definitions_markdown

ROOT = Path(__file__).resolve().parent.parent


def test_design_holds_every_summary_definition_as_the_code_has_it():
    design = (ROOT / "docs" / "DESIGN.md").read_text()
    assert definitions_markdown() in design, "regenerate the table: python -m runmodel.summary"
