"""Tests of analysis/report.py and analysis/runread.py against the synthetic run folder fixture."""

from __future__ import annotations

import json
import math
import re
import shutil
import statistics
from pathlib import Path
from typing import Any

import pytest

from analysis.report import LOSS_TOL, TABLE_COLUMNS, build_report, report_main
from analysis.runread import RunFolderError, load_run
from tests.make_run_fixture import FIXTURE_DIR, make_run

FIGURES = {"iter_time", "queue_occupancy", "drops_retransmits", "link_bytes", "goodput"}
STRAGGLER_FIGURES = {"utilisation", "staleness", "loss"}


def jsonl(path: Path) -> list[dict[str, Any]]:
    """Parse a (well-formed) fixture JSONL file the plain way, independent of runread."""
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """One report of a copy of the committed fixture, shared by the read-only tests."""
    run = tmp_path_factory.mktemp("rep") / "run"
    shutil.copytree(FIXTURE_DIR, run)
    return run, build_report(run)


@pytest.fixture()
def run_copy(tmp_path: Path) -> Path:
    """A private copy of the fixture for tests that damage it."""
    dest = tmp_path / "run"
    shutil.copytree(FIXTURE_DIR, dest)
    return dest


def test_fixture_is_reproducible_and_small(tmp_path: Path) -> None:
    fresh = make_run(tmp_path / "fresh")
    committed = sorted(p.relative_to(FIXTURE_DIR) for p in FIXTURE_DIR.rglob("*") if p.is_file())
    assert committed == sorted(p.relative_to(fresh) for p in fresh.rglob("*") if p.is_file())
    for rel in committed:
        assert (FIXTURE_DIR / rel).read_bytes() == (fresh / rel).read_bytes(), rel
    assert sum((FIXTURE_DIR / rel).stat().st_size for rel in committed) < 500_000


def test_files_written_and_html_self_contained(built: tuple[Path, dict[str, Any]]) -> None:
    run, res = built
    assert res["files"]["html"] == run / "report.html"
    assert set(res["files"]["figures"]) == FIGURES
    html = (run / "report.html").read_text()
    for name, path in res["files"]["figures"].items():
        assert path == run / "figures" / f"{name}.png"
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert f"id='fig-{name}'" in html
    assert "http://" not in html and "https://" not in html
    srcs = re.findall(r"""\b(?:src|href)\s*=\s*['"]([^'"]*)""", html)
    assert len(srcs) == len(FIGURES)
    assert all(s.startswith("data:image/png;base64,") for s in srcs)
    assert "<link" not in html and "<script" not in html
    md = (run / "report.md").read_text()
    linked = re.findall(r"!\[[^\]]*\]\((figures/[^)]+\.png)\)", md)
    assert sorted(linked) == sorted(f"figures/{n}.png" for n in FIGURES)
    assert all((run / rel).is_file() for rel in linked)
    assert res["complete"] is True and "WARNING" not in md and "Run incomplete" not in html


def test_table_equals_summary(built: tuple[Path, dict[str, Any]]) -> None:
    run, res = built
    summary = json.loads((run / "summary.json").read_text())["strategies"]
    table = res["table"]
    assert table["columns"] == [k for k, _, _ in TABLE_COLUMNS]
    assert set(table["rows"]) == {"ps", "ring"}
    for strat, row in table["rows"].items():
        assert table["derived"][strat] == []
        for col in table["columns"]:
            assert row[col] == summary[strat][col], (strat, col)
    md = (run / "report.md").read_text()
    ps_row = next(line for line in md.splitlines() if line.startswith("| ps |"))
    cells = [c.strip() for c in ps_row.strip("|").split("|")]
    cols = table["columns"]
    assert cells[2 + cols.index("ps_port_drops")] == str(summary["ps"]["ps_port_drops"])
    assert cells[2 + cols.index("iter_time_s")] == f"{summary['ps']['iter_time_s']:.3f}"
    assert cells[2 + cols.index("tcp_timeout_retransmits")] == str(summary["ps"]["tcp_timeout_retransmits"])


