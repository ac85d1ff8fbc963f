"""Incast cures in training, for real: what a cure changes is checked on the wire and in the
switches' queues, against figures worked out by hand from the run's config (gradient bytes S,
workers N, shards K, link rate B), not against the product's own summary; and a variant's TCP
settings are in effect inside the hosts while it runs and gone after it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runmodel.records import read_queue_samples
from tests.conftest import MITIGATE_VARIANTS as VARIANTS
from tests.conftest import run_cli
from tests.tshark import tshark_fields, tshark_unique_bytes

pytestmark = pytest.mark.integration
SHARDED = "ps_shards-2"
COLOCATED = "ps_shards-2_placement-colocated_rto_min_ms-1_cc-reno"


@pytest.fixture
def cured(mitigate_run):
    return mitigate_run


def _doc(path: Path) -> dict:
    return json.loads(path.read_text())


def _theory(run: Path) -> tuple[int, int, float, float]:
    """(N workers, T steps, S gradient bytes, B host link bits/s) from the run's config.json."""
    cfg = _doc(run / "config.json")
    return cfg["workers"], cfg["steps"], cfg["grad_mb"] * 2**20, cfg["fabric"]["host_mbit"] * 1e6


def _switch_port(run: Path) -> dict[str, str]:
    """plan.json: each host's switch port, the interface whose queue feeds it (lf1-eth3 for h1)."""
    return {h["name"]: f"{h['leaf']}-eth{h['port']}" for h in _doc(run / "plan.json")["hosts"]}


def _shards(folder: Path) -> list[tuple[str, str, int]]:
    """(host, address, port) of each PS shard, from the variant's job.json."""
    return [(k["host"], k["addr"], k["port"]) for k in _doc(folder / "job.json")["shards"]]


def _gradient_bytes(folder: Path) -> dict[str, int]:
    """Per shard host, the gradient payload that reached it over its link: every byte of every
    connection toward its PS port at least once, from its own capture, counted by tshark."""
    out = {}
    for host, addr, port in _shards(folder):
        flows = tshark_unique_bytes(folder / "pcap" / f"{host}.pcap")
        out[host] = sum(
            n for (_st, _src, sport, dst), n in flows.items() if dst == addr and sport != str(port)
        )
    return out


def _wire_span(folder: Path) -> float:
    """Seconds from the first gradient byte to the last model byte on the workers' own links: the
    T steps as the captures saw them."""
    ports = " || ".join(f"tcp.port == {p}" for p in {p for _h, _a, p in _shards(folder)})
    times = [
        float(t)
        for rank in _doc(folder / "job.json")["ranks"]
        for (t,) in tshark_fields(
            folder / "pcap" / f"{rank['host']}.pcap", "frame.time_epoch", display=f"tcp.len > 0 && ({ports})"
        )
    ]
    return max(times) - min(times)


def _tc_drops(folder: Path) -> dict[str, int]:
    """Per switch port, the packets its queue dropped while the variant ran: the last minus the first
    reading of `tc -s class` (queue_depth.jsonl holds the readings, taken every 10 ms)."""
    first: dict[str, int] = {}
    last: dict[str, int] = {}
    for s in read_queue_samples(folder / "queue_depth.jsonl"):
        first.setdefault(s.port, s.drops)
        last[s.port] = s.drops
    return {port: last[port] - first[port] for port in last}


def test_each_variant_is_a_row_and_a_folder_of_its_own(cured):
    run, proc = cured
    summary = _doc(run / "summary.json")
    assert list(summary["strategies"]) == VARIANTS.split(",")
    for folder in ("ps", SHARDED, COLOCATED, "ps_pull-serial", "ring"):
        assert (run / folder / "status.json").exists(), folder
    for name in VARIANTS.split(","):
        assert name in proc.stdout


def test_a_sharded_ps_trains_exactly_like_the_single_ps(cured):
    run, _ = cured
    s = _doc(run / "summary.json")["strategies"]
    losses = {name: fig["final_loss"] for name, fig in s.items()}
    assert len({round(v, 4) for v in losses.values()}) == 1, losses


def test_each_shard_link_carries_its_share_of_the_gradient(cured):
    """Each of the K PS hosts gets T N S / K gradient bytes over its link (the single PS all of
    T N S); colocated shards T (N - 1) S / K, as the slice of the worker on the shard's own host never
    leaves it. Captured on the PS hosts and counted by tshark; the protocol's headers add well
    under 1 %. Dedicated shards sit on leaves of their own (plan.json)."""
    run, _ = cured
    n, steps, grad, _ = _theory(run)
    leaf = {h["name"]: h["leaf"] for h in _doc(run / "plan.json")["hosts"]}
    for folder, k, senders in (("ps", 1, n), (SHARDED, 2, n), (COLOCATED, 2, n - 1)):
        got = _gradient_bytes(run / folder)
        want = steps * senders * grad / k
        print(f"{folder}: gradient bytes per PS link {got}, T x {senders} x S / {k} = {want:.0f}")
        assert len(got) == k, f"{folder}: {k} shards, on {len(got)} hosts"
        for host, bytes_in in got.items():
            assert abs(bytes_in - want) <= 0.01 * want, (folder, host, bytes_in, want)
    assert len({leaf[h] for h, _a, _p in _shards(run / SHARDED)}) == 2, "dedicated shards on two leaves"


