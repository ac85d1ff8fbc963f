"""The report's fidelity, bounds, cures, utilisation, goodput and timeout panels against the files.

Every table cell is compared with its summary.json field, and every figure's data with the file it is
drawn from (dequeue.json, cpu.jsonl, goodput_timeline.json, rto_events.json, queue_depth.jsonl, the
controller's port samples), read here the plain way. On tests/data/run-small (always) and, when they
exist, on copies of real runs named by INCASTLAB_REPORT_RUNS (colon-separated; default
/tmp/r3/latest:/tmp/r4/latest: ps and ring with 7 workers; ps, ps:rto_min_ms=1, ps:shards=2,
ps:shards=4, ps:shards=2:placement=colocated and ring on 12 hosts), whose summary is first rebuilt by
today's analysis.summary.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from analysis.fidelity import GAP_RATIO_RANGE, MAX_SATURATED_SHARE, MAX_UNEXPLAINED_LOSS
from analysis.summary import summarize
from report import build_report
from report.doc import slug
from runmodel.strategy import StrategySpec
from tests.test_report import REAL_RUNS, copy_run, edit_json, jsonl, summary_of, t0_of


def folder(strategy: str) -> str:
    return StrategySpec.parse(strategy).folder


def strategies_of(run: Path) -> list[str]:
    return json.loads((run / "config.json").read_text())["strategies"]


def read(run: Path, strategy: str, name: str) -> Any:
    return json.loads((run / folder(strategy) / name).read_text())


def cell(res: dict[str, Any], table: str, row: str, header: str) -> str:
    t = res["tables"][table]
    return t["rows"][row][t["headers"].index(header)]


def strategy_figure(
    any_run: tuple[Path, dict[str, Any]], name: str
) -> tuple[Path, dict[str, Any], dict[str, Any]]:
    """The run, its summary's strategies and the data of figure `name`, checked to hold every strategy."""
    run, res = any_run
    data = res["figures"][name]
    assert set(data) == set(strategies_of(run))
    return run, summary_of(run)["strategies"], data


BUILT: dict[str, tuple[Path, dict[str, Any]]] = {}  # one copy and report per run, for the whole module


SESSION_RUNS = ("compare", "mitigate")  # real runs of this checkout (tests/conftest.py session fixtures)


def build(
    key: str, tmp: pytest.TempPathFactory, request: pytest.FixtureRequest | None = None
) -> tuple[Path, dict[str, Any]]:
    """The fixture's copy, or a copy of a real run (its summary rebuilt by today's code), and its report."""
    if key not in BUILT:
        if key == "fixture":
            run = copy_run(tmp.mktemp("figs") / "run")
        else:
            if key in SESSION_RUNS:
                assert request is not None
                key_src = request.getfixturevalue(f"{key}_run")[0]
            else:
                key_src = Path(key)
            src = Path(key_src).resolve()
            run = tmp.mktemp("real") / src.parent.name
            shutil.copytree(src, run, ignore=shutil.ignore_patterns("figures", "report.*"))
            summarize(run)
        BUILT[key] = (run, build_report(run))
    return BUILT[key]


def real_param(key: str) -> Any:
    """A real run's parameter: it builds a fabric (session fixture), so `make test-unit` leaves it out."""
    return pytest.param(key, marks=pytest.mark.integration, id=_id(key))


def _id(p: Any) -> str:
    return p if p in ("fixture", *SESSION_RUNS) else Path(p).parent.name


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    return build("fixture", tmp_path_factory)


@pytest.fixture(scope="module", params=[real_param("mitigate"), *(real_param(str(p)) for p in REAL_RUNS)])
def real(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, dict[str, Any]]:
    """A copy of a real run with PS variants (this checkout's, and any named by INCASTLAB_REPORT_RUNS)."""
    return build(request.param, tmp_path_factory, request)


REAL_KEYS = (*SESSION_RUNS, *map(str, REAL_RUNS))


@pytest.fixture(scope="module", params=["fixture", *(real_param(k) for k in REAL_KEYS)], ids=_id)
def any_run(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, dict[str, Any]]:
    """tests/data/run-small, this checkout's real runs, then every other real run named."""
    return build(request.param, tmp_path_factory, request)


