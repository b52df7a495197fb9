"""``shardstore text-search [--language L | --off]``: full-text indexing, shown or switched."""

from __future__ import annotations

from ..app import Runner
from ..declare import arg, command, flag, one_of


@command(
    "text-search",
    "show or switch full-text indexing (its language, or off to save its disk)",
    one_of(
        arg(
            "--language",
            metavar="CONFIG",
            help="a PostgreSQL text search configuration (english, german, simple...): "
            "switch to it and reindex every folded turn",
        ),
        flag(
            "--off",
            help="stop indexing turns for text search and delete the index "
            "(search --mode text then fails; hybrid ranks by vectors alone)",
        ),
    ),
)
def cmd_text_search(run: Runner) -> int:
    """Print the text search language (or ``off``); with ``--language`` or ``--off`` switch
    it first (rebuilding or deleting the index in one transaction) and say how many text
    windows were written; 0 on success."""
    args = run.args
    with run.connect() as store:
        written = None
        if args.off or args.language is not None:
            written = store.configure_text_search(None if args.off else args.language)
        language = store.text_search_language()
    if run.json:
        run.emit({"language": language, "windows_written": written})
    elif written is None:
        run.line(f"text search: {language or 'off'}")
    elif language is None:
        run.line("text search: off (every text window deleted; VACUUM returns the space)")
    else:
        run.line(f"text search: {language} ({written} text windows written)")
    return 0


COMMANDS = (cmd_text_search,)
