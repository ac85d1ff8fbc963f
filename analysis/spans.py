"""Time spans [start, end] in seconds: union and intersection, for the idle-while-timed-out figures."""

from __future__ import annotations

Span = tuple[float, float]


def merge(spans: list[Span]) -> list[Span]:
    """Overlapping [a, b] spans merged, in order."""
    out: list[Span] = []
    for a, b in sorted(spans):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def overlap_s(a: list[Span], b: list[Span]) -> float:
    """Length of the intersection of two unions of spans."""
    ma, mb = merge(a), merge(b)
    i = j = 0
    total = 0.0
    while i < len(ma) and j < len(mb):
        lo, hi = max(ma[i][0], mb[j][0]), min(ma[i][1], mb[j][1])
        total += max(0.0, hi - lo)
        if ma[i][1] < mb[j][1]:
            i += 1
        else:
            j += 1
    return total
