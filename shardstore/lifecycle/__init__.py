"""Lifecycle: what operators run on the data over time.

* :mod:`.maintenance`: partition maintenance (the :mod:`partition_manager` library configured
  for shardstore) plus shardstore's own work in a run: folds, embeddings, retention;
* :mod:`.purge`: GDPR erasure of a session, a subject, a tenant, a session's oldest turns or
  everything older than a point in time.

SQL: ``sql/maintenance.sql``, ``sql/purge.sql``, ``run_maintenance`` and the ``maint_*`` /
``purge_*`` functions in ``sql/functions/``, the ``purge_targets`` view in ``sql/views/``.
"""