# -- the verdict and the facts at the top ----------------------------------------------------------------
def test_fidelity_verdict_at_the_top(any_run: tuple[Path, dict[str, Any]]) -> None:
    run, res = any_run
    summary = summary_of(run)
    box = res["callouts"][0]
    verdict = summary["fidelity"]["verdict"]
    assert box["title"] == f"Fidelity verdict: {verdict}"
    assert box["tone"] == ("warning" if verdict == "degraded" else "verdict")
    html = (run / "report.html").read_text()
    assert html.index("Fidelity verdict") < html.index("<h2")
    items = " ".join(box["items"])
    figs = {n: summary["strategies"][n]["fidelity"] for n in strategies_of(run)}
    bad = [n for n, f in figs.items() if f["verdict"] == "degraded"]
    assert box["items"][0].startswith(f"Run {verdict.upper()}: {len(bad)} of {len(figs)} strategies degraded")
    for n, f in figs.items():
        if f["verdict"] == "trustworthy":
            assert f"{n}: trustworthy" in items
            continue
        # each failed check names the strategy with its figure, and the figures it affects
        if f["cpu_saturated_share"] is not None and f["cpu_saturated_share"] > MAX_SATURATED_SHARE:
            line = next(i for i in box["items"] if i.startswith("CPU saturated"))
            assert f"{n} {f['cpu_saturated_share'] * 100:.0f} %" in line and "Affected: the times" in line
        if f["unexplained_loss_share"] is not None and f["unexplained_loss_share"] > MAX_UNEXPLAINED_LOSS:
            line = next(i for i in box["items"] if i.startswith("Losses no switch queue counted"))
            assert f"{n} {f['unexplained_loss_share'] * 100:.0f} %" in line
            assert "drop and retransmission" in line
        gap = f["dequeue_gap_median_over_ideal"]
        if gap is not None and not GAP_RATIO_RANGE[0] <= gap <= GAP_RATIO_RANGE[1]:
            line = next(i for i in box["items"] if i.startswith("The bottleneck off its rate"))
            assert f"{n} {gap:.3f}" in line


def test_environment_in_the_facts(built: tuple[Path, dict[str, Any]]) -> None:
    run, _ = built
    env = json.loads((run / "config.json").read_text())["environment"]
    facts = (run / "report.md").read_text().splitlines()[2]
    for text in (
        f"OVS {env['datapath']} datapath",
        f"kernel {env['kernel']}",
        f"{env['cores']} cores",
        f"virtualisation {env['virtualisation']}",
        f"TCP {env['cc']}, minimum RTO {env['rto_min_ms']:g} ms",
    ):
        assert text in facts


# -- the Fidelity section -------------------------------------------------------------------------------
def test_fidelity_table_is_summary_fidelity(any_run: tuple[Path, dict[str, Any]]) -> None:
    run, res = any_run
    summary = summary_of(run)["strategies"]
    t = res["tables"]["fidelity-checks"]
    assert list(t["rows"]) == strategies_of(run)
    for n, values in t["values"].items():
        fid = summary[n]["fidelity"]
        assert values == {k: fid.get(k) for k in values}
        assert cell(res, "fidelity-checks", n, "verdict") == fid["verdict"]
        assert cell(res, "fidelity-checks", n, "dequeue port") == fid["dequeue_port"]
        assert (
            cell(res, "fidelity-checks", n, "departure gap / ideal (median)")
            == f"{fid['dequeue_gap_median_over_ideal']:.3f}"
        )
        for column, share in (
            ("unexplained loss", "unexplained_loss_share"),
            ("seconds with every core saturated", "cpu_saturated_share"),
            ("ovs-vswitchd peak (of one core)", "switch_cpu_max"),
            ("busiest second, mean core busy", "cpu_busy_max"),
        ):  # the shares, as percentages with one decimal
            assert cell(res, "fidelity-checks", n, column) == f"{fid[share] * 100:.1f} %", column


def test_dequeue_cdf_is_dequeue_json(any_run: tuple[Path, dict[str, Any]]) -> None:
    run, summary, cdf = strategy_figure(any_run, "dequeue_cdf")
    for n, d in cdf.items():
        doc = read(run, n, "dequeue.json")
        assert d["x"] == doc["cdf_x"] and d["y"] == doc["cdf_y"] and d["port"] == doc["port"]
        assert d["port"] == summary[n]["fidelity"]["dequeue_port"]
        assert d["median"] == doc["median_ratio"] == summary[n]["fidelity"]["dequeue_gap_median_over_ideal"]
        assert d["y"] == sorted(d["y"]) and 0 <= d["y"][0] and d["y"][-1] <= 1


