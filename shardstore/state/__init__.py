"""Agent state beside the history.

* :mod:`.checkpoints`: checkpoints and ``restore`` after a crash;
* :mod:`.fork`: a new session sharing another's turns 0..N (copy on write);
* :mod:`.rewind`: take a session back to an earlier turn;
* :mod:`.runs`: the shadow record of each agent run in flight;
* :mod:`.facts`: durable facts about a subject, with provenance.

SQL: one statements file per module in ``sql/`` and their functions in ``sql/functions/``.
"""
