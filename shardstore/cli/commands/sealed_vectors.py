"""``shardstore sealed-vectors [--on | --off]``: whether encrypted turns get vectors."""

from __future__ import annotations

from ..app import Commands, Runner


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


def register(commands: Commands) -> None:
    """Add ``sealed-vectors``."""
    p = commands.add(
        "sealed-vectors",
        "show or switch vectors of encrypted turns (off: none stored, search ranks by text)",
        cmd_sealed_vectors,
    )
    which = p.add_mutually_exclusive_group()
    which.add_argument(
        "--on",
        action="store_true",
        help="embed encrypted turns again (those skipped are queued for the next embed)",
    )
    which.add_argument(
        "--off",
        action="store_true",
        help="delete every vector of an encrypted turn and embed none from now on",
    )
