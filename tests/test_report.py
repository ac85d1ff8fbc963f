"""The report (report/) on a real run folder: tests/data/run-small, made by tests/make_run_fixture.py
from `incastlab compare --strategies ps,ring --steps 3 --workers 3 --capture all`.

The checks read the run's files the plain way (json, the pcap counts of the summary) and compare
them with what the report shows: table cells are summary.json's figures, the plotted series come
from the records and add up to the summary's totals, panels appear only where they mean something.
Variants (stragglers, faults, a dead strategy, no host captures) are edits of copies of that folder.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from analysis.summary import summarize
from report import build_report
from report.build import build_document, write_document
from report.doc import Bullets, Callout, Column, Document, Figure, Paragraph, Row, Section, Table
from report.html import render_html
from report.markdown import render_markdown
from report.run import ReportError, RunView
from runmodel.params import ParamError
from runmodel.records import FaultRecord, JsonlWriter
from tests.browser import CHROMIUM, make_driver, missing
from tests.conftest import ROOT, require
from tests.make_run_fixture import FIXTURE_DIR, MAX_BYTES, header_bytes
from tests.reportpage import status_badges

BASE_FIGURES = {
    "iter_time",
    "comm_split",
    "queue_occupancy",
    "drops_retransmits",
    "goodput",
    "goodput_receivers",
    "goodput_ps_flows",
    "link_utilisation",
    "link_bytes",
    "dequeue_cdf",
    "cpu",
}
SUMMARY_TABLES = [
    "timing-and-loss",
    "switch-queues-and-links",
    "tcp",
    "bounds-and-the-split-of-communication-time",
]
STRAGGLER_FIGURES = {"compute_share", "loss"}
ARTIFACTS = Path(__file__).resolve().parent / "artifacts"
# real run folders the browser test and tests/test_report_figures.py also render (colon-separated; those
# that exist): the default compare (ps, ring, 7 workers) and the cures (six variants on 12 hosts)
RUNS_ENV = os.environ.get("INCASTLAB_REPORT_RUNS", "")
REAL_RUNS = [Path(p) for p in RUNS_ENV.split(":") if p]
_NOT_RUNS = [str(p) for p in REAL_RUNS if not (p / "config.json").is_file()]
if _NOT_RUNS:  # a run named and not found must not vanish from the parameters unseen
    raise pytest.UsageError(f"INCASTLAB_REPORT_RUNS: not a run folder: {', '.join(_NOT_RUNS)}")


def jsonl(path: Path) -> list[dict[str, Any]]:
    """A JSON-lines file, the plain way."""
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def steps_of(run: Path, strategy: str) -> list[dict[str, Any]]:
    """Every worker step record of a strategy."""
    return [r for w in sorted((run / strategy).glob("worker-*.jsonl")) for r in jsonl(w) if "event" not in r]


def t0_of(run: Path, strategy: str) -> float:
    """The timelines' origin: the strategy's first training step."""
    return min(r["t_start"] for r in steps_of(run, strategy))


def summary_of(run: Path) -> dict[str, Any]:
    return json.loads((run / "summary.json").read_text())


def hot_sorted(summary: dict[str, Any]) -> dict[str, Any]:
    """summary.json with each strategy's hot_ports in one order: analysis.summary collects them in a set,
    so ports with equal tx bytes come in an order that changes from process to process."""
    out = json.loads(json.dumps(summary))
    for fig in out["strategies"].values():
        fig["hot_ports"] = sorted(fig.get("hot_ports") or [], key=lambda h: (-h["tx_bytes"], h["port"]))
    return out


def edit_json(path: Path, **changes: Any) -> None:
    doc = json.loads(path.read_text())
    doc.update(changes)
    path.write_text(json.dumps(doc))


def copy_run(dest: Path) -> Path:
    """A copy of the fixture as recorded (its summary.json is the real run's own)."""
    shutil.copytree(FIXTURE_DIR, dest)
    return dest


def test_the_recorded_summary_is_what_todays_code_computes(tmp_path: Path) -> None:
    """The fixture's summary.json was written by the run itself; today's analysis must compute the
    same figures from the same records (after a deliberate change of a figure, regenerate it:
    python tests/make_run_fixture.py)."""
    recorded = summary_of(FIXTURE_DIR)
    run = copy_run(tmp_path / "run")
    summarize(run)
    assert hot_sorted(summary_of(run)) == hot_sorted(recorded), "regenerate: python tests/make_run_fixture.py"


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """One report of a copy of the fixture, shared by the read-only tests."""
    run = copy_run(tmp_path_factory.mktemp("rep") / "run")
    return run, build_report(run)


@pytest.fixture()
def run_copy(tmp_path: Path) -> Path:
    """A private copy for tests that edit it."""
    return copy_run(tmp_path / "run")


def md_tables(md: str) -> dict[str, list[list[str]]]:
    """Every Markdown table under its ### heading, as rows of cells (header row first)."""
    out: dict[str, list[list[str]]] = {}
    heading = None
    for line in md.splitlines():
        if line.startswith("### "):
            heading = line[4:]
            out[heading] = []
        elif line.startswith("|") and heading is not None and not line.startswith("|---"):
            out[heading].append([c.strip() for c in line.strip("|").split("|")])
    return out


# -- the data ---------------------------------------------------------------------------------------
def test_fixture_is_a_small_real_run() -> None:
    files = [p for p in FIXTURE_DIR.rglob("*") if p.is_file()]
    assert sum(p.stat().st_size for p in files) < MAX_BYTES
    cfg = json.loads((FIXTURE_DIR / "config.json").read_text())
    assert cfg["strategies"] == ["ps", "ring"] and cfg["steps"] == 3 and cfg["workers"] == 3
    assert cfg["capture"] == "all" and cfg["environment"]["torch"]  # a real run records its machine
    for strategy in ("ps", "ring"):
        for rank in range(3):
            log = jsonl(FIXTURE_DIR / strategy / f"worker-{rank}.jsonl")
            assert [r["step"] for r in log if "event" not in r] == [0, 1, 2] and log[-1]["event"] == "done"
        cap = json.loads((FIXTURE_DIR / strategy / "capture.json").read_text())
        for pt in cap["points"]:
            data = (FIXTURE_DIR / strategy / pt["file"]).read_bytes()
            assert data[:4] == b"\xd4\xc3\xb2\xa1" or data[:4] == b"\x4d\x3c\xb2\xa1", pt["file"]
            off, n = 24, 0
            while off + 16 <= len(data):  # the trimmed records keep their headers, nothing more
                incl = int.from_bytes(data[off + 8 : off + 12], "little")
                pkt = data[off + 16 : off + 16 + incl]
                assert incl == header_bytes(pkt) or incl < 54
                off, n = off + 16 + incl, n + 1
            assert n == pt["packets_captured"], pt["file"]
    assert (FIXTURE_DIR / "ps" / "pcap" / "ps-port.pcap").stat().st_size > 100_000


# -- files ------------------------------------------------------------------------------------------
def test_files_written_and_html_self_contained(built: tuple[Path, dict[str, Any]]) -> None:
    run, res = built
    assert res["files"]["html"] == run / "report.html" and res["files"]["md"] == run / "report.md"
    assert set(res["files"]["figures"]) == BASE_FIGURES == set(res["figures"])
    assert sorted(p.name for p in (run / "figures").iterdir()) == sorted(f"{k}.png" for k in BASE_FIGURES)
    html = (run / "report.html").read_text()
    for name, path in res["files"]["figures"].items():
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert f"id='fig-{name}'" in html
    assert "http://" not in html and "https://" not in html and "<script" not in html and "<link" not in html
    srcs = re.findall(r"""\b(?:src|href)\s*=\s*['"]([^'"]*)""", html)
    assert len(srcs) == len(BASE_FIGURES) and all(s.startswith("data:image/png;base64,") for s in srcs)
    md = (run / "report.md").read_text()
    linked = re.findall(r"!\[[^\]]*\]\((figures/[^)]+\.png)\)", md)
    assert sorted(linked) == sorted(f"figures/{k}.png" for k in BASE_FIGURES)
    assert res["complete"] is True and res["summary_rebuilt"] is None
    assert [c["title"] for c in res["callouts"]] == ["Fidelity verdict: degraded"]  # the fixture's ps is
    assert "COMPLETE" in html and "INCOMPLETE" not in html and "WARNING: Run incomplete" not in md
    assert status_badges(html) == ["complete"]
    assert "*" not in "".join(c for t in res["tables"].values() for row in t["rows"].values() for c in row)


def test_stale_figures_removed(run_copy: Path) -> None:
    (run_copy / "figures").mkdir()
    (run_copy / "figures" / "utilisation.png").write_bytes(b"old")
    res = build_report(run_copy)
    assert sorted(p.stem for p in (run_copy / "figures").iterdir()) == sorted(res["files"]["figures"])


# -- tables: summary.json rendered ---------------------------------------------------------------------
def test_tables_are_summary_json(built: tuple[Path, dict[str, Any]]) -> None:
    run, res = built
    summary = summary_of(run)["strategies"]
    tables = res["tables"]
    assert [k for k in tables if k in SUMMARY_TABLES] == SUMMARY_TABLES
    for key in SUMMARY_TABLES:
        t = tables[key]
        assert set(t["rows"]) == {"ps", "ring"} and set(t["values"]) == {"ps", "ring"}
        for strategy, values in t["values"].items():
            for field, value in values.items():
                assert value == summary[strategy][field], (key, strategy, field)
    timing = tables["timing-and-loss"]
    h = timing["headers"]
    for strategy in ("ps", "ring"):
        cells = timing["rows"][strategy]
        assert cells[h.index("iteration (s)")] == f"{summary[strategy]['iter_time_s']:.3f}"
        assert cells[h.index("final loss")] == f"{summary[strategy]['final_loss']:.4f}"
        assert cells[h.index("state")] == "complete"
    q = tables["switch-queues-and-links"]
    ps = q["rows"]["ps"]
    assert ps[q["headers"].index("PS-port drops")] == str(summary["ps"]["ps_port_drops"])
    assert (
        ps[q["headers"].index("busiest link, share of all link bytes")]
        == f"{summary['ps']['max_link_share'] * 100:.1f} % ({summary['ps']['busiest_link']})"
    )
    tcp = tables["tcp"]
    assert tcp["rows"]["ps"][tcp["headers"].index("retransmissions (pcap)")] == str(
        summary["ps"]["tcp_retransmits_pcap"]
    )
    # the same cells in both renderings, each table under its own heading
    md = md_tables((run / "report.md").read_text())
    html = (run / "report.html").read_text()
    for key, t in tables.items():
        assert md[t["heading"]][0] == [t["label_header"], *t["headers"]], key
        assert {r[0]: r[1:] for r in md[t["heading"]][1:]} == t["rows"]
        assert f"<h3 id='table-{key}'>{t['heading']}</h3>" in html


def test_same_tables_without_summary_json(run_copy: Path) -> None:
    """`incastlab report RUN` renders summary.json; without it, it rebuilds it with analysis.summary and
    shows the same table values, and a complete run stays complete."""

    def report() -> str:
        proc = subprocess.run(
            [sys.executable, "-m", "incastlab.cli", "report", str(run_copy)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert proc.returncode == 0, proc.stderr
        assert Path(proc.stdout.strip()) == run_copy / "report.html"
        return (run_copy / "report.md").read_text()

    written = summary_of(run_copy)
    with_summary = report()
    (run_copy / "summary.json").unlink()
    without = report()
    assert md_tables(with_summary) == md_tables(without)
    assert len(md_tables(without)) >= 3
    assert hot_sorted(summary_of(run_copy)) == hot_sorted(written)  # rebuilt by the code that wrote it
    for md in (with_summary, without):
        assert md.startswith("# incastlab report: run (complete)")
        assert "INCOMPLETE" not in md and "Run incomplete" not in md and "did not finish" not in md
    assert "summary.json rebuilt" in without and "summary.json rebuilt" not in with_summary


def test_findings_are_summary_figures(built: tuple[Path, dict[str, Any]]) -> None:
    run, res = built
    s = summary_of(run)["strategies"]
    ps = next(t for t in res["findings"] if t.startswith("ps:"))
    ring = next(t for t in res["findings"] if t.startswith("ring:"))
    assert f"{s['ps']['ps_port_drops']} packets dropped at lf1-eth3 (the PS port)" in ps
    assert f"{s['ps']['tcp_retransmits_pcap']} TCP retransmissions" in ps
    assert f"median iteration {s['ps']['iter_time_s']:.3f} s" in ps
    assert f"{s['ring']['queue_drops_total']} packets dropped in the fabric" in ring
    ratio = s["ps"]["iter_time_s"] / s["ring"]["iter_time_s"]
    assert f"{ratio:.2f}x faster than ps" in ring
    assert "Time to loss" not in " ".join(res["findings"])


# -- figures: the records, adding up to the summary ----------------------------------------------------
def test_iteration_times_equal_worker_logs(built: tuple[Path, dict[str, Any]]) -> None:
    run, res = built
    fig = res["figures"]["iter_time"]
    for strategy in ("ps", "ring"):
        recs = steps_of(run, strategy)
        want = [max(r["t_end"] - r["t_start"] for r in recs if r["step"] == k) for k in (0, 1, 2)]
        assert fig[strategy]["steps"] == [0, 1, 2]
        assert fig[strategy]["seconds"] == pytest.approx(want, abs=1e-9)
        median = sorted(want)[1]
        assert round(median, 4) == summary_of(run)["strategies"][strategy]["iter_time_s"]


def test_queue_panels_at_each_strategys_worst_port(built: tuple[Path, dict[str, Any]]) -> None:
    """Each strategy measured where its traffic goes: its own worst port (summary worst_queue_port), from
    that port's lines of queue_depth.jsonl, against the configured buffer."""
    run, res = built
    fig = res["figures"]["queue_occupancy"]
    cfg = json.loads((run / "config.json").read_text())
    summary = summary_of(run)["strategies"]
    assert fig["buffer_pkts"] == cfg["fabric"]["buffer_pkts"] == 20 and fig["port"] == "lf1-eth3"
    panels = {(p["strategy"], p["port"]): p for p in fig["panels"]}
    assert set(panels) == {(s, summary[s]["worst_queue_port"]) for s in ("ps", "ring")}
    assert summary["ps"]["worst_queue_port"] == "lf1-eth3" != summary["ring"]["worst_queue_port"]
    for (strategy, port), p in panels.items():
        rows = [r for r in jsonl(run / strategy / "queue_depth.jsonl") if r.get("port") == port]
        got = p["data"]
        assert rows and got["backlog_packets"] == [r["backlog_packets"] for r in rows]
        t0 = t0_of(run, strategy)
        assert got["t"] == pytest.approx([r["t"] - t0 for r in rows])
        assert got["max"] == max(r["backlog_packets"] for r in rows)
        hot = {h["port"]: h for h in summary[strategy]["hot_ports"]}
        assert got["max"] == hot[port]["max_backlog_packets"]
        assert p["drops"] == summary[strategy]["drops_by_port"].get(port, 0)
    assert panels[("ps", "lf1-eth3")]["role"] == "its worst port, the PS port"
    assert fig["strategies"]["ps"]["max"] >= 0.9 * cfg["fabric"]["buffer_pkts"]


def test_queue_lines_without_a_port_are_the_ps_port(run_copy: Path) -> None:
    """Runs from before the every-port sampler wrote lines without `port`: the PS port's."""
    path = run_copy / "ps" / "queue_depth.jsonl"
    rows = [r for r in jsonl(path) if r["port"] == "lf1-eth3"]
    path.write_text("".join(json.dumps({k: v for k, v in r.items() if k != "port"}) + "\n" for r in rows))
    (run_copy / "summary.json").unlink()
    res = build_report(run_copy)
    panel = next(p for p in res["figures"]["queue_occupancy"]["panels"] if p["strategy"] == "ps")
    assert panel["port"] == "lf1-eth3"
    assert panel["data"]["backlog_packets"] == [r["backlog_packets"] for r in rows]


def test_drops_add_up_to_the_summary(built: tuple[Path, dict[str, Any]]) -> None:
    run, res = built
    summary = summary_of(run)["strategies"]
    drops = res["figures"]["drops_retransmits"]["drops"]
    interval = json.loads((run / "config.json").read_text())["controller"]["interval"]
    for strategy in ("ps", "ring"):
        d = drops[strategy]
        assert d["fabric"]["total"] == sum(d["fabric"]["count"]) == summary[strategy]["queue_drops_total"]
        if summary[strategy]["ps_port"] is None:  # a collective runs no PS: no PS-port series
            assert d["ps_port"] is None
        else:
            assert d["ps_port"]["total"] == summary[strategy]["ps_port_drops"]
        assert d["fabric"]["per_s"] == pytest.approx(
            [c / t for c, t in zip(d["fabric"]["count"], d["fabric"]["dt"], strict=True)]
        )
        assert d["fabric"]["dt"] == pytest.approx([interval] * len(d["fabric"]["dt"]), rel=0.2)
    assert max(drops["ps"]["ps_port"]["per_s"]) > 0 and drops["ring"]["ps_port"] is None


def test_pcap_series_add_up(built: tuple[Path, dict[str, Any]]) -> None:
    run, res = built
    summary = summary_of(run)["strategies"]
    retx = res["figures"]["drops_retransmits"]["retransmits"]
    good = res["figures"]["goodput"]["strategies"]
    for strategy in ("ps", "ring"):
        r = retx[strategy]
        assert sum(r["retransmits"]) == r["retransmits_total"] == summary[strategy]["tcp_retransmits_pcap"]
        assert r["retransmits_per_s"] == pytest.approx([c / r["bin_s"] for c in r["retransmits"]])
        # payload delivered to the hosts (captures) against the payload the workers logged
        logged = summary[strategy]["worker_bytes_received"]
        if strategy == "ps":
            logged += summary[strategy]["worker_bytes_sent"]  # the PS received every gradient
        assert sum(good[strategy]["goodput_bytes"]) == pytest.approx(logged, rel=0.01)
        assert good[strategy]["goodput_mbit_s"] == pytest.approx(
            [b * 8 / good[strategy]["bin_s"] / 1e6 for b in good[strategy]["goodput_bytes"]]
        )
    assert good["ps"]["hosts"] == ["h1", "h2", "h3", "h4"] and good["ring"]["hosts"] == ["h2", "h3", "h4"]


def test_timelines_share_one_axis(built: tuple[Path, dict[str, Any]]) -> None:
    run, res = built
    timelines = ("queue_occupancy", "drops_retransmits", "goodput")
    ranges = {k: tuple(res["figures"][k]["xlim"]) for k in timelines}
    assert len(set(ranges.values())) == 1, ranges
    lo, hi = next(iter(ranges.values()))
    ends = [max(r["t_end"] for r in steps_of(run, s)) - t0_of(run, s) for s in ("ps", "ring")]
    assert lo <= 0 < max(ends) <= hi < max(ends) * 1.1


def test_link_bytes_are_summary_bytes_by_link(built: tuple[Path, dict[str, Any]]) -> None:
    run, res = built
    fig = res["figures"]["link_bytes"]
    summary = summary_of(run)["strategies"]
    for strategy in ("ps", "ring"):
        by = summary[strategy]["bytes_by_link"]
        col = dict(zip(fig["links"], fig["bytes"][strategy], strict=True))
        assert all(col[k] == by.get(k, 0) for k in col)
        assert max(fig["share"][strategy]) == pytest.approx(summary[strategy]["max_link_share"], abs=1e-4)
        left_out = [k for k in by if k not in col]
        assert all(by[k] < 0.005 * sum(by.values()) for k in left_out)
    assert fig["links"][fig["bytes"]["ps"].index(max(fig["bytes"]["ps"]))] in ("h1-eth0", "lf1-eth3")


def test_no_empty_panel(built: tuple[Path, dict[str, Any]]) -> None:
    _, res = built
    figs = res["figures"]
    assert all(figs["iter_time"][s]["seconds"] for s in ("ps", "ring"))
    assert figs["queue_occupancy"]["strategies"]["ps"]["t"]
    for s in ("ps", "ring"):
        assert figs["drops_retransmits"]["drops"][s]["fabric"]["t"]
        assert any(figs["goodput"]["strategies"][s]["goodput_bytes"])
    assert "Faults and events" not in res["sections"] and "Stragglers and convergence" not in res["sections"]


# -- panels only where they mean something -----------------------------------------------------------------
def test_without_the_ps_family_no_ps_panels(run_copy: Path) -> None:
    edit_json(run_copy / "config.json", strategies=["ring"])
    (run_copy / "summary.json").unlink()
    res = build_report(run_copy)
    panels = res["figures"]["queue_occupancy"]["panels"]  # the ring's own worst port, no PS port
    assert [(p["strategy"], p["role"]) for p in panels] == [("ring", "its worst port")]
    assert panels[0]["port"] != "lf1-eth3" and "Cures" not in res["sections"]
    assert res["strategies"] == ["ring"] and res["complete"]
    assert list(res["figures"]["drops_retransmits"]["drops"]) == ["ring"]
    assert "lf1-eth3 (the PS port)" not in (run_copy / "report.html").read_text()


def test_stragglers_and_target_loss(run_copy: Path) -> None:
    edit_json(run_copy / "config.json", stragglers=[{"host": "h3", "cpu": 0.5}], target_loss=2.31)
    res = build_report(run_copy)  # summary.json stays as written: stragglers change no figure
    assert "Stragglers and convergence" in res["sections"]
    assert set(res["figures"]) == BASE_FIGURES | STRAGGLER_FIGURES  # no staleness without async/ssp/backup
    summary = summary_of(run_copy)["strategies"]
    share = res["figures"]["compute_share"]
    assert share["stragglers"] == {1: "h3"}  # h3 is worker_hosts[1]
    for strategy in ("ps", "ring"):
        assert share["shares"][strategy] == {
            int(k): v for k, v in summary[strategy]["worker_compute_share_by_rank"].items()
        }
    loss = res["figures"]["loss"]
    assert loss["target"] == 2.31 and loss["xlim"] == res["figures"]["goodput"]["xlim"]
    t0 = t0_of(run_copy, "ps")
    recs = steps_of(run_copy, "ps")
    want = [sum(r["loss"] for r in recs if r["step"] == k) / 3 for k in (0, 1, 2)]
    assert loss["strategies"]["ps"]["loss"] == pytest.approx(want)
    assert loss["strategies"]["ps"]["t"] == pytest.approx(
        [max(r["t_end"] for r in recs if r["step"] == k) - t0 for k in (0, 1, 2)]
    )
    tt = res["tables"]["time-to-loss-2-31"]
    for strategy in ("ps", "ring"):
        d = loss["strategies"][strategy]
        first = next((t for t, v in zip(d["t"], d["loss"], strict=True) if v <= 2.31), None)
        assert tt["values"][strategy]["seconds"] == first
    assert any(t.startswith("Time to loss <= 2.31") for t in res["findings"])
    md = (run_copy / "report.md").read_text()
    assert "Straggler: worker rank 1 (h3); configured as h3 (cpu=0.5)." in md
    assert "### Parameter-server updates" in md
    # without a target, no time-to-target anywhere
    edit_json(run_copy / "config.json", target_loss=None)
    res = build_report(run_copy)
    assert not any(k.startswith("time-to-loss") for k in res["tables"])
    assert "Time to loss" not in (run_copy / "report.md").read_text()


def test_async_gets_the_staleness_panel(run_copy: Path) -> None:
    """The PS log of a run renamed async: the straggler strategies bring their panels."""
    (run_copy / "ps").rename(run_copy / "async")
    edit_json(run_copy / "config.json", strategies=["async", "ring"])
    (run_copy / "summary.json").unlink()
    res = build_report(run_copy)
    summary = summary_of(run_copy)["strategies"]
    assert {"staleness", "compute_share", "loss", "queue_occupancy"} <= set(res["figures"])
    assert res["figures"]["staleness"] == {
        "async": {int(k): v for k, v in summary["async"]["staleness_histogram"].items()}
    }
    events = jsonl(run_copy / "async" / "ps.jsonl")
    applied = [e for e in events if e.get("event") == "update" and e["applied"]]
    assert sum(res["figures"]["staleness"]["async"].values()) == len(applied)
    stale = len(applied) - summary["async"]["staleness_histogram"].get("0", 0)
    md = (run_copy / "report.md").read_text()
    assert f"async: {stale} of {len(applied)} applied updates were stale" in md


def test_no_host_captures(run_copy: Path) -> None:
    edit_json(run_copy / "config.json", capture="ps-port")
    cap = json.loads((run_copy / "ps" / "capture.json").read_text())
    cap["points"] = [p for p in cap["points"] if p["name"] == "ps-port"]
    (run_copy / "ps" / "capture.json").write_text(json.dumps(cap))
    for strategy in ("ps", "ring"):
        for p in (run_copy / strategy / "pcap").glob("h*.pcap"):
            p.unlink()
    (run_copy / "ring" / "capture.json").write_text(json.dumps({"points": [], "complete": False}))
    (run_copy / "summary.json").unlink()
    res = build_report(run_copy)
    assert "goodput" not in res["figures"] and "retransmits" in res["figures"]["drops_retransmits"]
    assert res["figures"]["drops_retransmits"]["retransmits"] == {}
    tcp = res["tables"]["tcp"]
    assert tcp["rows"]["ps"][tcp["headers"].index("retransmissions (pcap)")] == "–"
    assert tcp["values"]["ps"]["tcp_retransmits_pcap"] is None
    md = (run_copy / "report.md").read_text()
    assert "no host captures" in md and "No retransmission line" in md


# -- faults, events, gaps ---------------------------------------------------------------------------------
def test_faults_events_and_gaps(run_copy: Path) -> None:
    ps = run_copy / "ps"
    t0 = t0_of(run_copy, "ps")
    with JsonlWriter(ps / "faults.jsonl") as w:
        w.write(FaultRecord(t0 + 0.5, "fired", "link-down", "lf1-eth1", "down"))
        w.write(FaultRecord(t0 + 1.5, "restored", "link-down", "lf1-eth1", "up"))
    rows = jsonl(ps / "timeseries.jsonl")
    hole = (t0 + 1.8, t0 + 3.3)
    rows = [r for r in rows if not hole[0] < r["t"] < hole[1]]
    rows += [
        {"t": t0 + 0.51, "kind": "event", "event": "port_down", "switch": "lf1", "port": 1},
        {"t": t0 + 0.52, "kind": "event", "event": "port_down", "switch": "sp1", "port": 1},
        {"t": t0 + 0.6, "kind": "event", "event": "reroute", "link": "lf1-sp1", "state": "down"},
    ]
    rows.sort(key=lambda r: r["t"])
    (ps / "timeseries.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    res = build_report(run_copy)
    marks = res["figures"]["drops_retransmits"]["marks"]["ps"]
    faults = [m for m in marks if m["source"] == "fault"]
    assert [m["t"] for m in faults] == pytest.approx([0.5, 1.5])
    assert [m["label"] for m in faults] == ["link-down lf1-eth1 down", "link-down lf1-eth1 up"]
    downs = [m for m in marks if m["kind"] == "port_down"]
    assert len(downs) == 1 and downs[0]["count"] == 2 and downs[0]["label"] == "port_down lf1-eth1, sp1-eth1"
    assert [m["label"] for m in marks if m["kind"] == "reroute"] == ["reroute lf1-sp1 down"]
    assert res["figures"]["drops_retransmits"]["marks"]["ring"] == []
    assert res["figures"]["goodput"]["marks"]["ps"] == marks
    # iteration time: a mark at the step that was running
    recs = steps_of(run_copy, "ps")
    starts = sorted({min(r["t_start"] for r in recs if r["step"] == k) for k in (0, 1, 2)})
    xs = res["figures"]["iter_time"]["fault_steps"]["ps"]
    for m in faults:
        k = max(i for i, st in enumerate(starts) if st <= t0 + m["t"])
        assert any(k - 0.5 <= x < k + 0.5 for x in xs)
    gaps = res["figures"]["drops_retransmits"]["gaps"]["ps"]
    ts = sorted({r["t"] for r in rows if r["kind"] != "event"})
    before = max(t for t in ts if t <= hole[0])
    after = min(t for t in ts if t >= hole[1])
    assert (
        len(gaps) == 1
        and gaps[0]["t0"] == pytest.approx(before - t0)
        and gaps[0]["t1"] == pytest.approx(after - t0)
    )
    fabric = res["figures"]["drops_retransmits"]["drops"]["ps"]["fabric"]
    after_hole = next(i for i, t in enumerate(fabric["t"]) if t > hole[1] - t0)
    assert fabric["dt"][after_hole] == pytest.approx(after - before, abs=0.1)  # not one poll interval
    i = after_hole
    assert fabric["per_s"][i] == pytest.approx(fabric["count"][i] / fabric["dt"][i])
    assert "Faults and events" in res["sections"]
    md = (run_copy / "report.md").read_text()
    assert "| ps | 0.50 | faults.jsonl | link-down lf1-eth1 down |" in md
    assert f"controller statistics missing for {after - before:.1f} s" in md
    line = next(t for t in res["findings"] if t.startswith("ps faults and events"))
    assert "link-down lf1-eth1 down at 0.50 s" in line


def test_routing_decisions_table(run_copy: Path) -> None:
    """A pinning policy's decisions (controller events flow_pinned / flow_moved, as the controller
    writes them) appear one row each, with the time since the first step, the path and the reason;
    a run without them (ecmp) has no such section."""
    assert "Routing decisions" not in build_report(copy_run(run_copy.parent / "plain"))["sections"]
    edit_json(
        run_copy / "config.json",
        controller={**json.loads((run_copy / "config.json").read_text())["controller"], "routing": "hedera"},
    )
    ring = run_copy / "ring"
    t0 = t0_of(run_copy, "ring")
    end = max(r["t_end"] for r in steps_of(run_copy, "ring"))
    assert end - t0 > 0.5, "the two decisions must fall inside the ring's training"
    flow = "tcp 10.0.0.2:40112>10.0.0.5:29500"
    rows = jsonl(ring / "timeseries.jsonl") + [
        {"t": t0 + 0.25, "kind": "event", "event": "flow_pinned", "flow": flow, "old_path": None,
         "new_path": "sp1", "why": "least-loaded uplink (0 B/s)"},
        {"t": t0 + 0.5, "kind": "event", "event": "flow_moved", "flow": flow, "old_path": "sp1",
         "new_path": "sp2", "why": "demand 9.5 Mbit/s collides on sp1"},
    ]  # fmt: skip
    rows.sort(key=lambda r: r["t"])
    (ring / "timeseries.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    res = build_report(run_copy)
    assert "Routing decisions" in res["sections"]
    md = (run_copy / "report.md").read_text()
    assert f"| ring | 0.25 | flow_pinned | {flow} | - -> sp1 | least-loaded uplink (0 B/s) |" in md
    assert f"| ring | 0.50 | flow_moved | {flow} | sp1 -> sp2 | demand 9.5 Mbit/s collides on sp1 |" in md
    assert "The routing policy 'hedera' placed these flows" in md


# -- incomplete, damaged, missing ----------------------------------------------------------------------------
def test_incomplete_run_still_reports(run_copy: Path) -> None:
    log = run_copy / "ring" / "worker-2.jsonl"
    lines = log.read_text().splitlines()
    log.write_text("\n".join(lines[:2]) + "\n" + lines[2][: len(lines[2]) // 2])  # died mid-write
    edit_json(run_copy / "ring" / "status.json", state="incomplete", error="interrupted")
    (run_copy / "summary.json").unlink()
    res = build_report(run_copy)
    assert res["complete"] is False
    warn = next(c for c in res["callouts"] if c["title"] == "Run incomplete")
    assert warn["tone"] == "warning" and "ring: incomplete (interrupted)" in warn["items"]
    damaged = next(c for c in res["callouts"] if c["title"] == "Damaged or unreadable files")
    assert "ring/worker-2.jsonl: truncated last line skipped" in damaged["items"]
    assert res["figures"]["iter_time"]["ring"]["steps"] == [0, 1, 2]  # ranks 0 and 1 finished step 2
    html = (run_copy / "report.html").read_text()
    assert html.index("Run incomplete") < html.index("<h2")  # at the top, before any section
    assert "INCOMPLETE" in html and "class='callout warning'" in html
    assert status_badges(html) == ["incomplete"]
    md = (run_copy / "report.md").read_text()
    assert md.startswith("# incastlab report: run (INCOMPLETE)") and "> **WARNING: Run incomplete**" in md
    row = res["tables"]["timing-and-loss"]
    assert row["rows"]["ring"][0] == "incomplete"


def test_missing_strategy_folder(run_copy: Path) -> None:
    shutil.rmtree(run_copy / "ring")
    (run_copy / "summary.json").unlink()
    res = build_report(run_copy)
    assert res["complete"] is False
    warn = next(c for c in res["callouts"] if c["title"] == "Run incomplete")
    assert "ring: missing (no strategy folder)" in warn["items"]
    timing = res["tables"]["timing-and-loss"]
    assert timing["rows"]["ring"][0] == "missing" and set(timing["rows"]["ring"][2:]) == {"–"}
    assert "ring" not in res["figures"]["iter_time"]
    assert "– for ring: the strategy did not run (no folder)." in (run_copy / "report.md").read_text()


def test_interrupted_before_any_step(run_copy: Path) -> None:
    for log in (run_copy / "ring").glob("worker-*.jsonl"):
        log.unlink()
    edit_json(run_copy / "ring" / "status.json", state="incomplete", error="interrupted")
    (run_copy / "summary.json").unlink()
    res = build_report(run_copy)
    assert not res["complete"] and (run_copy / "report.html").is_file()
    assert "ring" not in res["figures"]["iter_time"] and "ps" in res["figures"]["iter_time"]


def test_older_summary_is_rebuilt(run_copy: Path) -> None:
    edit_json(run_copy / "summary.json", schema=1)
    res = build_report(run_copy)
    assert "summary.json was of schema 1" in res["summary_rebuilt"]
    assert summary_of(run_copy)["schema"] != 1


def test_not_a_run_folder(tmp_path: Path) -> None:
    with pytest.raises(ReportError, match="run folder not found"):
        build_report(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ParamError, match="no readable config.json"):
        build_report(tmp_path / "empty")
    proc = subprocess.run(
        [sys.executable, "-m", "incastlab.cli", "report", str(tmp_path / "nope")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "run folder not found" in proc.stderr


# -- the document model ------------------------------------------------------------------------------------
def test_document_model_renders_both_ways(tmp_path: Path) -> None:
    t = Table(
        "A <table>",
        "name",
        [Column("n", "how many"), Column("what", numeric=False)],
        [Row("a|b", ["1", "x < y"]), Row("c", ["2", "–"], bad=True)],
        notes=["– means none"],
    )
    fig = Figure("f", b"\x89PNG\r\n\x1a\nfake", "A figure", "Its caption & more")
    doc = Document(
        "Title",
        "incomplete",
        ["one fact", "another"],
        [Callout("Careful", ["something <broke>"], "warning"), Callout("Verdict", ["fine"], "verdict")],
        [Section("First part", [Paragraph("Text."), Bullets(["i", "j"]), t, fig])],
    )
    html = render_html(doc)
    assert "A &lt;table&gt;" in html and "x &lt; y" in html and "something &lt;broke&gt;" in html
    assert "<h2 id='first-part'>First part</h2>" in html and "<tr class='bad'>" in html
    assert "title='how many'" in html and "<dt>n</dt><dd>how many</dd>" in html
    assert "class='callout verdict'" in html and "INCOMPLETE" in html
    md = render_markdown(doc)
    assert "### A <table>" in md and "| a\\|b | 1 | x < y |" in md and "|---|---:|---|" in md
    assert "> **WARNING: Careful**" in md and "> **Verdict**" in md and "![A figure](figures/f.png)" in md
    assert t.cell("c", "what") == "–"
    with pytest.raises(ValueError):
        Table("bad", "x", [Column("a")], [Row("r", ["1", "2"])])
    with pytest.raises(ValueError):
        Callout("x", [], "loud")


def test_a_block_with_nothing_to_show_is_left_out_of_its_section() -> None:
    """A killed strategy has no data for some figures: their block functions return None."""
    sec = Section("Part", [None, Paragraph("Text."), None])  # type: ignore[list-item]
    assert [type(b).__name__ for b in sec.blocks] == ["Paragraph"]
    assert "<p>Text.</p>" in render_html(Document("T", "incomplete", [], [], [sec]))


def test_a_new_section_is_one_function(run_copy: Path) -> None:
    """What a later summary field needs: a function of the RunView (summary + folder) -> Section/Callout."""
    from report.sections import CALLOUTS, SECTIONS

    def verdict(run: RunView) -> Callout:
        text = f"{len(run.summary.strategies)} strategies, folder {run.folder.path.name}"
        return Callout("Fidelity", [text], "verdict")

    def hot_ports(run: RunView) -> Section:
        drops = {n: s.summary.max_drop_port for n, s in run.strategies.items()}
        return Section("Hot ports", [Paragraph(", ".join(f"{n}: {p}" for n, p in drops.items()))])

    run = RunView.open(run_copy)
    doc = build_document(run, sections=[*SECTIONS, hot_ports], callouts=[verdict, *CALLOUTS])
    write_document(doc, run)
    html = (run_copy / "report.html").read_text()
    assert html.index("Fidelity") < html.index("<h2") and "ps: lf1-eth3" in html
    assert "## Hot ports" in (run_copy / "report.md").read_text()


# -- in a browser -------------------------------------------------------------------------------------------
def _screenshot(html: Path, png: Path, height: int) -> None:
    """The page in headless Chromium at 1400 px wide."""
    import tempfile

    with tempfile.TemporaryDirectory() as profile:
        proc = subprocess.run(
            [
                CHROMIUM or "chromium",
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--no-first-run",
                f"--user-data-dir={profile}",
                "--hide-scrollbars",
                f"--window-size=1400,{height}",
                f"--screenshot={png}",
                html.as_uri(),
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert proc.returncode == 0 and png.is_file(), proc.stderr[-2000:]


@pytest.mark.browser
def test_page_at_1400px(tmp_path: Path) -> None:
    """No table clipped or scrolling sideways, every image drawn, every table under a heading;
    screenshots in tests/artifacts/: the fixture, the fixture with stragglers, and copies of the real
    runs of INCASTLAB_REPORT_RUNS (report-<run>.png: the top of the page, -full.png: all of it)."""
    require(missing())
    base = copy_run(tmp_path / "base")
    build_report(base)
    strag = copy_run(tmp_path / "stragglers")
    edit_json(strag / "config.json", stragglers=[{"host": "h3", "cpu": 0.5}], target_loss=2.31)
    build_report(strag)
    reals = []
    for src in REAL_RUNS:
        run = tmp_path / src.resolve().parent.name
        shutil.copytree(src.resolve(), run, ignore=shutil.ignore_patterns("figures", "report.*"))
        summarize(run)
        build_report(run)
        reals.append(run)
    drv = make_driver(1400, 3000)
    try:
        for run in (base, strag, *reals):
            drv.get((run / "report.html").as_uri())
            geo = drv.execute_script("""
                const de = document.documentElement;
                return {w: de.clientWidth, sw: de.scrollWidth, h: de.scrollHeight,
                  tables: [...document.querySelectorAll('table')].map(t => ({
                     right: t.getBoundingClientRect().right, head: t.previousElementSibling?.tagName,
                     cut: [...t.querySelectorAll('th,td')]
                            .filter(c => c.scrollWidth > c.clientWidth + 1).length})),
                  imgs: [...document.images].map(i => ({ok: i.complete && i.naturalWidth > 0,
                                                        w: i.getBoundingClientRect().width}))};""")
            assert geo["sw"] <= geo["w"], f"{run.name}: the page scrolls sideways"
            for t in geo["tables"]:
                assert t["right"] <= geo["w"] and t["cut"] == 0 and t["head"] == "H3", t
            assert geo["imgs"] and all(i["ok"] and i["w"] > 300 for i in geo["imgs"]), geo["imgs"]
            ARTIFACTS.mkdir(exist_ok=True)
            _screenshot(run / "report.html", ARTIFACTS / f"report-{run.name}.png", 3000)
            _screenshot(run / "report.html", ARTIFACTS / f"report-{run.name}-full.png", int(geo["h"]) + 20)
    finally:
        drv.quit()


def test_an_incast_report_without_captures_is_built(tmp_path: Path) -> None:
    """A sweep run with --capture none has no capture figures (None in incast.json): its report says
    the client's idle time is unknown instead of failing on a None."""
    from report.incast import build_incast_report

    run = tmp_path / "incast"
    shutil.copytree(FIXTURE_DIR.parent / "incast-small", run)
    doc = json.loads((run / "incast.json").read_text())
    for row in doc["rows"]:
        for key in (
            "timeout_idle_s",
            "timeouts_pcap",
            "timer_waits",
            "lost_s",
            "explained_s",
            "explained_frac",
        ):
            row[key] = None
    (run / "incast.json").write_text(json.dumps(doc))
    out = build_incast_report(run)
    assert Path(out["html"]).is_file()
    assert "the client's idle time is not known" in (run / "report.md").read_text()
