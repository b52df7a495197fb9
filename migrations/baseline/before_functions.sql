-- The schema as the legacy migrations 1..48 leave it, less its functions and views
-- (shardstore/sql/functions/, shardstore/sql/views/). Written by scripts/gen_schema.py
-- from pg_dump: never edit it; a change to a table is a new versioned migration in
-- migrations/. A fresh database runs this part, then every function and view file, then
-- after_functions.sql.

CREATE EXTENSION IF NOT EXISTS vector;

CREATE TABLE shardstore.artifact_refs (
    tenant_id text NOT NULL,
    artifact_id uuid NOT NULL,
    owner_type text NOT NULL,
    owner_id text NOT NULL,
    session_id uuid,
    turn_seq bigint,
    required_for_resume boolean DEFAULT false NOT NULL,
    expires_at timestamp with time zone,
    created_at timestamp with time zone NOT NULL,
    CONSTRAINT artifact_refs_check CHECK (((owner_type = ANY (ARRAY['turn'::text, 'checkpoint'::text])) = ((session_id IS NOT NULL) AND (turn_seq IS NOT NULL)))),
    CONSTRAINT artifact_refs_owner_type_check CHECK ((owner_type = ANY (ARRAY['turn'::text, 'checkpoint'::text, 'trajectory'::text, 'business_output'::text])))
);

CREATE TABLE shardstore.sessions (
    session_id uuid NOT NULL,
    tenant_id text NOT NULL,
    subject_id text,
    agent_id text,
    metadata jsonb DEFAULT '{}'::jsonb NOT NULL,
    created_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    closed_at timestamp with time zone,
    purged_at timestamp with time zone,
    next_turn_seq bigint DEFAULT 0 NOT NULL,
    open_chunk_seq bigint DEFAULT 0 NOT NULL,
    open_chunk_start timestamp with time zone,
    open_turns integer DEFAULT 0 NOT NULL,
    open_tokens bigint DEFAULT 0 NOT NULL,
    open_bytes bigint DEFAULT 0 NOT NULL,
    last_turn_at timestamp with time zone,
    fork_parent uuid,
    fork_at bigint,
    fork_chunk bigint
)
WITH (fillfactor='70');

CREATE TABLE shardstore.rls_role_tenants (
    role_name name NOT NULL,
    tenant_id text NOT NULL,
    CONSTRAINT rls_role_tenants_tenant_id_check CHECK ((tenant_id <> ''::text))
);

CREATE TABLE shardstore.runs (
    session_id uuid NOT NULL,
    run_id uuid NOT NULL,
    tenant_id text NOT NULL,
    framework text NOT NULL,
    thread_key text NOT NULL,
    status text DEFAULT 'running'::text NOT NULL,
    awaiting jsonb,
    awaiting_since timestamp with time zone,
    steps bigint DEFAULT 0 NOT NULL,
    usd_cost double precision DEFAULT 0 NOT NULL,
    error text,
    metadata jsonb DEFAULT '{}'::jsonb NOT NULL,
    created_at timestamp with time zone NOT NULL,
    updated_at timestamp with time zone NOT NULL,
    closed_at timestamp with time zone,
    CONSTRAINT runs_check CHECK (((status = 'awaiting_human'::text) = (awaiting_since IS NOT NULL))),
    CONSTRAINT runs_check1 CHECK (((status = 'awaiting_human'::text) = (awaiting IS NOT NULL))),
    CONSTRAINT runs_check2 CHECK (((status = ANY (ARRAY['done'::text, 'failed'::text])) = (closed_at IS NOT NULL))),
    CONSTRAINT runs_check3 CHECK (((error IS NULL) OR (status = 'failed'::text))),
    CONSTRAINT runs_status_check CHECK ((status = ANY (ARRAY['running'::text, 'awaiting_human'::text, 'done'::text, 'failed'::text]))),
    CONSTRAINT runs_steps_check CHECK ((steps >= 0)),
    CONSTRAINT runs_usd_cost_check CHECK (((usd_cost >= (0)::double precision) AND (usd_cost < 'Infinity'::double precision)))
);

CREATE TABLE shardstore.agent_history (
    session_id uuid NOT NULL,
    chunk_seq bigint NOT NULL,
    chunk_start timestamp with time zone NOT NULL,
    chunk_end timestamp with time zone NOT NULL,
    first_turn_seq bigint NOT NULL,
    turn_count integer NOT NULL,
    token_count bigint NOT NULL,
    byte_count bigint NOT NULL,
    conversation_chunk jsonb NOT NULL,
    tenant_id text NOT NULL
)
PARTITION BY RANGE (chunk_start);

CREATE TABLE shardstore.artifact_chunks (
    upload_id uuid NOT NULL,
    chunk_no integer NOT NULL,
    tenant_id text NOT NULL,
    data bytea NOT NULL,
    CONSTRAINT artifact_chunks_chunk_no_check CHECK ((chunk_no >= 0))
);
ALTER TABLE ONLY shardstore.artifact_chunks ALTER COLUMN data SET STORAGE EXTERNAL;

CREATE TABLE shardstore.artifact_erasures (
    tenant_id text NOT NULL,
    artifact_id uuid NOT NULL,
    queued_at timestamp with time zone NOT NULL
);

CREATE TABLE shardstore.artifact_links (
    tenant_id text NOT NULL,
    session_id uuid NOT NULL,
    artifact_id uuid NOT NULL,
    linked_at timestamp with time zone NOT NULL
);

CREATE TABLE shardstore.artifacts (
    tenant_id text NOT NULL,
    artifact_id uuid NOT NULL,
    sha256 text NOT NULL,
    size_bytes bigint NOT NULL,
    content_type text NOT NULL,
    backend text NOT NULL,
    object_key text NOT NULL,
    state text NOT NULL,
    upload_id uuid,
    tokens bigint,
    required_for_resume boolean DEFAULT false NOT NULL,
    schema_version integer DEFAULT 1 NOT NULL,
    ever_referenced boolean DEFAULT false NOT NULL,
    created_at timestamp with time zone NOT NULL,
    unreferenced_since timestamp with time zone,
    CONSTRAINT artifacts_backend_check CHECK ((backend = ANY (ARRAY['postgres'::text, 'file'::text, 's3'::text]))),
    CONSTRAINT artifacts_check CHECK (((backend <> 'postgres'::text) OR (state <> 'deleting'::text))),
    CONSTRAINT artifacts_check1 CHECK (((state <> 'ready'::text) OR (backend <> 'postgres'::text) OR (upload_id IS NOT NULL))),
    CONSTRAINT artifacts_sha256_check CHECK ((sha256 ~ '^[0-9a-f]{64}$'::text)),
    CONSTRAINT artifacts_size_bytes_check CHECK ((size_bytes >= 0)),
    CONSTRAINT artifacts_state_check CHECK ((state = ANY (ARRAY['uploading'::text, 'ready'::text, 'deleting'::text]))),
    CONSTRAINT artifacts_tokens_check CHECK (((tokens IS NULL) OR (tokens >= 0)))
);

CREATE SEQUENCE shardstore.checkpoint_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

CREATE TABLE shardstore.checkpoints (
    session_id uuid NOT NULL,
    checkpoint_id uuid NOT NULL,
    seq bigint NOT NULL,
    tenant_id text NOT NULL,
    turn_seq bigint NOT NULL,
    sub_step integer,
    parent_id uuid,
    idempotency_key text,
    created_at timestamp with time zone NOT NULL,
    state jsonb NOT NULL,
    tool_calls jsonb,
    tool_results jsonb,
    metadata jsonb DEFAULT '{}'::jsonb NOT NULL,
    CONSTRAINT checkpoints_sub_step_check CHECK ((sub_step >= 0)),
    CONSTRAINT checkpoints_turn_seq_check CHECK ((turn_seq >= '-1'::integer))
);

CREATE TABLE shardstore.chunk_map (
    session_id uuid NOT NULL,
    chunk_seq bigint NOT NULL,
    chunk_start timestamp with time zone NOT NULL,
    first_turn_seq bigint NOT NULL,
    tenant_id text NOT NULL
);

CREATE TABLE shardstore.chunk_summaries (
    session_id uuid NOT NULL,
    chunk_seq bigint NOT NULL,
    tenant_id text NOT NULL,
    chunk_start timestamp with time zone NOT NULL,
    first_turn_seq bigint NOT NULL,
    last_turn_seq bigint NOT NULL,
    summary text NOT NULL,
    tokens integer NOT NULL,
    model text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    message_tokens integer,
    counted_by text,
    CONSTRAINT chunk_summaries_check CHECK ((last_turn_seq >= first_turn_seq)),
    CONSTRAINT chunk_summaries_message_tokens_check CHECK ((message_tokens >= 0)),
    CONSTRAINT chunk_summaries_summary_check CHECK ((summary <> ''::text)),
    CONSTRAINT chunk_summaries_tokens_check CHECK ((tokens >= 0))
);

CREATE TABLE shardstore.chunk_vectors (
    session_id uuid NOT NULL,
    chunk_seq bigint NOT NULL,
    chunk_start timestamp with time zone NOT NULL,
    window_no integer NOT NULL,
    tenant_id text NOT NULL,
    agent_id text,
    first_turn_seq bigint NOT NULL,
    last_turn_seq bigint NOT NULL,
    first_at timestamp with time zone NOT NULL,
    last_at timestamp with time zone NOT NULL,
    embedding halfvec NOT NULL
)
PARTITION BY HASH (tenant_id);

CREATE TABLE shardstore.chunk_vectors_h00 (
    session_id uuid CONSTRAINT chunk_vectors_session_id_not_null NOT NULL,
    chunk_seq bigint CONSTRAINT chunk_vectors_chunk_seq_not_null NOT NULL,
    chunk_start timestamp with time zone CONSTRAINT chunk_vectors_chunk_start_not_null NOT NULL,
    window_no integer CONSTRAINT chunk_vectors_window_no_not_null NOT NULL,
    tenant_id text CONSTRAINT chunk_vectors_tenant_id_not_null NOT NULL,
    agent_id text,
    first_turn_seq bigint CONSTRAINT chunk_vectors_first_turn_seq_not_null NOT NULL,
    last_turn_seq bigint CONSTRAINT chunk_vectors_last_turn_seq_not_null NOT NULL,
    first_at timestamp with time zone CONSTRAINT chunk_vectors_first_at_not_null NOT NULL,
    last_at timestamp with time zone CONSTRAINT chunk_vectors_last_at_not_null NOT NULL,
    embedding halfvec CONSTRAINT chunk_vectors_embedding_not_null NOT NULL
);

CREATE TABLE shardstore.chunk_vectors_h01 (
    session_id uuid CONSTRAINT chunk_vectors_session_id_not_null NOT NULL,
    chunk_seq bigint CONSTRAINT chunk_vectors_chunk_seq_not_null NOT NULL,
    chunk_start timestamp with time zone CONSTRAINT chunk_vectors_chunk_start_not_null NOT NULL,
    window_no integer CONSTRAINT chunk_vectors_window_no_not_null NOT NULL,
    tenant_id text CONSTRAINT chunk_vectors_tenant_id_not_null NOT NULL,
    agent_id text,
    first_turn_seq bigint CONSTRAINT chunk_vectors_first_turn_seq_not_null NOT NULL,
    last_turn_seq bigint CONSTRAINT chunk_vectors_last_turn_seq_not_null NOT NULL,
    first_at timestamp with time zone CONSTRAINT chunk_vectors_first_at_not_null NOT NULL,
    last_at timestamp with time zone CONSTRAINT chunk_vectors_last_at_not_null NOT NULL,
    embedding halfvec CONSTRAINT chunk_vectors_embedding_not_null NOT NULL
);

CREATE TABLE shardstore.chunk_vectors_h02 (
    session_id uuid CONSTRAINT chunk_vectors_session_id_not_null NOT NULL,
    chunk_seq bigint CONSTRAINT chunk_vectors_chunk_seq_not_null NOT NULL,
    chunk_start timestamp with time zone CONSTRAINT chunk_vectors_chunk_start_not_null NOT NULL,
    window_no integer CONSTRAINT chunk_vectors_window_no_not_null NOT NULL,
    tenant_id text CONSTRAINT chunk_vectors_tenant_id_not_null NOT NULL,
    agent_id text,
    first_turn_seq bigint CONSTRAINT chunk_vectors_first_turn_seq_not_null NOT NULL,
    last_turn_seq bigint CONSTRAINT chunk_vectors_last_turn_seq_not_null NOT NULL,
    first_at timestamp with time zone CONSTRAINT chunk_vectors_first_at_not_null NOT NULL,
    last_at timestamp with time zone CONSTRAINT chunk_vectors_last_at_not_null NOT NULL,
    embedding halfvec CONSTRAINT chunk_vectors_embedding_not_null NOT NULL
);

CREATE TABLE shardstore.chunk_vectors_h03 (
    session_id uuid CONSTRAINT chunk_vectors_session_id_not_null NOT NULL,
    chunk_seq bigint CONSTRAINT chunk_vectors_chunk_seq_not_null NOT NULL,
    chunk_start timestamp with time zone CONSTRAINT chunk_vectors_chunk_start_not_null NOT NULL,
    window_no integer CONSTRAINT chunk_vectors_window_no_not_null NOT NULL,
    tenant_id text CONSTRAINT chunk_vectors_tenant_id_not_null NOT NULL,
    agent_id text,
    first_turn_seq bigint CONSTRAINT chunk_vectors_first_turn_seq_not_null NOT NULL,
    last_turn_seq bigint CONSTRAINT chunk_vectors_last_turn_seq_not_null NOT NULL,
    first_at timestamp with time zone CONSTRAINT chunk_vectors_first_at_not_null NOT NULL,
    last_at timestamp with time zone CONSTRAINT chunk_vectors_last_at_not_null NOT NULL,
    embedding halfvec CONSTRAINT chunk_vectors_embedding_not_null NOT NULL
);

CREATE TABLE shardstore.chunk_vectors_h04 (
    session_id uuid CONSTRAINT chunk_vectors_session_id_not_null NOT NULL,
    chunk_seq bigint CONSTRAINT chunk_vectors_chunk_seq_not_null NOT NULL,
    chunk_start timestamp with time zone CONSTRAINT chunk_vectors_chunk_start_not_null NOT NULL,
    window_no integer CONSTRAINT chunk_vectors_window_no_not_null NOT NULL,
    tenant_id text CONSTRAINT chunk_vectors_tenant_id_not_null NOT NULL,
    agent_id text,
    first_turn_seq bigint CONSTRAINT chunk_vectors_first_turn_seq_not_null NOT NULL,
    last_turn_seq bigint CONSTRAINT chunk_vectors_last_turn_seq_not_null NOT NULL,
    first_at timestamp with time zone CONSTRAINT chunk_vectors_first_at_not_null NOT NULL,
    last_at timestamp with time zone CONSTRAINT chunk_vectors_last_at_not_null NOT NULL,
    embedding halfvec CONSTRAINT chunk_vectors_embedding_not_null NOT NULL
);

