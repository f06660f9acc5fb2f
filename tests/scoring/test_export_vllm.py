"""`prmkit export RUN --vllm OUT`: the folder's config, weights and step token; a plain-transformers reading of
what vLLM's STEP pooler computes; and, where .venv-vllm exists, vLLM itself scoring as PRMScorer does."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import AutoModelForTokenClassification, AutoTokenizer
from tiny_models import train_tiny_run
from vllm_helpers import CPU_MEMORY_SHARE, build_vllm_sized_llama, needs_vllm, run_in_vllm

from prmkit.cli import main
from prmkit.errors import PRMError
from prmkit.model import PRMMetadata, load_token_classifier
from prmkit.scoring.export import export_merged
from prmkit.scoring.export_vllm import STEP_TOKEN, VLLM_FILE, VLLMInputs, export_vllm, step_scores
from prmkit.scoring.scorer import PRMScorer

CHAINS = [
    ("Tom has 3 bags of 4 apples. How many apples?", ["3 * 4 = 12.", "He has 12 apples.", "The answer is 12."]),
    ("What is 7 - 2?", ["7 - 2 = 5."]),
    # a step that holds the separator's last token itself, and a chain longer than max_length (steps dropped)
    ("She sells 4 boxes of 6 pens.", ["4 * 6 = 24.\n\nSo 24 pens.", "The answer is 24."]),
    ("Each friend gets 20 / 4 = 5 cookies. " * 6, ["Each friend gets 20 / 4 = 5 cookies. " * 3] * 6),
]
BIAS_SHIFT = 1.5  # moves every score far from the trained bias, so a dropped head bias cannot go unnoticed


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A tiny LoRA run (2 optimizer steps) on a backbone vLLM's CPU attention accepts."""
    root = tmp_path_factory.mktemp("vllm-run")
    return train_tiny_run(build_vllm_sized_llama(root / "base"), root)


@pytest.fixture(scope="module")
def variants(run, tmp_path_factory):
    """Merged prmkit folders to export: the run as trained (BCE), its head bias shifted, and the shifted one read
    as an MSE run (raw scores)."""
    root = tmp_path_factory.mktemp("variants")
    shifted = export_merged(run, root / "shifted")
    weights = load_file(shifted / "model.safetensors")
    weights["score.bias"] = weights["score.bias"] + BIAS_SHIFT
    save_file(weights, shifted / "model.safetensors", metadata={"format": "pt"})
    mse = root / "mse"
    shutil.copytree(shifted, mse)
    meta = PRMMetadata.load(mse)
    meta.loss, meta.base_path = "mse", str(mse)
    meta.save(mse)
    return {"run": run, "shifted": shifted, "mse": mse}


@pytest.fixture(scope="module")
def exports(variants, tmp_path_factory):
    root = tmp_path_factory.mktemp("vllm-exports")
    return {name: export_vllm(folder, root / name) for name, folder in variants.items()}


def expected_scores(folder, chains=CHAINS):
    return PRMScorer.from_pretrained(folder, device="cpu").score_many(chains)


def test_config_names_a_token_classifier_the_step_pooler_and_the_activation(exports):
    config = json.loads((exports["run"] / "config.json").read_text())
    settings = json.loads((exports["run"] / VLLM_FILE).read_text())
    step_id = AutoTokenizer.from_pretrained(exports["run"]).convert_tokens_to_ids(STEP_TOKEN)
    assert config["architectures"] == ["LlamaForTokenClassification"] and len(config["id2label"]) == 1
    assert config["problem_type"] == "multi_label_classification"  # vLLM: sigmoid, prmkit's bce score
    assert config["prm_step_token_id"] == settings["step_token_id"] == step_id
    assert config["vocab_size"] > step_id
    assert settings["pooler_config"] == {"pooling_type": "STEP", "step_tag_id": step_id}
    assert f'"step_tag_id": {step_id}' in settings["serve"] and "--runner pooling" in settings["serve"]
    assert settings["separator"] == "\n\n" and settings["max_length"] == 160
    assert json.loads((exports["mse"] / "config.json").read_text())["problem_type"] == "regression"  # raw output
    assert PRMMetadata.load(exports["run"]).added_tokens[-1] == STEP_TOKEN


def test_weights_keep_the_head_bias_and_copy_the_separator_embedding(variants, exports):
    exported = load_file(exports["shifted"] / "model.safetensors")
    merged = load_file(variants["shifted"] / "model.safetensors")
    torch.testing.assert_close(exported["score.bias"], merged["score.bias"], rtol=0, atol=0)
    torch.testing.assert_close(exported["score.weight"], merged["score.weight"], rtol=0, atol=0)
    embeddings, original = exported["model.embed_tokens.weight"], merged["model.embed_tokens.weight"]
    tokenizer = AutoTokenizer.from_pretrained(exports["shifted"])
    step_id = tokenizer.convert_tokens_to_ids(STEP_TOKEN)
    separator_last = tokenizer("\n\n", add_special_tokens=False)["input_ids"][-1]
    torch.testing.assert_close(embeddings[step_id], original[separator_last], rtol=0, atol=0)
    torch.testing.assert_close(embeddings[:original.shape[0]], original, rtol=0, atol=0)


