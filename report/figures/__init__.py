"""The report's figures, drawn with matplotlib's Agg canvas, one module per job of the page.

Each function takes the prepared data (report/series.py, or figures of summary.json) and returns a
matplotlib Figure whose axes say what they show: a title, axis labels with units and a legend, so a
figure can be read without the text around it.

    base.py        canvas, to_png, colours, marks, gaps, reference lines: what every figure uses
    timing.py      iteration time per step, the split of communication time
    queues.py      queue backlog, drops, retransmissions and timeouts over time
    traffic.py     goodput, per-receiver and per-flow heatmaps, link utilisation, bytes per link
    fidelity.py    departure-gap CDF, CPU over time
    stragglers.py  compute share, staleness, loss
    incast.py      the incast sweep's curve and one collapsed round
"""
