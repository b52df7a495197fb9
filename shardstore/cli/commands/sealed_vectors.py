"""``shardstore sealed-vectors [--on | --off]``: whether encrypted turns get vectors."""

from __future__ import annotations

from ..app import Runner
from ..declare import command, flag, one_of


@command(
    "sealed-vectors",
    "show or switch vectors of encrypted turns (off: none stored, search ranks by text)",
    one_of(
        flag(
            "--on", help="embed encrypted turns again (those skipped are queued for the next embed)"
        ),
        flag("--off", help="delete every vector of an encrypted turn and embed none from now on"),
    ),
)
def cmd_sealed_vectors(run: Runner) -> int:
    """Print whether turns sealed under encryption at rest get vectors (``on`` or ``off``);
    with ``--on`` or ``--off`` switch it first (off deletes their vectors in one transaction,
    on queues them for the next ``embed``) and say how much it changed; 0 on success."""
    args = run.args
    with run.connect() as store:
        changed = None
        if args.on or args.off:
            changed = store.configure_sealed_vectors(bool(args.on))
        on = store.sealed_vectors()
    if run.json:
        run.emit({"sealed_vectors": on, "changed": changed})
    elif changed is None:
        run.line(f"vectors of encrypted turns: {'on' if on else 'off'}")
    elif on:
        run.line(f"vectors of encrypted turns: on ({changed} chunks or sessions queued for embed)")
    else:
        run.line(
            f"vectors of encrypted turns: off ({changed} vectors deleted; vector and hybrid "
            "search of encrypted sessions rank by text; VACUUM returns the space)"
        )
    return 0


COMMANDS = (cmd_sealed_vectors,)
