"""The machinery every feature shares: the step protocol, the one executor, connections,
argument validation, rows by name and the bindings that make store methods of operations.
Nothing here knows about a feature; features import from here, never the other way."""
