"""The terminal tables (report/console.py): the writer's shape (header, units row, aligned columns,
'-' for a missing value, `#` footer lines) and the three tables printed through it (compare, incast,
make bench), each read back cell by cell against the JSON file it was made from."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from report.console import (
    TABLE_SCHEMA,
    Col,
    Table,
    comparison,
    comparison_table,
    goal_text,
    incast,
    incast_table,
)
from runmodel.incast import IncastResult
from runmodel.summary import RunSummary

DATA = Path(__file__).resolve().parent / "data"


def right_edges(line: str) -> list[int]:
    """Where each run of non-blank text ends (the right edge of right-aligned cells)."""
    return [i + 1 for i, ch in enumerate(line) if ch != " " and (i + 1 == len(line) or line[i + 1] == " ")]


def split(table: str) -> tuple[list[str], list[str], list[list[str]], list[str]]:
    """Header, units, the rows' cells (split on runs of 2+ spaces) and the footer of a rendered table."""
    lines = table.splitlines()
    body = [ln for ln in lines[2:] if not ln.startswith("#")]
    foot = [ln for ln in lines[2:] if ln.startswith("#")]
    cells = [[c for c in ln.split("  ") if c.strip()] for ln in body]
    return lines[0].split("  "), lines[1].split(), [[c.strip() for c in r] for r in cells], foot


def json_beside_text(table: Table, text: str) -> tuple[dict[str, Any], list[str], list[str]]:
    """`table`'s --json document (run "results/x"), held to the printed `text` of the same table:
    strict JSON (a NaN or an infinity fails), the table schema, one column per header cell with
    the units row's units. The document, its column keys and the text's footer lines."""
    out = json.loads(
        table.render_json(run="results/x"), parse_constant=lambda c: pytest.fail(f"not strict JSON: {c}")
    )
    assert out["schema"] == TABLE_SCHEMA and out["run"] == "results/x"
    head, units, _, foot = split(text)
    assert [c["title"] for c in out["columns"]] == [h.strip() for h in head if h.strip()]
    assert " ".join(c["unit"] for c in out["columns"] if c["unit"]) == " ".join(units)
    return out, [c["key"] for c in out["columns"]], foot


def test_writer_header_units_rows_aligned_and_footer() -> None:
    rows = [{"name": "a", "t": 1.5, "n": 3}, {"name": "a-much-longer-name", "t": None, "n": 12345678}]
    cols = [
        Col("name", "", "name", align="<"),
        Col("time", "s", "t", "{:.3f}"),
        Col("count", "pkts", "n", "{:d}"),
    ]
    out = Table(cols, rows, footer=["fidelity: trustworthy", "goal met: x"]).render().splitlines()
    assert out[0].split() == ["name", "time", "count"]
    assert out[1].split() == ["s", "pkts"]
    assert out[2].split() == ["a", "1.500", "3"]
    assert out[3].split() == ["a-much-longer-name", "-", "12345678"]  # None shown as '-'
    assert out[4:] == ["# fidelity: trustworthy", "# goal met: x"]
    # the numeric columns end at the same place on every line, the name column starts at 0
    edges = [right_edges(ln)[-2:] for ln in out[:4]]
    assert all(e == edges[3] for e in edges), out
    assert all(ln.startswith(("name", "a")) for ln in out[:1] + out[2:4])
    assert out[3].index("a-much-longer-name") == 0 and out[2].index("1.500") > len("a-much-longer-name")


def test_writer_nan_is_missing_a_function_key_and_a_row_note() -> None:
    cols = [Col("x", "", lambda r: r[0] * 2, "{:.1f}"), Col("y", "", lambda r: r[1], lambda v: f"<{v}>")]
    t = Table(cols, [(1.0, float("nan")), (2.5, "k")], note=lambda r: "(partial)" if r[1] == "k" else "")
    out = t.render().splitlines()
    assert out[2].split() == ["2.0", "-"]
    assert out[3].split() == ["5.0", "<k>", "(partial)"]
    assert all(ln == ln.rstrip() for ln in out)


def test_goal_text_is_the_one_wording() -> None:
    assert goal_text("g", True, 0.931) == "met: g (measured 93%)"
    assert goal_text("g", False, "3/4") == "NOT met: g (measured 3/4)"
    assert goal_text("g", None) == "not measured: g"


