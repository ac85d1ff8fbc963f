"""`make bench`: the collective benchmark on the fabric, then the analysis throughput benchmark."""

from __future__ import annotations

import sys

from bench import bench_analysis, collectives


def main(argv: list[str]) -> int:
    """Run both benchmarks; their results land in results/bench.json and results/bench_analysis.json."""
    code = collectives.main(argv)
    print()
    return code or bench_analysis.main([])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