def test_cpu_panel_is_cpu_jsonl(any_run: tuple[Path, dict[str, Any]]) -> None:
    """Every sample of the strategy (its start to its end + 1 s), per core and the switch; the
    saturated seconds of the training window (first step's start to last step's end + 1 s, as the
    fidelity check counts them) give the summary's cpu_saturated_share."""
    run, summary, cpu = strategy_figure(any_run, "cpu")
    for n, d in cpu.items():
        st = read(run, n, "status.json")
        rows = [r for r in jsonl(run / folder(n) / "cpu.jsonl") if st["t_start"] <= r["t"] <= st["t_end"] + 1]
        t0 = t0_of(run, folder(n))
        assert d["t"] == pytest.approx([r["t"] - t0 for r in rows])
        assert d["switch"] == [r["switch"] for r in rows]
        assert [list(c) for c in zip(*d["cores"], strict=True)] == [r["cores"] for r in rows]
        assert d["start"] == pytest.approx(st["t_start"] - t0)
        steps = [r for w in (run / folder(n)).glob("worker-*.jsonl") for r in jsonl(w) if "step" in r]
        lo, hi = min(r["t_start"] for r in steps), max(r["t_end"] for r in steps)
        train = [r for r in rows if lo <= r["t"] <= hi + 1.0]
        saturated = sum(1 for r in train if min(r["cores"]) >= 0.95) / len(train)
        assert saturated == pytest.approx(summary[n]["fidelity"]["cpu_saturated_share"], abs=0.001)


# -- tables: summary.json fields --------------------------------------------------------------------------
def test_tcp_table_timeouts_side_by_side(any_run: tuple[Path, dict[str, Any]]) -> None:
    run, res = any_run
    summary = summary_of(run)["strategies"]
    t = res["tables"]["tcp"]
    h = t["headers"]
    assert h.index("timeouts (pcap)") == h.index("timeouts (kernel)") + 1
    fields = {
        "timeouts (kernel)": "tcp_timeouts_kernel",
        "timeouts (pcap)": "tcp_timeouts_pcap",
        "tail-loss probes (kernel)": "tcp_loss_probes_kernel",
        "fast retransmits (kernel)": "tcp_fast_retrans_kernel",
        "fast retransmissions (tshark)": "wireshark_fast_retransmits",
        "dup-ACK retransmissions (our rule)": "dupack_retransmits_pcap",
    }
    for n in strategies_of(run):
        for header, key in fields.items():
            assert cell(res, "tcp", n, header) == str(summary[n][key])
            assert t["values"][n][key] == summary[n][key]
        for header, key in (("timeout stall (s)", "timeout_stall_s"), ("timeout idle (s)", "timeout_idle_s")):
            v = summary[n][key]
            assert cell(res, "tcp", n, header) == ("–" if v is None else f"{v:.3f}")


def test_link_columns_and_their_sentence(any_run: tuple[Path, dict[str, Any]]) -> None:
    run, res = any_run
    summary = summary_of(run)["strategies"]
    t = res["tables"]["switch-queues-and-links"]
    h = t["headers"]
    assert h.index("busiest link utilisation") < h.index("busiest link, share of all link bytes")
    for n in strategies_of(run):
        f = summary[n]
        link = max(f["link_utilisation"], key=f["link_utilisation"].get)
        assert (
            cell(res, "switch-queues-and-links", n, "busiest link utilisation")
            == f"{f['busiest_link_utilisation'] * 100:.1f} % ({link})"
        )
        assert cell(res, "switch-queues-and-links", n, "links under 5 % of the busiest") == str(
            f["links_under_5pct_of_busiest"]
        )
        assert cell(res, "switch-queues-and-links", n, "ECMP imbalance") == f"{f['ecmp_imbalance']:.2f}"
    md = (run / "report.md").read_text()
    assert "ECMP imbalance: over the leaves whose uplinks carried traffic" in md
    assert "Links under 5 % of the busiest: the link directions that carried less than 5 %" in md