def test_iteration_times_equal_worker_logs(built: tuple[Path, dict[str, Any]]) -> None:
    run, res = built
    for strat in ("ps", "ring"):
        logs = [r for w in sorted((run / strat).glob("worker-*.jsonl")) for r in jsonl(w) if "event" not in r]
        steps = sorted({r["step"] for r in logs})
        want = [max(r["t_end"] - r["t_start"] for r in logs if r["step"] == s) for s in steps]
        got = res["figures"]["iter_time"][strat]
        assert got["steps"] == steps == list(range(5))
        assert got["seconds"] == pytest.approx(want, abs=1e-9)
        summ = json.loads((run / "summary.json").read_text())["strategies"][strat]
        assert statistics.median(got["seconds"]) == pytest.approx(summ["iter_time_s"], abs=1e-5)
    ps, ring = (statistics.median(res["figures"]["iter_time"][s]["seconds"]) for s in ("ps", "ring"))
    assert ps > ring


def test_queue_occupancy_equals_queue_depth(built: tuple[Path, dict[str, Any]]) -> None:
    run, res = built
    fig = res["figures"]["queue_occupancy"]
    config = json.loads((run / "config.json").read_text())
    assert fig["buffer_packets"] == config["buffer_packets"]
    assert fig["port"] == "lf1-eth3"
    for strat in ("ps", "ring"):
        rows = jsonl(run / strat / "queue_depth.jsonl")
        got = fig["strategies"][strat]
        assert got["backlog_packets"] == [r["backlog_packets"] for r in rows]
        assert got["max"] == max(r["backlog_packets"] for r in rows)
    assert fig["strategies"]["ps"]["max"] >= 0.9 * config["buffer_packets"] > fig["strategies"]["ring"]["max"]


def test_drops_and_retransmits_series(built: tuple[Path, dict[str, Any]]) -> None:
    run, res = built
    fig = res["figures"]["drops_retransmits"]
    for strat in ("ps", "ring"):
        samples = [s for s in jsonl(run / strat / "timeseries.jsonl") if s["kind"] == "queue"]
        ps_port = [s["drops_per_s"] for s in samples if s["name"] == "lf1-eth3"]
        got = fig["strategies"][strat]
        assert got["ps_port_drops_per_s"] == ps_port
        # all ports of one poll share t in the fixture, so the fabric curve is the per-poll sum
        polls = sorted({s["t"] for s in samples})
        want = [sum(s["drops_per_s"] for s in samples if s["t"] == t) for t in polls]
        assert got["fabric_drops_per_s"] == pytest.approx(want)
        assert all(f >= p - 1e-9 for f, p in zip(got["fabric_drops_per_s"], ps_port, strict=True))
    assert max(fig["strategies"]["ps"]["ps_port_drops_per_s"]) > 0
    assert max(fig["strategies"]["ring"]["fabric_drops_per_s"]) == 0
    tl = json.loads((run / "ps" / "retransmits_timeline.json").read_text())
    assert fig["strategies"]["ps"]["retx_per_s"] == pytest.approx([c / tl["bin_s"] for c in tl["counts"]])
    assert fig["strategies"]["ring"]["retx_per_s"] is None  # absent file: curve skipped, not faked
    assert fig["retx_missing"] == ["ring"]


def test_link_heatmap_equals_bytes_by_link(built: tuple[Path, dict[str, Any]]) -> None:
    run, res = built
    fig = res["figures"]["link_bytes"]
    summary = json.loads((run / "summary.json").read_text())["strategies"]
    assert set(fig["links"]) == set(summary["ps"]["bytes_by_link"])
    for strat in ("ps", "ring"):
        col = dict(zip(fig["links"], fig["bytes"][strat], strict=True))
        assert col == {k: float(v) for k, v in summary[strat]["bytes_by_link"].items()}
        assert max(fig["share"][strat]) == pytest.approx(summary[strat]["max_link_share"], abs=1e-5)
    ps_col = fig["bytes"]["ps"]
    assert fig["links"][ps_col.index(max(ps_col))] == "lf1-eth3"