CREATE TABLE shardstore.chunk_vectors_h05 (
    session_id uuid CONSTRAINT chunk_vectors_session_id_not_null NOT NULL,
    chunk_seq bigint CONSTRAINT chunk_vectors_chunk_seq_not_null NOT NULL,
    chunk_start timestamp with time zone CONSTRAINT chunk_vectors_chunk_start_not_null NOT NULL,
    window_no integer CONSTRAINT chunk_vectors_window_no_not_null NOT NULL,
    tenant_id text CONSTRAINT chunk_vectors_tenant_id_not_null NOT NULL,
    agent_id text,
    first_turn_seq bigint CONSTRAINT chunk_vectors_first_turn_seq_not_null NOT NULL,
    last_turn_seq bigint CONSTRAINT chunk_vectors_last_turn_seq_not_null NOT NULL,
    first_at timestamp with time zone CONSTRAINT chunk_vectors_first_at_not_null NOT NULL,
    last_at timestamp with time zone CONSTRAINT chunk_vectors_last_at_not_null NOT NULL,
    embedding halfvec CONSTRAINT chunk_vectors_embedding_not_null NOT NULL
);

CREATE TABLE shardstore.chunk_vectors_h06 (
    session_id uuid CONSTRAINT chunk_vectors_session_id_not_null NOT NULL,
    chunk_seq bigint CONSTRAINT chunk_vectors_chunk_seq_not_null NOT NULL,
    chunk_start timestamp with time zone CONSTRAINT chunk_vectors_chunk_start_not_null NOT NULL,
    window_no integer CONSTRAINT chunk_vectors_window_no_not_null NOT NULL,
    tenant_id text CONSTRAINT chunk_vectors_tenant_id_not_null NOT NULL,
    agent_id text,
    first_turn_seq bigint CONSTRAINT chunk_vectors_first_turn_seq_not_null NOT NULL,
    last_turn_seq bigint CONSTRAINT chunk_vectors_last_turn_seq_not_null NOT NULL,
    first_at timestamp with time zone CONSTRAINT chunk_vectors_first_at_not_null NOT NULL,
    last_at timestamp with time zone CONSTRAINT chunk_vectors_last_at_not_null NOT NULL,
    embedding halfvec CONSTRAINT chunk_vectors_embedding_not_null NOT NULL
);

CREATE TABLE shardstore.chunk_vectors_h07 (
    session_id uuid CONSTRAINT chunk_vectors_session_id_not_null NOT NULL,
    chunk_seq bigint CONSTRAINT chunk_vectors_chunk_seq_not_null NOT NULL,
    chunk_start timestamp with time zone CONSTRAINT chunk_vectors_chunk_start_not_null NOT NULL,
    window_no integer CONSTRAINT chunk_vectors_window_no_not_null NOT NULL,
    tenant_id text CONSTRAINT chunk_vectors_tenant_id_not_null NOT NULL,
    agent_id text,
    first_turn_seq bigint CONSTRAINT chunk_vectors_first_turn_seq_not_null NOT NULL,
    last_turn_seq bigint CONSTRAINT chunk_vectors_last_turn_seq_not_null NOT NULL,
    first_at timestamp with time zone CONSTRAINT chunk_vectors_first_at_not_null NOT NULL,
    last_at timestamp with time zone CONSTRAINT chunk_vectors_last_at_not_null NOT NULL,
    embedding halfvec CONSTRAINT chunk_vectors_embedding_not_null NOT NULL
);

CREATE TABLE shardstore.chunk_vectors_h08 (
    session_id uuid CONSTRAINT chunk_vectors_session_id_not_null NOT NULL,
    chunk_seq bigint CONSTRAINT chunk_vectors_chunk_seq_not_null NOT NULL,
    chunk_start timestamp with time zone CONSTRAINT chunk_vectors_chunk_start_not_null NOT NULL,
    window_no integer CONSTRAINT chunk_vectors_window_no_not_null NOT NULL,
    tenant_id text CONSTRAINT chunk_vectors_tenant_id_not_null NOT NULL,
    agent_id text,
    first_turn_seq bigint CONSTRAINT chunk_vectors_first_turn_seq_not_null NOT NULL,
    last_turn_seq bigint CONSTRAINT chunk_vectors_last_turn_seq_not_null NOT NULL,
    first_at timestamp with time zone CONSTRAINT chunk_vectors_first_at_not_null NOT NULL,
    last_at timestamp with time zone CONSTRAINT chunk_vectors_last_at_not_null NOT NULL,
    embedding halfvec CONSTRAINT chunk_vectors_embedding_not_null NOT NULL
);

CREATE TABLE shardstore.chunk_vectors_h09 (
    session_id uuid CONSTRAINT chunk_vectors_session_id_not_null NOT NULL,
    chunk_seq bigint CONSTRAINT chunk_vectors_chunk_seq_not_null NOT NULL,
    chunk_start timestamp with time zone CONSTRAINT chunk_vectors_chunk_start_not_null NOT NULL,
    window_no integer CONSTRAINT chunk_vectors_window_no_not_null NOT NULL,
    tenant_id text CONSTRAINT chunk_vectors_tenant_id_not_null NOT NULL,
    agent_id text,
    first_turn_seq bigint CONSTRAINT chunk_vectors_first_turn_seq_not_null NOT NULL,
    last_turn_seq bigint CONSTRAINT chunk_vectors_last_turn_seq_not_null NOT NULL,
    first_at timestamp with time zone CONSTRAINT chunk_vectors_first_at_not_null NOT NULL,
    last_at timestamp with time zone CONSTRAINT chunk_vectors_last_at_not_null NOT NULL,
    embedding halfvec CONSTRAINT chunk_vectors_embedding_not_null NOT NULL
);

CREATE TABLE shardstore.chunk_vectors_h10 (
    session_id uuid CONSTRAINT chunk_vectors_session_id_not_null NOT NULL,
    chunk_seq bigint CONSTRAINT chunk_vectors_chunk_seq_not_null NOT NULL,
    chunk_start timestamp with time zone CONSTRAINT chunk_vectors_chunk_start_not_null NOT NULL,
    window_no integer CONSTRAINT chunk_vectors_window_no_not_null NOT NULL,
    tenant_id text CONSTRAINT chunk_vectors_tenant_id_not_null NOT NULL,
    agent_id text,
    first_turn_seq bigint CONSTRAINT chunk_vectors_first_turn_seq_not_null NOT NULL,
    last_turn_seq bigint CONSTRAINT chunk_vectors_last_turn_seq_not_null NOT NULL,
    first_at timestamp with time zone CONSTRAINT chunk_vectors_first_at_not_null NOT NULL,
    last_at timestamp with time zone CONSTRAINT chunk_vectors_last_at_not_null NOT NULL,
    embedding halfvec CONSTRAINT chunk_vectors_embedding_not_null NOT NULL
);

CREATE TABLE shardstore.chunk_vectors_h11 (
    session_id uuid CONSTRAINT chunk_vectors_session_id_not_null NOT NULL,
    chunk_seq bigint CONSTRAINT chunk_vectors_chunk_seq_not_null NOT NULL,
    chunk_start timestamp with time zone CONSTRAINT chunk_vectors_chunk_start_not_null NOT NULL,
    window_no integer CONSTRAINT chunk_vectors_window_no_not_null NOT NULL,
    tenant_id text CONSTRAINT chunk_vectors_tenant_id_not_null NOT NULL,
    agent_id text,
    first_turn_seq bigint CONSTRAINT chunk_vectors_first_turn_seq_not_null NOT NULL,
    last_turn_seq bigint CONSTRAINT chunk_vectors_last_turn_seq_not_null NOT NULL,
    first_at timestamp with time zone CONSTRAINT chunk_vectors_first_at_not_null NOT NULL,
    last_at timestamp with time zone CONSTRAINT chunk_vectors_last_at_not_null NOT NULL,
    embedding halfvec CONSTRAINT chunk_vectors_embedding_not_null NOT NULL
);

CREATE TABLE shardstore.chunk_vectors_h12 (
    session_id uuid CONSTRAINT chunk_vectors_session_id_not_null NOT NULL,
    chunk_seq bigint CONSTRAINT chunk_vectors_chunk_seq_not_null NOT NULL,
    chunk_start timestamp with time zone CONSTRAINT chunk_vectors_chunk_start_not_null NOT NULL,
    window_no integer CONSTRAINT chunk_vectors_window_no_not_null NOT NULL,
    tenant_id text CONSTRAINT chunk_vectors_tenant_id_not_null NOT NULL,
    agent_id text,
    first_turn_seq bigint CONSTRAINT chunk_vectors_first_turn_seq_not_null NOT NULL,
    last_turn_seq bigint CONSTRAINT chunk_vectors_last_turn_seq_not_null NOT NULL,
    first_at timestamp with time zone CONSTRAINT chunk_vectors_first_at_not_null NOT NULL,
    last_at timestamp with time zone CONSTRAINT chunk_vectors_last_at_not_null NOT NULL,
    embedding halfvec CONSTRAINT chunk_vectors_embedding_not_null NOT NULL
);

CREATE TABLE shardstore.chunk_vectors_h13 (
    session_id uuid CONSTRAINT chunk_vectors_session_id_not_null NOT NULL,
    chunk_seq bigint CONSTRAINT chunk_vectors_chunk_seq_not_null NOT NULL,
    chunk_start timestamp with time zone CONSTRAINT chunk_vectors_chunk_start_not_null NOT NULL,
    window_no integer CONSTRAINT chunk_vectors_window_no_not_null NOT NULL,
    tenant_id text CONSTRAINT chunk_vectors_tenant_id_not_null NOT NULL,
    agent_id text,
    first_turn_seq bigint CONSTRAINT chunk_vectors_first_turn_seq_not_null NOT NULL,
    last_turn_seq bigint CONSTRAINT chunk_vectors_last_turn_seq_not_null NOT NULL,
    first_at timestamp with time zone CONSTRAINT chunk_vectors_first_at_not_null NOT NULL,
    last_at timestamp with time zone CONSTRAINT chunk_vectors_last_at_not_null NOT NULL,
    embedding halfvec CONSTRAINT chunk_vectors_embedding_not_null NOT NULL
);

CREATE TABLE shardstore.chunk_vectors_h14 (
    session_id uuid CONSTRAINT chunk_vectors_session_id_not_null NOT NULL,
    chunk_seq bigint CONSTRAINT chunk_vectors_chunk_seq_not_null NOT NULL,
    chunk_start timestamp with time zone CONSTRAINT chunk_vectors_chunk_start_not_null NOT NULL,
    window_no integer CONSTRAINT chunk_vectors_window_no_not_null NOT NULL,
    tenant_id text CONSTRAINT chunk_vectors_tenant_id_not_null NOT NULL,
    agent_id text,
    first_turn_seq bigint CONSTRAINT chunk_vectors_first_turn_seq_not_null NOT NULL,
    last_turn_seq bigint CONSTRAINT chunk_vectors_last_turn_seq_not_null NOT NULL,
    first_at timestamp with time zone CONSTRAINT chunk_vectors_first_at_not_null NOT NULL,
    last_at timestamp with time zone CONSTRAINT chunk_vectors_last_at_not_null NOT NULL,
    embedding halfvec CONSTRAINT chunk_vectors_embedding_not_null NOT NULL
);

CREATE TABLE shardstore.chunk_vectors_h15 (
    session_id uuid CONSTRAINT chunk_vectors_session_id_not_null NOT NULL,
    chunk_seq bigint CONSTRAINT chunk_vectors_chunk_seq_not_null NOT NULL,
    chunk_start timestamp with time zone CONSTRAINT chunk_vectors_chunk_start_not_null NOT NULL,
    window_no integer CONSTRAINT chunk_vectors_window_no_not_null NOT NULL,
    tenant_id text CONSTRAINT chunk_vectors_tenant_id_not_null NOT NULL,
    agent_id text,
    first_turn_seq bigint CONSTRAINT chunk_vectors_first_turn_seq_not_null NOT NULL,
    last_turn_seq bigint CONSTRAINT chunk_vectors_last_turn_seq_not_null NOT NULL,
    first_at timestamp with time zone CONSTRAINT chunk_vectors_first_at_not_null NOT NULL,
    last_at timestamp with time zone CONSTRAINT chunk_vectors_last_at_not_null NOT NULL,
    embedding halfvec CONSTRAINT chunk_vectors_embedding_not_null NOT NULL
);

CREATE TABLE shardstore.chunk_vectors_h16 (
    session_id uuid CONSTRAINT chunk_vectors_session_id_not_null NOT NULL,
    chunk_seq bigint CONSTRAINT chunk_vectors_chunk_seq_not_null NOT NULL,
    chunk_start timestamp with time zone CONSTRAINT chunk_vectors_chunk_start_not_null NOT NULL,
    window_no integer CONSTRAINT chunk_vectors_window_no_not_null NOT NULL,
    tenant_id text CONSTRAINT chunk_vectors_tenant_id_not_null NOT NULL,
    agent_id text,
    first_turn_seq bigint CONSTRAINT chunk_vectors_first_turn_seq_not_null NOT NULL,
    last_turn_seq bigint CONSTRAINT chunk_vectors_last_turn_seq_not_null NOT NULL,
    first_at timestamp with time zone CONSTRAINT chunk_vectors_first_at_not_null NOT NULL,
    last_at timestamp with time zone CONSTRAINT chunk_vectors_last_at_not_null NOT NULL,
    embedding halfvec CONSTRAINT chunk_vectors_embedding_not_null NOT NULL
);

CREATE TABLE shardstore.chunk_vectors_h17 (
    session_id uuid CONSTRAINT chunk_vectors_session_id_not_null NOT NULL,
    chunk_seq bigint CONSTRAINT chunk_vectors_chunk_seq_not_null NOT NULL,
    chunk_start timestamp with time zone CONSTRAINT chunk_vectors_chunk_start_not_null NOT NULL,
    window_no integer CONSTRAINT chunk_vectors_window_no_not_null NOT NULL,
    tenant_id text CONSTRAINT chunk_vectors_tenant_id_not_null NOT NULL,
    agent_id text,
    first_turn_seq bigint CONSTRAINT chunk_vectors_first_turn_seq_not_null NOT NULL,
    last_turn_seq bigint CONSTRAINT chunk_vectors_last_turn_seq_not_null NOT NULL,
    first_at timestamp with time zone CONSTRAINT chunk_vectors_first_at_not_null NOT NULL,
    last_at timestamp with time zone CONSTRAINT chunk_vectors_last_at_not_null NOT NULL,
    embedding halfvec CONSTRAINT chunk_vectors_embedding_not_null NOT NULL
);

