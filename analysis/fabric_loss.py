"""Drops inside the fabric: data segments a sender-side capture saw that a receiver-side capture
never saw.

Segments are matched by (flow direction, seq, payload length, occurrence): the k-th copy of a
segment at the sender matches the k-th copy at the receiver, so a retransmission that got through
does not hide the loss of the original. Only flow directions present in the receiver capture are
compared (the sender capture may hold traffic to other hosts).
"""

from __future__ import annotations

import numpy as np

from analysis.packets import Packets, ep_to_str


def _segment_keys(p: Packets) -> tuple[np.ndarray, np.ndarray]:
    """(flow key, segment key) of each data segment: flow = 96-bit 4-tuple, segment = seq<<32|len."""
    d = p.plen > 0
    flow = np.stack(
        [
            (p.src[d].astype(np.uint64) << np.uint64(16)) | p.sport[d].astype(np.uint64),
            (p.dst[d].astype(np.uint64) << np.uint64(16)) | p.dport[d].astype(np.uint64),
        ],
        axis=1,
    )
    seg = (p.seq[d].astype(np.uint64) << np.uint64(32)) | p.plen[d].astype(np.uint64)
    return flow, seg


def fabric_drops(sender: Packets, receiver: Packets) -> dict[str, object]:
    """Count segments seen at the sender side and never (as often) at the receiver side.

    Returns {"fabric_drops_pcap": int, "sender_segments": int, "receiver_segments": int,
    "unexpected_at_receiver": int (receiver copies with no sender copy: capture gaps),
    "per_flow": [{"flow": "a:p-b:q", "sent": n, "received": n, "drops": n}]}.
    """
    fs, ss = _segment_keys(sender)
    fr, sr = _segment_keys(receiver)
    allflows, inv = np.unique(np.concatenate([fs, fr]), axis=0, return_inverse=True)
    inv = inv.ravel()
    ids, idr = inv[: fs.shape[0]], inv[fs.shape[0] :]
    common = np.isin(ids, np.unique(idr))
    ids, ss = ids[common], ss[common]
    # count copies of each (flow, segment) on both sides
    keys = np.concatenate(
        [np.stack([ids.astype(np.uint64), ss], 1), np.stack([idr.astype(np.uint64), sr], 1)]
    )
    who = np.concatenate([np.zeros(ids.shape[0], dtype=np.int64), np.ones(idr.shape[0], dtype=np.int64)])
    uk, kinv = np.unique(keys, axis=0, return_inverse=True)
    kinv = kinv.ravel()
    n_s = np.bincount(kinv[who == 0], minlength=uk.shape[0])
    n_r = np.bincount(kinv[who == 1], minlength=uk.shape[0])
    miss = np.maximum(n_s - n_r, 0)
    extra = np.maximum(n_r - n_s, 0)
    flow_of = uk[:, 0].astype(np.int64)
    per_flow = []
    for fid in np.unique(flow_of).tolist():
        sel = flow_of == fid
        a, b = int(allflows[fid, 0]), int(allflows[fid, 1])
        per_flow.append(
            {
                "flow": f"{ep_to_str(a >> 16, a & 0xFFFF)}-{ep_to_str(b >> 16, b & 0xFFFF)}",
                "sent": int(n_s[sel].sum()),
                "received": int(n_r[sel].sum()),
                "drops": int(miss[sel].sum()),
            }
        )
    return {
        "fabric_drops_pcap": int(miss.sum()),
        "sender_segments": int(ids.shape[0]),
        "receiver_segments": int(idr.shape[0]),
        "unexpected_at_receiver": int(extra.sum()),
        "per_flow": per_flow,
    }
