"""Benchmark (not a test): how close the emulated exchanges come to their theoretical bounds.

For ring all-reduce it reports nccl-tests' columns: algbw = S / t and busbw = algbw * 2(N-1)/N, as
a share of the configured link rate (the ring's bound is busbw = link rate). For the parameter
server it reports the communication time against its lower bound 2*N*S/B (N gradients in and N
weight copies out through the PS link), and the measured ps/ring ratio beside the theoretical
N^2/(N-1). Compute is kept small (batch 1) so the network dominates.

    python -m bench.collectives [--sizes 0.25,1] [--steps 5] [--workers 7] [--out results/bench.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from runmodel.folder import RunFolder
from runmodel.records import read_worker_log, write_json


def comm_times(sdir: Path, skip: int = 1) -> list[float]:
    """Per step, the slowest worker's communication time (steps after the first `skip`)."""
    per_step: dict[int, float] = {}
    for log in sdir.glob("worker-*.jsonl"):
        for r in read_worker_log(log, 0).steps:
            if r.step >= skip:
                per_step[r.step] = max(per_step.get(r.step, 0.0), r.comm_s)
    return [per_step[k] for k in sorted(per_step)]


def figures(size_mib: float, n: int, link_mbit: float, ring_t: float, ps_t: float) -> dict[str, Any]:
    """nccl-tests style bandwidths and the PS bound for one gradient size."""
    s_bytes = size_mib * 2**20
    b = link_mbit * 1e6 / 8  # bytes/s
    algbw = s_bytes / ring_t
    busbw = algbw * 2 * (n - 1) / n
    ps_bound = 2 * n * s_bytes / b
    return {
        "size_mib": size_mib, "workers": n, "link_mbit": link_mbit,
        "ring_time_s": round(ring_t, 4), "algbw_mbit": round(algbw * 8 / 1e6, 2),
        "busbw_mbit": round(busbw * 8 / 1e6, 2), "busbw_over_link": round(busbw / b, 3),
        "ps_time_s": round(ps_t, 4), "ps_bound_s": round(ps_bound, 4),
        "ps_over_bound": round(ps_t / ps_bound, 3),
        "ps_over_ring": round(ps_t / ring_t, 3), "ps_over_ring_theory": round(n * n / (n - 1), 3),
        "ratio_error": round(abs(ps_t / ring_t - n * n / (n - 1)) / (n * n / (n - 1)), 3),
    }


def table(rows: list[dict[str, Any]]) -> str:
    """The printed table: one line per gradient size."""
    head = (f"{'size MiB':>9}{'N':>3}{'ring s':>9}{'algbw Mb/s':>12}{'busbw Mb/s':>12}{'busbw/link':>11}"
            f"{'ps s':>8}{'ps/bound':>9}{'ps/ring':>9}{'theory':>8}")
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(f"{r['size_mib']:>9.2f}{r['workers']:>3}{r['ring_time_s']:>9.3f}{r['algbw_mbit']:>12.2f}"
                     f"{r['busbw_mbit']:>12.2f}{r['busbw_over_link']:>11.0%}{r['ps_time_s']:>8.2f}"
                     f"{r['ps_over_bound']:>9.2f}{r['ps_over_ring']:>9.2f}{r['ps_over_ring_theory']:>8.2f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Run ring and ps at each size on the default fabric; print the table, write JSON."""
    from incastlab.runner import run_experiment
    from incastlab.session import fabric_session, terminate_as_interrupt
    from runmodel.config import ControllerOptions, ExperimentConfig
    from runmodel.fabric import FabricSpec, build_plan

    ap = argparse.ArgumentParser(prog="bench.collectives", description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="0.25,1", help="gradient sizes, MiB")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--workers", type=int, default=7)
    ap.add_argument("--host-mbit", type=float, default=20.0)
    ap.add_argument("--out", default="results/bench.json")
    args = ap.parse_args(argv)
    terminate_as_interrupt()
    spec = FabricSpec(host_mbit=args.host_mbit, uplink_mbit=args.host_mbit)
    folder = RunFolder.create(Path("results"), name=time.strftime("bench-%Y%m%d-%H%M%S"), link_latest=False)
    rows = []

    def say(msg: str) -> None:
        print(f"[bench] {msg}", file=sys.stderr, flush=True)

    options = ControllerOptions()
    with fabric_session(build_plan(spec), options, folder.path, progress=say, tcp=("cubic", None)) as sess:
        for size in (float(x) for x in args.sizes.split(",")):
            sub = RunFolder.create(folder.path, name=f"size-{size:g}", link_latest=False)
            cfg = ExperimentConfig(fabric=spec, controller=options, workers=args.workers,
                                   strategies=("ring", "ps"), steps=args.steps, grad_mb=size, batch=1,
                                   capture="none")
            cfg.validate()
            sub.write_config(cfg)
            run_experiment(sess, cfg, sub, say)
            ring_t = statistics.median(comm_times(sub.path / "ring"))
            ps_t = statistics.median(comm_times(sub.path / "ps"))
            rows.append(figures(size, cfg.n_workers, args.host_mbit, ring_t, ps_t))
    print(table(rows))
    out = Path(args.out)
    doc = {"collectives": rows, "run": str(folder.path), "machine_note": "userspace OVS on a shared machine"}
    if out.exists():
        try:
            doc = {**json.loads(out.read_text()), **doc}
        except ValueError:
            pass
    write_json(out, doc)
    print(f"written {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
