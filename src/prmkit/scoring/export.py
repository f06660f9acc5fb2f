"""`prmkit export RUN --merge OUT`: a standard transformers folder that scores without prmkit installed, with a model
card (OUT/README.md) that says how it was trained, how well it did, and how to score with it.

The card is written from what the run folder holds: `prmkit.json` (base model, separator, loss, max_length, label
policy), `config.yaml` (training data), `summary.json` (validation metrics at the end of training; a checkpoint's
own come from its `trainer_state.json`) and `eval/*/metrics.json` (what `prmkit eval` measured on that folder).
Uploading is left to `hf upload`, whose command is printed: prmkit never pushes, so nothing here needs network.
"""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import replace
from pathlib import Path

import yaml

from prmkit.backbones import ALIASES
from prmkit.data.hub import parse_dataset_id
from prmkit.errors import PRMError
from prmkit.model import PRMMetadata, load_prm, merge_adapter

CARD_FILE = "README.md"
HUB_REPO = re.compile(r"[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*")
EXAMPLE = ("What is 3 * 4 + 2?", ["3 * 4 = 12.", "12 + 2 = 14."])


def export_merged(run_folder: str | Path, out_folder: str | Path, *, overwrite: bool = False,
                  hub_id: str | None = None) -> Path:
    """Merge and save; `hub_id` (owner/name) is the repository the folder is meant for, named in the card."""
    if hub_id is not None and not HUB_REPO.fullmatch(hub_id):
        raise PRMError(f"--hub-id '{hub_id}': expected a hub repository as owner/name, e.g. me/my-prm")
    out = prepare_out_folder(out_folder, overwrite)
    model, tokenizer, metadata = load_prm(run_folder)
    model = merge_adapter(model)
    describe_scoring(model.config, metadata)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    replace(metadata, finetune="merged", base_path=str(out.resolve())).save(out)
    (out / CARD_FILE).write_text(model_card(run_folder, metadata, model_id=hub_id or str(out)), encoding="utf-8")
    return out


def upload_command(out: str | Path, hub_id: str) -> str:
    return f"hf upload {hub_id} {out} --repo-type model"


def prepare_out_folder(out_folder: str | Path, overwrite: bool) -> Path:
    out = Path(out_folder)
    if out.exists() and any(out.iterdir()):
        if not overwrite:
            raise PRMError(f"{out} already holds files; choose an empty folder or pass --overwrite")
        shutil.rmtree(out)
    return out


def describe_scoring(config, metadata: PRMMetadata) -> None:
    """Plain-transformers users read these from config.json to score exactly as prmkit does."""
    config.prm_separator = metadata.separator
    config.prm_loss = metadata.loss
    config.prm_score = "sigmoid(logits)" if metadata.loss == "bce" else "logits"
    config.prm_max_length = metadata.max_length


