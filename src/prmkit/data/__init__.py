"""Data before training: `records` (the record contract and its validation), `rows` (the one row reader, with
row numbers), `hub` (datasets named by id, read with `datasets.load_dataset`), `io` (rows to validated records),
`convert` + `formats_*` (PRM800K, Math-Shepherd, ProcessBench, MATH-APS, PRMBench, TRL layouts), `stats` (validate,
statistics, grouped split) and `synthetic` (arithmetic chains with injected errors)."""