def test_hot_ports_tables_are_hot_ports(any_run: tuple[Path, dict[str, Any]]) -> None:
    run, res = any_run
    summary = summary_of(run)["strategies"]
    for n in strategies_of(run):
        t = res["tables"][slug(f"Hot ports: {n}")]
        assert t["heading"] == f"Hot ports: {n}"
        hot = {h["port"]: h for h in summary[n]["hot_ports"]}
        assert sorted(v["port"] for v in t["values"].values()) == sorted(hot)
        for label, h in t["values"].items():
            assert h == hot[h["port"]] and label.startswith(h["port"])
            assert t["rows"][label] == [
                h["kind"],
                f"{h['tx_bytes'] / 1e6:.2f}",
                str(h["drops"]),
                f"{h['utilisation'] * 100:.1f} %",
                str(h["max_backlog_packets"]),
            ]
        worst = [lb for lb in t["rows"] if lb.endswith(" *")]
        assert len(worst) == 1 and worst[0].startswith(summary[n]["worst_queue_port"])
        tx = [h["tx_bytes"] for h in t["values"].values()]
        assert tx == sorted(tx, reverse=True)


def test_bounds_table_and_split(any_run: tuple[Path, dict[str, Any]]) -> None:
    run, res = any_run
    summary = summary_of(run)["strategies"]
    key = "bounds-and-the-split-of-communication-time"
    for n in strategies_of(run):
        f = summary[n]
        assert cell(res, key, n, "bound (s)") == f"{f['bound_s']:.3f}"
        assert cell(res, key, n, "iteration / bound") == f"{f['iter_time_s'] / f['bound_s']:.2f}"
        ptp = f["push_then_pull_s"]
        assert cell(res, key, n, "push-then-pull (s)") == (f"{ptp:.3f}" if ptp is not None else "–")
        for part, header in (
            ("bound_s", "comm: bound part (s)"),
            ("timeouts_s", "comm: timeouts (s)"),
            ("rest_s", "comm: rest (s)"),
        ):
            assert cell(res, key, n, header) == f"{f['comm_split'][part]:.3f}"
    split = res["figures"]["comm_split"]
    assert split["splits"] == {n: summary[n]["comm_split"] for n in strategies_of(run)}
    assert split["comm_time_s"] == {n: summary[n]["comm_time_s"] for n in strategies_of(run)}


def test_bounds_on_the_iteration_figure(any_run: tuple[Path, dict[str, Any]]) -> None:
    run, res = any_run
    summary = summary_of(run)["strategies"]
    bounds = res["figures"]["iter_time"]["bounds"]
    for n in strategies_of(run):
        ps = StrategySpec.parse(n).uses_ps
        assert bounds[n] == {
            "bound_s": summary[n]["bound_s"],
            "push_then_pull_s": summary[n]["push_then_pull_s"] if ps else None,
        }
        if n.startswith("ps") and ":placement=colocated" not in n:
            assert bounds[n]["push_then_pull_s"] is not None


def test_gap_to_the_ring_in_bound_and_timeouts(any_run: tuple[Path, dict[str, Any]]) -> None:
    run, res = any_run
    summary = summary_of(run)["strategies"]
    md = (run / "report.md").read_text()
    ring = summary["ring"]
    for n in strategies_of(run):
        if not StrategySpec.parse(n).uses_ps:
            continue
        f = summary[n]
        gap = f["comm_time_s"] - ring["comm_time_s"]
        d_bound = f["comm_split"]["bound_s"] - ring["comm_split"]["bound_s"]
        d_to = f["comm_split"]["timeouts_s"] - ring["comm_split"]["timeouts_s"]
        line = next(ln for ln in md.splitlines() if ln.startswith(f"- {n}: a step took"))
        assert f"Of that {gap:.3f} s gap, {d_bound:.3f} s ({d_bound / gap * 100:.0f} %) is the bound" in line
        assert f"{d_to:.3f} s ({d_to / gap * 100:.0f} %) timeouts" in line


