"""Split an SQL script into its statements, as psql does before sending them.

The migrator sends a migration one statement at a time, because Citus forwards the whole
query string of some DDL on a distributed table (``DROP INDEX``, ``ALTER TABLE ... TYPE``,
``CREATE INDEX``) to its workers, which refuse a string holding more than one command
("cannot insert multiple commands into a prepared statement", citusdata/citus#6608).

The rules are psqlscan.l's: a ``;`` ends a statement unless it is inside a ``--`` or
(nested) ``/* */`` comment, a ``'...'`` or ``E'...'`` string, a ``"..."`` identifier, a
``$tag$...$tag$`` body, parentheses, or an SQL-standard ``BEGIN ATOMIC ... END`` body (a
``BEGIN`` or ``CASE`` that is not a statement's first word opens a level, ``END`` closes
one).
"""

from __future__ import annotations

import re

_WORD = re.compile(r"[^\W\d][\w$]*")  # an unquoted identifier or keyword (any letters)
_DOLLAR = re.compile(r"\$([^\W\d]\w*)?\$")


def split_statements(script: str) -> list[str]:
    """The statements of ``script`` in order, each with the text (comments, whitespace)
    before it and its terminating ``;``; code after the last ``;`` is a last statement, and
    comments and whitespace after it go with the statement before. Joined together, the
    pieces are the script (a script of only comments and whitespace has none)."""
    pieces: list[str] = []
    start = 0
    i = 0
    n = len(script)
    depth = 0  # BEGIN ATOMIC / CASE nesting
    parens = 0
    words = 0  # words seen in the current statement
    has_code = False
    while i < n:
        c = script[i]
        if c == "-" and script.startswith("--", i):
            end = script.find("\n", i)
            i = n if end < 0 else end + 1
            continue
        if c == "/" and script.startswith("/*", i):
            i = _skip_block_comment(script, i)
            continue
        has_code = has_code or not c.isspace()
        if c == "'":
            escapes = i > 0 and script[i - 1] in "eE" and not _is_word_char(script, i - 2)
            i = _skip_quoted(script, i, "'", escapes)
            continue
        if c == '"':
            i = _skip_quoted(script, i, '"', False)
            continue
        if c == "$" and not _is_word_char(script, i - 1):
            tag = _DOLLAR.match(script, i)
            if tag is not None:
                close = script.find(tag.group(0), tag.end())
                i = n if close < 0 else close + len(tag.group(0))
                continue
        if c == "(":
            parens += 1
        elif c == ")":
            parens = max(0, parens - 1)
        elif c == ";" and depth == 0 and parens == 0:
            pieces.append(script[start : i + 1])
            start = i + 1
            i += 1
            words = 0
            has_code = False
            continue
        if c.isalpha() or c == "_":
            word = _WORD.match(script, i)
            assert word is not None
            words += 1
            lowered = word.group(0).lower()
            if lowered in ("begin", "case") and words > 1:
                depth += 1
            elif lowered == "end" and depth > 0:
                depth -= 1
            i = word.end()
            continue
        i += 1
    if has_code:
        pieces.append(script[start:])
    elif pieces:
        pieces[-1] += script[start:]
    return pieces


def _is_word_char(script: str, i: int) -> bool:
    return i >= 0 and (script[i].isalnum() or script[i] in "_$")


def _skip_block_comment(script: str, i: int) -> int:
    depth = 0
    n = len(script)
    while i < n:
        if script.startswith("/*", i):
            depth += 1
            i += 2
        elif script.startswith("*/", i):
            depth -= 1
            i += 2
            if depth == 0:
                return i
        else:
            i += 1
    return n


def _skip_quoted(script: str, i: int, quote: str, backslash_escapes: bool) -> int:
    """The index after the quoted text opening at ``i`` (a doubled quote is one quote)."""
    i += 1
    n = len(script)
    while i < n:
        c = script[i]
        if backslash_escapes and c == "\\":
            i += 2
            continue
        if c == quote:
            if script.startswith(quote, i + 1):
                i += 2
                continue
            return i + 1
        i += 1
    return n