CREATE TABLE shardstore.chunk_vectors_h18 (
    session_id uuid CONSTRAINT chunk_vectors_session_id_not_null NOT NULL,
    chunk_seq bigint CONSTRAINT chunk_vectors_chunk_seq_not_null NOT NULL,
    chunk_start timestamp with time zone CONSTRAINT chunk_vectors_chunk_start_not_null NOT NULL,
    window_no integer CONSTRAINT chunk_vectors_window_no_not_null NOT NULL,
    tenant_id text CONSTRAINT chunk_vectors_tenant_id_not_null NOT NULL,
    agent_id text,
    first_turn_seq bigint CONSTRAINT chunk_vectors_first_turn_seq_not_null NOT NULL,
    last_turn_seq bigint CONSTRAINT chunk_vectors_last_turn_seq_not_null NOT NULL,
    first_at timestamp with time zone CONSTRAINT chunk_vectors_first_at_not_null NOT NULL,
    last_at timestamp with time zone CONSTRAINT chunk_vectors_last_at_not_null NOT NULL,
    embedding halfvec CONSTRAINT chunk_vectors_embedding_not_null NOT NULL
);

CREATE TABLE shardstore.chunk_vectors_h19 (
    session_id uuid CONSTRAINT chunk_vectors_session_id_not_null NOT NULL,
    chunk_seq bigint CONSTRAINT chunk_vectors_chunk_seq_not_null NOT NULL,
    chunk_start timestamp with time zone CONSTRAINT chunk_vectors_chunk_start_not_null NOT NULL,
    window_no integer CONSTRAINT chunk_vectors_window_no_not_null NOT NULL,
    tenant_id text CONSTRAINT chunk_vectors_tenant_id_not_null NOT NULL,
    agent_id text,
    first_turn_seq bigint CONSTRAINT chunk_vectors_first_turn_seq_not_null NOT NULL,
    last_turn_seq bigint CONSTRAINT chunk_vectors_last_turn_seq_not_null NOT NULL,
    first_at timestamp with time zone CONSTRAINT chunk_vectors_first_at_not_null NOT NULL,
    last_at timestamp with time zone CONSTRAINT chunk_vectors_last_at_not_null NOT NULL,
    embedding halfvec CONSTRAINT chunk_vectors_embedding_not_null NOT NULL
);

CREATE TABLE shardstore.chunk_vectors_h20 (
    session_id uuid CONSTRAINT chunk_vectors_session_id_not_null NOT NULL,
    chunk_seq bigint CONSTRAINT chunk_vectors_chunk_seq_not_null NOT NULL,
    chunk_start timestamp with time zone CONSTRAINT chunk_vectors_chunk_start_not_null NOT NULL,
    window_no integer CONSTRAINT chunk_vectors_window_no_not_null NOT NULL,
    tenant_id text CONSTRAINT chunk_vectors_tenant_id_not_null NOT NULL,
    agent_id text,
    first_turn_seq bigint CONSTRAINT chunk_vectors_first_turn_seq_not_null NOT NULL,
    last_turn_seq bigint CONSTRAINT chunk_vectors_last_turn_seq_not_null NOT NULL,
    first_at timestamp with time zone CONSTRAINT chunk_vectors_first_at_not_null NOT NULL,
    last_at timestamp with time zone CONSTRAINT chunk_vectors_last_at_not_null NOT NULL,
    embedding halfvec CONSTRAINT chunk_vectors_embedding_not_null NOT NULL
);

CREATE TABLE shardstore.chunk_vectors_h21 (
    session_id uuid CONSTRAINT chunk_vectors_session_id_not_null NOT NULL,
    chunk_seq bigint CONSTRAINT chunk_vectors_chunk_seq_not_null NOT NULL,
    chunk_start timestamp with time zone CONSTRAINT chunk_vectors_chunk_start_not_null NOT NULL,
    window_no integer CONSTRAINT chunk_vectors_window_no_not_null NOT NULL,
    tenant_id text CONSTRAINT chunk_vectors_tenant_id_not_null NOT NULL,
    agent_id text,
    first_turn_seq bigint CONSTRAINT chunk_vectors_first_turn_seq_not_null NOT NULL,
    last_turn_seq bigint CONSTRAINT chunk_vectors_last_turn_seq_not_null NOT NULL,
    first_at timestamp with time zone CONSTRAINT chunk_vectors_first_at_not_null NOT NULL,
    last_at timestamp with time zone CONSTRAINT chunk_vectors_last_at_not_null NOT NULL,
    embedding halfvec CONSTRAINT chunk_vectors_embedding_not_null NOT NULL
);

CREATE TABLE shardstore.chunk_vectors_h22 (
    session_id uuid CONSTRAINT chunk_vectors_session_id_not_null NOT NULL,
    chunk_seq bigint CONSTRAINT chunk_vectors_chunk_seq_not_null NOT NULL,
    chunk_start timestamp with time zone CONSTRAINT chunk_vectors_chunk_start_not_null NOT NULL,
    window_no integer CONSTRAINT chunk_vectors_window_no_not_null NOT NULL,
    tenant_id text CONSTRAINT chunk_vectors_tenant_id_not_null NOT NULL,
    agent_id text,
    first_turn_seq bigint CONSTRAINT chunk_vectors_first_turn_seq_not_null NOT NULL,
    last_turn_seq bigint CONSTRAINT chunk_vectors_last_turn_seq_not_null NOT NULL,
    first_at timestamp with time zone CONSTRAINT chunk_vectors_first_at_not_null NOT NULL,
    last_at timestamp with time zone CONSTRAINT chunk_vectors_last_at_not_null NOT NULL,
    embedding halfvec CONSTRAINT chunk_vectors_embedding_not_null NOT NULL
);

CREATE TABLE shardstore.chunk_vectors_h23 (
    session_id uuid CONSTRAINT chunk_vectors_session_id_not_null NOT NULL,
    chunk_seq bigint CONSTRAINT chunk_vectors_chunk_seq_not_null NOT NULL,
    chunk_start timestamp with time zone CONSTRAINT chunk_vectors_chunk_start_not_null NOT NULL,
    window_no integer CONSTRAINT chunk_vectors_window_no_not_null NOT NULL,
    tenant_id text CONSTRAINT chunk_vectors_tenant_id_not_null NOT NULL,
    agent_id text,
    first_turn_seq bigint CONSTRAINT chunk_vectors_first_turn_seq_not_null NOT NULL,
    last_turn_seq bigint CONSTRAINT chunk_vectors_last_turn_seq_not_null NOT NULL,
    first_at timestamp with time zone CONSTRAINT chunk_vectors_first_at_not_null NOT NULL,
    last_at timestamp with time zone CONSTRAINT chunk_vectors_last_at_not_null NOT NULL,
    embedding halfvec CONSTRAINT chunk_vectors_embedding_not_null NOT NULL
);

CREATE TABLE shardstore.chunk_vectors_h24 (
    session_id uuid CONSTRAINT chunk_vectors_session_id_not_null NOT NULL,
    chunk_seq bigint CONSTRAINT chunk_vectors_chunk_seq_not_null NOT NULL,
    chunk_start timestamp with time zone CONSTRAINT chunk_vectors_chunk_start_not_null NOT NULL,
    window_no integer CONSTRAINT chunk_vectors_window_no_not_null NOT NULL,
    tenant_id text CONSTRAINT chunk_vectors_tenant_id_not_null NOT NULL,
    agent_id text,
    first_turn_seq bigint CONSTRAINT chunk_vectors_first_turn_seq_not_null NOT NULL,
    last_turn_seq bigint CONSTRAINT chunk_vectors_last_turn_seq_not_null NOT NULL,
    first_at timestamp with time zone CONSTRAINT chunk_vectors_first_at_not_null NOT NULL,
    last_at timestamp with time zone CONSTRAINT chunk_vectors_last_at_not_null NOT NULL,
    embedding halfvec CONSTRAINT chunk_vectors_embedding_not_null NOT NULL
);

CREATE TABLE shardstore.chunk_vectors_h25 (
    session_id uuid CONSTRAINT chunk_vectors_session_id_not_null NOT NULL,
    chunk_seq bigint CONSTRAINT chunk_vectors_chunk_seq_not_null NOT NULL,
    chunk_start timestamp with time zone CONSTRAINT chunk_vectors_chunk_start_not_null NOT NULL,
    window_no integer CONSTRAINT chunk_vectors_window_no_not_null NOT NULL,
    tenant_id text CONSTRAINT chunk_vectors_tenant_id_not_null NOT NULL,
    agent_id text,
    first_turn_seq bigint CONSTRAINT chunk_vectors_first_turn_seq_not_null NOT NULL,
    last_turn_seq bigint CONSTRAINT chunk_vectors_last_turn_seq_not_null NOT NULL,
    first_at timestamp with time zone CONSTRAINT chunk_vectors_first_at_not_null NOT NULL,
    last_at timestamp with time zone CONSTRAINT chunk_vectors_last_at_not_null NOT NULL,
    embedding halfvec CONSTRAINT chunk_vectors_embedding_not_null NOT NULL
);

CREATE TABLE shardstore.chunk_vectors_h26 (
    session_id uuid CONSTRAINT chunk_vectors_session_id_not_null NOT NULL,
    chunk_seq bigint CONSTRAINT chunk_vectors_chunk_seq_not_null NOT NULL,
    chunk_start timestamp with time zone CONSTRAINT chunk_vectors_chunk_start_not_null NOT NULL,
    window_no integer CONSTRAINT chunk_vectors_window_no_not_null NOT NULL,
    tenant_id text CONSTRAINT chunk_vectors_tenant_id_not_null NOT NULL,
    agent_id text,
    first_turn_seq bigint CONSTRAINT chunk_vectors_first_turn_seq_not_null NOT NULL,
    last_turn_seq bigint CONSTRAINT chunk_vectors_last_turn_seq_not_null NOT NULL,
    first_at timestamp with time zone CONSTRAINT chunk_vectors_first_at_not_null NOT NULL,
    last_at timestamp with time zone CONSTRAINT chunk_vectors_last_at_not_null NOT NULL,
    embedding halfvec CONSTRAINT chunk_vectors_embedding_not_null NOT NULL
);

CREATE TABLE shardstore.chunk_vectors_h27 (
    session_id uuid CONSTRAINT chunk_vectors_session_id_not_null NOT NULL,
    chunk_seq bigint CONSTRAINT chunk_vectors_chunk_seq_not_null NOT NULL,
    chunk_start timestamp with time zone CONSTRAINT chunk_vectors_chunk_start_not_null NOT NULL,
    window_no integer CONSTRAINT chunk_vectors_window_no_not_null NOT NULL,
    tenant_id text CONSTRAINT chunk_vectors_tenant_id_not_null NOT NULL,
    agent_id text,
    first_turn_seq bigint CONSTRAINT chunk_vectors_first_turn_seq_not_null NOT NULL,
    last_turn_seq bigint CONSTRAINT chunk_vectors_last_turn_seq_not_null NOT NULL,
    first_at timestamp with time zone CONSTRAINT chunk_vectors_first_at_not_null NOT NULL,
    last_at timestamp with time zone CONSTRAINT chunk_vectors_last_at_not_null NOT NULL,
    embedding halfvec CONSTRAINT chunk_vectors_embedding_not_null NOT NULL
);

CREATE TABLE shardstore.chunk_vectors_h28 (
    session_id uuid CONSTRAINT chunk_vectors_session_id_not_null NOT NULL,
    chunk_seq bigint CONSTRAINT chunk_vectors_chunk_seq_not_null NOT NULL,
    chunk_start timestamp with time zone CONSTRAINT chunk_vectors_chunk_start_not_null NOT NULL,
    window_no integer CONSTRAINT chunk_vectors_window_no_not_null NOT NULL,
    tenant_id text CONSTRAINT chunk_vectors_tenant_id_not_null NOT NULL,
    agent_id text,
    first_turn_seq bigint CONSTRAINT chunk_vectors_first_turn_seq_not_null NOT NULL,
    last_turn_seq bigint CONSTRAINT chunk_vectors_last_turn_seq_not_null NOT NULL,
    first_at timestamp with time zone CONSTRAINT chunk_vectors_first_at_not_null NOT NULL,
    last_at timestamp with time zone CONSTRAINT chunk_vectors_last_at_not_null NOT NULL,
    embedding halfvec CONSTRAINT chunk_vectors_embedding_not_null NOT NULL
);

CREATE TABLE shardstore.chunk_vectors_h29 (
    session_id uuid CONSTRAINT chunk_vectors_session_id_not_null NOT NULL,
    chunk_seq bigint CONSTRAINT chunk_vectors_chunk_seq_not_null NOT NULL,
    chunk_start timestamp with time zone CONSTRAINT chunk_vectors_chunk_start_not_null NOT NULL,
    window_no integer CONSTRAINT chunk_vectors_window_no_not_null NOT NULL,
    tenant_id text CONSTRAINT chunk_vectors_tenant_id_not_null NOT NULL,
    agent_id text,
    first_turn_seq bigint CONSTRAINT chunk_vectors_first_turn_seq_not_null NOT NULL,
    last_turn_seq bigint CONSTRAINT chunk_vectors_last_turn_seq_not_null NOT NULL,
    first_at timestamp with time zone CONSTRAINT chunk_vectors_first_at_not_null NOT NULL,
    last_at timestamp with time zone CONSTRAINT chunk_vectors_last_at_not_null NOT NULL,
    embedding halfvec CONSTRAINT chunk_vectors_embedding_not_null NOT NULL
);

CREATE TABLE shardstore.chunk_vectors_h30 (
    session_id uuid CONSTRAINT chunk_vectors_session_id_not_null NOT NULL,
    chunk_seq bigint CONSTRAINT chunk_vectors_chunk_seq_not_null NOT NULL,
    chunk_start timestamp with time zone CONSTRAINT chunk_vectors_chunk_start_not_null NOT NULL,
    window_no integer CONSTRAINT chunk_vectors_window_no_not_null NOT NULL,
    tenant_id text CONSTRAINT chunk_vectors_tenant_id_not_null NOT NULL,
    agent_id text,
    first_turn_seq bigint CONSTRAINT chunk_vectors_first_turn_seq_not_null NOT NULL,
    last_turn_seq bigint CONSTRAINT chunk_vectors_last_turn_seq_not_null NOT NULL,
    first_at timestamp with time zone CONSTRAINT chunk_vectors_first_at_not_null NOT NULL,
    last_at timestamp with time zone CONSTRAINT chunk_vectors_last_at_not_null NOT NULL,
    embedding halfvec CONSTRAINT chunk_vectors_embedding_not_null NOT NULL
);

