"""One-off probes, each answering one question (probes/README.md); run
``python -m benchmarks.probes.NAME``."""
