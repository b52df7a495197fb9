"""One error tree: everything shardstore raises derives from :class:`ShardstoreError`.

Driver errors are translated at a single boundary (:func:`shardstore.core.executor.translate`),
so callers never need to catch psycopg exceptions.
"""

from __future__ import annotations

from typing import Any


class ShardstoreError(Exception):
    """Base of every error raised by shardstore.

    ``retryable`` says whether the same call may succeed if simply repeated (appends are
    safe to repeat when they carry an idempotency key).

    ``cli_message``: the message in the command line's terms (its flags and commands where
    the message names a Python argument or method), given as ``cli=`` by the code that
    raises it; None when the message is the same in both. ``str(error)`` is always the
    Python wording; the CLI prints :func:`cli_text`.
    """

    retryable: bool = False
    cli_message: str | None = None

    def __init__(self, *args: object, cli: str | None = None) -> None:
        super().__init__(*args)
        if cli is not None:
            self.cli_message = cli


class InvalidInput(ShardstoreError, ValueError):
    """An argument was rejected before anything was written."""


class InvalidMessage(InvalidInput):
    """A message is not a JSON object with a string ``role`` that shardstore can store exactly."""


class TurnTooLarge(InvalidInput):
    """A single message exceeds the per-turn byte cap (``max_turn_bytes``)."""


class SessionNotFound(ShardstoreError, LookupError):
    """The session does not exist; create it with ``create_session()`` first."""


class SessionPurged(ShardstoreError):
    """The session was purged; its id is tombstoned and can never be written again."""


class SessionConflict(ShardstoreError):
    """``create_session`` was given an existing session id with different owners."""


class ConfigurationError(ShardstoreError):
    """The store's settings are invalid or disagree with the settings recorded in the database."""


class ConnectionRejected(ConfigurationError):
    """The connection settings themselves are wrong: a malformed DSN or option, a database
    or role the server does not know, failed authentication, no ``pg_hba.conf`` entry.
    Repeating the call cannot succeed (``retryable`` is False, unlike
    :class:`DatabaseUnavailable`); the CLI exits with 8."""


class EmbeddingModelMismatch(ConfigurationError):
    """The database holds vectors of another embedding model (or dimension); vectors of two
    models cannot be compared. ``shardstore reembed --model NAME`` switches models."""


class MissingDependency(ShardstoreError, ImportError):
    """An optional extra is needed for this feature; the message names the pip command."""


class DatabaseUnavailable(ShardstoreError):
    """The database could not be reached or the connection broke mid-call.

    The call may or may not have been applied; repeat it (appends with an idempotency key
    are stored exactly once however often they are repeated).
    """

    retryable = True


class AccessDenied(ShardstoreError, PermissionError):
    """The database role may not do this (privileges, or Row-Level Security scoping the
    connection to another tenant)."""


class Conflict(ShardstoreError):
    """A concurrent transaction conflicted (serialization failure, deadlock); retry the call."""

    retryable = True


class DatabaseError(ShardstoreError):
    """Any other database error; the message carries the server's text and SQLSTATE."""


class RunNotFound(ShardstoreError, LookupError):
    """The run does not exist (or belongs to another tenant, or its session was purged);
    open it with ``open_run()`` first."""


class RunClosed(ShardstoreError):
    """The run is closed (done or failed) and cannot change any more; open a new run."""


class RunConflict(ShardstoreError):
    """``open_run`` was given an existing run id with a different session, framework or
    thread_key."""


class CheckpointNotFound(ShardstoreError, LookupError):
    """The checkpoint does not exist in this session (never written, or removed by a purge,
    retention or ``maintain(keep_checkpoints=...)``); ``checkpoints(session_id)`` lists
    those that do."""


class ArtifactNotFound(ShardstoreError, LookupError):
    """The artifact does not exist in this tenant (never stored, not finished, or deleted by
    a sweep or a purge), or the owner a reference names (a turn, a checkpoint) does not."""


class ArtifactCorrupt(ShardstoreError):
    """The bytes a backend holds do not match the artifact's sha256 and size; nothing that
    names them was written."""


class ImportRejected(InvalidInput):
    """An importer refused source data (a row, a LangGraph thread, a JSONL line) as it is;
    the message names where it is and why. Nothing of the session it belongs to was
    written: each session is imported in one transaction. When it stopped a run, the
    message also says what the run imported before it, and ``report`` (an
    :class:`~shardstore.ImportReport`) holds those counts; otherwise ``report`` is None."""

    report: Any = None


class SessionExists(SessionConflict):
    """An import found the session already in this database and was asked to refuse
    (``on_existing="refuse"``); ``on_existing="skip"`` leaves it as it is and goes on."""


class DecryptionFailed(ShardstoreError):
    """An encrypted value could not be read back: its ciphertext does not authenticate
    (altered, or copied to another row, position, session or tenant), its data key is not
    in the key store, or the key-encryption key cannot unwrap that key. Nothing of the value
    is returned. Repeating the call cannot succeed."""


class KeyShredded(DecryptionFailed):
    """The value's data key was destroyed (``purge_subject(..., shred=True)``): what was
    encrypted under it is unreadable for good, in this database and in every copy of it."""


class EncryptionRequired(DecryptionFailed, ConfigurationError):
    """A store connected without ``encryption=`` read a value that was stored encrypted
    (by a store connected with ``encryption=``): it is refused, never returned sealed.
    Connect with ``encryption=`` and the key store that holds its data key
    (``shardstore.connect(dsn, encryption=LocalKeyProvider(path))``)."""


class PlaintextRefused(DecryptionFailed):
    """A store connected with ``encryption=`` found a plaintext value where a ciphertext
    belongs (written without encryption, or injected); it is refused, never returned."""


def cli_text(error: BaseException) -> str:
    """The message of ``error`` as the command line prints it: its ``cli_message`` when it
    carries one (a :class:`ShardstoreError` raised with ``cli=``), else ``str(error)``."""
    message = getattr(error, "cli_message", None)
    return message if isinstance(message, str) else str(error)