CREATE TABLE shardstore.chunk_vectors_h31 (
    session_id uuid CONSTRAINT chunk_vectors_session_id_not_null NOT NULL,
    chunk_seq bigint CONSTRAINT chunk_vectors_chunk_seq_not_null NOT NULL,
    chunk_start timestamp with time zone CONSTRAINT chunk_vectors_chunk_start_not_null NOT NULL,
    window_no integer CONSTRAINT chunk_vectors_window_no_not_null NOT NULL,
    tenant_id text CONSTRAINT chunk_vectors_tenant_id_not_null NOT NULL,
    agent_id text,
    first_turn_seq bigint CONSTRAINT chunk_vectors_first_turn_seq_not_null NOT NULL,
    last_turn_seq bigint CONSTRAINT chunk_vectors_last_turn_seq_not_null NOT NULL,
    first_at timestamp with time zone CONSTRAINT chunk_vectors_first_at_not_null NOT NULL,
    last_at timestamp with time zone CONSTRAINT chunk_vectors_last_at_not_null NOT NULL,
    embedding halfvec CONSTRAINT chunk_vectors_embedding_not_null NOT NULL
);

CREATE TABLE shardstore.config (
    singleton boolean DEFAULT true NOT NULL,
    partition_interval interval NOT NULL,
    partition_origin timestamp with time zone DEFAULT '2001-01-01 00:00:00+00'::timestamp with time zone NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT config_partition_interval_check CHECK ((partition_interval >= '00:00:01'::interval)),
    CONSTRAINT config_singleton_check CHECK (singleton)
);

CREATE TABLE shardstore.embed_marks (
    session_id uuid NOT NULL,
    tenant_id text NOT NULL,
    upto bigint NOT NULL,
    marked_at timestamp with time zone NOT NULL
);

CREATE TABLE shardstore.embed_queue (
    session_id uuid NOT NULL,
    chunk_seq bigint NOT NULL,
    chunk_start timestamp with time zone NOT NULL,
    queued_at timestamp with time zone DEFAULT now() NOT NULL,
    tenant_id text NOT NULL
);

CREATE TABLE shardstore.embedding_config (
    singleton boolean DEFAULT true NOT NULL,
    model text NOT NULL,
    dimension integer NOT NULL,
    window_tokens integer NOT NULL,
    configured_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT embedding_config_dimension_check CHECK (((dimension >= 1) AND (dimension <= 4000))),
    CONSTRAINT embedding_config_model_check CHECK ((model <> ''::text)),
    CONSTRAINT embedding_config_singleton_check CHECK (singleton),
    CONSTRAINT embedding_config_window_tokens_check CHECK ((window_tokens > 0))
);

CREATE TABLE shardstore.facts (
    tenant_id text NOT NULL,
    fact_id uuid NOT NULL,
    subject text NOT NULL,
    key text NOT NULL,
    value jsonb NOT NULL,
    confidence double precision,
    source_session_id uuid,
    source_turn_seq bigint,
    valid_from timestamp with time zone NOT NULL,
    valid_to timestamp with time zone,
    recorded_at timestamp with time zone NOT NULL,
    CONSTRAINT facts_check CHECK (((source_session_id IS NULL) = (source_turn_seq IS NULL))),
    CONSTRAINT facts_check1 CHECK (((valid_to IS NULL) OR (valid_to > valid_from))),
    CONSTRAINT facts_confidence_check CHECK (((confidence IS NULL) OR ((confidence >= (0)::double precision) AND (confidence <= (1)::double precision)))),
    CONSTRAINT facts_source_turn_seq_check CHECK (((source_turn_seq IS NULL) OR (source_turn_seq >= 0)))
);

CREATE TABLE shardstore.fork_copies (
    session_id uuid NOT NULL,
    chunk_seq bigint NOT NULL,
    origin_session_id uuid NOT NULL,
    chunk_start timestamp with time zone NOT NULL,
    first_turn_seq bigint NOT NULL,
    last_turn_seq bigint NOT NULL,
    tenant_id text NOT NULL
);

CREATE TABLE shardstore.langgraph_checkpoints (
    session_id uuid NOT NULL,
    checkpoint_ns text NOT NULL,
    checkpoint_id text NOT NULL,
    parent_id text,
    shard_id uuid NOT NULL,
    turn_seq bigint NOT NULL,
    run_id text,
    tenant_id text NOT NULL,
    CONSTRAINT langgraph_checkpoints_turn_seq_check CHECK ((turn_seq >= '-1'::integer))
);

CREATE TABLE shardstore.langgraph_writes (
    session_id uuid NOT NULL,
    checkpoint_ns text NOT NULL,
    checkpoint_id text NOT NULL,
    task_id text NOT NULL,
    idx integer NOT NULL,
    channel text NOT NULL,
    value_type text NOT NULL,
    value bytea NOT NULL,
    task_path text DEFAULT ''::text NOT NULL,
    turn_seq bigint NOT NULL,
    tenant_id text NOT NULL,
    CONSTRAINT langgraph_writes_turn_seq_check CHECK ((turn_seq >= '-1'::integer))
);

CREATE TABLE shardstore.maintenance_runs (
    run_id bigint NOT NULL,
    source text NOT NULL,
    started_at timestamp with time zone NOT NULL,
    finished_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    healthy boolean NOT NULL,
    report jsonb NOT NULL
);

ALTER TABLE shardstore.maintenance_runs ALTER COLUMN run_id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME shardstore.maintenance_runs_run_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

CREATE TABLE shardstore.table_registry (
    table_name regclass NOT NULL,
    kind text DEFAULT 'session'::text NOT NULL,
    session_column name DEFAULT 'session_id'::name,
    turn_column name,
    chunk_column name,
    chunk_start_column name,
    tenant_column name,
    "position" integer DEFAULT 100 NOT NULL,
    builtin boolean DEFAULT false NOT NULL,
    purge_rows boolean DEFAULT true NOT NULL,
    rewrite_reset name[] DEFAULT '{}'::name[] NOT NULL,
    rls boolean DEFAULT true NOT NULL,
    tenant_grants text DEFAULT 'SELECT, INSERT, UPDATE, DELETE'::text,
    note text,
    registered_at timestamp with time zone DEFAULT now() NOT NULL,
    session_nullable boolean DEFAULT false NOT NULL,
    CONSTRAINT table_registry_check CHECK (((kind = 'session'::text) = (session_column IS NOT NULL))),
    CONSTRAINT table_registry_check1 CHECK (((kind = 'session'::text) OR ((turn_column IS NULL) AND (chunk_column IS NULL) AND (tenant_column IS NULL) AND (purge_rows IS NOT TRUE) AND (cardinality(rewrite_reset) = 0)))),
    CONSTRAINT table_registry_check2 CHECK (((kind = 'global'::text) OR rls)),
    CONSTRAINT table_registry_check3 CHECK (((turn_column IS NULL) OR (chunk_column IS NULL))),
    CONSTRAINT table_registry_check4 CHECK (((chunk_start_column IS NULL) OR (chunk_column IS NOT NULL))),
    CONSTRAINT table_registry_kind_check CHECK ((kind = ANY (ARRAY['session'::text, 'global'::text]))),
    CONSTRAINT table_registry_position_check CHECK (("position" >= 0)),
    CONSTRAINT table_registry_tenant_grants_check CHECK ((tenant_grants ~ '^(SELECT|INSERT|UPDATE|DELETE)(, (SELECT|INSERT|UPDATE|DELETE))*$'::text))
);

CREATE TABLE shardstore.summary_queue (
    session_id uuid NOT NULL,
    chunk_seq bigint NOT NULL,
    chunk_start timestamp with time zone NOT NULL,
    queued_at timestamp with time zone DEFAULT now() NOT NULL,
    tenant_id text NOT NULL
);

CREATE TABLE shardstore.text_search_config (
    singleton boolean DEFAULT true NOT NULL,
    config regconfig DEFAULT 'english'::regconfig,
    configured_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT text_search_config_singleton_check CHECK (singleton)
);

CREATE TABLE shardstore.turn_buffer (
    session_id uuid NOT NULL,
    turn_seq bigint NOT NULL,
    chunk_seq bigint NOT NULL,
    created_at timestamp with time zone NOT NULL,
    tokens integer NOT NULL,
    bytes integer NOT NULL,
    idempotency_key text,
    message jsonb NOT NULL,
    tenant_id text NOT NULL
)
WITH (autovacuum_vacuum_scale_factor='0', autovacuum_vacuum_threshold='2000', autovacuum_vacuum_insert_scale_factor='0', autovacuum_vacuum_insert_threshold='2000');

CREATE TABLE shardstore.turn_keys (
    session_id uuid NOT NULL,
    idempotency_key text NOT NULL,
    turn_seq bigint NOT NULL,
    chunk_seq bigint NOT NULL,
    tokens integer NOT NULL,
    created_at timestamp with time zone NOT NULL,
    tenant_id text NOT NULL
);

CREATE TABLE shardstore.turn_text (
    session_id uuid NOT NULL,
    turn_seq bigint NOT NULL,
    window_no integer NOT NULL,
    chunk_seq bigint NOT NULL,
    tenant_id text NOT NULL,
    agent_id text,
    created_at timestamp with time zone NOT NULL,
    tsv integer[] NOT NULL
)
PARTITION BY HASH (session_id);

CREATE TABLE shardstore.turn_text_h00 (
    session_id uuid CONSTRAINT turn_text_session_id_not_null NOT NULL,
    turn_seq bigint CONSTRAINT turn_text_turn_seq_not_null NOT NULL,
    window_no integer CONSTRAINT turn_text_window_no_not_null NOT NULL,
    chunk_seq bigint CONSTRAINT turn_text_chunk_seq_not_null NOT NULL,
    tenant_id text CONSTRAINT turn_text_tenant_id_not_null NOT NULL,
    agent_id text,
    created_at timestamp with time zone CONSTRAINT turn_text_created_at_not_null NOT NULL,
    tsv integer[] CONSTRAINT turn_text_tsv_not_null NOT NULL
);

CREATE TABLE shardstore.turn_text_h01 (
    session_id uuid CONSTRAINT turn_text_session_id_not_null NOT NULL,
    turn_seq bigint CONSTRAINT turn_text_turn_seq_not_null NOT NULL,
    window_no integer CONSTRAINT turn_text_window_no_not_null NOT NULL,
    chunk_seq bigint CONSTRAINT turn_text_chunk_seq_not_null NOT NULL,
    tenant_id text CONSTRAINT turn_text_tenant_id_not_null NOT NULL,
    agent_id text,
    created_at timestamp with time zone CONSTRAINT turn_text_created_at_not_null NOT NULL,
    tsv integer[] CONSTRAINT turn_text_tsv_not_null NOT NULL
);

CREATE TABLE shardstore.turn_text_h02 (
    session_id uuid CONSTRAINT turn_text_session_id_not_null NOT NULL,
    turn_seq bigint CONSTRAINT turn_text_turn_seq_not_null NOT NULL,
    window_no integer CONSTRAINT turn_text_window_no_not_null NOT NULL,
    chunk_seq bigint CONSTRAINT turn_text_chunk_seq_not_null NOT NULL,
    tenant_id text CONSTRAINT turn_text_tenant_id_not_null NOT NULL,
    agent_id text,
    created_at timestamp with time zone CONSTRAINT turn_text_created_at_not_null NOT NULL,
    tsv integer[] CONSTRAINT turn_text_tsv_not_null NOT NULL
);

CREATE TABLE shardstore.turn_text_h03 (
    session_id uuid CONSTRAINT turn_text_session_id_not_null NOT NULL,
    turn_seq bigint CONSTRAINT turn_text_turn_seq_not_null NOT NULL,
    window_no integer CONSTRAINT turn_text_window_no_not_null NOT NULL,
    chunk_seq bigint CONSTRAINT turn_text_chunk_seq_not_null NOT NULL,
    tenant_id text CONSTRAINT turn_text_tenant_id_not_null NOT NULL,
    agent_id text,
    created_at timestamp with time zone CONSTRAINT turn_text_created_at_not_null NOT NULL,
    tsv integer[] CONSTRAINT turn_text_tsv_not_null NOT NULL
);

CREATE TABLE shardstore.turn_text_h04 (
    session_id uuid CONSTRAINT turn_text_session_id_not_null NOT NULL,
    turn_seq bigint CONSTRAINT turn_text_turn_seq_not_null NOT NULL,
    window_no integer CONSTRAINT turn_text_window_no_not_null NOT NULL,
    chunk_seq bigint CONSTRAINT turn_text_chunk_seq_not_null NOT NULL,
    tenant_id text CONSTRAINT turn_text_tenant_id_not_null NOT NULL,
    agent_id text,
    created_at timestamp with time zone CONSTRAINT turn_text_created_at_not_null NOT NULL,
    tsv integer[] CONSTRAINT turn_text_tsv_not_null NOT NULL
);

CREATE TABLE shardstore.turn_text_h05 (
    session_id uuid CONSTRAINT turn_text_session_id_not_null NOT NULL,
    turn_seq bigint CONSTRAINT turn_text_turn_seq_not_null NOT NULL,
    window_no integer CONSTRAINT turn_text_window_no_not_null NOT NULL,
    chunk_seq bigint CONSTRAINT turn_text_chunk_seq_not_null NOT NULL,
    tenant_id text CONSTRAINT turn_text_tenant_id_not_null NOT NULL,
    agent_id text,
    created_at timestamp with time zone CONSTRAINT turn_text_created_at_not_null NOT NULL,
    tsv integer[] CONSTRAINT turn_text_tsv_not_null NOT NULL
);

CREATE TABLE shardstore.turn_text_h06 (
    session_id uuid CONSTRAINT turn_text_session_id_not_null NOT NULL,
    turn_seq bigint CONSTRAINT turn_text_turn_seq_not_null NOT NULL,
    window_no integer CONSTRAINT turn_text_window_no_not_null NOT NULL,
    chunk_seq bigint CONSTRAINT turn_text_chunk_seq_not_null NOT NULL,
    tenant_id text CONSTRAINT turn_text_tenant_id_not_null NOT NULL,
    agent_id text,
    created_at timestamp with time zone CONSTRAINT turn_text_created_at_not_null NOT NULL,
    tsv integer[] CONSTRAINT turn_text_tsv_not_null NOT NULL
);

