"""The suites of ``python -m benchmarks``, one module each (registered in
``benchmarks/__main__.py``)."""
