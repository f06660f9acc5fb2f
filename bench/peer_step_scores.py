"""Per-step scores from a PRM trained by a peer system, read with that system's own tokenization.

    PEER_VENV/bin/python bench/peer_step_scores.py {trl|soup} RUN_DIR BASE_DIR ROWS.jsonl MAX_LEN OUT.json

Runs inside the peer's own environment (it imports only torch, transformers, peft and, for soup, soup-cli), so
bench/peer_quality.py can put every system through the same metric code. ROWS.jsonl holds `prompt` and
`completions`; OUT.json gets one list per row with a score per step, None where the step's label token falls past
MAX_LEN (each system truncates as it does in training: TRL and soup-cli cut from the right).
"""

import json
import sys

import torch


def trl_scorer(run_dir: str, base: str, max_len: int):
    from peft import PeftModel
    from transformers import AutoModelForTokenClassification, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(run_dir)
    model = AutoModelForTokenClassification.from_pretrained(base, num_labels=2)
    model = PeftModel.from_pretrained(model, run_dir).eval()
    separator = tokenizer("\n", add_special_tokens=False)["input_ids"]

    def score(prompt: str, steps: list[str]) -> list[float | None]:
        # TRL's tokenize_row: BOS + prompt, then each step followed by the separator, label on its last token.
        ids = [tokenizer.bos_token_id] if tokenizer.bos_token_id is not None else []
        ids += tokenizer(prompt, add_special_tokens=False)["input_ids"]
        positions = []
        for step in steps:
            ids += tokenizer(step, add_special_tokens=False)["input_ids"] + separator
            positions.append(len(ids) - 1)
        with torch.no_grad():
            probs = torch.softmax(model(input_ids=torch.tensor([ids[:max_len]])).logits[0], -1)[:, 1]
        return [probs[p].item() if p < max_len else None for p in positions]

    return score


def soup_scorer(run_dir: str, base: str, max_len: int):
    from safetensors.torch import load_file
    from soup_cli.trainer.prm import _prepare_prm_dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(run_dir)
    model = AutoModelForCausalLM.from_pretrained(run_dir).eval()
    head = torch.nn.Linear(model.config.hidden_size, 1)
    state = load_file(f"{run_dir}/model.safetensors")
    head.load_state_dict({"weight": state["reward_head.weight"], "bias": state["reward_head.bias"]})

    def score(prompt: str, steps: list[str]) -> list[float | None]:
        # soup-cli's own preparation: its step positions are the steps that fit in max_len.
        prepared = _prepare_prm_dataset([{"prompt": prompt, "completions": steps, "labels": [True] * len(steps)}],
                                        tokenizer, max_len)
        if not prepared:
            return [None] * len(steps)
        row = prepared[0]
        with torch.no_grad():
            hidden = model(input_ids=torch.tensor([row["input_ids"]]), output_hidden_states=True).hidden_states[-1]
            values = head(hidden[0, row["step_positions"]]).squeeze(-1).tolist()
        return values + [None] * (len(steps) - len(values))

    return score


def main() -> None:
    system, run_dir, base, rows_path, max_len, out = sys.argv[1:7]
    torch.set_num_threads(2)
    score = {"trl": trl_scorer, "soup": soup_scorer}[system](run_dir, base, int(max_len))
    rows = [json.loads(line) for line in open(rows_path, encoding="utf-8")]
    with open(out, "w", encoding="utf-8") as handle:
        json.dump([score(row["prompt"], row["completions"]) for row in rows], handle)


if __name__ == "__main__":
    main()
