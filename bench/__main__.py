"""`make bench`: the collective benchmark on the fabric, then the analysis throughput benchmark, both
into the bench's own run folder, results/<YYYYmmdd-HHMMSS>-bench/ (bench.json, bench_analysis.json)."""

from __future__ import annotations

import sys

from bench import bench_analysis, collectives


def main(argv: list[str]) -> int:
    """Run both benchmarks into one new run folder; print its path last (a script reads that line)."""
    code, folder = collectives.run_bench(argv)
    if folder is None:
        return code
    print()
    code = code or bench_analysis.main(["--out", str(folder / collectives.ANALYSIS_FILE)])
    print(f"bench run folder: {folder}")
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