# -- figures: the files they come from --------------------------------------------------------------------
def test_goodput_per_receiver_adds_up(any_run: tuple[Path, dict[str, Any]]) -> None:
    run, res = any_run
    summary = summary_of(run)["strategies"]
    per = res["figures"]["goodput_receivers"]
    total = res["figures"]["goodput"]["strategies"]
    for n in strategies_of(run):
        doc = read(run, n, "goodput_timeline.json")
        got = per[n]
        want = summary[n]["delivered_bytes_by_receiver"]
        assert {h: r["bytes"] for h, r in got["receivers"].items()} == want
        assert got["bytes_total"] == summary[n]["delivered_bytes"] == total[n]["bytes_total"]
        for h, r in got["receivers"].items():
            assert r["mbit_s"] == doc["by_receiver"][h]["mbit_s"]
            # the series add up to the total (each bin rounded to 1 kbit/s in the file)
            assert sum(r["mbit_s"]) * 1e6 * doc["bin_s"] / 8 == pytest.approx(r["bytes"], rel=0.01, abs=2000)
        assert sum(total[n]["goodput_bytes"]) == pytest.approx(summary[n]["delivered_bytes"], rel=0.01)
        assert got["t"][0] == pytest.approx(doc["t0"] - t0_of(run, folder(n)))


def test_flows_into_the_ps_with_their_timeouts(any_run: tuple[Path, dict[str, Any]]) -> None:
    run, res = any_run
    flows = res["figures"]["goodput_ps_flows"]
    ps_family = [n for n in strategies_of(run) if StrategySpec.parse(n).uses_ps]
    assert set(flows) == {n for n in ps_family if read(run, n, "goodput_timeline.json")["flows_to_ps"]}
    ps_ip = next(h["ip"] for h in json.loads((run / "plan.json").read_text())["hosts"] if h["ps"])
    for n, d in flows.items():
        doc = read(run, n, "goodput_timeline.json")
        assert d["flows"] == doc["flows_to_ps"]
        labels = list(d["flows"])
        events = [
            e
            for e in read(run, n, "rto_events.json")["events"]
            if e["kind"] != "tlp" and e["flow"].split("-")[1].rsplit(":", 1)[0] == ps_ip
        ]
        t0 = t0_of(run, folder(n))
        want = sorted(
            (e["t"] - t0, labels.index(f"{e['host']}:{e['flow'].split('-')[0].rsplit(':', 1)[1]}"))
            for e in events
        )
        assert sorted(d["marks"]) == pytest.approx(want) and d["timeouts"] == len(events)


def test_rto_events_on_the_timeline(any_run: tuple[Path, dict[str, Any]]) -> None:
    run, res = any_run
    summary = summary_of(run)["strategies"]
    fig = res["figures"]["drops_retransmits"]
    for n in strategies_of(run):
        events = read(run, n, "rto_events.json")["events"]
        t0 = t0_of(run, folder(n))
        got = fig["rto_events"][n]
        assert [e["t"] for e in got] == pytest.approx([e["t"] - t0 for e in events])
        assert [e["kind"] for e in got] == [e["kind"] for e in events]
        assert sum(1 for e in got if e["kind"] != "tlp") == summary[n]["tcp_timeouts_pcap"]
        assert sum(fig["retransmits"][n]["retransmits"]) == summary[n]["tcp_retransmits_pcap"]


