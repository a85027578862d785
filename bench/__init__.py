"""opledger benchmarks: one runner (``python -m bench``), one module per scenario.

Not part of the distribution; a bench-only dependency group (``pip install -e '.[bench]'``)
brings Procrastinate (the baseline), pyinstrument (profiles) and psutil (memory).
Results and the method are in ``docs/performance.md``.
"""
