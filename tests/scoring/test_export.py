"""`prmkit export RUN --merge OUT`: the model card written beside the weights says how the PRM was trained and how it
did, and its transformers snippet, run as written, gives prmkit's step scores."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from prmkit.cli import main
from prmkit.config import load_config
from prmkit.data.synthetic import generate_records
from prmkit.errors import PRMError
from prmkit.files import write_jsonl
from prmkit.model import PRMMetadata
from prmkit.scoring.export import CARD_FILE, EXAMPLE, export_merged
from prmkit.scoring.scorer import PRMScorer
from prmkit.training.trainer import train


def front_matter(card: str) -> dict:
    return yaml.safe_load(card.split("---\n", 2)[1])


def python_blocks(card: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", card, flags=re.S)


def test_the_card_describes_the_run_and_its_snippet_scores_as_prmkit_does(tiny_run, tmp_path, capsys):
    out = tmp_path / "merged"
    assert main(["export", str(tiny_run), "--merge", str(out)]) == 0
    assert f"model card in {out / CARD_FILE}" in capsys.readouterr().out
    card = (out / CARD_FILE).read_text(encoding="utf-8")
    metadata = PRMMetadata.load(tiny_run)
    assert front_matter(card)["library_name"] == "transformers"
    assert "base_model" not in front_matter(card)  # the tiny backbone is a local folder, not a hub model
    assert metadata.base_model.startswith("/")  # the tiny backbone's folder: shown by its name only
    assert f"| Base model | `{Path(metadata.base_model).name}` (a local folder or file) |" in card
    assert "| Fine-tuning | lora (merged into the weights for this export) |" in card
    assert "| Training data | `train.jsonl` (a local file or folder) |" in card  # the machine's path is not shown
    assert "| Validation data | none |" in card
    assert "| Label scheme | binary: correct (1) / wrong (0)" in card
    assert '| Step separator | `"\\n\\n"` (after the prompt and after every step) |' in card
    assert "| Loss | `bce`: a step score is a probability, `sigmoid(logit)` |" in card
    assert "| max_length | 160 tokens" in card
    assert "| Training | 2 optimizer steps on 16 chains |" in card
    assert "No evaluation was recorded" in card or "`prmkit eval`" in card  # other tests may have evaluated the run

    prmkit_snippet, transformers_snippet = python_blocks(card)
    assert f'PRMScorer.from_pretrained("{out}")' in prmkit_snippet
    printed = {}
    exec(transformers_snippet.replace("print(", "printed['scores'] = ("), {"printed": printed})  # noqa: S102
    expected = PRMScorer.from_pretrained(out, device="cpu").score(*EXAMPLE)
    assert printed["scores"] == pytest.approx(expected, abs=1e-5)


def test_a_hub_id_names_the_model_in_the_snippets_and_the_upload_command_is_printed(tiny_run, tmp_path, capsys):
    out = tmp_path / "merged"
    assert main(["export", str(tiny_run), "--merge", str(out), "--hub-id", "me/tiny-prm"]) == 0
    assert f"hf upload me/tiny-prm {out} --repo-type model" in capsys.readouterr().out
    card = (out / CARD_FILE).read_text(encoding="utf-8")
    assert card.split("\n---\n", 1)[1].lstrip().startswith("# tiny-prm\n")
    prmkit_snippet, transformers_snippet = python_blocks(card)
    assert 'PRMScorer.from_pretrained(snapshot_download("me/tiny-prm"))' in prmkit_snippet
    assert 'model_id = "me/tiny-prm"' in transformers_snippet
    with pytest.raises(PRMError, match=r"--hub-id 'tiny-prm': expected a hub repository as owner/name"):
        export_merged(tiny_run, tmp_path / "other", hub_id="tiny-prm")
    assert main(["export", str(tiny_run), "--vllm", str(tmp_path / "vllm"), "--hub-id", "me/tiny-prm"]) == 2
    assert "--hub-id goes with --merge" in capsys.readouterr().err and not (tmp_path / "vllm").exists()


@pytest.fixture(scope="module")
def evaluated_run(tiny_llama, tmp_path_factory):
    """A ternary run with validation data, trained from a dataset id, then measured by `prmkit eval`."""
    root = tmp_path_factory.mktemp("card-run")
    records = generate_records(16, seed=4)
    for record in records:  # PRM800K-style ratings: wrong steps -1, the last step neutral
        record["labels"] = [None if label is None else -1 if label == 0 else 1 for label in record["labels"]]
        record["labels"][-1] = 0
    write_jsonl(records[4:], root / "train.jsonl")
    write_jsonl(records[:4], root / "val.jsonl")
    train(load_config(None, [
        f"model.base={tiny_llama}", f"data.train={root / 'train.jsonl'}", f"data.val={root / 'val.jsonl'}",
        "data.neutral_label=ignore", "data.max_length=448", f"output_dir={root}", "run_name=run",
        "training.max_steps=2", "training.batch_size=4", "training.save_steps=2", "training.eval_steps=1",
        "lora.r=4", "lora.dropout=0.0", "loss.type=mse"]))
    assert main(["eval", str(root / "run"), str(root / "val.jsonl"), "--out", str(root / "run" / "eval" / "val"),
                 "--device", "cpu"]) == 0
    return root / "run"


def test_the_card_reports_validation_and_eval_metrics_of_the_run(evaluated_run, tmp_path):
    card = (export_merged(evaluated_run, tmp_path / "merged") / CARD_FILE).read_text(encoding="utf-8")
    summary = json.loads((evaluated_run / "summary.json").read_text())
    assert summary["eval_metrics"]
    for name, value in summary["eval_metrics"].items():
        shown = f"{value:.4f}" if isinstance(value, float) else str(value)
        assert f"| {name} | {shown} |" in card
    assert "| Label scheme | ternary: PRM800K-style -1/0/+1 ratings, the neutral 0 read as not trained on |" in card
    assert "| Loss | `mse`: a step score is the raw regression output |" in card
    assert "| Validation data | `val.jsonl` (a local file or folder) |" in card
    metrics = json.loads((evaluated_run / "eval" / "val" / "metrics.json").read_text())
    split = metrics["splits"]["val"]
    shown = ["-" if v is None else f"{v:.4f}" for v in (split["step"]["auroc"], split["step"]["f1"])]
    assert split["step"]["auroc"] is not None and f"| val | 4 | {shown[0]} | {shown[1]} |" in card
    _, transformers_snippet = python_blocks(card)
    assert "return logits[positions].tolist()" in transformers_snippet  # mse: raw outputs, no sigmoid


def test_a_checkpoint_card_says_so_and_reports_the_checkpoints_own_validation(evaluated_run, tmp_path):
    card = (export_merged(evaluated_run / "checkpoint-2", tmp_path / "merged") / CARD_FILE).read_text("utf-8")
    assert "| Checkpoint | `checkpoint-2` of the run (not its final weights) |" in card
    assert "| Validation data | `val.jsonl` (a local file or folder) |" in card  # the run's config, read from above
    state = json.loads((evaluated_run / "checkpoint-2" / "trainer_state.json").read_text())
    last = next(e for e in reversed(state["log_history"]) if "eval_loss" in e)
    assert f"Validation data, at optimizer step {last['step']}, the last validation this checkpoint" in card
    assert f"| loss | {last['eval_loss']:.4f} |" in card


def test_hub_names_of_base_and_data_go_into_the_cards_metadata(tmp_path, monkeypatch):
    """A base model and datasets named by hub id are linked and listed for the hub; local ones are not."""
    from prmkit.scoring.export import model_card

    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text(yaml.safe_dump({"data": {"train": "trl-lib/math_shepherd",
                                                              "val": "trl-lib/math_shepherd#test"}}))
    monkeypatch.chdir(tmp_path)  # no folder trl-lib/math_shepherd here: the ids are hub ids
    metadata = PRMMetadata(base_model="Qwen/Qwen2.5-0.5B", base_path="Qwen/Qwen2.5-0.5B", finetune="full",
                           loss="bce", separator="\n", max_length=1024, label_scheme="binary")
    card = model_card(run, metadata, model_id="me/prm")
    assert front_matter(card)["base_model"] == "Qwen/Qwen2.5-0.5B"
    assert front_matter(card)["datasets"] == ["trl-lib/math_shepherd"]
    assert "| Base model | [Qwen/Qwen2.5-0.5B](https://huggingface.co/Qwen/Qwen2.5-0.5B) |" in card
    assert ("| Validation data | [trl-lib/math_shepherd#test](https://huggingface.co/datasets/trl-lib/math_shepherd)"
            " |") in card
    assert "No evaluation was recorded in the run folder" in card

    (tmp_path / "trl-lib" / "math_shepherd").mkdir(parents=True)  # a local copy wins, as it did for training
    alias = PRMMetadata(base_model="smollm2-135m", base_path="/cache/smollm2", finetune="lora", loss="bce",
                        separator="\n", max_length=1024)
    card = model_card(run, alias, model_id="me/prm")
    assert "base_model" not in front_matter(card) and "datasets" not in front_matter(card)
    assert "| Base model | `smollm2-135m` (prmkit's alias for SmolLM2-135M-Instruct.Q4_1.gguf) |" in card
    assert "| Training data | `math_shepherd` (a local file or folder) |" in card
