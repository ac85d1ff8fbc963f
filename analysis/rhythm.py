"""Training steps read off a worker's traffic, for a job that logs nothing of its own.

A data-parallel step computes, then exchanges its gradient: on the worker's own link that is a burst
of data packets, then quiet while the next step computes. The steps are therefore the bursts between
quiet gaps, and which gaps separate steps is decided by the traffic itself: an idle over LONG_IDLE_S
always does; of the other gaps between data packets, sorted longest first, those above the largest
jump of that order (the compute pauses, all alike, stand apart from the pauses inside an exchange),
never one shorter than MIN_STEP_GAP_S. A job whose compute pauses are no longer than the waits
inside its exchange shows no rhythm on its links: its steps then come out merged (e.g. a DDP job
with little compute per batch against gloo's ring waits).
Bursts that carry under SMALL_BURST_SHARE of the median burst's bytes (a rendezvous, a closing
barrier) are not steps. Every worker of a synchronous job takes the same steps: steps_of_job reads
each worker's capture with the number of steps most captures show (a capture whose pauses are less
clear is read with the others' count, its pauses picked one per period, and one whose step
boundaries stray from the others' is cut at its own pauses nearest theirs). A script that prints a
line a step says where its steps end: the runner notes when it read each line, and each worker's step
then ends with the last packet it received before that moment (steps_at_lines), the only reading that
holds when a step's exchange pauses longer inside than between steps, or its next exchange begins
before its compute ends (DDP's buckets). The first burst (DDP's
broadcast of the initial parameters, or the first step's exchange) starts the clock: step k runs
from the end of burst k-1 to the end of burst k, its compute being the quiet gap and its
communication the burst.
"""

from __future__ import annotations

import math
import re
import statistics
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from analysis.packets import str_to_ip
from analysis.pcapfile import read_pcap

MIN_STEP_GAP_S = 0.005
LONG_IDLE_S = 1.0  # a pause this long always ends a burst (start-up, a stall)
SMALL_BURST_SHARE = 0.25
STEP_RE = re.compile(r"\bstep\s+(\d+)\b", re.IGNORECASE)
LOSS_RE = re.compile(r"\bloss\b[\s=:]+([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)", re.IGNORECASE)


@dataclass(frozen=True)
class Burst:
    """One exchange: first and last data packet, payload bytes the host sent and received."""

    t0: float
    t1: float
    sent: int
    recv: int

    @property
    def bytes(self) -> int:
        """Payload both ways."""
        return self.sent + self.recv


@dataclass(frozen=True)
class RhythmStep:
    """One step as the traffic shows it."""

    step: int
    t_start: float
    t_end: float
    compute_s: float  # the quiet gap before the burst
    comm_s: float  # the burst
    bytes_sent: int
    bytes_recv: int


def step_gap(gaps: np.ndarray) -> float | None:
    """The shortest gap that ends a step, from the gaps themselves: sorted longest first, the gaps
    above the largest ratio between neighbours are the compute pauses (at least two of them where
    there are; one when one pause is far longer than any other), never shorter than MIN_STEP_GAP_S.
    None: no gap is (the traffic is one burst)."""
    order = np.sort(gaps)[::-1]
    n_long = int((order >= MIN_STEP_GAP_S).sum())
    if n_long == 0:
        return None
    if n_long == len(order):
        return float(order[-1])
    ratios = order[:n_long] / np.maximum(order[1 : n_long + 1], 1e-9)
    k = int(np.argmax(ratios[1:]) + 1) if len(ratios) > 1 else 0
    if ratios[0] > 4 * ratios[k]:
        k = 0
    return float(order[k])


def find_bursts(ts: np.ndarray, plen: np.ndarray, outgoing: np.ndarray) -> list[Burst]:
    """Bursts of data packets (ts sorted), split at every idle over LONG_IDLE_S (start-up, a stall)
    and at the compute pauses the gaps in between show (step_gap)."""
    if len(ts) == 0:
        return []
    gaps = np.diff(ts)
    idle = gaps >= LONG_IDLE_S
    gap = step_gap(gaps[~idle]) if (~idle).any() else None
    cut = idle | (gaps >= gap) if gap is not None else idle
    return cut_bursts(ts, plen, outgoing, [int(i) + 1 for i in np.nonzero(cut)[0]])


