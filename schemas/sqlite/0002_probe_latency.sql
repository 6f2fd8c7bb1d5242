-- Probes measure a server's round trip; SDK and API tool lists leave it empty.
ALTER TABLE servers ADD COLUMN latency_ms REAL;
