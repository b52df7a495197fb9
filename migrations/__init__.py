"""The schema's versioned part, installed as the package ``shardstore.migrations`` (setup.py
maps it onto this folder): ``baseline/`` (the squashed schema a fresh database gets),
``legacy/NNNN_<feature>.sql`` (the historical migrations, kept only to upgrade databases
created before the baseline) and ``NNNN_<feature>.sql`` after them (what must run once:
tables, columns, indexes, data moves, DROPs; never a function). Never edit an applied file:
databases record each file's sha256. Functions live in
``shardstore/<feature>/sql/functions/``. The runner is :mod:`shardstore.schema.migrate`;
docs/architecture.md, "The SQL layer", says more."""
