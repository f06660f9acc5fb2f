"""`prmkit export RUN --vllm OUT`: a folder that `vllm serve --runner pooling` answers with one score per step.

vLLM loads a `<Base>ForTokenClassification` folder (Llama, Qwen2, Mistral...) as its own `<Base>ForCausalLM`
converted to a classifier: no LM head, a `score` linear layer whose `score.bias` is read from the checkpoint, and
the `token_classify` task by default. Its STEP pooler keeps the tokens whose id is `step_tag_id` and applies the
head there, then the activation that `problem_type` names: sigmoid for a BCE-trained PRM (multi-label
classification), none for an MSE one (regression). So vLLM returns exactly prmkit's step scores, probability or
raw value, with the head's bias included.

The STEP pooler needs one token id that occurs only where a score is read. prmkit reads each step's score at the
last token of its separator span, and that token also closes the prompt (and may occur inside a step), so the
export adds a dedicated step token whose input embedding is a copy of that last separator token's. A request puts
the step token in those places only: every hidden state is the one prmkit computes, and the pooler finds exactly
one position per step. Requests carry token ids (`VLLMInputs.token_ids`), never text, because tokenizing the
joined text can merge a separator with its neighbours and move or lose step positions.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Sequence

import torch

from prmkit.errors import PRMError
from prmkit.files import write_json_atomic
from prmkit.model import PRMMetadata, head_name, load_prm, load_tokenizer, merge_adapter
from prmkit.scoring.export import describe_scoring, prepare_out_folder
from prmkit.tokenize import encode, tokenize_chain

STEP_TOKEN = "<|prm_step|>"
VLLM_FILE = "prmkit_vllm.json"
# vLLM's activation for a token classifier follows config.problem_type, as transformers' losses do.
PROBLEM_TYPES = {"bce": "multi_label_classification", "mse": "regression"}


def export_vllm(run_folder: str | Path, out_folder: str | Path, *, overwrite: bool = False) -> Path:
    """Write the vLLM folder for a run, checkpoint or merged export; returns the folder."""
    model, tokenizer, metadata = load_prm(run_folder)
    model = merge_adapter(model)
    check_exportable(model, tokenizer, metadata, run_folder)
    out = prepare_out_folder(out_folder, overwrite)
    step_id = add_step_token(model, tokenizer, encode(tokenizer, metadata.separator)[-1])
    describe_scoring(model.config, metadata)
    model.config.problem_type = PROBLEM_TYPES[metadata.loss]
    model.config.prm_step_token = STEP_TOKEN
    model.config.prm_step_token_id = step_id
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    replace(metadata, finetune="merged", base_path=str(out.resolve()),
            added_tokens=[*metadata.added_tokens, STEP_TOKEN]).save(out)
    write_json_atomic(out / VLLM_FILE, vllm_settings(out, metadata, step_id))
    return out


def check_exportable(model, tokenizer, metadata: PRMMetadata, source) -> None:
    if STEP_TOKEN in tokenizer.get_vocab():
        raise PRMError(f"{source}: the tokenizer already has {STEP_TOKEN!r}; export from the run folder, not from a "
                       "vLLM export")
    if metadata.loss not in PROBLEM_TYPES:
        raise PRMError(f"{source}: loss {metadata.loss!r} has no vLLM activation; prmkit exports "
                       f"{', '.join(sorted(PROBLEM_TYPES))} runs")
    if not metadata.separator:
        raise PRMError(f"{source}: the run has an empty separator, so each step's score sits on its own last token "
                       "and no single step token can mark them; train with a separator (data.separator) to serve "
                       "it with vLLM, or use --merge and score with transformers")
    name = head_name(model)
    if name != "score":
        raise PRMError(f"{source}: {type(model).__name__} names its head {name!r}; vLLM's token classifier reads "
                       "`score.weight` / `score.bias`, which Llama-, Qwen2- and Mistral-style models use. Export "
                       "this one with --merge and score it with transformers")


def add_step_token(model, tokenizer, copy_of: int) -> int:
    """Add STEP_TOKEN with the input embedding of token `copy_of`; returns its id."""
    tokenizer.add_special_tokens({"additional_special_tokens": [STEP_TOKEN]})
    step_id = tokenizer.convert_tokens_to_ids(STEP_TOKEN)
    if model.get_input_embeddings().weight.shape[0] <= step_id:
        model.resize_token_embeddings(step_id + 1, mean_resizing=False)
    with torch.no_grad():
        weights = model.get_input_embeddings().weight
        weights[step_id] = weights[copy_of]
    return step_id


def serve_command(folder: str | Path, step_id: int, dtype: str = "float32") -> str:
    pooler = json.dumps({"pooling_type": "STEP", "step_tag_id": step_id})
    return f"vllm serve {folder} --runner pooling --dtype {dtype} --pooler-config '{pooler}'"


def vllm_settings(folder: Path, metadata: PRMMetadata, step_id: int) -> dict:
    return {
        "step_token": STEP_TOKEN, "step_token_id": step_id, "separator": metadata.separator,
        "max_length": metadata.max_length, "loss": metadata.loss,
        "score": "probability (sigmoid applied by vLLM)" if metadata.loss == "bce" else "raw regression output",
        "pooler_config": {"pooling_type": "STEP", "step_tag_id": step_id},
        "serve": serve_command(folder.resolve(), step_id),
        "request": "POST /pooling {\"model\": ..., \"input\": [token ids], \"task\": \"token_classify\"}: token ids "
                   "from prmkit.scoring.export_vllm.VLLMInputs, one [score] per step in the response's data",
    }


@dataclass
class VLLMInputs:
    """Token ids of (prompt, steps) for a vLLM export: prmkit's tokenization (same truncation to max_length) with
    each step's score position holding the step token."""
    tokenizer: object
    separator: str
    max_length: int
    step_token_id: int

    @classmethod
    def from_folder(cls, folder: str | Path) -> "VLLMInputs":
        path = Path(folder, VLLM_FILE)
        if not path.is_file():
            raise PRMError(f"{folder}: no {VLLM_FILE}; create the folder with `prmkit export RUN --vllm {folder}`")
        settings = json.loads(path.read_text(encoding="utf-8"))
        return cls(load_tokenizer(str(folder)), settings["separator"], settings["max_length"],
                   settings["step_token_id"])

    def token_ids(self, prompt: str, steps: Sequence[str]) -> list[int]:
        chain = tokenize_chain(self.tokenizer, prompt, steps, None, separator=self.separator,
                               max_length=self.max_length)
        ids = list(chain.input_ids)
        for position in chain.step_positions:
            ids[position] = self.step_token_id
        return ids


def step_scores(rows: Sequence, steps: Sequence[str]) -> list[float | None]:
    """One score per step from vLLM's STEP output (one [score] row per step token), None for the steps that
    max_length cut off, as PRMScorer returns them."""
    values = [float(row[0]) if isinstance(row, (list, tuple)) else float(row) for row in rows]
    if len(values) > len(steps):
        raise PRMError(f"vLLM returned {len(values)} scores for {len(steps)} steps; build the request with "
                       "VLLMInputs.token_ids and serve with the step_tag_id of prmkit_vllm.json")
    return values + [None] * (len(steps) - len(values))