def test_utilisation_heatmap_adds_up(any_run: tuple[Path, dict[str, Any]]) -> None:
    """Per poll interval, a link's tx bytes x 8 / its configured rate, from the controller's port samples;
    over the training it is the summary's link_utilisation, the busiest link's its
    busiest_link_utilisation."""
    run, res = any_run
    summary = summary_of(run)["strategies"]
    plan = json.loads((run / "plan.json").read_text())
    util = res["figures"]["link_utilisation"]
    for n in strategies_of(run):
        d, f = util[n], summary[n]
        busiest = max(f["link_utilisation"], key=f["link_utilisation"].get)
        assert d["mean"][busiest] == pytest.approx(f["busiest_link_utilisation"], rel=0.03)
        for link, u in f["link_utilisation"].items():
            if u > 0.05:
                assert d["mean"][link] == pytest.approx(u, rel=0.05), (n, link)
        # the mean of a row is its cells weighted by the poll intervals, over the training time
        widths = [b - a for a, b in zip(d["edges"], d["edges"][1:], strict=False)]
        i = d["links"].index(busiest)
        assert sum(c * w for c, w in zip(d["util"][i], widths, strict=True)) / d["end"] == pytest.approx(
            d["mean"][busiest], rel=1e-3
        )
        # one cell: the port counter between two polls, by hand
        host = next(h for h in plan["hosts"] if h["ps"])
        port = f"{host['leaf']}-eth{host['port']}"
        rows = [
            r
            for r in jsonl(run / folder(n) / "timeseries.jsonl")
            if r.get("kind") == "port" and r["name"] == port
        ]
        t0 = t0_of(run, folder(n))
        j = len(d["edges"]) // 2
        a = min(rows, key=lambda r: abs(r["t"] - t0 - d["edges"][j]))
        b = min(rows, key=lambda r: abs(r["t"] - t0 - d["edges"][j + 1]))
        assert abs(a["t"] - t0 - d["edges"][j]) < 0.05 and abs(b["t"] - t0 - d["edges"][j + 1]) < 0.05
        by_hand = (b["tx_bytes"] - a["tx_bytes"]) * 8 / (host["rate_mbit"] * 1e6 * (b["t"] - a["t"]))
        assert d["util"][d["links"].index(port)][j] == pytest.approx(by_hand, rel=0.05, abs=0.01)
        # host links labelled as host links (hX-eth0 up, the leaf port down), then the uplinks
        labels = dict(zip(d["links"], d["labels"], strict=True))
        assert labels[f"{host['name']}-eth0"] == f"host {host['name']} up: {host['name']}-eth0"
        assert labels[port].startswith(f"host {host['name']} down: {port}")
        kinds = d["kinds"]
        assert kinds == sorted(kinds) and set(kinds) == {"host", "uplink"}
        ups = [lb for lb, k in zip(d["labels"], kinds, strict=True) if k == "uplink"]
        assert ups and all(lb.startswith("uplink ") for lb in ups)


# -- cures (#15) ------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def variants(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """The fixture with two more PS-family variants (their folders copies of ps's), summarised again."""
    run = copy_run(tmp_path_factory.mktemp("cures") / "run")
    for name in ("ps:rto_min_ms=1", "ps:shards=2"):
        shutil.copytree(run / "ps", run / folder(name))
    edit_json(run / "config.json", strategies=["ps", "ps:rto_min_ms=1", "ps:shards=2", "ring"])
    summarize(run)
    return run, build_report(run)


