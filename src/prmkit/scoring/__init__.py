"""Using a trained PRM: `scorer` (PRMScorer: every step of many chains in batched forward passes), `inputs` (text
and rows to (prompt, steps)), `aggregate` (one number per chain, best-of-N ranking), `options` (every default),
`score_file` (`prmkit score`), `reward` (PRMReward for RL trainers), `export` (a merged transformers folder),
`export_vllm` (a folder `vllm serve` scores steps with), `distributed` (sharding `prmkit score` under torchrun)
and `formats` (public PRMs read behind the same scorer)."""
