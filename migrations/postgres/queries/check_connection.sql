-- Listener: a round trip that raises on a connection that died quietly.
SELECT 1
