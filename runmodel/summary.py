"""summary.json: the figures of a run, one typed block per strategy, each field defined once.

Every field's metadata says what it holds and how it is computed (its statistic); docs/DESIGN.md
shows these definitions (`python -m runmodel.summary` prints them as the Markdown table there, and
a test checks the two agree). analysis/summary.py computes the values; the report only renders
them, so a figure has the same value wherever it is shown.
"""

from __future__ import annotations

import dataclasses
import sys
from dataclasses import dataclass, field, fields
from typing import Any

from runmodel import SCHEMA


def metric(doc: str, default: Any = None, *, factory: Any = None, source: str = "") -> Any:
    """A summary field: `doc` defines it (statistic included); `source` names the files it comes from."""
    meta = {"doc": doc, "source": source}
    if factory is not None:
        return field(default_factory=factory, metadata=meta)
    return field(default=default, metadata=meta)


W, C, K, P, S = ("worker logs", "controller samples", "hosts.json (kernel)", "pcaps", "ps.jsonl")
# the spread beside a median over steps: linear interpolation between the closest ranks (numpy's default)
P10, P90 = (
    "10th percentile (linear between closest ranks)",
    "90th percentile (linear between closest ranks)",
)


@dataclass
class StrategySummary:
    """The figures of one strategy (None where the run produced nothing to compute them from)."""

    state: str = metric(
        "how the strategy ended: complete, incomplete (interrupted, or still running), failed, missing",
        "missing",
        source="status.json",
    )
    error: str | None = metric("the one-line error of a failed or interrupted strategy", source="status.json")
    workers: int = metric("workers that logged at least one step", 0, source=W)
    steps: int = metric("steps logged (distinct step numbers over all workers)", 0, source=W)
    grad_bytes: int = metric("bytes of one gradient (float32 values)", 0, source="config.json")
    iter_time_s: float | None = metric(
        "median over steps of the slowest worker's step time (t_end - t_start): what a step cost the job",
        source=W,
    )
    iter_time_p10_s: float | None = metric(f"{P10} over steps of the slowest worker's step time", source=W)
    iter_time_p90_s: float | None = metric(f"{P90} over steps of the slowest worker's step time", source=W)
    comm_time_s: float | None = metric(
        "median over all worker steps of comm_s: the time a worker spent "
        "exchanging gradients and weights, waiting for others included",
        source=W,
    )
    comm_time_p10_s: float | None = metric(f"{P10} of every worker step's comm_s", source=W)
    comm_time_p90_s: float | None = metric(f"{P90} of every worker step's comm_s", source=W)
    compute_time_s: float | None = metric("median over all worker steps of compute_s", source=W)
    compute_time_p10_s: float | None = metric(f"{P10} of every worker step's compute_s", source=W)
    compute_time_p90_s: float | None = metric(f"{P90} of every worker step's compute_s", source=W)
    wait_time_s: float | None = metric(
        "median over all worker steps of wait_s: the part of comm_s spent "
        "waiting for the others (PS family: after its push was sent)",
        source=W,
    )
    wait_time_p10_s: float | None = metric(f"{P10} of every worker step's wait_s", source=W)
    wait_time_p90_s: float | None = metric(f"{P90} of every worker step's wait_s", source=W)
    first_loss: float | None = metric(
        "mean loss at the first step with one, over the workers that reported a loss (a job: the ranks "
        "that printed one); none when no worker did",
        source=W,
    )
    final_loss: float | None = metric(
        "mean loss at the last step with one, over the workers that reported a loss", source=W
    )
    wall_time_s: float | None = metric("first step's start to last step's end, over all workers", source=W)
    throughput_samples_per_s: float | None = metric("samples of every worker's steps / wall_time_s", source=W)
    worker_compute_share: float | None = metric(
        "mean over workers of each worker's compute time / its own active span (first step start to last "
        "step end): how busy the accelerators were",
        source=W,
    )
    worker_compute_share_by_rank: dict[str, float] = metric(
        "worker_compute_share of each rank", factory=dict, source=W
    )
    pp_bubble: float | None = metric(
        "pipeline (pp): mean over stages of each stage's idle share of its steps from the third on (the "
        "pipeline's steady state), 1 - sum(compute_s) / sum(step time)",
        source=W,
    )
    pp_bubble_by_stage: dict[str, float] = metric("pp_bubble of each stage", factory=dict, source=W)
    pp_bubble_theory: float | None = metric(
        "pipeline (pp): (S - 1)/(M + S - 1), the idle share of GPipe and 1F1B with equal stage times"
    )
    pp_in_flight_by_stage: dict[str, int] = metric(
        "pipeline (pp): the most micro-batches whose activations each stage held at once (GPipe: M, "
        "1F1B: at most S - s)",
        factory=dict,
        source=W,
    )
    pp_stage_bytes_theory: int | None = metric(
        "pipeline (pp): payload bytes each way between consecutive stages per step, batch x hidden x 4"
    )
    worker_bytes_sent: int = metric(
        "sum over worker steps of bytes_sent: gradient payload the workers sent", 0, source=W
    )
    worker_bytes_received: int = metric(
        "sum over worker steps of bytes_recv: payload the workers received "
        "(weights from the PS, chunks from ring neighbours)",
        0,
        source=W,
    )
    queue_drops_total: int | None = metric(
        "sum over switch port queues of the drops counter's increase "
        "over the strategy (OpenFlow queue tx_errors)",
        source=C,
    )
    ps_port: str | None = metric(
        "PS family: the leaf port toward its hottest PS host (the shard whose port "
        "dropped most; the one PS's port when unsharded); none for collectives",
        source="plan.json, " + C,
    )
    ps_port_drops: int | None = metric(
        "queue drops at ps_port over the strategy (none for collectives)", source=C
    )
    max_port_drops: int | None = metric("the most queue drops of any one port", source=C)
    max_drop_port: str | None = metric("the port with max_port_drops (none without drops)", source=C)
    drops_by_port: dict[str, int] = metric(
        "queue drops per port, ports with drops only", factory=dict, source=C
    )
    bytes_by_link: dict[str, int] = metric(
        "bytes per link direction over the strategy: each switch port's tx bytes, and hX-eth0 for a "
        "host's own sending (its leaf port's rx bytes)",
        factory=dict,
        source=C,
    )
    max_link_share: float | None = metric(
        "bytes of the busiest link direction / bytes of all link directions", source=C
    )
    busiest_link: str | None = metric("the link direction with the most bytes", source=C)
    tcp_retransmits_kernel: int | None = metric(
        "sum over hosts of TcpRetransSegs: segments TCP sent again", source=K
    )
    tcp_timeouts_kernel: int | None = metric(
        "sum over hosts of TcpExtTCPTimeouts: retransmission timer expiries (RTOs, SYN timeouts included)",
        source=K,
    )
    tcp_loss_probes_kernel: int | None = metric(
        "sum over hosts of TcpExtTCPLossProbes: tail-loss probes sent", source=K
    )
    tcp_fast_retrans_kernel: int | None = metric(
        "sum over hosts of TcpExtTCPFastRetrans: segments sent again by fast recovery", source=K
    )
    tcp_spurious_rtos_kernel: int | None = metric(
        "sum over hosts of TcpExtTCPSpuriousRTOs: timeouts the kernel found were not needed", source=K
    )
    tcp_retransmits_pcap: int | None = metric(
        "retransmissions in the hosts' own captures, as tshark's tcp.analysis.retransmission counts them "
        "(the segments each host sent)",
        source=P,
    )
    dupack_retransmits_pcap: int | None = metric(
        "retransmitted segments sent while the receiver repeated an ACK (>= 2 dup ACKs in its current run) "
        "or that tshark calls fast retransmissions: loss repaired without waiting for a timer",
        source=P,
    )
    wireshark_fast_retransmits: int | None = metric(
        "retransmissions tshark's tcp.analysis.fast_retransmission matches (its own, narrower rule)", source=P
    )
    tcp_timeouts_pcap: int | None = metric(
        "retransmission timeouts seen in the senders' captures: a retransmission after >= 0.75 x the "
        "minimum RTO without ACK progress (SYN timeouts included, tail-loss probes not); events, not "
        "segments (analysis/rto.py)",
        source=P,
    )
    tcp_loss_probes_pcap: int | None = metric(
        "tail-loss probes seen in the senders' captures (only those that resent data: a probe that sends "
        "new data is no retransmission, so the kernel's count is higher)",
        source=P,
    )
    timeout_stall_s: float | None = metric(
        "wall-clock seconds during which at least one flow sat in a retransmission timeout (union over "
        "flows of each timeout's idle time)",
        source=P,
    )
    dup_acks: int | None = metric(
        "duplicate ACKs the hosts sent (tshark tcp.analysis.duplicate_ack)", source=P
    )
    out_of_order: int | None = metric("segments tshark calls out-of-order", source=P)
    zero_window: int | None = metric("segments advertising a zero window", source=P)
    fabric_drops_pcap: int | None = metric(
        "data segments a sending host's capture saw that the receiving host's capture never saw", source=P
    )
    drops_on_path_to_ps_pcap: int | None = metric(
        "segments toward the PS a sender's capture saw and the PS-port capture never did (lost before the "
        "PS port's queue)",
        source=P,
    )
    capture_complete: bool = metric(
        "every capture point of the strategy got every packet", False, source="capture.json"
    )
    captures: int = metric("capture points of the strategy", 0, source="capture.json")
    pcap_error: str | None = metric("why the pcaps could not be read, if they could not", source=P)
    delivered_bytes_by_receiver: dict[str, int] = metric(
        "per receiving host, the unique payload bytes that reached it (each byte once, at its first "
        "arrival, retransmissions that repaired a loss included), from its own capture",
        factory=dict,
        source=P,
    )
    delivered_bytes: int | None = metric("sum of delivered_bytes_by_receiver", source=P)
    traffic_matrix_pcap: dict[str, int] = metric(
        "the traffic matrix: per sender and receiver ('h2->h3'), delivered bytes as in "
        "delivered_bytes_by_receiver, every connection included (rendezvous too)",
        factory=dict,
        source=P,
    )
    traffic_matrix_theory: dict[str, int] = metric(
        "ring and the model splits (pp, tp, fsdp, moe, hybrid): the strategy's own traffic_theory(job) "
        "(payload bytes per step rank to rank, from job.json alone) with its ranks put on their hosts, x the "
        "steps logged; cells as in traffic_matrix_pcap (none for the other kinds)",
        factory=dict,
        source="job.json, " + W,
    )
    traffic_matrix_error: dict[str, float] = metric(
        "per cell of traffic_matrix_theory, (traffic_matrix_pcap - theory) / theory",
        factory=dict,
        source=P,
    )
    traffic_matrix_error_max: float | None = metric(
        "the largest absolute traffic_matrix_error: how far the worst host pair the theory says carries "
        "bytes was from it (none without host captures or a theory)",
        source=P,
    )
    traffic_matrix_off_theory: dict[str, int] = metric(
        "traffic_matrix_pcap's bytes on the host pairs traffic_matrix_theory leaves empty: what no theory "
        "of a training step counts (the rendezvous store at rank 0's host, barriers, connection set-up)",
        factory=dict,
        source=P,
    )
    bytes_per_worker_step_pcap: float | None = metric(
        "mean over the job's hosts of the payload bytes each sent per step: its row of traffic_matrix_pcap "
        "/ steps (strategies with a traffic_matrix_theory)",
        source=P,
    )
    bytes_per_worker_step_theory: float | None = metric(
        "bytes_per_worker_step_pcap as the theory has it: rows of traffic_matrix_theory / steps",
        source="job.json",
    )
    traffic_theory_error: str | None = metric(
        "why the strategy's traffic_theory(job) could not be computed, if it could not", source="job.json"
    )
    tcp_timeouts_by_receiver: dict[str, int] = metric(
        "tcp_timeouts_pcap per receiving host of the flow that timed out: where the incast's victims "
        "were headed",
        factory=dict,
        source=P,
    )
    hot_ports: list[dict[str, Any]] = metric(
        "the strategy's busiest and most-dropping switch ports, busiest first: port, kind (uplink or host), "
        "tx_bytes, drops, utilisation (tx bytes x 8 / (rate x training time)), max_backlog_packets",
        factory=list,
        source=C + ", queue_depth.jsonl",
    )
    worst_queue_port: str | None = metric(
        "the port whose queue the report shows for this strategy: the most-dropping port, else the busiest",
        source=C,
    )
    link_utilisation: dict[str, float] = metric(
        "per link direction (as bytes_by_link), bytes x 8 / (configured rate x training time)",
        factory=dict,
        source=C,
    )
    busiest_link_utilisation: float | None = metric(
        "the highest link_utilisation: how close the strategy came to a link's capacity", source=C
    )
    links_under_5pct_of_busiest: int | None = metric(
        "link directions of the fabric that carried less than 5 % of the busiest one's bytes", source=C
    )
    ecmp_imbalance: float | None = metric(
        "over the leaves whose uplinks carried traffic, the largest (max - min) / max of one leaf's uplink "
        "tx bytes: 0 when ECMP spread a leaf's traffic evenly over the spines, 1 when a spine got none",
        source=C,
    )
    tcp: dict[str, Any] = metric(
        "the congestion control and minimum RTO the hosts' TCP ran with, read "
        "back from the kernel when the strategy started",
        factory=dict,
        source="status.json",
    )
    timeout_idle_s: float | None = metric(
        "seconds the strategy's bottleneck host (PS family: the hottest PS; collectives: the host behind "
        "the worst queue) saw no data packet in either direction for > 2 ms while some flow sat in a "
        "timeout: what the timeouts cost the step",
        source=P,
    )
    bound_s: float | None = metric(
        "the communication lower bound of one step (analysis/bounds.py): ps, ssp, backup (N + 1) S / B "
        "(full-duplex PS link: the next step's pushes overlap this step's pulls); async N S / B; over K "
        "dedicated shards divided by K; over K colocated shards (S (K - 1) + (N - 1) S) / (K B); ring and "
        "allreduce 2 (N - 1) S / (N B), and so a job (incastlab job), its S taken from the bytes its workers "
        "sent a step; N workers, S the gradient's wire bytes (payload x 1514/1448), B the slowest host "
        "link's rate",
        source="config.json",
    )
    push_then_pull_s: float | None = metric(
        "PS family: 2 N S / (K B), a step when no push overlaps a pull (the textbook PS time)",
        source="config.json",
    )
    comm_split: dict[str, float] = metric(
        "comm_time_s split into bound_s, timeouts_s (timeout_idle_s / steps) and rest_s (what is left: "
        "queueing, slow start, software overhead; never below 0)",
        factory=dict,
        source=W + ", " + P,
    )
    fidelity: dict[str, Any] = metric(
        "did the emulator keep its promise: verdict (trustworthy or degraded), reasons, "
        "unexplained_loss_share (max(0, fabric_drops_pcap - queue_drops_total) / fabric_drops_pcap: losses "
        "the captures saw that no switch queue counted, a lower bound since queue drops include ACKs), "
        "dequeue_port, dequeue_gap_median_over_ideal (median gap between packets leaving the strategy's "
        "worst host port while its queue was backlogged, over the serialization time at its rate), "
        "cpu_busy_max (the busiest second's mean core busy share), cpu_saturated_share (share of seconds "
        "with every core >= 95 % busy), switch_cpu_max (ovs-vswitchd's peak share of a core); the CPU "
        "figures over the training window (first step's start to last step's end)",
        factory=dict,
        source="pcaps, queue_depth.jsonl, cpu.jsonl",
    )
    updates_applied: int | None = metric("gradients the PS applied", source=S)
    updates_discarded: int | None = metric(
        "gradients the PS dropped (late in a synchronous step, or a backup's)", source=S
    )
    staleness_max: int | None = metric(
        "the largest staleness of an applied gradient (model versions "
        "between the one it was computed on and the one it updated)",
        source=S,
    )
    staleness_mean: float | None = metric("mean staleness of the applied gradients", source=S)
    staleness_histogram: dict[str, int] = metric("applied gradients per staleness", factory=dict, source=S)
    discarded_per_step: list[int] = metric(
        "gradients discarded at each synchronous step", factory=list, source=S
    )
    ssp_max_gap: int | None = metric(
        "SSP: the largest step gap between fastest and slowest worker the PS allowed", source=S
    )

    def to_dict(self) -> dict[str, Any]:
        """The strategy's block of summary.json."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> StrategySummary:
        """From summary.json (keys it does not know are ignored: a newer schema's additions)."""
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in doc.items() if k in names})


