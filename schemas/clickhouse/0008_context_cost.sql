-- What a server's current tool list and instructions cost a model's context (o200k_base tokens, bytes of
-- compact JSON); empty on rows written before it, until the server's next list.
ALTER TABLE servers ADD COLUMN IF NOT EXISTS context_tokens Nullable(UInt64);
ALTER TABLE servers ADD COLUMN IF NOT EXISTS context_bytes Nullable(UInt64);
