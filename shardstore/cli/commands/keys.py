"""``shardstore keys``: key rotation for encryption at rest. The key store is the global
one (``--key-store PATH`` / ``$SHARDSTORE_KEY_STORE``, its KEK ``--kek-file`` /
``$SHARDSTORE_KEK_FILE``).

    shardstore --key-store P [--kek-file OLD] keys rotate-kek --new-key-file F
    shardstore --key-store P keys rotate (--tenant T --subject S | --session ID) [--batch-size N]

``rotate-kek`` rewraps every data key of the key store under the key-encryption key in F
(created if absent) and rewrites no database row (it needs no database); after a crash, run
it again with the same files: it finishes. Use F as ``--kek-file`` from then on. ``rotate``
gives one subject (or one session without a subject) a new data key, re-seals its values
under it while the store stays in use, and shreds the old key.
"""

from __future__ import annotations

from ...encryption import LocalKeyProvider
from ...encryption.rotation import DEFAULT_BATCH_SIZE, MAX_BATCH_SIZE
from ...errors import ConfigurationError
from ..app import Runner
from ..args import UsageError, positive_int
from ..declare import arg, command, form, one_of
from ..output import num, printable


def _key_store(run: Runner) -> LocalKeyProvider:
    keys = run.encryption()
    if keys is None:
        raise ConfigurationError(
            "keys needs the key store: --key-store PATH (or $SHARDSTORE_KEY_STORE)"
        )
    assert isinstance(keys, LocalKeyProvider)
    return keys


#: ``keys``'s forms; :func:`cmd_keys` runs the one named.
KEYS_FORMS = (
    form(
        "rotate-kek",
        "rewrap every data key under a new key-encryption key (no database row changes)",
        arg(
            "--new-key-file",
            metavar="PATH",
            required=True,
            help="the new key-encryption key (a new random one is written there if absent)",
        ),
    ),
    form(
        "rotate",
        "a new data key for a subject or a session without one: its values re-sealed, "
        "the old key shredded",
        arg("--tenant", help="the subject's tenant (with --subject)"),
        one_of(
            arg("--subject", help="the data subject whose key to rotate"),
            arg("--session", metavar="ID", help="a session without a subject"),
            required=True,
        ),
        arg(
            "--batch-size",
            type=positive_int,
            default=DEFAULT_BATCH_SIZE,
            metavar="N",
            help=f"values re-sealed per transaction (default {DEFAULT_BATCH_SIZE}, "
            f"at most {MAX_BATCH_SIZE})",
        ),
    ),
)


@command(
    "keys",
    "encryption at rest: rotate the key-encryption key or a data key",
    subcommands=KEYS_FORMS,
    dest="keys_action",
)
def cmd_keys(run: Runner) -> int:
    """Run one form and print what it did; 0 when it ran."""
    args = run.args
    if args.keys_action == "rotate-kek":
        report = _key_store(run).rotate_kek(args.new_key_file)
        run.record(
            report.to_dict(),
            [
                ("rewrapped", f"{num(report.rewrapped)} data keys"),
                ("already", f"{num(report.already)} under the new key (an earlier run)"),
                ("kek", report.kek),
            ],
        )
        return 0
    if args.subject is not None and not args.tenant:
        raise UsageError("keys rotate --subject needs --tenant")
    if args.session is not None and args.tenant:
        raise UsageError("keys rotate --session takes no --tenant (the session names it)")
    keys = _key_store(run)
    with run.connect(encryption=keys) as store:
        if args.subject is not None:
            result = store.rotate_data_key(
                tenant_id=args.tenant, subject_id=args.subject, batch_size=args.batch_size
            )
        else:
            result = store.rotate_data_key(session_id=args.session, batch_size=args.batch_size)
    resealed = ", ".join(f"{num(n)} {kind}" for kind, n in result.resealed.items())
    run.record(
        result.to_dict(),
        [
            (
                "rotated",
                f"{result.scope} {printable(result.name)!r} of tenant "
                f"{printable(result.tenant_id)!r}",
            ),
            ("new key", result.new_key or "none: no data key to rotate"),
            ("re-sealed", resealed),
            ("shredded", ", ".join(result.shredded_keys) or "none"),
            ("sessions", num(result.sessions)),
        ],
    )
    return 0


COMMANDS = (cmd_keys,)
