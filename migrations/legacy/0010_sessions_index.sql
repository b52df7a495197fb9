-- 0010: indexes for listing sessions (store.sessions(), `shardstore sessions`), newest
-- first, paged by the keyset (created_at, session_id).
--
-- Every index is partial on live sessions (purged sessions are never listed) and names only
-- columns an append never writes (tenant, subject, agent, created_at, session_id; purged_at
-- changes once, at purge), so the per-append update of the session's write head stays a HOT
-- update. Last activity (last_turn_at) is shown, never indexed, for the same reason.
--
-- The ORDER BY created_at DESC, session_id DESC of the listing reads each index in order,
-- and the keyset condition (created_at, session_id) < (c, s) is one index condition:
--   sessions_list           a tenant's sessions (the common listing, and every tenant
--                           store under RLS, whose policy is tenant_id = the setting)
--   sessions_list_subject   a tenant's sessions of one subject
--   sessions_list_agent     a tenant's sessions of one agent
--   sessions_list_all       every tenant's sessions (an operator's listing)

CREATE INDEX sessions_list ON shardstore.sessions (tenant_id, created_at DESC, session_id DESC)
    WHERE purged_at IS NULL;

CREATE INDEX sessions_list_subject
    ON shardstore.sessions (tenant_id, subject_id, created_at DESC, session_id DESC)
    WHERE purged_at IS NULL;

CREATE INDEX sessions_list_agent
    ON shardstore.sessions (tenant_id, agent_id, created_at DESC, session_id DESC)
    WHERE purged_at IS NULL;

CREATE INDEX sessions_list_all ON shardstore.sessions (created_at DESC, session_id DESC)
    WHERE purged_at IS NULL;