def test_two_shards_halve_the_step_on_the_wire_and_the_summary_says_so(cured):
    """The single PS's link carries N S in and N S out per step, two shards' links half of it each:
    the steps take about half as long (push-then-pull: 2 N S / (K B) a step), seen from the first
    gradient byte to the last model byte in the workers' captures. The summary's iteration time, the
    headline figure, must tell the same story: each within 20 % of the wire's T steps."""
    run, _ = cured
    _, steps, _, _ = _theory(run)
    s = _doc(run / "summary.json")["strategies"]
    span = {name: _wire_span(run / name) for name in ("ps", SHARDED)}
    iters = {name: s[v]["iter_time_s"] for name, v in (("ps", "ps"), (SHARDED, "ps:shards=2"))}
    print(
        f"wire time of {steps} steps {span}; summary's iter_time_s x {steps}: "
        f"{ {k: round(v * steps, 3) for k, v in iters.items()} }"
    )
    assert span[SHARDED] < 0.75 * span["ps"], span
    for name in span:
        assert abs(iters[name] * steps - span[name]) <= 0.2 * span[name], (name, iters[name], span[name])


def test_the_hottest_ps_port_drops_less_with_two_shards(cured):
    """The queue in front of a PS host overflows when the N pushes arrive together; with K shards
    each such port takes N S / K a step instead of N S, so the hottest of them drops fewer packets.
    Counted by tc at the switch ports plan.json puts in front of the shard hosts."""
    run, _ = cured
    port = _switch_port(run)
    hottest = {}
    for folder in ("ps", SHARDED):
        drops = _tc_drops(run / folder)
        at_ps = {port[h]: drops.get(port[h], 0) for h, _a, _p in _shards(run / folder)}
        nonzero = {k: v for k, v in drops.items() if v}
        print(f"{folder}: drops at the PS ports {at_ps}, at all ports {nonzero}")
        hottest[folder] = max(at_ps.values())
    assert hottest["ps"] > 0, "the single PS's port overflowed: an incast to cure"
    assert hottest[SHARDED] < hottest["ps"], hottest


def _reply_spreads(folder) -> list[float]:
    """Per step, the time between the first and the last worker getting its model, smallest first."""
    ends: dict[int, list[float]] = {}
    for log in folder.glob("worker-*.jsonl"):
        for line in log.read_text().splitlines():
            rec = json.loads(line)
            if "step" in rec and "event" not in rec:
                ends.setdefault(rec["step"], []).append(rec["t_end"])
    return sorted(max(t) - min(t) for t in ends.values())


def test_a_serial_pull_answers_one_worker_after_another(cured):
    """pull=serial: the models of a step leave one after another, each S / B on the PS's link; the
    plain PS sends them all at once, so they arrive much closer together."""
    run, _ = cured
    job = json.loads((run / "ps_pull-serial" / "job.json").read_text())
    link_mbit = json.loads((run / "config.json").read_text())["fabric"]["host_mbit"]
    one_model_s = job["grad_mb"] * 2**20 * 8 / (link_mbit * 1e6)  # S / B on the PS's link
    serial, together = _reply_spreads(run / "ps_pull-serial"), _reply_spreads(run / "ps")
    print(f"first-to-last model per step: serial {serial}, all at once {together}, S/B {one_model_s:.3f}")
    # serial: the median step spreads its models over most of (N - 1) S / B. All at once: the models
    # share the PS's link and end close together, how close depends on the flows' luck in its queue
    # (0.009-0.068 s in its best step, 0.03-0.11 s in the median one over runs, serial 0.44 s)
    serial_s = serial[len(serial) // 2]
    assert serial_s > 0.5 * (job["world"] - 1) * one_model_s
    assert together[0] < 0.5 * serial_s


def test_a_variants_tcp_is_in_effect_while_it_runs_and_gone_after(cured):
    run, _ = cured
    tcp = {
        d: {
            h: {k: v[k] for k in ("cc", "rto_min_ms")}
            for h, v in json.loads((run / d / "status.json").read_text())["tcp"].items()
        }
        for d in ("ps", COLOCATED, "ring")
    }
    assert tcp[COLOCATED] and all(v == {"cc": "reno", "rto_min_ms": 1.0} for v in tcp[COLOCATED].values())
    for d in ("ps", "ring"):  # before it and after it: the run's own settings, read from the kernel
        assert all(v == {"cc": "cubic", "rto_min_ms": 200.0} for v in tcp[d].values()), (d, tcp[d])
    s = json.loads((run / "summary.json").read_text())["strategies"]
    got = s["ps:shards=2:placement=colocated:rto_min_ms=1:cc=reno"]["tcp"]
    assert (got["cc"], got["rto_min_ms"]) == ("reno", 1.0)


def test_a_cure_the_kernel_cannot_run_is_refused_before_anything_is_built(clean_host, tmp_path):
    proc = run_cli(["compare", "--strategies", "ps:cc=dctcp", "--results", str(tmp_path)], timeout=60)
    available = open("/proc/sys/net/ipv4/tcp_available_congestion_control").read().split()
    if "dctcp" in available:  # a kernel with DCTCP (the VM) runs it: nothing to refuse here
        assert proc.returncode == 0, proc.stderr[-2000:]
        return
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
    assert "dctcp" in proc.stderr and "not available" in proc.stderr
    assert not any(tmp_path.iterdir())
