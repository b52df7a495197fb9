"""The ``shardstore`` subcommands, one module per feature.

Each module has ``register(commands: shardstore.cli.app.Commands)`` and imports only the
shared helpers (:mod:`shardstore.cli.app`, :mod:`~shardstore.cli.output`,
:mod:`~shardstore.cli.args`), never another command module.
"""
