-- Whether turns sealed under encryption at rest get vectors (docs/decisions/0025): on by
-- default; store.configure_sealed_vectors(False) turns it off and deletes those vectors. A
-- database-wide search setting, so it sits beside the text search language in the table that
-- tenant roles may only read (shardstore.config is writable by them).
ALTER TABLE shardstore.text_search_config ADD COLUMN sealed_vectors boolean NOT NULL DEFAULT true;
