"""Run inside .venv-trl (scripts/setup_trl.sh): TRL 1.13's own PRMTrainer.tokenize_row on the cases sent as JSON on
stdin, each {tokenizer folder, row, step_separator, max_length, max_completion_length, train_on_last_step_only,
is_eval}. Prints one JSON object: per case the input ids and labels TRL produced, or the error TRL raised (its
message and type), and the fields of TRL's PRMConfig, so the test can say which of prmkit's settings TRL has."""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import warnings

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
warnings.filterwarnings("ignore")

import trl  # noqa: E402
from transformers import AutoTokenizer  # noqa: E402
from trl.experimental.prm import PRMConfig, PRMTrainer  # noqa: E402


def main() -> None:
    payload = json.load(sys.stdin)
    tokenizers = {folder: AutoTokenizer.from_pretrained(folder) for folder in {c["tokenizer"] for c in payload}}
    results = []
    for case in payload:
        try:
            out = PRMTrainer.tokenize_row(case["row"], tokenizers[case["tokenizer"]], case["step_separator"],
                                          case["max_length"], case["max_completion_length"],
                                          case["train_on_last_step_only"], case["is_eval"])
            results.append({"input_ids": out["input_ids"], "labels": out["labels"]})
        except Exception as err:  # TRL's own failure on a row is a result the test compares, not a crash here
            results.append({"error": f"{type(err).__name__}: {err}"})
    print(json.dumps({"trl_version": trl.__version__, "results": results,
                      "config_fields": sorted(f.name for f in dataclasses.fields(PRMConfig))}))


if __name__ == "__main__":
    main()