def model_card(run_folder: str | Path, metadata: PRMMetadata, *, model_id: str) -> str:
    """The README.md of an export of `run_folder`; its snippets load `model_id` (a hub id or the local folder)."""
    run = Path(run_folder)
    root = run.parent if _is_checkpoint(run) else run  # a checkpoint's run folder holds the config and summary
    config = _read_yaml(root / "config.yaml")
    data = config.get("data") or {}
    train, val = data.get("train"), data.get("val")
    front = {"library_name": "transformers", "pipeline_tag": "token-classification",
             "tags": ["prmkit", "process-reward-model"]}
    if _base_on_hub(metadata):
        front["base_model"] = metadata.base_model
    datasets = [str(parse_dataset_id(d).repo) for d in (train, val) if d and _is_hub_id(d, dataset=True)]
    if datasets:
        front["datasets"] = list(dict.fromkeys(datasets))

    rows = [("Base model", _base_name(metadata)),
            ("Fine-tuning", f"{metadata.finetune} (merged into the weights for this export)"
             if metadata.finetune == "lora" else metadata.finetune),
            ("Training data", _data_name(train) if train else "not recorded"),
            ("Validation data", _data_name(val) if val else ("a held-out fraction of the training data"
                                                              if data.get("val_fraction") else "none")),
            ("Label scheme", _label_policy(metadata)),
            ("Step separator", f"`{json.dumps(metadata.separator)}` (after the prompt and after every step)"),
            ("Loss", f"`{metadata.loss}`: a step score is "
             + ("a probability, `sigmoid(logit)`" if metadata.loss == "bce" else "the raw regression output")),
            ("max_length", f"{metadata.max_length} tokens (steps beyond it were dropped whole, never cut)")]
    if metadata.train_on_last_step_only:
        rows.append(("Trained on", "the last step of each chain only"))
    summary = _read_json(root / "summary.json") if root == run else None
    if summary:
        rows.append(("Training", f"{summary.get('optimizer_steps')} optimizer steps on "
                                 f"{summary.get('train_rows')} chains"))
    if root != run:
        rows.append(("Checkpoint", f"`{run.name}` of the run (not its final weights)"))

    lines = ["---", yaml.safe_dump(front, sort_keys=False).rstrip(), "---", "",
             f"# {model_id.rstrip('/').rsplit('/', 1)[-1]}", "",
             "A Process Reward Model trained with prmkit: it reads a problem and a "
             "solution cut into steps in one forward pass and gives one score per step, read at the last token of "
             "the step. Higher means the step is more likely correct.", "",
             "## Training", "", "| | |", "|---|---|", *[f"| {k} | {v} |" for k, v in rows], "",
             "## Evaluation", "", *_evaluation(run, root, summary), "",
             "## Use", "", *_usage(model_id, metadata)]
    return "\n".join(lines) + "\n"


def _usage(model_id: str, metadata: PRMMetadata) -> list[str]:
    prompt, steps = EXAMPLE
    score = "torch.sigmoid(logits[positions])" if metadata.loss == "bce" else "logits[positions]"
    local = not _is_hub_id(model_id)
    load = (f'PRMScorer.from_pretrained("{model_id}")' if local else
            f'PRMScorer.from_pretrained(snapshot_download("{model_id}"))')
    return [
        "With prmkit, which tokenizes exactly as training did:", "",
        "```python", *([] if local else ["from huggingface_hub import snapshot_download"]),
        "from prmkit import PRMScorer", "", f"scorer = {load}",
        f"print(scorer.score({json.dumps(prompt)}, {json.dumps(steps)}))  # one score per step",
        "```", "",
        "With transformers only: the prompt, then each step, each followed by the separator; a step's score sits "
        "on the last token of its span (`config.json` carries `prm_separator`, `prm_score` and `prm_max_length`; "
        f"a chain longer than {metadata.max_length} tokens is scored by prmkit on the steps that fit, so drop "
        "steps from the end to stay within it):", "",
        "```python", "import torch", "from transformers import AutoModelForTokenClassification, AutoTokenizer", "",
        f'model_id = "{model_id}"',
        "model = AutoModelForTokenClassification.from_pretrained(model_id).eval()",
        "tok = AutoTokenizer.from_pretrained(model_id)",
        f"sep = model.config.prm_separator  # {json.dumps(metadata.separator)}", "",
        "", "def encode(text):", "    return tok(text, add_special_tokens=False).input_ids", "", "",
        "def step_scores(prompt, steps):",
        "    ids = ([tok.bos_token_id] if tok.bos_token_id is not None else []) + encode(prompt) + encode(sep)",
        "    positions = []", "    for step in steps:", "        ids += encode(step) + encode(sep)",
        "        positions.append(len(ids) - 1)", "    with torch.no_grad():",
        "        logits = model(input_ids=torch.tensor([ids])).logits[0, :, 0]",
        f"    return {score}.tolist()", "", "",
        f"print(step_scores({json.dumps(prompt)}, {json.dumps(steps)}))", "```"]


