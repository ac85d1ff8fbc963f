"""The run model: every parameter and every record of an incastlab run, as typed dataclasses.

The bottom of the import graph. Every stage (topologies -> controller -> workloads -> capture ->
analysis -> report, and the command line on top) reads and writes a run through these types, and
this package imports none of them, so the code that writes a file and the code that reads it agree
by construction. Each parameter is declared once, as a dataclass field whose metadata also makes
its command-line flag (runmodel.params).
"""

SCHEMA = 4  # version of config.json and summary.json (1: unversioned; 2: the run model; 3: bounds,
# hottest PS port, CPU over the training window; 4: config.json's provenance, p10/p90 of step times)
