-- summarize() takes a tenant scope: the worker's claim takes the tenant as an argument
-- (summary_claim_v2); the version before it, with no tenant, goes.
DROP FUNCTION IF EXISTS shardstore.summary_claim_v1(uuid, uuid[], bigint[]);
