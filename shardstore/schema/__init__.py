"""The schema and what shapes it.

* :mod:`.migrate`: the migrator: baseline, versioned migrations and the function and view
  files of every feature (:mod:`shardstore.core.sql` says where they are);
* :mod:`.sqlsplit`: splitting an SQL script into statements, as psql does;
* :mod:`.rls`: tenant isolation with Row-Level Security and the session-table registry;
* :mod:`.distribute`: scale-out on Citus.

SQL: ``sql/rls.sql``, ``sql/distribute.sql`` and the ``rls_*`` / ``citus_*`` /
``register_*`` functions in ``sql/functions/``.
"""