CREATE TABLE shardstore.turn_text_h07 (
    session_id uuid CONSTRAINT turn_text_session_id_not_null NOT NULL,
    turn_seq bigint CONSTRAINT turn_text_turn_seq_not_null NOT NULL,
    window_no integer CONSTRAINT turn_text_window_no_not_null NOT NULL,
    chunk_seq bigint CONSTRAINT turn_text_chunk_seq_not_null NOT NULL,
    tenant_id text CONSTRAINT turn_text_tenant_id_not_null NOT NULL,
    agent_id text,
    created_at timestamp with time zone CONSTRAINT turn_text_created_at_not_null NOT NULL,
    tsv integer[] CONSTRAINT turn_text_tsv_not_null NOT NULL
);

CREATE TABLE shardstore.turn_text_h08 (
    session_id uuid CONSTRAINT turn_text_session_id_not_null NOT NULL,
    turn_seq bigint CONSTRAINT turn_text_turn_seq_not_null NOT NULL,
    window_no integer CONSTRAINT turn_text_window_no_not_null NOT NULL,
    chunk_seq bigint CONSTRAINT turn_text_chunk_seq_not_null NOT NULL,
    tenant_id text CONSTRAINT turn_text_tenant_id_not_null NOT NULL,
    agent_id text,
    created_at timestamp with time zone CONSTRAINT turn_text_created_at_not_null NOT NULL,
    tsv integer[] CONSTRAINT turn_text_tsv_not_null NOT NULL
);

CREATE TABLE shardstore.turn_text_h09 (
    session_id uuid CONSTRAINT turn_text_session_id_not_null NOT NULL,
    turn_seq bigint CONSTRAINT turn_text_turn_seq_not_null NOT NULL,
    window_no integer CONSTRAINT turn_text_window_no_not_null NOT NULL,
    chunk_seq bigint CONSTRAINT turn_text_chunk_seq_not_null NOT NULL,
    tenant_id text CONSTRAINT turn_text_tenant_id_not_null NOT NULL,
    agent_id text,
    created_at timestamp with time zone CONSTRAINT turn_text_created_at_not_null NOT NULL,
    tsv integer[] CONSTRAINT turn_text_tsv_not_null NOT NULL
);

CREATE TABLE shardstore.turn_text_h10 (
    session_id uuid CONSTRAINT turn_text_session_id_not_null NOT NULL,
    turn_seq bigint CONSTRAINT turn_text_turn_seq_not_null NOT NULL,
    window_no integer CONSTRAINT turn_text_window_no_not_null NOT NULL,
    chunk_seq bigint CONSTRAINT turn_text_chunk_seq_not_null NOT NULL,
    tenant_id text CONSTRAINT turn_text_tenant_id_not_null NOT NULL,
    agent_id text,
    created_at timestamp with time zone CONSTRAINT turn_text_created_at_not_null NOT NULL,
    tsv integer[] CONSTRAINT turn_text_tsv_not_null NOT NULL
);

CREATE TABLE shardstore.turn_text_h11 (
    session_id uuid CONSTRAINT turn_text_session_id_not_null NOT NULL,
    turn_seq bigint CONSTRAINT turn_text_turn_seq_not_null NOT NULL,
    window_no integer CONSTRAINT turn_text_window_no_not_null NOT NULL,
    chunk_seq bigint CONSTRAINT turn_text_chunk_seq_not_null NOT NULL,
    tenant_id text CONSTRAINT turn_text_tenant_id_not_null NOT NULL,
    agent_id text,
    created_at timestamp with time zone CONSTRAINT turn_text_created_at_not_null NOT NULL,
    tsv integer[] CONSTRAINT turn_text_tsv_not_null NOT NULL
);

CREATE TABLE shardstore.turn_text_h12 (
    session_id uuid CONSTRAINT turn_text_session_id_not_null NOT NULL,
    turn_seq bigint CONSTRAINT turn_text_turn_seq_not_null NOT NULL,
    window_no integer CONSTRAINT turn_text_window_no_not_null NOT NULL,
    chunk_seq bigint CONSTRAINT turn_text_chunk_seq_not_null NOT NULL,
    tenant_id text CONSTRAINT turn_text_tenant_id_not_null NOT NULL,
    agent_id text,
    created_at timestamp with time zone CONSTRAINT turn_text_created_at_not_null NOT NULL,
    tsv integer[] CONSTRAINT turn_text_tsv_not_null NOT NULL
);

CREATE TABLE shardstore.turn_text_h13 (
    session_id uuid CONSTRAINT turn_text_session_id_not_null NOT NULL,
    turn_seq bigint CONSTRAINT turn_text_turn_seq_not_null NOT NULL,
    window_no integer CONSTRAINT turn_text_window_no_not_null NOT NULL,
    chunk_seq bigint CONSTRAINT turn_text_chunk_seq_not_null NOT NULL,
    tenant_id text CONSTRAINT turn_text_tenant_id_not_null NOT NULL,
    agent_id text,
    created_at timestamp with time zone CONSTRAINT turn_text_created_at_not_null NOT NULL,
    tsv integer[] CONSTRAINT turn_text_tsv_not_null NOT NULL
);

CREATE TABLE shardstore.turn_text_h14 (
    session_id uuid CONSTRAINT turn_text_session_id_not_null NOT NULL,
    turn_seq bigint CONSTRAINT turn_text_turn_seq_not_null NOT NULL,
    window_no integer CONSTRAINT turn_text_window_no_not_null NOT NULL,
    chunk_seq bigint CONSTRAINT turn_text_chunk_seq_not_null NOT NULL,
    tenant_id text CONSTRAINT turn_text_tenant_id_not_null NOT NULL,
    agent_id text,
    created_at timestamp with time zone CONSTRAINT turn_text_created_at_not_null NOT NULL,
    tsv integer[] CONSTRAINT turn_text_tsv_not_null NOT NULL
);

CREATE TABLE shardstore.turn_text_h15 (
    session_id uuid CONSTRAINT turn_text_session_id_not_null NOT NULL,
    turn_seq bigint CONSTRAINT turn_text_turn_seq_not_null NOT NULL,
    window_no integer CONSTRAINT turn_text_window_no_not_null NOT NULL,
    chunk_seq bigint CONSTRAINT turn_text_chunk_seq_not_null NOT NULL,
    tenant_id text CONSTRAINT turn_text_tenant_id_not_null NOT NULL,
    agent_id text,
    created_at timestamp with time zone CONSTRAINT turn_text_created_at_not_null NOT NULL,
    tsv integer[] CONSTRAINT turn_text_tsv_not_null NOT NULL
);

ALTER TABLE ONLY shardstore.chunk_vectors ATTACH PARTITION shardstore.chunk_vectors_h00 FOR VALUES WITH (modulus 32, remainder 0);

ALTER TABLE ONLY shardstore.chunk_vectors ATTACH PARTITION shardstore.chunk_vectors_h01 FOR VALUES WITH (modulus 32, remainder 1);

ALTER TABLE ONLY shardstore.chunk_vectors ATTACH PARTITION shardstore.chunk_vectors_h02 FOR VALUES WITH (modulus 32, remainder 2);

ALTER TABLE ONLY shardstore.chunk_vectors ATTACH PARTITION shardstore.chunk_vectors_h03 FOR VALUES WITH (modulus 32, remainder 3);

ALTER TABLE ONLY shardstore.chunk_vectors ATTACH PARTITION shardstore.chunk_vectors_h04 FOR VALUES WITH (modulus 32, remainder 4);

ALTER TABLE ONLY shardstore.chunk_vectors ATTACH PARTITION shardstore.chunk_vectors_h05 FOR VALUES WITH (modulus 32, remainder 5);

ALTER TABLE ONLY shardstore.chunk_vectors ATTACH PARTITION shardstore.chunk_vectors_h06 FOR VALUES WITH (modulus 32, remainder 6);

ALTER TABLE ONLY shardstore.chunk_vectors ATTACH PARTITION shardstore.chunk_vectors_h07 FOR VALUES WITH (modulus 32, remainder 7);

ALTER TABLE ONLY shardstore.chunk_vectors ATTACH PARTITION shardstore.chunk_vectors_h08 FOR VALUES WITH (modulus 32, remainder 8);

ALTER TABLE ONLY shardstore.chunk_vectors ATTACH PARTITION shardstore.chunk_vectors_h09 FOR VALUES WITH (modulus 32, remainder 9);

ALTER TABLE ONLY shardstore.chunk_vectors ATTACH PARTITION shardstore.chunk_vectors_h10 FOR VALUES WITH (modulus 32, remainder 10);

ALTER TABLE ONLY shardstore.chunk_vectors ATTACH PARTITION shardstore.chunk_vectors_h11 FOR VALUES WITH (modulus 32, remainder 11);

ALTER TABLE ONLY shardstore.chunk_vectors ATTACH PARTITION shardstore.chunk_vectors_h12 FOR VALUES WITH (modulus 32, remainder 12);

ALTER TABLE ONLY shardstore.chunk_vectors ATTACH PARTITION shardstore.chunk_vectors_h13 FOR VALUES WITH (modulus 32, remainder 13);

ALTER TABLE ONLY shardstore.chunk_vectors ATTACH PARTITION shardstore.chunk_vectors_h14 FOR VALUES WITH (modulus 32, remainder 14);

ALTER TABLE ONLY shardstore.chunk_vectors ATTACH PARTITION shardstore.chunk_vectors_h15 FOR VALUES WITH (modulus 32, remainder 15);

ALTER TABLE ONLY shardstore.chunk_vectors ATTACH PARTITION shardstore.chunk_vectors_h16 FOR VALUES WITH (modulus 32, remainder 16);

ALTER TABLE ONLY shardstore.chunk_vectors ATTACH PARTITION shardstore.chunk_vectors_h17 FOR VALUES WITH (modulus 32, remainder 17);

ALTER TABLE ONLY shardstore.chunk_vectors ATTACH PARTITION shardstore.chunk_vectors_h18 FOR VALUES WITH (modulus 32, remainder 18);

ALTER TABLE ONLY shardstore.chunk_vectors ATTACH PARTITION shardstore.chunk_vectors_h19 FOR VALUES WITH (modulus 32, remainder 19);

ALTER TABLE ONLY shardstore.chunk_vectors ATTACH PARTITION shardstore.chunk_vectors_h20 FOR VALUES WITH (modulus 32, remainder 20);

ALTER TABLE ONLY shardstore.chunk_vectors ATTACH PARTITION shardstore.chunk_vectors_h21 FOR VALUES WITH (modulus 32, remainder 21);

ALTER TABLE ONLY shardstore.chunk_vectors ATTACH PARTITION shardstore.chunk_vectors_h22 FOR VALUES WITH (modulus 32, remainder 22);

ALTER TABLE ONLY shardstore.chunk_vectors ATTACH PARTITION shardstore.chunk_vectors_h23 FOR VALUES WITH (modulus 32, remainder 23);

ALTER TABLE ONLY shardstore.chunk_vectors ATTACH PARTITION shardstore.chunk_vectors_h24 FOR VALUES WITH (modulus 32, remainder 24);

ALTER TABLE ONLY shardstore.chunk_vectors ATTACH PARTITION shardstore.chunk_vectors_h25 FOR VALUES WITH (modulus 32, remainder 25);

ALTER TABLE ONLY shardstore.chunk_vectors ATTACH PARTITION shardstore.chunk_vectors_h26 FOR VALUES WITH (modulus 32, remainder 26);

ALTER TABLE ONLY shardstore.chunk_vectors ATTACH PARTITION shardstore.chunk_vectors_h27 FOR VALUES WITH (modulus 32, remainder 27);

ALTER TABLE ONLY shardstore.chunk_vectors ATTACH PARTITION shardstore.chunk_vectors_h28 FOR VALUES WITH (modulus 32, remainder 28);

ALTER TABLE ONLY shardstore.chunk_vectors ATTACH PARTITION shardstore.chunk_vectors_h29 FOR VALUES WITH (modulus 32, remainder 29);

ALTER TABLE ONLY shardstore.chunk_vectors ATTACH PARTITION shardstore.chunk_vectors_h30 FOR VALUES WITH (modulus 32, remainder 30);

ALTER TABLE ONLY shardstore.chunk_vectors ATTACH PARTITION shardstore.chunk_vectors_h31 FOR VALUES WITH (modulus 32, remainder 31);

ALTER TABLE ONLY shardstore.turn_text ATTACH PARTITION shardstore.turn_text_h00 FOR VALUES WITH (modulus 16, remainder 0);

ALTER TABLE ONLY shardstore.turn_text ATTACH PARTITION shardstore.turn_text_h01 FOR VALUES WITH (modulus 16, remainder 1);

ALTER TABLE ONLY shardstore.turn_text ATTACH PARTITION shardstore.turn_text_h02 FOR VALUES WITH (modulus 16, remainder 2);

ALTER TABLE ONLY shardstore.turn_text ATTACH PARTITION shardstore.turn_text_h03 FOR VALUES WITH (modulus 16, remainder 3);

ALTER TABLE ONLY shardstore.turn_text ATTACH PARTITION shardstore.turn_text_h04 FOR VALUES WITH (modulus 16, remainder 4);

ALTER TABLE ONLY shardstore.turn_text ATTACH PARTITION shardstore.turn_text_h05 FOR VALUES WITH (modulus 16, remainder 5);

ALTER TABLE ONLY shardstore.turn_text ATTACH PARTITION shardstore.turn_text_h06 FOR VALUES WITH (modulus 16, remainder 6);

ALTER TABLE ONLY shardstore.turn_text ATTACH PARTITION shardstore.turn_text_h07 FOR VALUES WITH (modulus 16, remainder 7);

ALTER TABLE ONLY shardstore.turn_text ATTACH PARTITION shardstore.turn_text_h08 FOR VALUES WITH (modulus 16, remainder 8);

ALTER TABLE ONLY shardstore.turn_text ATTACH PARTITION shardstore.turn_text_h09 FOR VALUES WITH (modulus 16, remainder 9);

ALTER TABLE ONLY shardstore.turn_text ATTACH PARTITION shardstore.turn_text_h10 FOR VALUES WITH (modulus 16, remainder 10);

ALTER TABLE ONLY shardstore.turn_text ATTACH PARTITION shardstore.turn_text_h11 FOR VALUES WITH (modulus 16, remainder 11);

ALTER TABLE ONLY shardstore.turn_text ATTACH PARTITION shardstore.turn_text_h12 FOR VALUES WITH (modulus 16, remainder 12);

ALTER TABLE ONLY shardstore.turn_text ATTACH PARTITION shardstore.turn_text_h13 FOR VALUES WITH (modulus 16, remainder 13);

ALTER TABLE ONLY shardstore.turn_text ATTACH PARTITION shardstore.turn_text_h14 FOR VALUES WITH (modulus 16, remainder 14);

ALTER TABLE ONLY shardstore.turn_text ATTACH PARTITION shardstore.turn_text_h15 FOR VALUES WITH (modulus 16, remainder 15);

