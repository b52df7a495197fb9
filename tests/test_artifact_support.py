"""The old name of tests/artifacts/support.py, kept only for benchmarks/suites/artifacts.py
(``from tests.test_artifact_support import s3_url``); no tests here."""

from tests.artifacts.support import s3_url

__all__ = ["s3_url"]
