"""Training: a config in, a run folder out. `trainer` drives the transformers Trainer with prmkit's data, model and
loss; `checkpoints` writes every checkpoint whole or not at all and finds the one to resume; `run_folder` checks
the folder before a run; `head_init` fits the head as a linear probe; `packing` makes padding-free batches;
`summary` is the end-of-run table and summary.json."""
