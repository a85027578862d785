-- PostgresStatusView.write: binary COPY of the rows into the staging table ({columns}: the status columns).
COPY opledger_status_stage ({columns}) FROM STDIN (FORMAT BINARY)