def steps_from_bursts(found: list[Burst]) -> list[RhythmStep]:
    """Steps from the bursts (small ones dropped): step k ends with burst k, k >= 1."""
    if not found:
        return []
    median = statistics.median(b.bytes for b in found)
    big = [b for b in found if b.bytes >= SMALL_BURST_SHARE * median]
    out = []
    for k in range(1, len(big)):
        prev, cur = big[k - 1], big[k]
        out.append(
            RhythmStep(k, prev.t1, cur.t1, max(0.0, cur.t0 - prev.t1), cur.t1 - cur.t0, cur.sent, cur.recv)
        )
    return out


def data_packets(path: Path, host_ip: str) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """(times, payload bytes, sent by the host) of the data packets in one host's capture, by time."""
    try:
        pk = read_pcap(path, allow_truncated=True, require_tcp=False)
    except Exception:  # noqa: BLE001 - a missing or broken capture gives no steps
        return None
    ip = str_to_ip(host_ip)
    mine = (pk.plen > 0) & ((pk.src == ip) | (pk.dst == ip))
    if not mine.any():
        return None
    ts = pk.ts[mine]
    order = np.argsort(ts, kind="stable")
    return ts[order], pk.plen[mine][order], (pk.src[mine] == ip)[order]


def steps_from_pcap(path: Path, host_ip: str) -> list[RhythmStep]:
    """The steps of one worker from its own capture alone ([] when it has no data packets)."""
    pk = data_packets(path, host_ip)
    return steps_from_bursts(find_bursts(*pk)) if pk is not None else []


def cut_bursts(ts: np.ndarray, plen: np.ndarray, outgoing: np.ndarray, cuts: list[int]) -> list[Burst]:
    """The bursts between the cuts (indices of the first packet of each burst but the first)."""
    out = []
    for lo, hi in zip([0, *cuts], [*cuts, len(ts)], strict=True):
        sent = int(plen[lo:hi][outgoing[lo:hi]].sum())
        out.append(Burst(float(ts[lo]), float(ts[hi - 1]), sent, int(plen[lo:hi].sum()) - sent))
    return out


def periodic_bursts(ts: np.ndarray, plen: np.ndarray, outgoing: np.ndarray, n_steps: int) -> list[Burst]:
    """Bursts when the job is known to take `n_steps` steps: in the longest stretch between idles, its
    longest gaps, each at least half a period (the stretch's span / n_steps) from those taken before, are
    taken one by one until the bursts make n_steps steps (a gap before a small burst makes none)."""
    gaps = np.diff(ts)
    idle = [int(i) + 1 for i in np.nonzero(gaps >= LONG_IDLE_S)[0]]
    edges = [0, *idle, len(ts)]
    a, b = max(zip(edges[:-1], edges[1:], strict=True), key=lambda ab: ts[ab[1] - 1] - ts[ab[0]])
    per = (ts[b - 1] - ts[a]) / max(1, n_steps)
    chosen: list[int] = []
    found = cut_bursts(ts, plen, outgoing, idle)
    for i in (np.argsort(gaps[a : b - 1])[::-1] + a) if b - a > 1 else []:
        if len(steps_from_bursts(found)) >= n_steps or gaps[i] < MIN_STEP_GAP_S:
            break
        if all(abs(ts[i] - ts[j]) >= 0.5 * per for j in chosen):
            chosen.append(int(i))
            found = cut_bursts(ts, plen, outgoing, sorted(set(idle) | {j + 1 for j in chosen}))
    return found


def line_times(said: list[tuple[int, float]], n: int) -> list[float] | None:
    """When the lines `step 1..n` (or 0..n-1) were read, when the script printed exactly those, one a
    step, in order and at distinct moments; None otherwise (its stdout came in blocks, or another count)."""
    times = [t for _, t in said]
    if n < 1 or len(said) != n or not counts_steps([k for k, _ in said]):
        return None
    if any(b <= a for a, b in zip(times, times[1:], strict=False)):
        return None
    return times


