"""Moving in and out: importers from a single-row table, from LangGraph's PostgresSaver
tables and from JSONL exports, and the JSONL exporter (docs/importers.md).

Each is a store method (``store.import_single_row``, ``store.import_langgraph``,
``store.import_jsonl``, ``store.export_sessions``) and a CLI command (``shardstore import
single-row|langgraph|jsonl``, ``shardstore export``). Every importer writes a session in
one transaction and resumes after the turns a session already holds."""

from .report import ExportReport, ImportReport, Skipped

__all__ = ["ExportReport", "ImportReport", "Skipped"]