ALTER TABLE ONLY shardstore.agent_history
    ADD CONSTRAINT agent_history_pkey PRIMARY KEY (session_id, chunk_seq, chunk_start);

ALTER TABLE ONLY shardstore.artifact_chunks
    ADD CONSTRAINT artifact_chunks_pkey PRIMARY KEY (tenant_id, upload_id, chunk_no);

ALTER TABLE ONLY shardstore.artifact_erasures
    ADD CONSTRAINT artifact_erasures_pkey PRIMARY KEY (tenant_id, artifact_id);

ALTER TABLE ONLY shardstore.artifact_links
    ADD CONSTRAINT artifact_links_pkey PRIMARY KEY (tenant_id, session_id, artifact_id);

ALTER TABLE ONLY shardstore.artifact_refs
    ADD CONSTRAINT artifact_refs_pkey PRIMARY KEY (tenant_id, artifact_id, owner_type, owner_id);

ALTER TABLE ONLY shardstore.artifacts
    ADD CONSTRAINT artifacts_pkey PRIMARY KEY (tenant_id, artifact_id);

ALTER TABLE ONLY shardstore.checkpoints
    ADD CONSTRAINT checkpoints_pkey PRIMARY KEY (session_id, checkpoint_id);

ALTER TABLE ONLY shardstore.checkpoints
    ADD CONSTRAINT checkpoints_session_id_idempotency_key_key UNIQUE (session_id, idempotency_key);

ALTER TABLE ONLY shardstore.chunk_map
    ADD CONSTRAINT chunk_map_pkey PRIMARY KEY (session_id, chunk_seq);

ALTER TABLE ONLY shardstore.chunk_summaries
    ADD CONSTRAINT chunk_summaries_pkey PRIMARY KEY (session_id, chunk_seq);

ALTER TABLE ONLY shardstore.chunk_vectors
    ADD CONSTRAINT chunk_vectors_pkey PRIMARY KEY (session_id, chunk_seq, chunk_start, window_no, tenant_id);

ALTER TABLE ONLY shardstore.chunk_vectors_h00
    ADD CONSTRAINT chunk_vectors_h00_pkey PRIMARY KEY (session_id, chunk_seq, chunk_start, window_no, tenant_id);

ALTER TABLE ONLY shardstore.chunk_vectors_h01
    ADD CONSTRAINT chunk_vectors_h01_pkey PRIMARY KEY (session_id, chunk_seq, chunk_start, window_no, tenant_id);

ALTER TABLE ONLY shardstore.chunk_vectors_h02
    ADD CONSTRAINT chunk_vectors_h02_pkey PRIMARY KEY (session_id, chunk_seq, chunk_start, window_no, tenant_id);

ALTER TABLE ONLY shardstore.chunk_vectors_h03
    ADD CONSTRAINT chunk_vectors_h03_pkey PRIMARY KEY (session_id, chunk_seq, chunk_start, window_no, tenant_id);

ALTER TABLE ONLY shardstore.chunk_vectors_h04
    ADD CONSTRAINT chunk_vectors_h04_pkey PRIMARY KEY (session_id, chunk_seq, chunk_start, window_no, tenant_id);

ALTER TABLE ONLY shardstore.chunk_vectors_h05
    ADD CONSTRAINT chunk_vectors_h05_pkey PRIMARY KEY (session_id, chunk_seq, chunk_start, window_no, tenant_id);

ALTER TABLE ONLY shardstore.chunk_vectors_h06
    ADD CONSTRAINT chunk_vectors_h06_pkey PRIMARY KEY (session_id, chunk_seq, chunk_start, window_no, tenant_id);

ALTER TABLE ONLY shardstore.chunk_vectors_h07
    ADD CONSTRAINT chunk_vectors_h07_pkey PRIMARY KEY (session_id, chunk_seq, chunk_start, window_no, tenant_id);

ALTER TABLE ONLY shardstore.chunk_vectors_h08
    ADD CONSTRAINT chunk_vectors_h08_pkey PRIMARY KEY (session_id, chunk_seq, chunk_start, window_no, tenant_id);

ALTER TABLE ONLY shardstore.chunk_vectors_h09
    ADD CONSTRAINT chunk_vectors_h09_pkey PRIMARY KEY (session_id, chunk_seq, chunk_start, window_no, tenant_id);

ALTER TABLE ONLY shardstore.chunk_vectors_h10
    ADD CONSTRAINT chunk_vectors_h10_pkey PRIMARY KEY (session_id, chunk_seq, chunk_start, window_no, tenant_id);

ALTER TABLE ONLY shardstore.chunk_vectors_h11
    ADD CONSTRAINT chunk_vectors_h11_pkey PRIMARY KEY (session_id, chunk_seq, chunk_start, window_no, tenant_id);

ALTER TABLE ONLY shardstore.chunk_vectors_h12
    ADD CONSTRAINT chunk_vectors_h12_pkey PRIMARY KEY (session_id, chunk_seq, chunk_start, window_no, tenant_id);

ALTER TABLE ONLY shardstore.chunk_vectors_h13
    ADD CONSTRAINT chunk_vectors_h13_pkey PRIMARY KEY (session_id, chunk_seq, chunk_start, window_no, tenant_id);

ALTER TABLE ONLY shardstore.chunk_vectors_h14
    ADD CONSTRAINT chunk_vectors_h14_pkey PRIMARY KEY (session_id, chunk_seq, chunk_start, window_no, tenant_id);

ALTER TABLE ONLY shardstore.chunk_vectors_h15
    ADD CONSTRAINT chunk_vectors_h15_pkey PRIMARY KEY (session_id, chunk_seq, chunk_start, window_no, tenant_id);

ALTER TABLE ONLY shardstore.chunk_vectors_h16
    ADD CONSTRAINT chunk_vectors_h16_pkey PRIMARY KEY (session_id, chunk_seq, chunk_start, window_no, tenant_id);

ALTER TABLE ONLY shardstore.chunk_vectors_h17
    ADD CONSTRAINT chunk_vectors_h17_pkey PRIMARY KEY (session_id, chunk_seq, chunk_start, window_no, tenant_id);

ALTER TABLE ONLY shardstore.chunk_vectors_h18
    ADD CONSTRAINT chunk_vectors_h18_pkey PRIMARY KEY (session_id, chunk_seq, chunk_start, window_no, tenant_id);

ALTER TABLE ONLY shardstore.chunk_vectors_h19
    ADD CONSTRAINT chunk_vectors_h19_pkey PRIMARY KEY (session_id, chunk_seq, chunk_start, window_no, tenant_id);

ALTER TABLE ONLY shardstore.chunk_vectors_h20
    ADD CONSTRAINT chunk_vectors_h20_pkey PRIMARY KEY (session_id, chunk_seq, chunk_start, window_no, tenant_id);

ALTER TABLE ONLY shardstore.chunk_vectors_h21
    ADD CONSTRAINT chunk_vectors_h21_pkey PRIMARY KEY (session_id, chunk_seq, chunk_start, window_no, tenant_id);

ALTER TABLE ONLY shardstore.chunk_vectors_h22
    ADD CONSTRAINT chunk_vectors_h22_pkey PRIMARY KEY (session_id, chunk_seq, chunk_start, window_no, tenant_id);

ALTER TABLE ONLY shardstore.chunk_vectors_h23
    ADD CONSTRAINT chunk_vectors_h23_pkey PRIMARY KEY (session_id, chunk_seq, chunk_start, window_no, tenant_id);

ALTER TABLE ONLY shardstore.chunk_vectors_h24
    ADD CONSTRAINT chunk_vectors_h24_pkey PRIMARY KEY (session_id, chunk_seq, chunk_start, window_no, tenant_id);

ALTER TABLE ONLY shardstore.chunk_vectors_h25
    ADD CONSTRAINT chunk_vectors_h25_pkey PRIMARY KEY (session_id, chunk_seq, chunk_start, window_no, tenant_id);

ALTER TABLE ONLY shardstore.chunk_vectors_h26
    ADD CONSTRAINT chunk_vectors_h26_pkey PRIMARY KEY (session_id, chunk_seq, chunk_start, window_no, tenant_id);

ALTER TABLE ONLY shardstore.chunk_vectors_h27
    ADD CONSTRAINT chunk_vectors_h27_pkey PRIMARY KEY (session_id, chunk_seq, chunk_start, window_no, tenant_id);

ALTER TABLE ONLY shardstore.chunk_vectors_h28
    ADD CONSTRAINT chunk_vectors_h28_pkey PRIMARY KEY (session_id, chunk_seq, chunk_start, window_no, tenant_id);

ALTER TABLE ONLY shardstore.chunk_vectors_h29
    ADD CONSTRAINT chunk_vectors_h29_pkey PRIMARY KEY (session_id, chunk_seq, chunk_start, window_no, tenant_id);

ALTER TABLE ONLY shardstore.chunk_vectors_h30
    ADD CONSTRAINT chunk_vectors_h30_pkey PRIMARY KEY (session_id, chunk_seq, chunk_start, window_no, tenant_id);

ALTER TABLE ONLY shardstore.chunk_vectors_h31
    ADD CONSTRAINT chunk_vectors_h31_pkey PRIMARY KEY (session_id, chunk_seq, chunk_start, window_no, tenant_id);

ALTER TABLE ONLY shardstore.config
    ADD CONSTRAINT config_pkey PRIMARY KEY (singleton);

ALTER TABLE ONLY shardstore.embed_marks
    ADD CONSTRAINT embed_marks_pkey PRIMARY KEY (session_id);

ALTER TABLE ONLY shardstore.embed_queue
    ADD CONSTRAINT embed_queue_pkey PRIMARY KEY (session_id, chunk_seq, chunk_start);

ALTER TABLE ONLY shardstore.embedding_config
    ADD CONSTRAINT embedding_config_pkey PRIMARY KEY (singleton);

ALTER TABLE ONLY shardstore.facts
    ADD CONSTRAINT facts_pkey PRIMARY KEY (tenant_id, fact_id);

ALTER TABLE ONLY shardstore.fork_copies
    ADD CONSTRAINT fork_copies_pkey PRIMARY KEY (session_id, chunk_seq, origin_session_id);

ALTER TABLE ONLY shardstore.langgraph_checkpoints
    ADD CONSTRAINT langgraph_checkpoints_pkey PRIMARY KEY (session_id, checkpoint_ns, checkpoint_id);

ALTER TABLE ONLY shardstore.langgraph_writes
    ADD CONSTRAINT langgraph_writes_pkey PRIMARY KEY (session_id, checkpoint_ns, checkpoint_id, task_id, idx);

ALTER TABLE ONLY shardstore.maintenance_runs
    ADD CONSTRAINT maintenance_runs_pkey PRIMARY KEY (run_id);

ALTER TABLE ONLY shardstore.rls_role_tenants
    ADD CONSTRAINT rls_role_tenants_pkey PRIMARY KEY (role_name);

ALTER TABLE ONLY shardstore.runs
    ADD CONSTRAINT runs_pkey PRIMARY KEY (session_id, run_id);

ALTER TABLE ONLY shardstore.sessions
    ADD CONSTRAINT sessions_pkey PRIMARY KEY (session_id);

ALTER TABLE ONLY shardstore.summary_queue
    ADD CONSTRAINT summary_queue_pkey PRIMARY KEY (session_id, chunk_seq, chunk_start);

ALTER TABLE ONLY shardstore.table_registry
    ADD CONSTRAINT table_registry_pkey PRIMARY KEY (table_name);

ALTER TABLE ONLY shardstore.text_search_config
    ADD CONSTRAINT text_search_config_pkey PRIMARY KEY (singleton);

ALTER TABLE ONLY shardstore.turn_buffer
    ADD CONSTRAINT turn_buffer_pkey PRIMARY KEY (session_id, turn_seq);

ALTER TABLE ONLY shardstore.turn_keys
    ADD CONSTRAINT turn_keys_pkey PRIMARY KEY (session_id, idempotency_key);

ALTER TABLE ONLY shardstore.turn_text
    ADD CONSTRAINT turn_text_pkey PRIMARY KEY (session_id, turn_seq, window_no);

ALTER TABLE ONLY shardstore.turn_text_h00
    ADD CONSTRAINT turn_text_h00_pkey PRIMARY KEY (session_id, turn_seq, window_no);

ALTER TABLE ONLY shardstore.turn_text_h01
    ADD CONSTRAINT turn_text_h01_pkey PRIMARY KEY (session_id, turn_seq, window_no);

ALTER TABLE ONLY shardstore.turn_text_h02
    ADD CONSTRAINT turn_text_h02_pkey PRIMARY KEY (session_id, turn_seq, window_no);

ALTER TABLE ONLY shardstore.turn_text_h03
    ADD CONSTRAINT turn_text_h03_pkey PRIMARY KEY (session_id, turn_seq, window_no);

ALTER TABLE ONLY shardstore.turn_text_h04
    ADD CONSTRAINT turn_text_h04_pkey PRIMARY KEY (session_id, turn_seq, window_no);

ALTER TABLE ONLY shardstore.turn_text_h05
    ADD CONSTRAINT turn_text_h05_pkey PRIMARY KEY (session_id, turn_seq, window_no);

ALTER TABLE ONLY shardstore.turn_text_h06
    ADD CONSTRAINT turn_text_h06_pkey PRIMARY KEY (session_id, turn_seq, window_no);

ALTER TABLE ONLY shardstore.turn_text_h07
    ADD CONSTRAINT turn_text_h07_pkey PRIMARY KEY (session_id, turn_seq, window_no);

ALTER TABLE ONLY shardstore.turn_text_h08
    ADD CONSTRAINT turn_text_h08_pkey PRIMARY KEY (session_id, turn_seq, window_no);

ALTER TABLE ONLY shardstore.turn_text_h09
    ADD CONSTRAINT turn_text_h09_pkey PRIMARY KEY (session_id, turn_seq, window_no);

ALTER TABLE ONLY shardstore.turn_text_h10
    ADD CONSTRAINT turn_text_h10_pkey PRIMARY KEY (session_id, turn_seq, window_no);

ALTER TABLE ONLY shardstore.turn_text_h11
    ADD CONSTRAINT turn_text_h11_pkey PRIMARY KEY (session_id, turn_seq, window_no);

ALTER TABLE ONLY shardstore.turn_text_h12
    ADD CONSTRAINT turn_text_h12_pkey PRIMARY KEY (session_id, turn_seq, window_no);

ALTER TABLE ONLY shardstore.turn_text_h13
    ADD CONSTRAINT turn_text_h13_pkey PRIMARY KEY (session_id, turn_seq, window_no);

ALTER TABLE ONLY shardstore.turn_text_h14
    ADD CONSTRAINT turn_text_h14_pkey PRIMARY KEY (session_id, turn_seq, window_no);