def steps_at_lines(
    ts: np.ndarray, plen: np.ndarray, outgoing: np.ndarray, times: list[float]
) -> list[RhythmStep] | None:
    """A worker's steps when its script printed a line at the end of each (times: when each was read).

    Step k ends with the last data packet the worker received before line k was read: the script
    prints once its step's exchange is done, and the line reaches us within milliseconds. Its
    pauses cannot say this: DDP sends a step's first buckets while backward still runs and a ring
    neighbour ahead of it sends early, so the pause between two steps is often broken, and an
    exchange can pause longer inside.
    Step 1 starts at first_pause; compute_s is a step's longest pause, comm_s the rest. None when a
    line has no received packet before it that the previous line had not (the traffic does not fit)."""
    if len(ts) < 2 or not times:
        return None
    received = np.nonzero(~outgoing)[0]
    at = np.searchsorted(ts[received], np.asarray(times), side="right") - 1
    if at[0] < 0:
        return None
    cuts = [int(i) for i in received[at]]
    if any(b <= a for a, b in zip(cuts, cuts[1:], strict=False)) or cuts[0] == 0:
        return None
    gaps = np.diff(ts)
    first = first_pause(gaps, plen, cuts)
    if first is None:
        return None
    out = []
    for k, (a, b) in enumerate(zip([first, *cuts[:-1]], cuts, strict=True), start=1):
        part = slice(a + 1, b + 1)  # step k's packets: after packet a, up to packet b
        sent = int(plen[part][outgoing[part]].sum())
        pause = float(gaps[a:b].max())
        out.append(
            RhythmStep(
                k,
                float(ts[a]),
                float(ts[b]),
                pause,
                float(ts[b] - ts[a]) - pause,
                sent,
                int(plen[part].sum()) - sent,
            )
        )
    return out


def first_pause(gaps: np.ndarray, plen: np.ndarray, cuts: list[int]) -> int | None:
    """Where step 1 starts, given where every step ends (`cuts`, gap indices): of the pauses before its
    end, after the last idle (LONG_IDLE_S), the one that leaves step 1 the bytes the other steps
    carried (median; every step of a synchronous job moves the same gradient), the longer of two
    equal; with one step, the last idle or else the longest pause. None: no pause before it."""
    lo = np.nonzero(gaps[: cuts[0]] >= LONG_IDLE_S)[0]
    cand = np.nonzero(gaps[: cuts[0]] >= MIN_STEP_GAP_S)[0]
    cand = cand[cand >= lo[-1]] if lo.size else cand
    if not cand.size:
        return None
    if len(cuts) < 2:
        return int(lo[-1]) if lo.size else int(cand[np.argmax(gaps[cand])])
    csum = np.concatenate([[0], np.cumsum(plen)])  # csum[i]: bytes of packets before i
    typical = statistics.median(int(csum[b + 1] - csum[a + 1]) for a, b in zip(cuts, cuts[1:], strict=False))
    miss = np.abs((csum[cuts[0] + 1] - csum[cand + 1]) - typical)
    best = cand[miss == miss.min()]
    return int(best[np.argmax(gaps[best])])


def steps_from_output(text: str) -> int | None:
    """How many steps a script said it took: its lines `step K ...` when K counts up by one from 0 or 1
    (one line a step, as the shipped DDP example prints); None when it prints no such count."""
    ks = [int(m.group(1)) for line in text.splitlines() if (m := STEP_RE.search(line))]
    return len(ks) if counts_steps(ks) else None


def counts_steps(ks: list[int]) -> bool:
    """The step numbers a script printed count up by one from 0 or 1 (one line a step)."""
    return bool(ks) and ks[0] in (0, 1) and all(b == a + 1 for a, b in zip(ks, ks[1:], strict=False))


