"""The ``shardstore`` subcommands, one module per feature.

Each module declares its commands with :mod:`shardstore.cli.declare` and lists them in
``COMMANDS``; it imports only the shared helpers (:mod:`shardstore.cli.app`,
:mod:`~shardstore.cli.declare`, :mod:`~shardstore.cli.output`, :mod:`~shardstore.cli.args`),
never another command module.
"""