ALTER TABLE ONLY shardstore.turn_text_h15
    ADD CONSTRAINT turn_text_h15_pkey PRIMARY KEY (session_id, turn_seq, window_no);

CREATE INDEX artifact_refs_owner ON shardstore.artifact_refs USING btree (tenant_id, owner_type, owner_id);

CREATE INDEX artifact_refs_session ON shardstore.artifact_refs USING btree (session_id, turn_seq) WHERE (session_id IS NOT NULL);

CREATE INDEX artifacts_deleting ON shardstore.artifacts USING btree (tenant_id) WHERE (state = 'deleting'::text);

CREATE INDEX artifacts_unreferenced ON shardstore.artifacts USING btree (unreferenced_since) WHERE (unreferenced_since IS NOT NULL);

CREATE INDEX checkpoints_newest ON shardstore.checkpoints USING btree (session_id, seq DESC);

CREATE INDEX chunk_vectors_tenant ON ONLY shardstore.chunk_vectors USING btree (tenant_id, chunk_start);

CREATE INDEX chunk_vectors_h00_tenant_id_chunk_start_idx ON shardstore.chunk_vectors_h00 USING btree (tenant_id, chunk_start);

CREATE INDEX chunk_vectors_h01_tenant_id_chunk_start_idx ON shardstore.chunk_vectors_h01 USING btree (tenant_id, chunk_start);

CREATE INDEX chunk_vectors_h02_tenant_id_chunk_start_idx ON shardstore.chunk_vectors_h02 USING btree (tenant_id, chunk_start);

CREATE INDEX chunk_vectors_h03_tenant_id_chunk_start_idx ON shardstore.chunk_vectors_h03 USING btree (tenant_id, chunk_start);

CREATE INDEX chunk_vectors_h04_tenant_id_chunk_start_idx ON shardstore.chunk_vectors_h04 USING btree (tenant_id, chunk_start);

CREATE INDEX chunk_vectors_h05_tenant_id_chunk_start_idx ON shardstore.chunk_vectors_h05 USING btree (tenant_id, chunk_start);

CREATE INDEX chunk_vectors_h06_tenant_id_chunk_start_idx ON shardstore.chunk_vectors_h06 USING btree (tenant_id, chunk_start);

CREATE INDEX chunk_vectors_h07_tenant_id_chunk_start_idx ON shardstore.chunk_vectors_h07 USING btree (tenant_id, chunk_start);

CREATE INDEX chunk_vectors_h08_tenant_id_chunk_start_idx ON shardstore.chunk_vectors_h08 USING btree (tenant_id, chunk_start);

CREATE INDEX chunk_vectors_h09_tenant_id_chunk_start_idx ON shardstore.chunk_vectors_h09 USING btree (tenant_id, chunk_start);

CREATE INDEX chunk_vectors_h10_tenant_id_chunk_start_idx ON shardstore.chunk_vectors_h10 USING btree (tenant_id, chunk_start);

CREATE INDEX chunk_vectors_h11_tenant_id_chunk_start_idx ON shardstore.chunk_vectors_h11 USING btree (tenant_id, chunk_start);

CREATE INDEX chunk_vectors_h12_tenant_id_chunk_start_idx ON shardstore.chunk_vectors_h12 USING btree (tenant_id, chunk_start);

CREATE INDEX chunk_vectors_h13_tenant_id_chunk_start_idx ON shardstore.chunk_vectors_h13 USING btree (tenant_id, chunk_start);

CREATE INDEX chunk_vectors_h14_tenant_id_chunk_start_idx ON shardstore.chunk_vectors_h14 USING btree (tenant_id, chunk_start);

CREATE INDEX chunk_vectors_h15_tenant_id_chunk_start_idx ON shardstore.chunk_vectors_h15 USING btree (tenant_id, chunk_start);

CREATE INDEX chunk_vectors_h16_tenant_id_chunk_start_idx ON shardstore.chunk_vectors_h16 USING btree (tenant_id, chunk_start);

CREATE INDEX chunk_vectors_h17_tenant_id_chunk_start_idx ON shardstore.chunk_vectors_h17 USING btree (tenant_id, chunk_start);

CREATE INDEX chunk_vectors_h18_tenant_id_chunk_start_idx ON shardstore.chunk_vectors_h18 USING btree (tenant_id, chunk_start);

CREATE INDEX chunk_vectors_h19_tenant_id_chunk_start_idx ON shardstore.chunk_vectors_h19 USING btree (tenant_id, chunk_start);

CREATE INDEX chunk_vectors_h20_tenant_id_chunk_start_idx ON shardstore.chunk_vectors_h20 USING btree (tenant_id, chunk_start);

CREATE INDEX chunk_vectors_h21_tenant_id_chunk_start_idx ON shardstore.chunk_vectors_h21 USING btree (tenant_id, chunk_start);

CREATE INDEX chunk_vectors_h22_tenant_id_chunk_start_idx ON shardstore.chunk_vectors_h22 USING btree (tenant_id, chunk_start);

CREATE INDEX chunk_vectors_h23_tenant_id_chunk_start_idx ON shardstore.chunk_vectors_h23 USING btree (tenant_id, chunk_start);

CREATE INDEX chunk_vectors_h24_tenant_id_chunk_start_idx ON shardstore.chunk_vectors_h24 USING btree (tenant_id, chunk_start);

CREATE INDEX chunk_vectors_h25_tenant_id_chunk_start_idx ON shardstore.chunk_vectors_h25 USING btree (tenant_id, chunk_start);

CREATE INDEX chunk_vectors_h26_tenant_id_chunk_start_idx ON shardstore.chunk_vectors_h26 USING btree (tenant_id, chunk_start);

CREATE INDEX chunk_vectors_h27_tenant_id_chunk_start_idx ON shardstore.chunk_vectors_h27 USING btree (tenant_id, chunk_start);

CREATE INDEX chunk_vectors_h28_tenant_id_chunk_start_idx ON shardstore.chunk_vectors_h28 USING btree (tenant_id, chunk_start);

CREATE INDEX chunk_vectors_h29_tenant_id_chunk_start_idx ON shardstore.chunk_vectors_h29 USING btree (tenant_id, chunk_start);

CREATE INDEX chunk_vectors_h30_tenant_id_chunk_start_idx ON shardstore.chunk_vectors_h30 USING btree (tenant_id, chunk_start);

CREATE INDEX chunk_vectors_h31_tenant_id_chunk_start_idx ON shardstore.chunk_vectors_h31 USING btree (tenant_id, chunk_start);

CREATE INDEX embed_queue_order ON shardstore.embed_queue USING btree (queued_at);

CREATE UNIQUE INDEX facts_current ON shardstore.facts USING btree (tenant_id, subject, key) WHERE (valid_to IS NULL);

CREATE INDEX facts_recall ON shardstore.facts USING btree (tenant_id, subject, key, valid_from);

CREATE INDEX facts_source ON shardstore.facts USING btree (source_session_id, source_turn_seq) WHERE (source_session_id IS NOT NULL);

CREATE INDEX fork_copies_origin ON shardstore.fork_copies USING btree (origin_session_id);

CREATE INDEX langgraph_checkpoints_run ON shardstore.langgraph_checkpoints USING btree (run_id) WHERE (run_id IS NOT NULL);

CREATE INDEX runs_awaiting ON shardstore.runs USING btree (tenant_id, awaiting_since) WHERE (status = 'awaiting_human'::text);

CREATE INDEX runs_run_id ON shardstore.runs USING btree (run_id);

CREATE INDEX runs_tenant_status ON shardstore.runs USING btree (tenant_id, status, created_at);

CREATE INDEX sessions_fork_parent ON shardstore.sessions USING btree (fork_parent, fork_at) WHERE (fork_parent IS NOT NULL);

CREATE INDEX sessions_list ON shardstore.sessions USING btree (tenant_id, created_at DESC, session_id DESC) WHERE (purged_at IS NULL);

CREATE INDEX sessions_list_agent ON shardstore.sessions USING btree (tenant_id, agent_id, created_at DESC, session_id DESC) WHERE (purged_at IS NULL);

CREATE INDEX sessions_list_all ON shardstore.sessions USING btree (created_at DESC, session_id DESC) WHERE (purged_at IS NULL);

CREATE INDEX sessions_list_subject ON shardstore.sessions USING btree (tenant_id, subject_id, created_at DESC, session_id DESC) WHERE (purged_at IS NULL);

CREATE INDEX sessions_tenant_subject ON shardstore.sessions USING btree (tenant_id, subject_id);

CREATE INDEX summary_queue_order ON shardstore.summary_queue USING btree (queued_at);

CREATE INDEX turn_text_tenant ON ONLY shardstore.turn_text USING btree (tenant_id, created_at);

CREATE INDEX turn_text_h00_tenant_id_created_at_idx ON shardstore.turn_text_h00 USING btree (tenant_id, created_at);

CREATE INDEX turn_text_tsv ON ONLY shardstore.turn_text USING gin (tsv);

CREATE INDEX turn_text_h00_tsv_idx ON shardstore.turn_text_h00 USING gin (tsv) WITH (gin_pending_list_limit='256');

CREATE INDEX turn_text_h01_tenant_id_created_at_idx ON shardstore.turn_text_h01 USING btree (tenant_id, created_at);

CREATE INDEX turn_text_h01_tsv_idx ON shardstore.turn_text_h01 USING gin (tsv) WITH (gin_pending_list_limit='256');

CREATE INDEX turn_text_h02_tenant_id_created_at_idx ON shardstore.turn_text_h02 USING btree (tenant_id, created_at);

CREATE INDEX turn_text_h02_tsv_idx ON shardstore.turn_text_h02 USING gin (tsv) WITH (gin_pending_list_limit='256');

CREATE INDEX turn_text_h03_tenant_id_created_at_idx ON shardstore.turn_text_h03 USING btree (tenant_id, created_at);

CREATE INDEX turn_text_h03_tsv_idx ON shardstore.turn_text_h03 USING gin (tsv) WITH (gin_pending_list_limit='256');

CREATE INDEX turn_text_h04_tenant_id_created_at_idx ON shardstore.turn_text_h04 USING btree (tenant_id, created_at);

CREATE INDEX turn_text_h04_tsv_idx ON shardstore.turn_text_h04 USING gin (tsv) WITH (gin_pending_list_limit='256');

CREATE INDEX turn_text_h05_tenant_id_created_at_idx ON shardstore.turn_text_h05 USING btree (tenant_id, created_at);

CREATE INDEX turn_text_h05_tsv_idx ON shardstore.turn_text_h05 USING gin (tsv) WITH (gin_pending_list_limit='256');

CREATE INDEX turn_text_h06_tenant_id_created_at_idx ON shardstore.turn_text_h06 USING btree (tenant_id, created_at);

CREATE INDEX turn_text_h06_tsv_idx ON shardstore.turn_text_h06 USING gin (tsv) WITH (gin_pending_list_limit='256');

CREATE INDEX turn_text_h07_tenant_id_created_at_idx ON shardstore.turn_text_h07 USING btree (tenant_id, created_at);

CREATE INDEX turn_text_h07_tsv_idx ON shardstore.turn_text_h07 USING gin (tsv) WITH (gin_pending_list_limit='256');

CREATE INDEX turn_text_h08_tenant_id_created_at_idx ON shardstore.turn_text_h08 USING btree (tenant_id, created_at);

CREATE INDEX turn_text_h08_tsv_idx ON shardstore.turn_text_h08 USING gin (tsv) WITH (gin_pending_list_limit='256');

CREATE INDEX turn_text_h09_tenant_id_created_at_idx ON shardstore.turn_text_h09 USING btree (tenant_id, created_at);

CREATE INDEX turn_text_h09_tsv_idx ON shardstore.turn_text_h09 USING gin (tsv) WITH (gin_pending_list_limit='256');

CREATE INDEX turn_text_h10_tenant_id_created_at_idx ON shardstore.turn_text_h10 USING btree (tenant_id, created_at);

CREATE INDEX turn_text_h10_tsv_idx ON shardstore.turn_text_h10 USING gin (tsv) WITH (gin_pending_list_limit='256');

CREATE INDEX turn_text_h11_tenant_id_created_at_idx ON shardstore.turn_text_h11 USING btree (tenant_id, created_at);

CREATE INDEX turn_text_h11_tsv_idx ON shardstore.turn_text_h11 USING gin (tsv) WITH (gin_pending_list_limit='256');

CREATE INDEX turn_text_h12_tenant_id_created_at_idx ON shardstore.turn_text_h12 USING btree (tenant_id, created_at);

CREATE INDEX turn_text_h12_tsv_idx ON shardstore.turn_text_h12 USING gin (tsv) WITH (gin_pending_list_limit='256');

CREATE INDEX turn_text_h13_tenant_id_created_at_idx ON shardstore.turn_text_h13 USING btree (tenant_id, created_at);

CREATE INDEX turn_text_h13_tsv_idx ON shardstore.turn_text_h13 USING gin (tsv) WITH (gin_pending_list_limit='256');

CREATE INDEX turn_text_h14_tenant_id_created_at_idx ON shardstore.turn_text_h14 USING btree (tenant_id, created_at);

CREATE INDEX turn_text_h14_tsv_idx ON shardstore.turn_text_h14 USING gin (tsv) WITH (gin_pending_list_limit='256');

CREATE INDEX turn_text_h15_tenant_id_created_at_idx ON shardstore.turn_text_h15 USING btree (tenant_id, created_at);

CREATE INDEX turn_text_h15_tsv_idx ON shardstore.turn_text_h15 USING gin (tsv) WITH (gin_pending_list_limit='256');

ALTER INDEX shardstore.chunk_vectors_pkey ATTACH PARTITION shardstore.chunk_vectors_h00_pkey;

ALTER INDEX shardstore.chunk_vectors_tenant ATTACH PARTITION shardstore.chunk_vectors_h00_tenant_id_chunk_start_idx;

ALTER INDEX shardstore.chunk_vectors_pkey ATTACH PARTITION shardstore.chunk_vectors_h01_pkey;

ALTER INDEX shardstore.chunk_vectors_tenant ATTACH PARTITION shardstore.chunk_vectors_h01_tenant_id_chunk_start_idx;

ALTER INDEX shardstore.chunk_vectors_pkey ATTACH PARTITION shardstore.chunk_vectors_h02_pkey;

ALTER INDEX shardstore.chunk_vectors_tenant ATTACH PARTITION shardstore.chunk_vectors_h02_tenant_id_chunk_start_idx;

ALTER INDEX shardstore.chunk_vectors_pkey ATTACH PARTITION shardstore.chunk_vectors_h03_pkey;

