-- LedgerPostgresApplicationRecorder: one column of a small batch's call (one placeholder a value, cast to the column's array type).
ARRAY[{placeholders}]::{cast}[]