def cures_checks(run: Path, res: dict[str, Any]) -> None:
    summary = summary_of(run)["strategies"]
    plan = json.loads((run / "plan.json").read_text())
    cfg = json.loads((run / "config.json").read_text())
    t = res["tables"]["cures-one-row-per-variant"]
    assert list(t["rows"]) == cfg["strategies"]  # one row per variant (the ring as the reference)
    from runmodel.config import ExperimentConfig

    config = ExperimentConfig.from_dict(cfg)
    port_of = {h["name"]: f"{h['leaf']}-eth{h['port']}" for h in plan["hosts"]}
    for n in cfg["strategies"]:
        f, v = summary[n], t["values"][n]
        assert v["iter_time_s"] == f["iter_time_s"] and v["bound_s"] == f["bound_s"]
        assert v["tcp_timeouts_kernel"] == f["tcp_timeouts_kernel"] and v["tcp"] == f["tcp"]
        assert v["busiest_link_utilisation"] == f["busiest_link_utilisation"]
        assert v["timeouts_s"] == f["comm_split"]["timeouts_s"]
        assert cell(res, "cures-one-row-per-variant", n, "iteration (s)") == f"{f['iter_time_s']:.3f}"
        assert cell(res, "cures-one-row-per-variant", n, "bound (s)") == f"{f['bound_s']:.3f}"
        assert (
            cell(res, "cures-one-row-per-variant", n, "iteration / bound")
            == f"{f['iter_time_s'] / f['bound_s']:.2f}"
        )
        assert cell(res, "cures-one-row-per-variant", n, "timeouts (kernel)") == str(f["tcp_timeouts_kernel"])
        assert (
            cell(res, "cures-one-row-per-variant", n, "TCP")
            == f"{f['tcp']['cc']}, RTO min {f['tcp']['rto_min_ms']:g} ms"
        )
        spec = StrategySpec.parse(n)
        if spec.uses_ps:
            ports = [port_of[h] for h in config.shard_hosts(spec)]
            drops = max(f["drops_by_port"].get(p, 0) for p in ports)
            assert v["hottest_ps_port"] in ports and v["hottest_ps_port_drops"] == drops
            assert (
                cell(res, "cures-one-row-per-variant", n, "hottest PS-port drops")
                == f"{drops} ({v['hottest_ps_port']})"
            )
        else:
            assert cell(res, "cures-one-row-per-variant", n, "hottest PS-port drops") == "–"
    # the paragraph is the numbers: every variant against the plain ps
    md = (run / "report.md").read_text()
    b = summary["ps"]
    for n in cfg["strategies"]:
        if n == "ps" or not StrategySpec.parse(n).uses_ps:
            continue
        f, v, bv = summary[n], t["values"][n], t["values"]["ps"]
        line = next(ln for ln in md.splitlines() if ln.startswith("- ") and f"({n}) " in ln)
        if v["hottest_ps_port_drops"] != bv["hottest_ps_port_drops"]:
            verb = "cut" if v["hottest_ps_port_drops"] < bv["hottest_ps_port_drops"] else "raised"
            assert (
                f"{verb} the hottest PS port's drops from {bv['hottest_ps_port_drops']} "
                f"({bv['hottest_ps_port']}) to {v['hottest_ps_port_drops']} "
                f"({v['hottest_ps_port']})"
            ) in line
        if f"{b['iter_time_s']:.3f}" != f"{f['iter_time_s']:.3f}":
            verb = "cut" if f["iter_time_s"] < b["iter_time_s"] else "raised"
            assert f"{verb} the step from {b['iter_time_s']:.3f} s to {f['iter_time_s']:.3f} s" in line
        assert (
            f"(bound {f['bound_s']:.3f} s, unchanged;"
            if f"{b['bound_s']:.3f}" == f"{f['bound_s']:.3f}"
            else f"(bound {b['bound_s']:.3f} s -> {f['bound_s']:.3f} s;"
        ) in line
        assert f"Timeouts (kernel): {b['tcp_timeouts_kernel']} -> {f['tcp_timeouts_kernel']}" in line
        c0, c1 = b["comm_split"]["timeouts_s"], f["comm_split"]["timeouts_s"]
        assert f"they cost {c1:.3f} s a step against {c0:.3f} s" in line
        d = f["comm_split"]["bound_s"] - b["comm_split"]["bound_s"]
        assert f"bound {d:+.3f} s" in line
        if spec.shards > 1:
            assert line.startswith(
                f"- sharding over {spec.shards} hosts"
                if spec.placement == "dedicated"
                else f"- placing {spec.shards} shards on worker hosts"
            )
        if spec.rto_min_ms is not None:
            assert line.startswith(f"- the {spec.rto_min_ms:g} ms minimum RTO")


def test_cures_one_row_per_variant(variants: tuple[Path, dict[str, Any]]) -> None:
    run, res = variants
    assert res["sections"].index("Cures") == res["sections"].index("Iteration time and bounds") + 1
    cures_checks(run, res)


def test_cures_on_a_real_run(real: tuple[Path, dict[str, Any]]) -> None:
    run, res = real
    if sum(1 for n in strategies_of(run) if StrategySpec.parse(n).uses_ps) < 2:
        assert "Cures" not in res["sections"]
        return
    cures_checks(run, res)
    md = (run / "report.md").read_text()
    s = summary_of(run)["strategies"]
    if "ps:shards=4" in s:  # the hottest of four shard ports, not the first shard's
        t = res["tables"]["cures-one-row-per-variant"]["values"]["ps:shards=4"]
        assert t["hottest_ps_port_drops"] >= s["ps:shards=4"]["ps_port_drops"]
        assert "sharding over 4 hosts (ps:shards=4)" in md


def test_no_cures_with_one_ps(built: tuple[Path, dict[str, Any]]) -> None:
    _, res = built
    assert "Cures" not in res["sections"] and "cures-one-row-per-variant" not in res["tables"]


def test_colocated_shards_get_no_ps_port_panel(real: tuple[Path, dict[str, Any]]) -> None:
    """A variant with no parameter server on the PS host: no PS-port queue panel, no PS-port drop line."""
    run, res = real
    names = [n for n in strategies_of(run) if ":placement=colocated" in n]
    panels = res["figures"]["queue_occupancy"]["panels"]
    ps_port = res["figures"]["queue_occupancy"]["port"]
    for n in names:
        assert [p["port"] for p in panels if p["strategy"] == n] == [
            summary_of(run)["strategies"][n]["worst_queue_port"]
        ]
        assert ps_port not in [p["port"] for p in panels if p["strategy"] == n]