def test_request_ids_put_the_step_token_exactly_at_prmkit_step_positions(exports):
    inputs = VLLMInputs.from_folder(exports["run"])
    scorer = PRMScorer.from_pretrained(exports["run"], device="cpu")
    for prompt, steps in CHAINS:
        chain = scorer.tokenize(prompt, steps)
        ids = inputs.token_ids(prompt, steps)
        marked = [i for i, token in enumerate(ids) if token == inputs.step_token_id]
        assert marked == chain.step_positions  # not the prompt's separator, not a separator inside a step
        unmarked = [token for i, token in enumerate(ids) if i not in marked]
        assert unmarked == [token for i, token in enumerate(chain.input_ids) if i not in marked]
    assert scorer.tokenize(*CHAINS[3]).steps_dropped > 0  # the long chain really is cut


@pytest.mark.parametrize("name", ["run", "shifted", "mse"])
def test_what_vllm_loads_scores_as_prmscorer_in_plain_transformers(variants, exports, name):
    """vLLM's STEP pooler, re-done in transformers: the head on the tokens whose id is step_tag_id, then the
    activation problem_type names. It must give PRMScorer's scores on the source folder."""
    folder = exports[name]
    model = AutoModelForTokenClassification.from_pretrained(folder).eval()
    settings = json.loads((folder / VLLM_FILE).read_text())
    step_id = settings["pooler_config"]["step_tag_id"]
    activation = torch.sigmoid if model.config.problem_type == "multi_label_classification" else (lambda x: x)
    inputs = VLLMInputs.from_folder(folder)
    got = []
    for prompt, steps in CHAINS:
        ids = torch.tensor([inputs.token_ids(prompt, steps)])
        with torch.no_grad():
            logits = model(input_ids=ids).logits[0]
        got.append(step_scores(activation(logits[ids[0] == step_id]).tolist(), steps))
    expected = expected_scores(variants[name])
    assert [len(s) for s in got] == [len(s) for s in expected]
    for row, want in zip(got, expected):
        assert [x is None for x in row] == [x is None for x in want]
        assert [x for x in row if x is not None] == pytest.approx([x for x in want if x is not None], abs=1e-5)
    if name == "mse":  # raw outputs, not probabilities: the shifted bias pushes them past 1
        assert any(x > 1 for row in got for x in row if x is not None)


def test_the_bias_shift_is_visible_in_the_scores(variants):
    plain, shifted = expected_scores(variants["run"])[0], expected_scores(variants["shifted"])[0]
    assert all(b > a + 0.05 for a, b in zip(plain, shifted))


def test_step_scores_pads_cut_steps_and_rejects_extra_rows():
    assert step_scores([[0.25], [0.5]], ["a", "b", "c"]) == [0.25, 0.5, None]
    with pytest.raises(PRMError, match="3 scores for 2 steps"):
        step_scores([[0.1], [0.2], [0.3]], ["a", "b"])


def test_refusals_name_the_problem_and_the_fix(variants, exports, tiny_gpt2, tmp_path):
    with pytest.raises(PRMError, match="already holds files"):
        export_vllm(variants["run"], exports["run"])
    with pytest.raises(PRMError, match="already has"):
        export_vllm(exports["run"], tmp_path / "again")
    empty = tmp_path / "empty-separator"
    shutil.copytree(variants["shifted"], empty)
    meta = PRMMetadata.load(empty)
    meta.separator = ""
    meta.save(empty)
    with pytest.raises(PRMError, match="empty separator"):
        export_vllm(empty, tmp_path / "out-empty")
    gpt2 = tmp_path / "gpt2"
    load_token_classifier(str(tiny_gpt2)).save_pretrained(gpt2)
    AutoTokenizer.from_pretrained(tiny_gpt2).save_pretrained(gpt2)
    PRMMetadata(base_model="gpt2", base_path=str(gpt2), finetune="merged", loss="bce", separator="\n\n",
                max_length=64).save(gpt2)
    with pytest.raises(PRMError, match="'classifier'.*--merge"):
        export_vllm(gpt2, tmp_path / "out-gpt2")
    assert not (tmp_path / "out-gpt2").exists()  # nothing is written for a refused export


def test_cli_export_vllm_prints_the_serve_command(variants, tmp_path, capsys):
    out = tmp_path / "cli-export"
    assert main(["export", str(variants["run"]), "--vllm", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "--runner pooling" in printed and (out / VLLM_FILE).is_file()
    with pytest.raises(SystemExit):
        main(["export", str(variants["run"])])  # one of --merge / --vllm is required
    assert "one of the arguments --merge --vllm is required" in capsys.readouterr().err


@needs_vllm
def test_vllm_step_scores_equal_prmscorer(variants, exports):
    """vLLM's offline pooling runner (fp32, the folder's STEP pooler config) on token ids from VLLMInputs returns
    PRMScorer's scores within 1e-5: probabilities with the trained and the shifted bias, raw values for MSE."""
    names = ["shifted", "mse"]
    runs = [{"folder": str(exports[name]),
             "inputs": [VLLMInputs.from_folder(exports[name]).token_ids(p, s) for p, s in CHAINS]} for name in names]
    answer = run_in_vllm("score_export.py", {"memory": CPU_MEMORY_SHARE, "runs": runs})
    for name, rows in zip(names, answer["scores"]):
        got = [step_scores(chain_rows, steps) for chain_rows, (_, steps) in zip(rows, CHAINS)]
        expected = expected_scores(variants[name])
        for row, want in zip(got, expected):
            assert [x is None for x in row] == [x is None for x in want]
            assert [x for x in row if x is not None] == pytest.approx([x for x in want if x is not None], abs=1e-5)