def test_compare_table_is_summary_json() -> None:
    doc = json.loads((DATA / "run-small" / "summary.json").read_text())
    out = comparison_table(RunSummary.from_dict(doc))
    head, units, rows, foot = split(out)
    assert [h.strip() for h in head if h.strip()][:3] == ["strategy", "iter", "comm"]
    assert units[:2] == ["s", "s"]
    assert [r[0] for r in rows] == list(doc["strategies"])
    for row in rows:
        s = doc["strategies"][row[0]]
        assert row[1] == f"{s['iter_time_s']:.3f}" and row[3] == f"{s['final_loss']:.4f}"
        shown = ["-" if s[k] is None else str(s[k]) for k in ("ps_port_drops", "queue_drops_total")]
        assert row[4:6] == shown
        assert row[6:10] == [
            str(s[k])
            for k in (
                "tcp_retransmits_kernel",
                "tcp_retransmits_pcap",
                "tcp_timeouts_kernel",
                "tcp_timeouts_pcap",
            )
        ]
        assert row[10] == f"{round(s['busiest_link_utilisation'] * 100)}%"
    assert foot[0] == f"# fidelity: {doc['fidelity']['verdict']}"
    assert foot[1:] == [f"#   {r}" for r in doc["fidelity"]["reasons"][:3]]
    assert any(ln.startswith("ps ") for ln in out.splitlines())


def test_compare_json_is_summary_json() -> None:
    # the same Table as JSON: one object per strategy, each value the summary's own, unformatted
    doc = json.loads((DATA / "run-small" / "summary.json").read_text())
    summary = RunSummary.from_dict(doc)
    out, keys, foot = json_beside_text(comparison(summary), comparison_table(summary))
    assert keys[0] == "strategy" and set(keys[1:]) <= set(next(iter(doc["strategies"].values())))
    assert [r["strategy"] for r in out["rows"]] == list(doc["strategies"])
    for row in out["rows"]:
        s = doc["strategies"][row["strategy"]]
        assert {k: row[k] for k in keys[1:]} == {k: s[k] for k in keys[1:]}
        assert row.get("note", "") == ("" if s["state"] == "complete" else f"({s['state']})")
    assert ["# " + ln for ln in out["footer"]] == foot
    assert out["footer"][0] == f"fidelity: {doc['fidelity']['verdict']}"


def test_json_rows_carry_missing_values_as_null() -> None:
    twice = Col("y", "", lambda r: None if r["x"] is None else r["x"] * 2, name="twice")
    rows = [{"x": float("nan")}, {"x": 1.5}, {"x": None}]
    t = Table([Col("x", "s", "x", "{:.1f}"), twice], rows, note=lambda r: "" if r["x"] else "(partial)")
    out = json.loads(t.render_json())
    assert out["columns"] == [
        {"title": "x", "unit": "s", "key": "x"},
        {"title": "y", "unit": "", "key": "twice"},
    ]
    assert out["rows"] == [
        {"x": None, "twice": None},  # NaN (and NaN * 2) is missing, as '-' in the text
        {"x": 1.5, "twice": 3.0},
        {"x": None, "twice": None, "note": "(partial)"},
    ]


def test_incast_table_is_incast_json() -> None:
    doc = json.loads((DATA / "incast-small" / "incast.json").read_text())
    out = incast_table(IncastResult.from_dict(doc))
    head, units, rows, foot = split(out)
    assert units[:3] == ["senders", "Mbit/s", "share"]
    assert len(rows) == len(doc["rows"])
    for row, r in zip(rows, doc["rows"], strict=True):
        assert row[:3] == [r["line"], str(r["senders"]), f"{r['goodput_mbit']:.2f}"]
        assert row[4] == f"{r['round_s_median'] * 1000:.1f}"
        assert row[5] == str(r["timeouts_kernel"]) and row[6] == str(r["timeouts_pcap"])
        assert row[-1].startswith(r["fidelity"]["verdict"])
    assert foot[0] == f"# fidelity: {doc['fidelity']['verdict']}"
    goals = [ln for ln in foot if ln.startswith("# goal ")]
    assert len(goals) == len(doc["goals"])
    for ln, g in zip(goals, doc["goals"], strict=True):
        mark = "met" if g["met"] else "NOT met"
        assert ln.startswith(f"# goal {mark}: {g['goal']}")