ALTER INDEX shardstore.chunk_vectors_tenant ATTACH PARTITION shardstore.chunk_vectors_h03_tenant_id_chunk_start_idx;

ALTER INDEX shardstore.chunk_vectors_pkey ATTACH PARTITION shardstore.chunk_vectors_h04_pkey;

ALTER INDEX shardstore.chunk_vectors_tenant ATTACH PARTITION shardstore.chunk_vectors_h04_tenant_id_chunk_start_idx;

ALTER INDEX shardstore.chunk_vectors_pkey ATTACH PARTITION shardstore.chunk_vectors_h05_pkey;

ALTER INDEX shardstore.chunk_vectors_tenant ATTACH PARTITION shardstore.chunk_vectors_h05_tenant_id_chunk_start_idx;

ALTER INDEX shardstore.chunk_vectors_pkey ATTACH PARTITION shardstore.chunk_vectors_h06_pkey;

ALTER INDEX shardstore.chunk_vectors_tenant ATTACH PARTITION shardstore.chunk_vectors_h06_tenant_id_chunk_start_idx;

ALTER INDEX shardstore.chunk_vectors_pkey ATTACH PARTITION shardstore.chunk_vectors_h07_pkey;

ALTER INDEX shardstore.chunk_vectors_tenant ATTACH PARTITION shardstore.chunk_vectors_h07_tenant_id_chunk_start_idx;

ALTER INDEX shardstore.chunk_vectors_pkey ATTACH PARTITION shardstore.chunk_vectors_h08_pkey;

ALTER INDEX shardstore.chunk_vectors_tenant ATTACH PARTITION shardstore.chunk_vectors_h08_tenant_id_chunk_start_idx;

ALTER INDEX shardstore.chunk_vectors_pkey ATTACH PARTITION shardstore.chunk_vectors_h09_pkey;

ALTER INDEX shardstore.chunk_vectors_tenant ATTACH PARTITION shardstore.chunk_vectors_h09_tenant_id_chunk_start_idx;

ALTER INDEX shardstore.chunk_vectors_pkey ATTACH PARTITION shardstore.chunk_vectors_h10_pkey;

ALTER INDEX shardstore.chunk_vectors_tenant ATTACH PARTITION shardstore.chunk_vectors_h10_tenant_id_chunk_start_idx;

ALTER INDEX shardstore.chunk_vectors_pkey ATTACH PARTITION shardstore.chunk_vectors_h11_pkey;

ALTER INDEX shardstore.chunk_vectors_tenant ATTACH PARTITION shardstore.chunk_vectors_h11_tenant_id_chunk_start_idx;

ALTER INDEX shardstore.chunk_vectors_pkey ATTACH PARTITION shardstore.chunk_vectors_h12_pkey;

ALTER INDEX shardstore.chunk_vectors_tenant ATTACH PARTITION shardstore.chunk_vectors_h12_tenant_id_chunk_start_idx;

ALTER INDEX shardstore.chunk_vectors_pkey ATTACH PARTITION shardstore.chunk_vectors_h13_pkey;

ALTER INDEX shardstore.chunk_vectors_tenant ATTACH PARTITION shardstore.chunk_vectors_h13_tenant_id_chunk_start_idx;

ALTER INDEX shardstore.chunk_vectors_pkey ATTACH PARTITION shardstore.chunk_vectors_h14_pkey;

ALTER INDEX shardstore.chunk_vectors_tenant ATTACH PARTITION shardstore.chunk_vectors_h14_tenant_id_chunk_start_idx;

ALTER INDEX shardstore.chunk_vectors_pkey ATTACH PARTITION shardstore.chunk_vectors_h15_pkey;

ALTER INDEX shardstore.chunk_vectors_tenant ATTACH PARTITION shardstore.chunk_vectors_h15_tenant_id_chunk_start_idx;

ALTER INDEX shardstore.chunk_vectors_pkey ATTACH PARTITION shardstore.chunk_vectors_h16_pkey;

ALTER INDEX shardstore.chunk_vectors_tenant ATTACH PARTITION shardstore.chunk_vectors_h16_tenant_id_chunk_start_idx;

ALTER INDEX shardstore.chunk_vectors_pkey ATTACH PARTITION shardstore.chunk_vectors_h17_pkey;

ALTER INDEX shardstore.chunk_vectors_tenant ATTACH PARTITION shardstore.chunk_vectors_h17_tenant_id_chunk_start_idx;

ALTER INDEX shardstore.chunk_vectors_pkey ATTACH PARTITION shardstore.chunk_vectors_h18_pkey;

ALTER INDEX shardstore.chunk_vectors_tenant ATTACH PARTITION shardstore.chunk_vectors_h18_tenant_id_chunk_start_idx;

ALTER INDEX shardstore.chunk_vectors_pkey ATTACH PARTITION shardstore.chunk_vectors_h19_pkey;

ALTER INDEX shardstore.chunk_vectors_tenant ATTACH PARTITION shardstore.chunk_vectors_h19_tenant_id_chunk_start_idx;

ALTER INDEX shardstore.chunk_vectors_pkey ATTACH PARTITION shardstore.chunk_vectors_h20_pkey;

ALTER INDEX shardstore.chunk_vectors_tenant ATTACH PARTITION shardstore.chunk_vectors_h20_tenant_id_chunk_start_idx;

ALTER INDEX shardstore.chunk_vectors_pkey ATTACH PARTITION shardstore.chunk_vectors_h21_pkey;

ALTER INDEX shardstore.chunk_vectors_tenant ATTACH PARTITION shardstore.chunk_vectors_h21_tenant_id_chunk_start_idx;

ALTER INDEX shardstore.chunk_vectors_pkey ATTACH PARTITION shardstore.chunk_vectors_h22_pkey;

ALTER INDEX shardstore.chunk_vectors_tenant ATTACH PARTITION shardstore.chunk_vectors_h22_tenant_id_chunk_start_idx;

ALTER INDEX shardstore.chunk_vectors_pkey ATTACH PARTITION shardstore.chunk_vectors_h23_pkey;

ALTER INDEX shardstore.chunk_vectors_tenant ATTACH PARTITION shardstore.chunk_vectors_h23_tenant_id_chunk_start_idx;

ALTER INDEX shardstore.chunk_vectors_pkey ATTACH PARTITION shardstore.chunk_vectors_h24_pkey;

ALTER INDEX shardstore.chunk_vectors_tenant ATTACH PARTITION shardstore.chunk_vectors_h24_tenant_id_chunk_start_idx;

ALTER INDEX shardstore.chunk_vectors_pkey ATTACH PARTITION shardstore.chunk_vectors_h25_pkey;

ALTER INDEX shardstore.chunk_vectors_tenant ATTACH PARTITION shardstore.chunk_vectors_h25_tenant_id_chunk_start_idx;

ALTER INDEX shardstore.chunk_vectors_pkey ATTACH PARTITION shardstore.chunk_vectors_h26_pkey;

ALTER INDEX shardstore.chunk_vectors_tenant ATTACH PARTITION shardstore.chunk_vectors_h26_tenant_id_chunk_start_idx;

ALTER INDEX shardstore.chunk_vectors_pkey ATTACH PARTITION shardstore.chunk_vectors_h27_pkey;

ALTER INDEX shardstore.chunk_vectors_tenant ATTACH PARTITION shardstore.chunk_vectors_h27_tenant_id_chunk_start_idx;

ALTER INDEX shardstore.chunk_vectors_pkey ATTACH PARTITION shardstore.chunk_vectors_h28_pkey;

ALTER INDEX shardstore.chunk_vectors_tenant ATTACH PARTITION shardstore.chunk_vectors_h28_tenant_id_chunk_start_idx;

ALTER INDEX shardstore.chunk_vectors_pkey ATTACH PARTITION shardstore.chunk_vectors_h29_pkey;

ALTER INDEX shardstore.chunk_vectors_tenant ATTACH PARTITION shardstore.chunk_vectors_h29_tenant_id_chunk_start_idx;

ALTER INDEX shardstore.chunk_vectors_pkey ATTACH PARTITION shardstore.chunk_vectors_h30_pkey;

ALTER INDEX shardstore.chunk_vectors_tenant ATTACH PARTITION shardstore.chunk_vectors_h30_tenant_id_chunk_start_idx;

ALTER INDEX shardstore.chunk_vectors_pkey ATTACH PARTITION shardstore.chunk_vectors_h31_pkey;

ALTER INDEX shardstore.chunk_vectors_tenant ATTACH PARTITION shardstore.chunk_vectors_h31_tenant_id_chunk_start_idx;

ALTER INDEX shardstore.turn_text_pkey ATTACH PARTITION shardstore.turn_text_h00_pkey;

ALTER INDEX shardstore.turn_text_tenant ATTACH PARTITION shardstore.turn_text_h00_tenant_id_created_at_idx;

ALTER INDEX shardstore.turn_text_tsv ATTACH PARTITION shardstore.turn_text_h00_tsv_idx;

ALTER INDEX shardstore.turn_text_pkey ATTACH PARTITION shardstore.turn_text_h01_pkey;

ALTER INDEX shardstore.turn_text_tenant ATTACH PARTITION shardstore.turn_text_h01_tenant_id_created_at_idx;

ALTER INDEX shardstore.turn_text_tsv ATTACH PARTITION shardstore.turn_text_h01_tsv_idx;

ALTER INDEX shardstore.turn_text_pkey ATTACH PARTITION shardstore.turn_text_h02_pkey;

ALTER INDEX shardstore.turn_text_tenant ATTACH PARTITION shardstore.turn_text_h02_tenant_id_created_at_idx;

ALTER INDEX shardstore.turn_text_tsv ATTACH PARTITION shardstore.turn_text_h02_tsv_idx;

ALTER INDEX shardstore.turn_text_pkey ATTACH PARTITION shardstore.turn_text_h03_pkey;

ALTER INDEX shardstore.turn_text_tenant ATTACH PARTITION shardstore.turn_text_h03_tenant_id_created_at_idx;

ALTER INDEX shardstore.turn_text_tsv ATTACH PARTITION shardstore.turn_text_h03_tsv_idx;

ALTER INDEX shardstore.turn_text_pkey ATTACH PARTITION shardstore.turn_text_h04_pkey;

ALTER INDEX shardstore.turn_text_tenant ATTACH PARTITION shardstore.turn_text_h04_tenant_id_created_at_idx;

ALTER INDEX shardstore.turn_text_tsv ATTACH PARTITION shardstore.turn_text_h04_tsv_idx;

ALTER INDEX shardstore.turn_text_pkey ATTACH PARTITION shardstore.turn_text_h05_pkey;

ALTER INDEX shardstore.turn_text_tenant ATTACH PARTITION shardstore.turn_text_h05_tenant_id_created_at_idx;

ALTER INDEX shardstore.turn_text_tsv ATTACH PARTITION shardstore.turn_text_h05_tsv_idx;

ALTER INDEX shardstore.turn_text_pkey ATTACH PARTITION shardstore.turn_text_h06_pkey;

ALTER INDEX shardstore.turn_text_tenant ATTACH PARTITION shardstore.turn_text_h06_tenant_id_created_at_idx;

ALTER INDEX shardstore.turn_text_tsv ATTACH PARTITION shardstore.turn_text_h06_tsv_idx;

ALTER INDEX shardstore.turn_text_pkey ATTACH PARTITION shardstore.turn_text_h07_pkey;

ALTER INDEX shardstore.turn_text_tenant ATTACH PARTITION shardstore.turn_text_h07_tenant_id_created_at_idx;

ALTER INDEX shardstore.turn_text_tsv ATTACH PARTITION shardstore.turn_text_h07_tsv_idx;

ALTER INDEX shardstore.turn_text_pkey ATTACH PARTITION shardstore.turn_text_h08_pkey;

ALTER INDEX shardstore.turn_text_tenant ATTACH PARTITION shardstore.turn_text_h08_tenant_id_created_at_idx;

ALTER INDEX shardstore.turn_text_tsv ATTACH PARTITION shardstore.turn_text_h08_tsv_idx;

ALTER INDEX shardstore.turn_text_pkey ATTACH PARTITION shardstore.turn_text_h09_pkey;

ALTER INDEX shardstore.turn_text_tenant ATTACH PARTITION shardstore.turn_text_h09_tenant_id_created_at_idx;

ALTER INDEX shardstore.turn_text_tsv ATTACH PARTITION shardstore.turn_text_h09_tsv_idx;

ALTER INDEX shardstore.turn_text_pkey ATTACH PARTITION shardstore.turn_text_h10_pkey;

ALTER INDEX shardstore.turn_text_tenant ATTACH PARTITION shardstore.turn_text_h10_tenant_id_created_at_idx;

ALTER INDEX shardstore.turn_text_tsv ATTACH PARTITION shardstore.turn_text_h10_tsv_idx;

ALTER INDEX shardstore.turn_text_pkey ATTACH PARTITION shardstore.turn_text_h11_pkey;

ALTER INDEX shardstore.turn_text_tenant ATTACH PARTITION shardstore.turn_text_h11_tenant_id_created_at_idx;

ALTER INDEX shardstore.turn_text_tsv ATTACH PARTITION shardstore.turn_text_h11_tsv_idx;

ALTER INDEX shardstore.turn_text_pkey ATTACH PARTITION shardstore.turn_text_h12_pkey;

ALTER INDEX shardstore.turn_text_tenant ATTACH PARTITION shardstore.turn_text_h12_tenant_id_created_at_idx;

ALTER INDEX shardstore.turn_text_tsv ATTACH PARTITION shardstore.turn_text_h12_tsv_idx;

ALTER INDEX shardstore.turn_text_pkey ATTACH PARTITION shardstore.turn_text_h13_pkey;

ALTER INDEX shardstore.turn_text_tenant ATTACH PARTITION shardstore.turn_text_h13_tenant_id_created_at_idx;

ALTER INDEX shardstore.turn_text_tsv ATTACH PARTITION shardstore.turn_text_h13_tsv_idx;

ALTER INDEX shardstore.turn_text_pkey ATTACH PARTITION shardstore.turn_text_h14_pkey;

ALTER INDEX shardstore.turn_text_tenant ATTACH PARTITION shardstore.turn_text_h14_tenant_id_created_at_idx;

ALTER INDEX shardstore.turn_text_tsv ATTACH PARTITION shardstore.turn_text_h14_tsv_idx;

ALTER INDEX shardstore.turn_text_pkey ATTACH PARTITION shardstore.turn_text_h15_pkey;

ALTER INDEX shardstore.turn_text_tenant ATTACH PARTITION shardstore.turn_text_h15_tenant_id_created_at_idx;

ALTER INDEX shardstore.turn_text_tsv ATTACH PARTITION shardstore.turn_text_h15_tsv_idx;
