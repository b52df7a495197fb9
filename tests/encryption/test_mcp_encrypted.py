"""``shardstore --key-store P mcp``: the MCP server reads an encrypted tenant's turns and
facts with the key store named for every command, and without it refuses them with a tool
error instead of returning ciphertext (the real MCP client over stdio)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import shardstore

pytest.importorskip("mcp")

from tests.integrations.test_mcp_server import connected, stdio_opener

TENANT = "mcp-enc"
MARKER = "heron-vault-5512"


@pytest.fixture(scope="module")
def sealed_session(enc_store: shardstore.Store) -> str:
    sid = enc_store.create_session(TENANT, "ines")
    enc_store.append_turns(
        sid,
        [
            {"role": "user", "content": f"remember {MARKER}"},
            {"role": "assistant", "content": "noted"},
        ],
    )
    enc_store.remember(TENANT, "ines", "code", MARKER, source=(sid, 0))
    return str(sid)


def test_the_key_store_opens_turns_and_facts(
    module_dsn: str, key_dir: Path, sealed_session: str
) -> None:
    keys = ["--key-store", str(key_dir / "store"), "--kek-file", str(key_dir / "kek")]
    with connected(stdio_opener(module_dsn, "--tenant", TENANT, *keys)) as client:
        page: dict[str, Any] = client.ok("tail", session_id=sealed_session, n=2)
        assert [t["message"]["content"] for t in page["turns"]] == [f"remember {MARKER}", "noted"]
        facts = client.ok("recall_facts", subject="ines")
        assert MARKER in str(facts)
    with connected(stdio_opener(module_dsn, "--tenant", TENANT)) as client:
        error = client.error("tail", session_id=sealed_session, n=2)
        assert "encrypt" in error and MARKER not in error
