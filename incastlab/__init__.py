"""incastlab: the command line (incastlab.cli) and, for scripts, the reader of a run folder:

from incastlab import load_run
run = load_run("results/latest")  # config, provenance, summary, per-strategy records
"""

from runmodel.run import Run, StrategyRecords, load_run

__all__ = ["Run", "StrategyRecords", "load_run"]
