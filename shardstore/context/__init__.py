"""Context: what a model call gets of a session.

* :mod:`.assembly`: ``store.context``, the view of a session within an exact token budget;
* :mod:`.summaries`: chunk summaries made by the user's model, and their listing.

SQL: ``sql/assembly.sql``, ``sql/summaries.sql`` and their functions in ``sql/functions/``.
"""
