"""History: sessions, appends and reads of the turn log.

* :mod:`.ops`: sessions, ``append_turn``, ``tail``, ``history`` and the rest of the log's
  operations, with the store methods built from them;
* :mod:`.folding`: folding buffered turns into sealed chunks, off the append path;
* :mod:`.tokens`: the token counters the chunker and ``tail(max_tokens=...)`` use;
* :mod:`.pairing`: the tool-call pairing rules a window of turns keeps.

SQL: ``sql/ops.sql``, ``sql/long_reads.sql``, the append/fold/tail functions in
``sql/functions/`` and the ``turns`` view in ``sql/views/``.
"""