def test_goodput_sources(built: tuple[Path, dict[str, Any]]) -> None:
    run, res = built
    fig = res["figures"]["goodput"]
    gt = json.loads((run / "ps" / "goodput_timeline.json").read_text())
    assert fig["ps"]["source"] == "goodput_timeline.json"
    assert fig["ps"]["mbit_s"] == pytest.approx([b * 8 / gt["bin_s"] / 1e6 for b in gt["bytes"]])
    ring_ps_port = [s["tx_bps"] for s in jsonl(run / "ring" / "timeseries.jsonl")
                    if s["kind"] == "port" and s["name"] == "lf1-eth3"]
    assert fig["ring"]["source"] == "tx_bps of lf1-eth3"
    assert fig["ring"]["mbit_s"] == pytest.approx([v / 1e6 for v in ring_ps_port])


def test_findings_name_port_and_counts(built: tuple[Path, dict[str, Any]]) -> None:
    run, res = built
    summary = json.loads((run / "summary.json").read_text())["strategies"]
    ps_line = next(t for t in res["text"] if t.startswith("ps:"))
    ring_line = next(t for t in res["text"] if t.startswith("ring:"))
    assert f"{summary['ps']['ps_port_drops']} packets dropped at lf1-eth3 (the PS port)" in ps_line
    assert f"{summary['ps']['tcp_retransmits_pcap']} retransmissions" in ps_line
    assert f"({summary['ps']['tcp_timeout_retransmits']} after timeouts)" in ps_line
    elsewhere = summary["ps"]["queue_drops_total"] - summary["ps"]["ps_port_drops"]
    assert f"{elsewhere} elsewhere" in ps_line
    assert "0 drops at that port" in ring_line
    assert f"{summary['ring']['max_link_share'] * 100:.0f} % of bytes vs " \
           f"{summary['ps']['max_link_share'] * 100:.0f} % for ps" in ring_line
    html = (run / "report.html").read_text()
    assert "lf1-eth3 (the PS port)" in html
    assert res["straggler"] is False and "time_to_target" not in res["figures"]


def test_no_summary_figure_derived_from_logs(run_copy: Path) -> None:
    summary = json.loads((run_copy / "summary.json").read_text())
    for strat in summary["strategies"].values():
        for key in ("iter_time_s", "ps_port_drops", "bytes_by_link", "max_link_share"):
            del strat[key]
    want = json.loads((FIXTURE_DIR / "summary.json").read_text())["strategies"]["ps"]
    (run_copy / "summary.json").write_text(json.dumps(summary))
    res = build_report(run_copy)
    row = res["table"]["rows"]["ps"]
    assert "iter_time_s" in res["table"]["derived"]["ps"]
    iters = res["figures"]["iter_time"]["ps"]["seconds"]
    assert row["iter_time_s"] == pytest.approx(statistics.median(iters))
    qd = jsonl(run_copy / "ps" / "queue_depth.jsonl")
    assert row["ps_port_drops"] == qd[-1]["drops"] - qd[0]["drops"] == want["ps_port_drops"]
    assert res["figures"]["link_bytes"]["source"]["ps"] == "timeseries.jsonl tx_bytes deltas"
    ps_col = res["figures"]["link_bytes"]["bytes"]["ps"]
    assert res["figures"]["link_bytes"]["links"][ps_col.index(max(ps_col))] == "lf1-eth3"
    assert f"{want['ps_port_drops']} packets dropped at lf1-eth3" in res["text"][0]