def test_incast_json_is_incast_json() -> None:
    # incast --json: one object per point, each value incast.json's own row field, unformatted
    doc = json.loads((DATA / "incast-small" / "incast.json").read_text())
    result = IncastResult.from_dict(doc)
    out, keys, foot = json_beside_text(incast(result), incast_table(result))
    assert "verdict" in keys and set(keys) - {"verdict"} <= set(doc["rows"][0])
    assert len(out["rows"]) == len(doc["rows"])
    for row, r in zip(out["rows"], doc["rows"], strict=True):
        assert {k: row[k] for k in keys if k != "verdict"} == {k: r[k] for k in keys if k != "verdict"}
        assert row["verdict"] == r["fidelity"]["verdict"]
        assert row.get("note", "") == ("" if r["state"] == "complete" else f"({r['state']})")
    assert ["# " + ln for ln in out["footer"]] == foot
    assert out["footer"][0] == f"fidelity: {doc['fidelity']['verdict']}"
    assert len([ln for ln in out["footer"] if ln.startswith("goal ")]) == len(doc["goals"])


def test_incast_rebuild_json_prints_one_document_and_the_report_on_stderr(tmp_path) -> None:
    import shutil

    from tests.conftest import run_cli

    run = tmp_path / "incast-small"
    shutil.copytree(DATA / "incast-small", run)
    proc = run_cli(["incast", "--rebuild", str(run), "--json"], timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)  # stdout is the one document, nothing else
    assert out["run"] == str(run) and "report:" not in proc.stdout
    assert f"report: {run / 'report.html'}" in proc.stderr and (run / "report.html").exists()
    rebuilt = json.loads((run / "incast.json").read_text())["rows"]
    assert [(r["line"], r["senders"], r["goodput_mbit"]) for r in out["rows"]] == [
        (r["line"], r["senders"], r["goodput_mbit"]) for r in rebuilt
    ]


def bench_rows() -> list[dict[str, Any]]:
    return [
        {
            "size_bytes": 65572,
            "collective": "ring",
            "time_s": 0.25,
            "min_time_s": 0.2,
            "algbw_mbit": 2.1,
            "busbw_mbit": 3.15,
            "busbw_over_link": 0.1575,
            "ring_over_gloo": 1.07,
            "ring_vs_gloo": "tied",
            "bound_s": 0.041,
        },
        {
            "size_bytes": 33554472,
            "collective": "ps",
            "time_s": 40.0,
            "min_time_s": 39.5,
            "algbw_mbit": 6.71,
            "busbw_mbit": 10.07,
            "busbw_over_link": 0.5033,
            "bound_s": 26.8,
            "ps_over_ring": 2.9,
            "ps_over_ring_theory": 3.0,
        },
    ]


def test_bench_table_columns_and_footer() -> None:
    from bench import sweep

    largest = {
        "ring": {
            "size_bytes": 33554472,
            "busbw_over_link": 0.93,
            "goal_busbw_over_link": 0.9,
            "goal_met": True,
        }
    }
    out = sweep.table(bench_rows(), 3, "the switch was idle", largest)
    head, units, rows, foot = split(out)
    assert "floats" in units and "Mb/s" in units
    assert (
        rows[0]
        == ["64 KiB", "16393", "ring", "0.250", "0.200", "2.10", "3.15", "16%", "1.07", "tied", "0.041"]
        + ["-"] * 3
    )
    assert rows[1][:3] == ["32 MiB", "8388618", "ps"] and rows[1][8:10] == ["-", "-"]
    assert rows[1][-4:] == ["26.800", "2.90", "3.00", "-"]  # no model ratio: '-'
    assert foot == [
        "# N = 3 workers",
        "# fidelity: the switch was idle",
        "# goal met: ring busbw at 32 MiB >= 90% of the link (measured 93%)",
    ]
    fits = [{"collective": "ring", "steps": 4, "alpha_s": 0.0021, "beta_over_link": 1.02}]
    fits[0] |= {"link_efficiency": None, "max_rel_residual": 0.031}
    assert split(sweep.fit_table(fits))[2] == [["ring", "4", "2.10", "1.020", "-", "3.1%"]]


def test_report_json_prints_one_json_document_on_stdout(tmp_path, capsys) -> None:
    # `incastlab report RUN --json`: stdout is the table's JSON alone, the report's path on stderr
    import shutil

    from incastlab.cli import main as cli_main

    run = tmp_path / "run"
    shutil.copytree(DATA / "run-small", run)
    assert cli_main(["report", str(run), "--json"]) == 0
    out, err = capsys.readouterr()
    doc = json.loads(out)
    summary = json.loads((DATA / "run-small" / "summary.json").read_text())
    assert doc["run"] == str(run.resolve()) and "report.html" in err
    assert {r["strategy"]: r["iter_time_s"] for r in doc["rows"]} == {
        k: s["iter_time_s"] for k, s in summary["strategies"].items()
    }
