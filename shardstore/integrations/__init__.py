"""Adapters that put shardstore under the agent frameworks people already run.

Each adapter lives in its own module behind an optional extra and imports its framework
only there; importing this package imports no framework.
"""
