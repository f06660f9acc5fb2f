"""Judging a PRM: `metrics` (step AUROC, accuracy, calibration, best-of-N), `processbench` (the first-error
protocol and its threshold calibration), `prmbench` (PRMBench's PRMScore per error class), `evaluate`
(`prmkit eval`: data files in, EvalResult and metrics.json out), `options`, `tables` (the printed tables) and
`report` (the HTML page of scored chains and the PNG plots)."""