def steps_of_job(
    captures: list[tuple[Path, str]],
    n_steps: int | None = None,
    step_lines: list[list[tuple[int, float]]] | None = None,
) -> list[list[RhythmStep]]:
    """Every worker's steps of one synchronous job, from each worker's own capture (path, its IP).

    Every worker takes the same steps, so their number is the median of what each capture shows on
    its own (steps_from_pcap); each worker's steps are then the bursts between that many of its
    longest pauses, one per period (periodic_bursts), so a capture whose pauses are less clear than
    the others' is read with what the others show. `n_steps`, when the script said how many steps it
    took (steps_from_output), is that number: the traffic then gives only each step's times, cut at
    the moments each worker's lines were read (`step_lines`: per capture, (K, when) of each `step K`
    line) where they fit (steps_at_lines)."""
    packets = [data_packets(path, ip) for path, ip in captures]
    alone = [len(steps_from_bursts(find_bursts(*pk))) for pk in packets if pk is not None]
    if not alone:
        return [[] for _ in captures]
    n = n_steps or int(round(statistics.median(alone)))
    said = step_lines or [[] for _ in captures]
    steps, by_lines = [], []
    for pk, lines in zip(packets, said, strict=True):
        times = line_times(lines, n) if n_steps else None
        at_lines = steps_at_lines(*pk, times) if pk is not None and times else None
        by_lines.append(at_lines is not None)
        steps.append(
            at_lines
            if at_lines is not None
            else steps_from_bursts(periodic_bursts(*pk, n))
            if pk is not None and n
            else []
        )
    if all(by_lines):
        return steps
    return agreed_steps(steps, packets, n, keep=by_lines)


Series = tuple[np.ndarray, np.ndarray, np.ndarray]  # a worker's data packets: (times, bytes, sent by it)


def agreed_steps(
    steps: list[list[RhythmStep]], packets: list[Series | None], n: int, keep: list[bool] | None = None
) -> list[list[RhythmStep]]:
    """The workers' steps, a minority whose step boundaries stray from the others' re-cut there.

    A synchronous job's workers all end a step together (within the ring's skew), so where most
    of them agree on the times between steps (the median over the workers, per boundary), a
    worker whose boundary lies more than a quarter period away is cut at its own longest pause
    within that quarter period of each agreed boundary instead (a timeout stall inside a step can
    look like a step boundary on one worker). Kept unchanged when fewer than three workers agree,
    or when the re-cut does not give n steps. `keep[i]`: worker i's steps were cut at its own step
    lines, truer than any pause: counted in the agreement, never re-cut."""
    full = [s for s in steps if len(s) == n and n > 1]
    if len(full) < 3:
        return steps
    agreed = [
        statistics.median(s[0].t_start for s in full),
        *(statistics.median(s[k].t_end for s in full) for k in range(n - 1)),
    ]
    tol = 0.25 * statistics.median(np.diff(agreed)) if n > 2 else 0.25 * (agreed[1] - agreed[0])
    out = []
    kept = keep or [False] * len(steps)
    for mine, pk, fixed in zip(steps, packets, kept, strict=True):
        own = [mine[0].t_start, *(st.t_end for st in mine[:-1])] if len(mine) == n else []
        if pk is None or fixed or (own and all(abs(a - b) <= tol for a, b in zip(own, agreed, strict=True))):
            out.append(mine)
            continue
        ts, plen, outgoing = pk
        gaps = np.diff(ts)
        cuts = {int(i) + 1 for i in np.nonzero(gaps >= LONG_IDLE_S)[0]}
        for c in agreed:
            near = np.nonzero((gaps >= MIN_STEP_GAP_S) & (np.abs(ts[:-1] - c) <= tol))[0]
            if near.size:
                cuts.add(int(near[np.argmax(gaps[near])]) + 1)
        recut = steps_from_bursts(cut_bursts(ts, plen, outgoing, sorted(cuts)))
        out.append(recut if len(recut) == n else mine)
    return out


def losses_from_output(text: str) -> list[float]:
    """The losses a training script printed, in order (lines with `loss <number>`)."""
    out = []
    for line in text.splitlines():
        m = LOSS_RE.search(line)
        if m:
            try:
                out.append(float(m.group(1)))
            except ValueError:
                continue
    return out


def loss_for(step: int, losses: list[float]) -> float | None:
    """The loss of step k (1-based) when the script printed one a step; None when it printed none
    (e.g. a DDP script that prints on rank 0 only) or one that is not finite."""
    loss = losses[step - 1] if 0 < step <= len(losses) else None
    return loss if loss is not None and math.isfinite(loss) else None
