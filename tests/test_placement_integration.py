"""`--placement spread` on a real fabric: rank r's ring traffic leaves the host placement says.

One short ring run of 5 workers on the default fabric (4 leaves x 2 hosts, PS h1). Spread deals the
ranks round-robin over the leaves: by hand h2 (lf1), h3 (lf2), h5 (lf3), h7 (lf4), then h4 (lf2),
where packed would take h2, h3, h4, h5, h6 (and a name-sorted list h2, h3, h4, h5, h7). The
oracle is the captures: in each host's own capture, the ring's payload (2 (N-1)/N of the
gradient per step, to the right neighbour) must go from that host's address (plan.json) to the
address of the host placed at rank r + 1, and nowhere else.
"""

from __future__ import annotations

import collections
import json
from pathlib import Path

import pytest

from runmodel.folder import RunFolder
from tests.conftest import guarded_host, run_cli
from tests.tshark import tshark_fields, tshark_unique_bytes

pytestmark = pytest.mark.integration

STEPS, WORKERS = 3, 5
SPREAD = ["h2", "h3", "h5", "h7", "h4"]  # worked by hand, see the module's docstring


@pytest.fixture(scope="module")
def spread_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    results = tmp_path_factory.mktemp("placement")
    with guarded_host("placement"):
        proc = run_cli(
            ["compare", "--strategies", "ring", "--workers", str(WORKERS), "--placement", "spread",
             "--steps", str(STEPS), "--results", str(results)],
            timeout=900,
        )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    return results / "latest", proc.stderr


def test_the_run_records_and_says_the_placement(spread_run: tuple[Path, str]) -> None:
    run, stderr = spread_run
    config = json.loads(RunFolder(run).config_file.read_text())
    assert (config["rank_placement"], config["worker_hosts"]) == ("spread", SPREAD)
    job = json.loads(RunFolder(run).strategy("ring").job_file.read_text())
    assert [(r["rank"], r["host"]) for r in job["ranks"]] == list(enumerate(SPREAD))
    assert "rank placement spread: 0 h2 (lf1), 1 h3 (lf2), 2 h5 (lf3), 3 h7 (lf4), 4 h4 (lf2)" in stderr


def test_each_ranks_traffic_leaves_its_placed_host(spread_run: tuple[Path, str]) -> None:
    """From host H_r's capture: unique payload from H_r's address to H_(r+1)'s within 5 % of STEPS x
    2 (N-1)/N x the gradient's bytes, under 1 % of that to any other worker host (the rendezvous
    store's connections, on the master port, left out)."""
    from workloads.model import ModelSpec

    run, _ = spread_run
    folder = RunFolder(run)
    plan = folder.plan()
    sf = folder.strategy("ring")
    job = json.loads(sf.job_file.read_text())
    theory = STEPS * 2 * (WORKERS - 1) / WORKERS * ModelSpec.from_grad_mb(0.5).grad_bytes
    ip = {h: plan.host(h).ip for h in SPREAD}
    by_ip = {v: k for k, v in ip.items()}
    for r, host in enumerate(SPREAD):
        pcap = sf.pcap(host)
        store = {
            row[0] for row in tshark_fields(pcap, "tcp.stream", display=f"tcp.port == {job['master_port']}")
        }
        sent: dict[str, int] = collections.Counter()
        for (stream, src, _, dst), n in tshark_unique_bytes(pcap).items():
            if stream not in store and src == ip[host] and dst in by_ip:
                sent[by_ip[dst]] += n
        right = SPREAD[(r + 1) % WORKERS]
        print(f"rank {r} on {host}: sent {dict(sent)}; theory {theory:.0f} to {right}")
        assert abs(sent[right] - theory) <= 0.05 * theory, (r, host, dict(sent))
        others = {h: n for h, n in sent.items() if h != right}
        assert all(n < 0.01 * theory for n in others.values()), (r, host, others)
        assert plan.host(host).leaf != plan.host(right).leaf  # spread: every ring hop crosses a spine