def test_incomplete_run_still_reports(run_copy: Path) -> None:
    log = run_copy / "ring" / "worker-2.jsonl"
    lines = log.read_text().splitlines()
    log.write_text("\n".join(lines[:3]) + "\n" + lines[3][: len(lines[3]) // 2])  # died mid-write
    (run_copy / "ring" / "status.json").write_text(json.dumps({"state": "incomplete", "error": "timeout"}))
    summary = json.loads((run_copy / "summary.json").read_text())
    summary["complete"] = False
    (run_copy / "summary.json").write_text(json.dumps(summary))
    res = build_report(run_copy)
    assert res["complete"] is False
    assert res["figures"]["iter_time"]["ring"]["steps"] == [0, 1, 2, 3, 4]  # ranks 0, 1 finished
    assert [r["step"] for r in load_run(run_copy).strategies["ring"].workers[2]] == [0, 1, 2]
    html = (run_copy / "report.html").read_text()
    assert "INCOMPLETE" in html and "Run incomplete" in html
    assert "ring: incomplete (timeout)" in html
    assert any("worker-2.jsonl: truncated last line skipped" in w for w in res["warnings"])
    assert "> **WARNING:** Run incomplete" in (run_copy / "report.md").read_text()


def test_incomplete_run_with_missing_strategy_folder(run_copy: Path) -> None:
    want = json.loads((run_copy / "summary.json").read_text())["strategies"]["ps"]["ps_port_drops"]
    shutil.rmtree(run_copy / "ring")
    (run_copy / "summary.json").unlink()  # the run died before writing its summary
    res = build_report(run_copy)
    assert res["complete"] is False
    assert res["table"]["rows"]["ring"]["iter_time_s"] is None
    assert "ring" not in res["figures"]["iter_time"]
    assert res["table"]["rows"]["ps"]["ps_port_drops"] == want  # derived from the qdisc samples
    assert "ring: missing (strategy folder missing)" in (run_copy / "report.html").read_text()


def test_capture_incomplete_warning(run_copy: Path) -> None:
    summary = json.loads((run_copy / "summary.json").read_text())
    summary["capture"] = {"complete": False}
    (run_copy / "summary.json").write_text(json.dumps(summary))
    res = build_report(run_copy)
    assert any("Packet capture incomplete" in w for w in res["warnings"])
    assert "Packet capture incomplete" in (run_copy / "report.html").read_text()


def test_missing_strategy_in_complete_run_is_an_error(run_copy: Path) -> None:
    shutil.rmtree(run_copy / "ring")
    with pytest.raises(RunFolderError) as err:
        load_run(run_copy)
    msg = str(err.value)
    assert "ring" in msg and "\n" not in msg
    assert report_main([str(run_copy)]) == 2


def test_not_a_run_folder(tmp_path: Path) -> None:
    with pytest.raises(RunFolderError, match="run folder not found"):
        load_run(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(RunFolderError, match="no readable config.json"):
        load_run(tmp_path / "empty")


def test_report_main(run_copy: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert report_main([str(tmp_path / "missing")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "run folder not found" in err and "Traceback" not in err
    assert report_main([]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert report_main([str(run_copy)]) == 0
    out = capsys.readouterr().out.strip()
    assert Path(out) == run_copy / "report.html" and Path(out).is_file()


def test_straggler_run(tmp_path: Path) -> None:
    run = make_run(tmp_path / "strag", strategies=("ps", "async", "ssp"), slow_every=1, slow_factor=3)
    res = build_report(run)
    assert res["straggler"] is True
    assert set(res["files"]["figures"]) == FIGURES | STRAGGLER_FIGURES
    busy = res["figures"]["utilisation"]["busy_share"]
    for strat in ("ps", "async", "ssp"):
        for rank in range(3):
            recs = [r for r in jsonl(run / strat / f"worker-{rank}.jsonl") if "event" not in r]
            want = sum(r["compute_s"] for r in recs) / (recs[-1]["t_end"] - recs[0]["t_start"])
            assert busy[strat][rank] == pytest.approx(want)
        assert busy[strat][2] > busy[strat][0]  # the slowed worker computes most of its time
    stale = res["figures"]["staleness"]
    for strat in ("ps", "async", "ssp"):
        ev = [e["staleness"] for e in jsonl(run / strat / "ps.jsonl") if e.get("event") == "update"]
        assert sum(stale[strat]["counts"]) == len(ev)
        assert stale[strat]["counts"][0] == ev.count(0)
    assert stale["ps"]["counts"][0] == 15 and not any(stale["ps"]["counts"][1:])  # sync PS: never stale
    tt = res["figures"]["time_to_target"]
    finals = {s: r["final_loss"] for s, r in res["table"]["rows"].items()}
    worst = max(finals, key=lambda s: finals[s])
    assert tt["target"] == finals[worst] and worst in tt["target_source"]
    loss = res["figures"]["loss"]["strategies"]
    for strat, secs in tt["seconds"].items():
        assert secs is not None
        tol = LOSS_TOL * tt["target"]
        first = next(i for i, v in enumerate(loss[strat]["loss"]) if v <= tt["target"] + tol)
        assert secs == loss[strat]["t"][first]
    assert any(t.startswith(f"Time to loss <= {tt['target']:.4g}") for t in res["text"])


def test_target_loss_from_config(tmp_path: Path) -> None:
    run = make_run(tmp_path / "tgt", strategies=("ps", "backup"), target_loss=0.1)
    res = build_report(run)
    tt = res["figures"]["time_to_target"]
    assert tt["target"] == 0.1 and tt["target_source"] == "config target_loss"
    assert tt["seconds"] == {"ps": None, "backup": None}
    assert "ps not reached" in " ".join(res["text"])


def test_failed_strategy_without_files_and_damaged_topology(run_copy: Path) -> None:
    shutil.rmtree(run_copy / "ring")
    (run_copy / "ring").mkdir()
    status = {"state": "failed", "error": "worker 1 exited 1"}
    (run_copy / "ring" / "status.json").write_text(json.dumps(status))
    (run_copy / "topology.json").write_text('{"swi')  # truncated: PS port must come from capture.json
    summary = json.loads((run_copy / "summary.json").read_text())
    summary["complete"] = False
    del summary["strategies"]["ring"]
    (run_copy / "summary.json").write_text(json.dumps(summary))
    res = build_report(run_copy)
    assert res["ps_port"] == "lf1-eth3"
    assert res["figures"]["iter_time"]["ring"]["steps"] == []
    assert all(v is None for v in res["table"]["rows"]["ring"].values())
    assert any("ring: failed (worker 1 exited 1)" in w for w in res["warnings"])
    assert any("topology.json: unreadable" in w for w in res["warnings"])
    assert set(res["files"]["figures"]) == FIGURES


def _t0(run: Path, strat: str) -> float:
    """The report's time origin: the strategy's first worker step."""
    return min(r["t_start"] for r in steps_of(run, strat))


def steps_of(run: Path, strat: str) -> list[dict[str, Any]]:
    """Every worker step record of a strategy."""
    return [r for w in sorted((run / strat).glob("worker-*.jsonl")) for r in jsonl(w) if "event" not in r]


def test_faults_marked_on_timelines(tmp_path: Path) -> None:
    run = make_run(tmp_path / "fault", fault_in="ps")
    res = build_report(run)
    t0 = _t0(run, "ps")
    rows = jsonl(run / "ps" / "faults.jsonl")
    want = [r["t"] - t0 for r in rows]
    marks = res["figures"]["faults"]["ps"]["marks"]
    got = [m["t"] for m in marks if m["source"] == "faults.jsonl"]
    assert got == pytest.approx(want, abs=1e-9) and len(got) == 2
    assert [m["label"] for m in marks if m["source"] == "faults.jsonl"] == \
        ["link-down lf1-eth1 down", "link-down lf1-eth1 up"]
    # controller events: both ends of the link merged into one mark, reroutes kept
    events = [e for e in jsonl(run / "ps" / "timeseries.jsonl") if e["kind"] == "event"]
    downs = [m for m in marks if m["kind"] == "port_down"]
    assert len(downs) == 1 and downs[0]["count"] == sum(e["event"] == "port_down" for e in events) == 2
    assert "lf1-eth1" in downs[0]["label"] and "sp1-eth1" in downs[0]["label"]
    assert sum(m["kind"] == "reroute" for m in marks) == 2
    all_t = sorted(m["t"] for m in marks)
    for fig in ("drops_retransmits", "goodput"):
        assert res["figures"][fig]["marks"]["ps"] == pytest.approx(all_t), fig
        assert res["figures"][fig]["marks"]["ring"] == []
    assert res["figures"]["queue_occupancy"]["marks"]["ps"] == pytest.approx(all_t)
    # iteration-time marks sit at the step that was running at the fault's time
    recs = steps_of(run, "ps")
    starts = [min(r["t_start"] for r in recs if r["step"] == k) for k in sorted({r["step"] for r in recs})]
    xs = res["figures"]["iter_time"]["fault_steps"]["ps"]
    assert len(xs) == len(marks)
    for row in rows:
        k = max(i for i, st in enumerate(starts) if st <= row["t"])
        assert any(k - 0.5 <= x < k + 0.5 for x in xs)
    # the hole in the controller's samples
    ts = sorted({r["t"] for r in jsonl(run / "ps" / "timeseries.jsonl") if r["kind"] != "event"})
    hole = max((b - a, a) for a, b in zip(ts, ts[1:], strict=False))
    gaps = res["figures"]["faults"]["ps"]["gaps"]
    assert len(gaps) == 1 and gaps[0]["seconds"] == pytest.approx(hole[0]) and hole[0] > 3 * 0.5
    assert gaps[0]["t0"] == pytest.approx(hole[1] - t0)
    assert res["figures"]["drops_retransmits"]["gaps"]["ps"] == gaps
    assert res["figures"]["faults"]["ring"] == {"marks": [], "gaps": [], "interval": 0.5}
    line = next(t for t in res["text"] if t.startswith("ps faults and events"))
    assert f"controller statistics missing for {hole[0]:.1f} s" in line
    assert f"link-down lf1-eth1 down at {want[0]:.2f} s" in line
    md = (run / "report.md").read_text()
    assert "## Faults and events" in md
    assert f"| ps | {want[0]:.2f} | faults.jsonl | link-down lf1-eth1 down |" in md
    assert "Faults and events" in (run / "report.html").read_text()


def test_no_faults_no_section(built: tuple[Path, dict[str, Any]]) -> None:
    run, res = built
    assert all(v["marks"] == [] and v["gaps"] == [] for v in res["figures"]["faults"].values())
    assert "Faults and events" not in (run / "report.md").read_text()


def test_straggler_section_from_data(tmp_path: Path) -> None:
    run = make_run(tmp_path / "strag", strategies=("ps", "async", "ssp", "backup"), slow_every=1,
                   slow_factor=3, staleness=2, backup=1, stragglers=[{"host": "h4", "compute_factor": 3}])
    res = build_report(run)
    summary = json.loads((run / "summary.json").read_text())["strategies"]
    util = res["figures"]["utilisation"]
    assert util["stragglers"] == {2: "h4"}  # h4 is worker_hosts[2]
    for strat in ("ps", "async", "ssp", "backup"):
        assert util["source"][strat] == "summary.json utilisation_by_worker"
        want = summary[strat]["utilisation_by_worker"]
        assert util["busy_share"][strat] == {int(k): v for k, v in want.items()}
    text = " ".join(res["text"])
    assert "Straggler: worker rank 2 (h4)" in text
    fast = {n: statistics.fmean(v for r, v in u.items() if r != 2) for n, u in util["busy_share"].items()}
    assert ", ".join(f"{n} {fast[n] * 100:.0f} %" for n in ("ps",)) in text
    gap = max(e["gap"] for e in jsonl(run / "ssp" / "ps.jsonl") if e["event"] == "release")
    assert f"ssp: the fastest worker was at most {gap} steps ahead of the slowest (bound s=2)" in text
    assert res["figures"]["straggler_checks"]["ssp"]["source"] == "ps.jsonl release events"
    discarded = [len(e["discarded"]) for e in jsonl(run / "backup" / "ps.jsonl") if e["event"] == "step"]
    assert summary["backup"]["updates_discarded"] == sum(discarded)
    assert f"backup discarded exactly {discarded[0]} update per step (b=1), {sum(discarded)} in total" in text
    ev = [e["staleness"] for e in jsonl(run / "async" / "ps.jsonl") if e["event"] == "update"]
    assert "async: mean utilisation" in text
    assert f"{sum(1 for v in ev if v)} of {len(ev)} applied updates were stale" in text
    stale = res["figures"]["staleness"]
    applied = [e for e in jsonl(run / "backup" / "ps.jsonl") if e["event"] == "update" and e["applied"]]
    assert sum(stale["backup"]["counts"]) == len(applied)  # discarded updates are not in the histogram
    assert "Straggler: worker rank 2 (h4)" in (run / "report.md").read_text().split("## Stragglers")[1]
    # without the summary's figures the same numbers come from ps.jsonl
    full = json.loads((run / "summary.json").read_text())
    for key in ("updates_discarded", "discarded_per_step", "utilisation_by_worker"):
        del full["strategies"]["backup"][key]
    (run / "summary.json").write_text(json.dumps(full))
    res2 = build_report(run)
    bk = res2["figures"]["straggler_checks"]["backup"]
    assert bk["discarded_per_step"] == discarded and bk["updates_discarded"] == sum(discarded)
    assert res2["figures"]["utilisation"]["source"]["backup"] == "worker logs"


def test_time_to_target_with_rounded_final_loss(tmp_path: Path) -> None:
    run = make_run(tmp_path / "ttt", slow_every=1, slow_factor=3)
    res = build_report(run)
    raw = res["figures"]["loss"]["strategies"]["ring"]["loss"][-1]
    full = json.loads((run / "summary.json").read_text())
    target = math.floor((raw - 3e-6) * 1e5) / 1e5  # rounded a hair below the logs' mean
    full["strategies"]["ring"]["final_loss"] = target
    full["strategies"]["ps"]["final_loss"] = target - 0.01
    (run / "summary.json").write_text(json.dumps(full))
    res = build_report(run)
    tt = res["figures"]["time_to_target"]
    assert tt["target"] == target and raw > target
    assert tt["seconds"]["ring"] == res["figures"]["loss"]["strategies"]["ring"]["t"][-1]
    assert "ring not reached" not in " ".join(res["text"])


def md_row(md: str, strat: str) -> list[str]:
    """Cells of a strategy's row in report.md's comparison table."""
    line = next(x for x in md.splitlines() if x.startswith(f"| {strat} | "))
    return [c.strip() for c in line.strip("|").split("|")]


def test_null_summary_values_are_dashes(run_copy: Path) -> None:
    full = json.loads((run_copy / "summary.json").read_text())
    full["strategies"]["ps"]["tcp_retransmits_pcap"] = None  # the timeline could give a number: must not
    (run_copy / "summary.json").write_text(json.dumps(full))
    res = build_report(run_copy)
    assert res["table"]["rows"]["ps"]["tcp_retransmits_pcap"] is None
    assert "tcp_retransmits_pcap" not in res["table"]["derived"]["ps"]
    cols = res["table"]["columns"]
    md = (run_copy / "report.md").read_text()
    cells = md_row(md, "ps")
    assert cells[2 + cols.index("tcp_retransmits_pcap")] == "–"
    assert "summary.json holds null: ps: retx (pcap)" in md
    # no host captures: every host-capture column is unknown, even where summary.json wrote 0
    cfg = json.loads((run_copy / "config.json").read_text())
    cfg["capture"] = "ps-port"
    (run_copy / "config.json").write_text(json.dumps(cfg))
    res = build_report(run_copy)
    for strat in ("ps", "ring"):
        for key in ("tcp_retransmits_pcap", "tcp_fast_retransmits", "tcp_timeout_retransmits", "dup_acks",
                    "fabric_drops_pcap"):
            assert res["table"]["rows"][strat][key] is None
    md = (run_copy / "report.md").read_text()
    assert "no host captures" in md
    ring = md_row(md, "ring")
    assert ring[2 + cols.index("dup_acks")] == "–"


def test_interrupted_before_any_step_still_reports(run_copy: Path) -> None:
    """Ctrl-C while the workers were still importing torch: a strategy folder without step logs."""
    for log in (run_copy / "ring").glob("worker-*.jsonl"):
        log.unlink()
    status = {"state": "incomplete", "error": "interrupted"}
    (run_copy / "ring" / "status.json").write_text(json.dumps(status))
    (run_copy / "summary.json").unlink()
    res = build_report(run_copy)
    assert not res["complete"]
    assert (run_copy / "report.html").exists()
    assert res["figures"]["iter_time"]["ring"]["steps"] == []
