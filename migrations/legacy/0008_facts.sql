-- 0008: facts, durable memory about a subject with provenance (shardstore/facts.py,
-- docs/architecture.md "Facts").
--
-- A fact is one version of the value of (tenant_id, subject, key): valid from valid_from
-- until valid_to (NULL: still valid). Correcting a fact closes the version valid until then
-- (valid_to = the new version's valid_from) instead of deleting it, so every past belief
-- can be read back (recall as of a time, fact_history). Rules:
--   * per (tenant_id, subject, key) at most one version is valid at any instant. The writers
--     below serialise per key on a transaction advisory lock and never write an overlap; the
--     partial unique index facts_current also refuses a second open version outright
--     (btree_gist, which an exclusion constraint on tstzrange per key would need, is not
--     shipped by the embedded server).
--   * source_session_id / source_turn_seq: the turn the fact came from, or both NULL. A
--     source names an existing turn of a live session of the same tenant; the session row
--     is held FOR KEY SHARE while the fact is written (as purge_guard_v1 does), so a fact
--     either commits before a purge of its session (and is purged with it) or is refused.
--
-- Tenant-scoped, not session-scoped: the key starts with tenant_id (Citus: distributed by
-- tenant_id) and the session column is optional. The table is registered in the session
-- table registry by its source columns, so every purge and retention run that removes a
-- turn removes the facts that came from it, and the RLS policy compares tenant_id directly.
-- 0006's register_session_table_v1 requires a NOT NULL session column; the registry gets a
-- column session_nullable and register_session_table_v2 accepts one when asked to.
-- purge_subject removes all of a subject's facts, sourced or not (facts_purge_subject_v1).
--
-- Writers report refusals in r_status instead of raising, so that the client raises the
-- typed error without a savepoint and nothing is written:
--   'ok', 'no_session' (unknown, or another tenant's), 'purged', 'no_turn' (past the end),
--   'turn_purged' (removed by a range purge or retention), 'too_early' (valid_from not after
--   the newest version's start / end; r_detail holds the bound).

ALTER TABLE shardstore.table_registry ADD COLUMN session_nullable boolean NOT NULL DEFAULT false;

CREATE TABLE shardstore.facts (
    tenant_id         text NOT NULL,
    fact_id           uuid NOT NULL,
    subject           text NOT NULL,
    key               text NOT NULL,
    value             jsonb NOT NULL,
    confidence        double precision
        CHECK (confidence IS NULL OR (confidence >= 0 AND confidence <= 1)),
    source_session_id uuid,
    source_turn_seq   bigint CHECK (source_turn_seq IS NULL OR source_turn_seq >= 0),
    valid_from        timestamptz NOT NULL,
    valid_to          timestamptz,
    recorded_at       timestamptz NOT NULL,
    PRIMARY KEY (tenant_id, fact_id),
    CHECK ((source_session_id IS NULL) = (source_turn_seq IS NULL)),
    CHECK (valid_to IS NULL OR valid_to > valid_from)
);

-- recall (as of a time) and fact_history: one range of this index per key
CREATE INDEX facts_recall ON shardstore.facts (tenant_id, subject, key, valid_from);
-- at most one open version per key, whatever writes the table
CREATE UNIQUE INDEX facts_current ON shardstore.facts (tenant_id, subject, key)
    WHERE valid_to IS NULL;
-- purges and retention delete by source session (and turn)
CREATE INDEX facts_source ON shardstore.facts (source_session_id, source_turn_seq)
    WHERE source_session_id IS NOT NULL;

-- As register_session_table_v1 (0006), with one more argument: session_nullable lets the
-- session column be NULL (a row tied to no session, which no purge of a session matches; the
-- table must then carry tenant_column, which its policy compares). Recorded in
-- table_registry.session_nullable. The checks are v1's otherwise; calling it again updates
-- the registration.
CREATE FUNCTION shardstore.register_session_table_v2(
    table_name         regclass,
    session_column     name DEFAULT 'session_id',
    turn_column        name DEFAULT NULL,
    chunk_column       name DEFAULT NULL,
    chunk_start_column name DEFAULT NULL,
    tenant_column      name DEFAULT NULL,
    purge_order        integer DEFAULT NULL,
    note               text DEFAULT NULL,
    purge_rows         boolean DEFAULT true,
    tenant_grants      text DEFAULT 'SELECT, INSERT, UPDATE, DELETE',
    session_nullable   boolean DEFAULT false)
RETURNS void
LANGUAGE plpgsql
AS $$
#variable_conflict use_column
DECLARE
    v_rel  regclass := register_session_table_v2.table_name;
    v_null boolean := register_session_table_v2.session_nullable;
    v_kind "char";
    v_part boolean;
    c      record;
BEGIN
    SELECT k.relkind, k.relispartition INTO v_kind, v_part FROM pg_class k WHERE k.oid = v_rel;
    IF v_kind NOT IN ('r', 'p') OR v_part THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('%s is not a table (or is a partition: register its parent)', v_rel);
    END IF;
    IF register_session_table_v2.turn_column IS NOT NULL AND register_session_table_v2.chunk_column IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('%s: rows belong to turns or to chunks, not both', v_rel);
    END IF;
    IF register_session_table_v2.chunk_start_column IS NOT NULL AND register_session_table_v2.chunk_column IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('%s: chunk_start_column needs chunk_column', v_rel);
    END IF;
    IF v_null AND register_session_table_v2.tenant_column IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('%s: a NULLable session column needs tenant_column', v_rel);
    END IF;
    FOR c IN
        SELECT x.what, x.col, x.types, a.atttypid::regtype::text AS found, a.attnotnull AS notnull
          FROM (VALUES ('session_column', register_session_table_v2.session_column, '{uuid}'::text[]),
                       ('turn_column', register_session_table_v2.turn_column, '{bigint,integer}'),
                       ('chunk_column', register_session_table_v2.chunk_column, '{bigint,integer}'),
                       ('chunk_start_column', register_session_table_v2.chunk_start_column,
                        '{"timestamp with time zone"}'),
                       ('tenant_column', register_session_table_v2.tenant_column, '{text}')) AS x(what, col, types)
          LEFT JOIN pg_attribute a ON a.attrelid = v_rel AND a.attname = x.col AND NOT a.attisdropped AND a.attnum > 0
         WHERE x.col IS NOT NULL
    LOOP
        IF c.found IS NULL THEN
            RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE = format('%s has no column %I (%s)', v_rel, c.col, c.what);
        END IF;
        IF NOT c.found = ANY (c.types) THEN
            RAISE EXCEPTION USING ERRCODE = '22023',
                MESSAGE = format('%s.%I (%s) is %s, not %s', v_rel, c.col, c.what, c.found, array_to_string(c.types, ' or '));
        END IF;
        IF NOT c.notnull AND (c.what = 'tenant_column' OR (c.what = 'session_column' AND NOT v_null)) THEN
            RAISE EXCEPTION USING ERRCODE = '22023',
                MESSAGE = format('%s.%I (%s) must be NOT NULL', v_rel, c.col, c.what);
        END IF;
    END LOOP;
    INSERT INTO shardstore.table_registry AS r
           (table_name, kind, session_column, turn_column, chunk_column, chunk_start_column,
            tenant_column, position, purge_rows, rls, tenant_grants, note, session_nullable)
    VALUES (v_rel, 'session', register_session_table_v2.session_column,
            register_session_table_v2.turn_column, register_session_table_v2.chunk_column,
            register_session_table_v2.chunk_start_column, register_session_table_v2.tenant_column,
            coalesce(register_session_table_v2.purge_order, 100), register_session_table_v2.purge_rows,
            true, register_session_table_v2.tenant_grants, register_session_table_v2.note, v_null)
    ON CONFLICT (table_name) DO UPDATE
       SET kind = 'session', session_column = EXCLUDED.session_column,
           turn_column = EXCLUDED.turn_column, chunk_column = EXCLUDED.chunk_column,
           chunk_start_column = EXCLUDED.chunk_start_column, tenant_column = EXCLUDED.tenant_column,
           position = coalesce(register_session_table_v2.purge_order, r.position),
           purge_rows = EXCLUDED.purge_rows, rls = true, tenant_grants = EXCLUDED.tenant_grants,
           note = coalesce(EXCLUDED.note, r.note), session_nullable = EXCLUDED.session_nullable;
    PERFORM shardstore.rls_install_policy_v1(v_rel, v_rel);
    PERFORM shardstore.rls_adopt_v1(v_rel);
END
$$;

REVOKE EXECUTE ON FUNCTION shardstore.register_session_table_v2(regclass, name, name, name, name,
    name, integer, text, boolean, text, boolean) FROM PUBLIC;

SELECT shardstore.register_session_table_v2('shardstore.facts', session_column => 'source_session_id',
                                            turn_column => 'source_turn_seq',
                                            tenant_column => 'tenant_id', session_nullable => true,
                                            note => 'facts with provenance (0008); purge_subject clears the subject''s');

-- The locks every fact writer takes, in this order: the subject's lock shared (a
-- purge_subject takes it exclusively, so no fact of the subject commits behind its delete),
-- then the key's lock exclusively (writers of one key serialise). Advisory, transaction
-- scoped; a hash collision only serialises two keys more than needed.
CREATE FUNCTION shardstore.fact_lock_v1(p_tenant text, p_subject text, p_key text)
RETURNS void
LANGUAGE plpgsql
AS $$
BEGIN
    PERFORM pg_advisory_xact_lock_shared(
        hashtextextended(jsonb_build_array('fact-subject', p_tenant, p_subject)::text, 8));
    IF p_key IS NOT NULL THEN
        PERFORM pg_advisory_xact_lock(
            hashtextextended(jsonb_build_array('fact-key', p_tenant, p_subject, p_key)::text, 8));
    END IF;
END
$$;

-- Records a new version of (p_tenant, p_subject, p_key). p_valid_from NULL: the server's
-- clock now (moved past the newest version's start if the clock has not advanced since).
-- The newest version, if open, is closed at the new valid_from; a new valid_from before
-- the newest version's start (or, if it is closed, before its end) is 'too_early'.
CREATE FUNCTION shardstore.fact_remember_v1(
    p_fact_id uuid, p_tenant text, p_subject text, p_key text, p_value jsonb,
    p_confidence double precision, p_session_id uuid, p_turn_seq bigint, p_valid_from timestamptz)
RETURNS TABLE (r_status text, r_detail text, r_fact_id uuid, r_valid_from timestamptz,
               r_valid_to timestamptz, r_recorded_at timestamptz, r_closed_id uuid,
               r_value text)
LANGUAGE plpgsql
AS $$
DECLARE
    v_tenant   text;
    v_purged   timestamptz;
    v_next     bigint;
    v_first    bigint;
    v_now      timestamptz;
    v_from     timestamptz;
    v_last_id  uuid;
    v_last_from timestamptz;
    v_last_to  timestamptz;
    v_closed   uuid;
BEGIN
    IF p_session_id IS NOT NULL THEN
        SELECT s.tenant_id, s.purged_at, s.next_turn_seq INTO v_tenant, v_purged, v_next
          FROM shardstore.sessions s WHERE s.session_id = p_session_id FOR KEY SHARE;
        IF NOT FOUND OR v_tenant <> p_tenant THEN
            r_status := 'no_session';
            RETURN NEXT;
            RETURN;
        END IF;
        IF v_purged IS NOT NULL THEN
            r_status := 'purged';
            RETURN NEXT;
            RETURN;
        END IF;
        IF p_turn_seq >= v_next THEN
            r_status := 'no_turn';
            r_detail := v_next::text;
            RETURN NEXT;
            RETURN;
        END IF;
        -- the oldest turn still stored: range purges and retention remove a prefix
        v_first := least(
            (SELECT m.first_turn_seq FROM shardstore.chunk_map m
              WHERE m.session_id = p_session_id ORDER BY m.chunk_seq LIMIT 1),
            (SELECT b.turn_seq FROM shardstore.turn_buffer b
              WHERE b.session_id = p_session_id ORDER BY b.turn_seq LIMIT 1));
        IF v_first IS NULL OR p_turn_seq < v_first THEN
            r_status := 'turn_purged';
            r_detail := v_first::text;
            RETURN NEXT;
            RETURN;
        END IF;
    END IF;
    PERFORM shardstore.fact_lock_v1(p_tenant, p_subject, p_key);
    v_now := clock_timestamp();
    v_from := coalesce(p_valid_from, v_now);
    SELECT f.fact_id, f.valid_from, f.valid_to INTO v_last_id, v_last_from, v_last_to
      FROM shardstore.facts f
     WHERE f.tenant_id = p_tenant AND f.subject = p_subject AND f.key = p_key
     ORDER BY f.valid_from DESC
     LIMIT 1;
    IF v_last_id IS NOT NULL THEN
        IF v_last_to IS NULL AND v_from <= v_last_from THEN
            IF p_valid_from IS NOT NULL THEN
                r_status := 'too_early';
                r_detail := v_last_from::text;
                RETURN NEXT;
                RETURN;
            END IF;
            v_from := v_last_from + interval '1 microsecond';
        ELSIF v_last_to IS NOT NULL AND v_from < v_last_to THEN
            IF p_valid_from IS NOT NULL THEN
                r_status := 'too_early';
                r_detail := v_last_to::text;
                RETURN NEXT;
                RETURN;
            END IF;
            v_from := v_last_to;
        END IF;
        IF v_last_to IS NULL THEN
            UPDATE shardstore.facts f SET valid_to = v_from
             WHERE f.tenant_id = p_tenant AND f.fact_id = v_last_id AND f.valid_to IS NULL;
            IF FOUND THEN
                v_closed := v_last_id;
            END IF;
        END IF;
    END IF;
    INSERT INTO shardstore.facts (tenant_id, fact_id, subject, key, value, confidence,
                                  source_session_id, source_turn_seq, valid_from, valid_to,
                                  recorded_at)
    VALUES (p_tenant, p_fact_id, p_subject, p_key, p_value, p_confidence, p_session_id,
            p_turn_seq, v_from, NULL, v_now);
    r_status := 'ok';
    r_fact_id := p_fact_id;
    r_valid_from := v_from;
    r_recorded_at := v_now;
    r_closed_id := v_closed;
    r_value := p_value::text;
    RETURN NEXT;
END
$$;

-- Closes the version of (p_tenant, p_subject, p_key) valid now, at now; returns it closed
-- (no row when none is valid). Versions that start later (a valid_from in the future) stay.
CREATE FUNCTION shardstore.fact_forget_v1(p_tenant text, p_subject text, p_key text)
RETURNS TABLE (r_fact_id uuid, r_value text, r_confidence double precision,
               r_source_session_id uuid, r_source_turn_seq bigint, r_valid_from timestamptz,
               r_valid_to timestamptz, r_recorded_at timestamptz)
LANGUAGE plpgsql
AS $$
DECLARE
    v_now  timestamptz;
    v_id   uuid;
    v_from timestamptz;
    v_to   timestamptz;
BEGIN
    PERFORM shardstore.fact_lock_v1(p_tenant, p_subject, p_key);
    v_now := clock_timestamp();
    SELECT f.fact_id, f.valid_from INTO v_id, v_from
      FROM shardstore.facts f
     WHERE f.tenant_id = p_tenant AND f.subject = p_subject AND f.key = p_key
       AND f.valid_from <= v_now AND (f.valid_to IS NULL OR f.valid_to > v_now)
     ORDER BY f.valid_from DESC
     LIMIT 1;
    IF v_id IS NULL THEN
        RETURN;
    END IF;
    v_to := greatest(v_now, v_from + interval '1 microsecond');
    UPDATE shardstore.facts f SET valid_to = v_to
     WHERE f.tenant_id = p_tenant AND f.fact_id = v_id
    RETURNING f.fact_id, f.value::text, f.confidence, f.source_session_id, f.source_turn_seq,
              f.valid_from, f.valid_to, f.recorded_at
         INTO r_fact_id, r_value, r_confidence, r_source_session_id, r_source_turn_seq,
              r_valid_from, r_valid_to, r_recorded_at;
    IF FOUND THEN
        RETURN NEXT;
    END IF;
END
$$;

-- purge_subject's last step: every fact about the subject, with or without a source (the
-- purges of the subject's sessions before it removed the facts sourced in them, about any
-- subject). Takes the subject's lock exclusively: writers of the subject's facts in flight
-- finish first, later ones wait for this transaction. A dry run deletes and rolls back,
-- leaving out facts sourced in the subject's live sessions (the dry run of their purges
-- counted those already). Returns {"tables": {"shardstore.facts": [rows, 0, bytes]}}.
CREATE FUNCTION shardstore.facts_purge_subject_v1(p_tenant text, p_subject text, p_dry_run boolean)
RETURNS jsonb
LANGUAGE plpgsql
AS $$
DECLARE
    v_n bigint;
    v_b bigint;
BEGIN
    PERFORM pg_advisory_xact_lock(
        hashtextextended(jsonb_build_array('fact-subject', p_tenant, p_subject)::text, 8));
    BEGIN
        WITH d AS (
            DELETE FROM shardstore.facts f
             WHERE f.tenant_id = p_tenant AND f.subject = p_subject
               AND (NOT p_dry_run OR NOT EXISTS (
                        SELECT 1 FROM shardstore.sessions s
                         WHERE s.session_id = f.source_session_id AND s.tenant_id = p_tenant
                           AND s.subject_id = p_subject AND s.purged_at IS NULL))
            RETURNING pg_column_size(f.*) AS sz)
        SELECT count(*), coalesce(sum(d.sz), 0) INTO v_n, v_b FROM d;
        IF p_dry_run THEN
            RAISE EXCEPTION USING ERRCODE = 'SS299', MESSAGE = 'dry run: rolled back';
        END IF;
    EXCEPTION WHEN SQLSTATE 'SS299' THEN
        NULL;  -- a dry run: the delete is undone, the counts stay
    END;
    RETURN jsonb_build_object('tables', jsonb_build_object('shardstore.facts', jsonb_build_array(v_n, 0, v_b)));
END
$$;
