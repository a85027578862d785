-- DatabaseDriver.autovacuum: whether the server runs autovacuum (`opledger doctor` warns when it
-- does not: archive's deletes and every status update leave dead rows nothing reclaims).
SELECT current_setting('autovacuum')