def _evaluation(run: Path, root: Path, summary: dict | None) -> list[str]:
    lines: list[str] = []
    if root == run:
        validation, when = (summary or {}).get("eval_metrics"), "at the end of training"
    else:
        step, validation = _checkpoint_eval(run)
        when = f"at optimizer step {step}, the last validation this checkpoint records"
    if validation:
        lines += [f"Validation data, {when}:", "", "| metric | value |", "|---|---|",
                  *[f"| {name} | {_number(value)} |" for name, value in validation.items()], ""]
    for path in sorted((run / "eval").glob("*/metrics.json")):
        metrics = _read_json(path) or {}
        threshold = (metrics.get("threshold") or {}).get("value")
        shown = "-" if threshold is None else f"{threshold:g}"
        lines += [f"`prmkit eval` ({path.parent.name}, step threshold {shown}):", "",
                  "| split | chains | step AUROC | step F1 | ProcessBench F1 | best-of-N accuracy |",
                  "|---|---|---|---|---|---|"]
        for name, split in (metrics.get("splits") or {}).items():
            step, pb, bon = split.get("step") or {}, split.get("processbench") or {}, split.get("best_of_n") or {}
            best = ", ".join(f"{how} {_number(v)}" for how, v in (bon.get("prm") or {}).items())
            lines.append(f"| {name} | {split.get('rows', '-')} | {_number(step.get('auroc'))} | "
                         f"{_number(step.get('f1'))} | {_number(pb.get('f1'))} | {best or '-'} |")
        lines.append("")
    return lines[:-1] if lines else ["No evaluation was recorded in the run folder (no validation data, no "
                                     "`prmkit eval`)."]


def _checkpoint_eval(checkpoint: Path) -> tuple[int | None, dict]:
    """The last validation a checkpoint's trainer_state.json records, and its step (the run's summary.json is the
    final weights', and a checkpoint may be saved before the validation of its own step)."""
    history = (_read_json(checkpoint / "trainer_state.json") or {}).get("log_history") or []
    last = next((entry for entry in reversed(history) if "eval_loss" in entry), {})
    return last.get("step"), {k.removeprefix("eval_"): v for k, v in last.items()
                              if k.startswith("eval_") and not k.endswith(("_runtime", "_per_second"))}


def _label_policy(metadata: PRMMetadata) -> str:
    if metadata.label_scheme == "ternary":
        neutral = {"positive": "correct", "negative": "wrong", "ignore": "not trained on"}[metadata.neutral_label]
        return f"ternary: PRM800K-style -1/0/+1 ratings, the neutral 0 read as {neutral}"
    if metadata.label_scheme == "binary":
        return "binary: correct (1) / wrong (0), soft labels in [0, 1] allowed"
    return metadata.label_scheme


def _base_on_hub(metadata: PRMMetadata) -> bool:
    return metadata.base_path == metadata.base_model and _is_hub_id(metadata.base_model)  # loaded by its hub id


def _base_name(metadata: PRMMetadata) -> str:
    base = metadata.base_model
    if _base_on_hub(metadata):
        return f"[{base}](https://huggingface.co/{base})"
    if base in ALIASES:
        return f"`{base}` (prmkit's alias for {ALIASES[base][1]})"
    return f"`{Path(base).name}` (a local folder or file)"  # as for data: the machine's path says nothing


def _data_name(value: str) -> str:
    if _is_hub_id(value, dataset=True):
        dataset = parse_dataset_id(value)
        return f"[{value}](https://huggingface.co/datasets/{dataset.repo})"
    # the machine's path means nothing to a reader of the card (and may say more than its owner wants)
    return f"`{Path(value.split('#', 1)[0]).name}` (a local file or folder)"


def _is_hub_id(value: str, *, dataset: bool = False) -> bool:
    """An id on the hub rather than a local path (the local path wins, as everywhere in prmkit)."""
    if Path(value).exists() or (dataset and Path(value.split("#", 1)[0].split(":", 1)[0]).exists()):
        return False
    return (parse_dataset_id(value) is not None) if dataset else bool(HUB_REPO.fullmatch(value))


def _is_checkpoint(folder: Path) -> bool:
    return folder.name.startswith("checkpoint-") and (folder.parent / "config.yaml").is_file()


def _number(value) -> str:
    if value is None:
        return "-"
    return f"{value:.4f}" if isinstance(value, float) else str(value)


def _read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):  # no such file, or a damaged one: the card goes without it
        return None


def _read_yaml(path: Path) -> dict:
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError):
        return {}