@dataclass
class CaptureTotals:
    """The run's captures in one place: complete or not, and what was lost where."""

    enabled: bool
    complete: bool
    packets_captured: int = 0
    packets_dropped_kernel: int = 0
    incomplete_points: list[str] = field(default_factory=list)  # "<strategy>/<point>"


@dataclass
class RunSummary:
    """summary.json."""

    config: dict[str, Any]
    strategies: dict[str, StrategySummary]
    capture: CaptureTotals
    complete: bool  # every strategy complete
    schema: int = SCHEMA
    fidelity: dict[str, Any] = field(default_factory=dict)  # verdict over every strategy, with reasons

    def to_dict(self) -> dict[str, Any]:
        """summary.json."""
        return {
            "schema": self.schema,
            "config": self.config,
            "fidelity": self.fidelity,
            "strategies": {k: v.to_dict() for k, v in self.strategies.items()},
            "capture": dataclasses.asdict(self.capture),
            "complete": self.complete,
        }

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> RunSummary:
        """From summary.json."""
        cap = doc.get("capture") or {}
        known = {f.name for f in fields(CaptureTotals)}
        strategies = doc.get("strategies") or {}
        return cls(
            config=doc.get("config") or {},
            strategies={k: StrategySummary.from_dict(v) for k, v in strategies.items()},
            capture=CaptureTotals(**{k: v for k, v in cap.items() if k in known})
            if cap
            else CaptureTotals(False, False),
            complete=bool(doc.get("complete")),
            schema=int(doc.get("schema") or 1),
            fidelity=doc.get("fidelity") or {},
        )


def definitions_markdown() -> str:
    """The per-strategy fields of summary.json as a Markdown table (docs/DESIGN.md holds it)."""
    rows = ["| key | from | definition |", "|---|---|---|"]
    for f in fields(StrategySummary):
        rows.append(f"| `{f.name}` | {f.metadata['source']} | {f.metadata['doc']} |")
    return "\n".join(rows)


if __name__ == "__main__":
    sys.stdout.write(definitions_markdown() + "\n")
