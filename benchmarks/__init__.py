"""shardstore's benchmark suite: ``python -m benchmarks --list`` (see benchmarks/README.md).

Not part of the installed package and not part of the test run; the suites import
:mod:`benchmarks.lib`, never one another.
"""
