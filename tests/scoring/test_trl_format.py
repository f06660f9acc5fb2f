"""The `trl` format: a PRM trained by TRL 1.13's PRMTrainer (a `*ForTokenClassification` model with two labels) read
by PRMScorer exactly as TRL trained it. The reference here is TRL's own tokenize_row, copied below, and plain
transformers' logits at the positions it labels; the models are tiny ones saved in the layout TRL's trainer leaves
(save_pretrained of the model and of its tokenizer)."""

from __future__ import annotations

import json
import sys
from itertools import chain
from pathlib import Path

import pytest
import torch
from public_prms import CHAINS, SMALL
from tiny_models import build_tokenizer
from transformers import (
    AutoModelForTokenClassification,
    AutoTokenizer,
    LlamaConfig,
    LlamaForTokenClassification,
    Qwen2Config,
    Qwen2ForTokenClassification,
)

from prmkit.errors import PRMError
from prmkit.scoring.formats import detect_format
from prmkit.scoring.scorer import PRMScorer

sys.path.insert(0, str(Path(__file__).parents[1] / "serving"))  # serve_helpers.LiveServer, for the server test


def tokenize_row(features, tokenizer, step_separator, max_length, max_completion_length, train_on_last_step_only,
                 is_eval):
    """TRL 1.13.0's PRMTrainer.tokenize_row (trl/experimental/prm/prm_trainer.py), copied without its docstring: the
    reference every score here is read at."""
    # Tokenize the prompt and completions
    prompt_ids = tokenizer(features["prompt"], add_special_tokens=False)["input_ids"]
    completions_ids = [
        tokenizer(completion, add_special_tokens=False)["input_ids"] for completion in features["completions"]
    ]
    if train_on_last_step_only and not is_eval:
        labels = [-100] * (len(features["labels"]) - 1) + [int(features["labels"][-1])]
    else:
        labels = [int(label) for label in features["labels"]]

    # Get the ID of the separator token and add it to the completions
    separator_ids = tokenizer.encode(step_separator, add_special_tokens=False)
    completions_ids = [completion + separator_ids for completion in completions_ids]

    # Create the label
    labels = [
        [-100] * (len(completion) - 1) + [label] for completion, label in zip(completions_ids, labels, strict=True)
    ]

    # Join the completions and labels steps
    completion_ids = list(chain(*completions_ids))
    labels = list(chain(*labels))

    if tokenizer.bos_token_id is not None:
        prompt_ids = [tokenizer.bos_token_id] + prompt_ids

    # Truncate completion sequences
    if max_completion_length is not None:
        completion_ids = completion_ids[:max_completion_length]
        labels = labels[:max_completion_length]

    input_ids = prompt_ids + completion_ids
    labels = [-100] * len(prompt_ids) + labels

    if max_length is not None:
        input_ids = input_ids[:max_length]
        labels = labels[:max_length]

    return {"input_ids": input_ids, "labels": labels}


def trl_row(tokenizer, prompt, steps, separator="\n", max_length=None):
    """TRL's input ids and label positions of a chain (labels all 1, so every labelled position shows)."""
    row = tokenize_row({"prompt": prompt, "completions": steps, "labels": [True] * len(steps)}, tokenizer, separator,
                       max_length, None, False, True)
    return row["input_ids"], [i for i, label in enumerate(row["labels"]) if label != -100]


@torch.no_grad()
def by_transformers(folder, prompt, steps, separator="\n", max_length=None):
    """Plain transformers, one chain at a time, no padding: softmax(logits)[..., 1] at TRL's label positions."""
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForTokenClassification.from_pretrained(folder).eval()
    ids, positions = trl_row(tokenizer, prompt, steps, separator, max_length)
    return model(input_ids=torch.tensor([ids])).logits.softmax(-1)[0, positions, 1].tolist()


def build_trl_prm(folder: str | Path, arch: str = "llama", bos: bool = True, seed: int = 0) -> Path:
    """A folder as TRL's PRMTrainer leaves it: AutoModelForTokenClassification(num_labels=2) and its tokenizer,
    save_pretrained. `bos=False` is a tokenizer without a BOS token (Qwen2.5's), to which TRL prepends nothing."""
    folder = Path(folder)
    tokenizer = build_tokenizer()
    if not bos:
        tokenizer.bos_token = None
    config_class, model_class = {"llama": (LlamaConfig, LlamaForTokenClassification),
                                 "qwen2": (Qwen2Config, Qwen2ForTokenClassification)}[arch]
    config = config_class(**SMALL, vocab_size=len(tokenizer), eos_token_id=tokenizer.eos_token_id,
                          pad_token_id=tokenizer.pad_token_id, num_labels=2)
    torch.manual_seed(seed)
    model = model_class(config).eval()
    # a trained head's logits are far apart; the default init's (std 0.02) give every step nearly 0.5
    torch.nn.init.normal_(model.score.weight, std=0.2)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def trl_llama(tmp_path_factory):
    return build_trl_prm(tmp_path_factory.mktemp("trl-llama"), "llama")


@pytest.fixture(scope="module")
def trl_qwen(tmp_path_factory):
    return build_trl_prm(tmp_path_factory.mktemp("trl-qwen"), "qwen2", bos=False, seed=1)


def test_a_folder_trl_saved_is_detected_and_other_token_classifiers_are_not(trl_llama, trl_qwen, tiny_run, tmp_path):
    assert json.loads((trl_llama / "config.json").read_text())["architectures"] == ["LlamaForTokenClassification"]
    assert detect_format(trl_llama)[0] == "trl"
    assert detect_format(trl_qwen)[0] == "trl"
    assert detect_format(tiny_run)[0] == "prmkit"  # prmkit.json wins: a prmkit run is a token classifier too
    one_label = tmp_path / "one-label"  # a prmkit export's layout (one output), without its prmkit.json
    Qwen2ForTokenClassification(Qwen2Config(**SMALL, vocab_size=400, num_labels=1)).save_pretrained(one_label)
    build_tokenizer().save_pretrained(one_label)
    with pytest.raises(PRMError, match="--prm-format"):
        detect_format(one_label)
    with pytest.raises(PRMError, match="has 1 label.*TRL's PRMTrainer trains two"):
        PRMScorer.from_pretrained(one_label, device="cpu", prm_format="trl")


@pytest.mark.parametrize("fixture", ["trl_llama", "trl_qwen"])
def test_scores_are_p_label_1_at_trl_label_positions_batched_with_padding(fixture, request, capsys):
    folder = request.getfixturevalue(fixture)
    scorer = PRMScorer.from_pretrained(folder, device="cpu", batch_size=8)
    assert scorer.prm_format == "trl" and "as a trl PRM" in capsys.readouterr().err
    tokenizer = AutoTokenizer.from_pretrained(folder)
    for prompt, steps in CHAINS:  # the ids and positions are TRL's, BOS or none
        ids, positions = trl_row(tokenizer, prompt, steps)
        tokenized = scorer.tokenize(prompt, steps)
        assert (tokenized.input_ids, tokenized.step_positions) == (ids, positions)
        assert (ids[0] == tokenizer.bos_token_id) == (fixture == "trl_llama")
    batched = scorer.score_many(CHAINS)  # three lengths in one padded batch
    for (prompt, steps), scores in zip(CHAINS, batched):
        expected = by_transformers(folder, prompt, steps)
        assert len(scores) == len(steps)
        assert scores == pytest.approx(expected, abs=1e-5)
        assert scorer.score(prompt, steps) == pytest.approx(scores, abs=1e-5)  # alone = in a padded batch
    assert len({round(s, 4) for s in batched[2]}) == 4  # a position off by one would give other numbers, not these


def test_a_chain_cut_by_max_length_scores_the_steps_trl_kept(trl_llama):
    prompt, steps = CHAINS[2]
    tokenizer = AutoTokenizer.from_pretrained(trl_llama)
    _, positions = trl_row(tokenizer, prompt, steps)
    uncut = PRMScorer.from_pretrained(trl_llama, device="cpu").score(prompt, steps)
    for max_length in (positions[1] + 1, positions[1] + 3):  # at a label, and inside the next step
        cut = PRMScorer.from_pretrained(trl_llama, device="cpu", max_length=max_length)
        ids, kept = trl_row(tokenizer, prompt, steps, max_length=max_length)
        tokenized = cut.tokenize(prompt, steps)
        assert (tokenized.input_ids, tokenized.step_positions, tokenized.steps_dropped) == (ids, kept, 2)
        scores = cut.score_many([(prompt, steps), CHAINS[1]])[0]
        assert scores[2:] == [None, None]
        expected = by_transformers(trl_llama, prompt, steps, max_length=max_length)
        assert scores[:2] == pytest.approx(expected, abs=1e-5)
        assert scores[:2] == pytest.approx(uncut[:2], abs=1e-5)  # causal: the steps kept read as in the whole chain
    shorter = PRMScorer.from_pretrained(trl_llama, device="cpu", max_length=positions[0])  # not even step 0
    assert shorter.score(prompt, steps) == [None] * 4


def test_the_step_separator_is_trls_default_unless_given(trl_llama, trl_qwen):
    prompt, steps = CHAINS[0]
    default = PRMScorer.from_pretrained(trl_llama, device="cpu")
    assert default.split_steps("a\nb") == ["a", "b"]  # a raw completion is cut where the PRM read its steps
    blank = PRMScorer.from_pretrained(trl_llama, device="cpu", step_separator="\n\n")
    tokenizer = AutoTokenizer.from_pretrained(trl_llama)
    ids, positions = trl_row(tokenizer, prompt, steps, "\n\n")
    assert ids != trl_row(tokenizer, prompt, steps)[0]  # "\n\n" is one other token in this vocabulary
    assert (blank.tokenize(prompt, steps).input_ids, blank.tokenize(prompt, steps).step_positions) == (ids, positions)
    assert blank.score(prompt, steps) == pytest.approx(by_transformers(trl_llama, prompt, steps, "\n\n"), abs=1e-5)
    assert blank.split_steps("a\nb\n\nc") == ["a\nb", "c"]
    with pytest.raises(PRMError, match="step_separator='\\\\n\\\\n' given for a qwen PRM.*the trl format's"):
        PRMScorer.from_pretrained(trl_llama, prm_format="qwen", step_separator="\n\n")
    empty = PRMScorer.from_pretrained(trl_qwen, device="cpu", step_separator="")
    assert empty.score(prompt, steps) == pytest.approx(by_transformers(trl_qwen, prompt, steps, ""), abs=1e-5)
    with pytest.raises(PRMError, match="step 1 and the step separator '' tokenize to no tokens"):
        empty.score(prompt, ["3 + 12 = 15.", "", "The answer is 15."])


def test_a_causal_lm_read_as_trl_is_refused_not_scored_with_a_random_head(tiny_llama, tmp_path):
    with pytest.raises(PRMError, match="trl PRM: .* lack 2 tensor\\(s\\) its config needs \\(score.bias, score.weight"):
        PRMScorer.from_pretrained(tiny_llama, device="cpu", prm_format="trl")
    adapter = tmp_path / "lora-prm"  # what TRL's PRMTrainer saves with a peft_config: the adapter, no config.json
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": str(tiny_llama),
                                                             "peft_type": "LORA", "task_type": "TOKEN_CLS"}))
    for prm_format in (None, "trl"):
        with pytest.raises(PRMError, match="a PEFT adapter .* merge it into its base once"):
            PRMScorer.from_pretrained(adapter, device="cpu", prm_format=prm_format)


def test_bf16_scores_stay_close_to_fp32(trl_llama):
    scorer = PRMScorer.from_pretrained(trl_llama, device="cpu", dtype="bf16")
    assert scorer.model.model.embed_tokens.weight.dtype == torch.bfloat16
    assert scorer.model.score.weight.dtype == torch.float32  # the head runs in fp32 on a bf16 backbone
    fp32 = PRMScorer.from_pretrained(trl_llama, device="cpu").score_many(CHAINS)
    for low, high in zip(scorer.score_many(CHAINS), fp32):
        assert low == pytest.approx(high, abs=3e-2)


def test_prmkit_score_and_eval_read_a_trl_prm_with_or_without_the_flag(trl_llama, trl_qwen, tmp_path, capsys):
    from prmkit.cli import main
    from prmkit.files import write_jsonl

    rows = [{"prompt": p, "completions": s, "labels": [1] * (len(s) - 1) + [0]} for p, s in CHAINS]
    write_jsonl(rows, tmp_path / "chains.jsonl")
    expected = [by_transformers(trl_llama, p, s) for p, s in CHAINS]
    for flags in (["--prm-format", "trl"], []):
        assert main(["score", str(trl_llama), str(tmp_path / "chains.jsonl"), str(tmp_path / "scored.jsonl"),
                     "--device", "cpu", *flags]) == 0
        scored = [json.loads(line) for line in (tmp_path / "scored.jsonl").read_text().splitlines()]
        assert [row["step_scores"] for row in scored] == [pytest.approx(s, abs=1e-5) for s in expected]
    assert "as a trl PRM" in capsys.readouterr().err  # the run without the flag said what it detected
    assert main(["score", str(trl_llama), str(tmp_path / "chains.jsonl"), str(tmp_path / "blank.jsonl"),
                 "--device", "cpu", "--step-separator", "\\n\\n"]) == 0  # typed on a command line as \n\n
    blank = [json.loads(line)["step_scores"] for line in (tmp_path / "blank.jsonl").read_text().splitlines()]
    assert blank[0] == pytest.approx(by_transformers(trl_llama, *CHAINS[0], "\n\n"), abs=1e-5)
    out = tmp_path / "side-by-side"
    assert main(["eval", str(trl_llama), str(trl_qwen), str(tmp_path / "chains.jsonl"), "--device", "cpu",
                 "--out", str(out)]) == 0  # prmkit eval A B DATA: a table of two TRL PRMs
    comparison = json.loads((out / "comparison.json").read_text())
    assert [r["prm"] for r in comparison["rows"]] == [trl_llama.name, trl_qwen.name]
    metrics = json.loads((out / trl_llama.name / "metrics.json").read_text())
    assert metrics["splits"]["chains"]["steps"] == 9


def test_the_rl_reward_and_the_server_score_a_trl_prm_as_transformers_does(trl_qwen):
    import httpx
    from serve_helpers import LiveServer

    from prmkit.scoring.reward import PRMReward
    from prmkit.serving.app import create_app
    from prmkit.serving.options import ServeOptions

    prompt, steps = CHAINS[0]
    expected = by_transformers(trl_qwen, prompt, steps)
    reward = PRMReward(trl_qwen, device="cpu", aggregate="min")
    completion = [{"role": "assistant", "content": "\n".join(steps)}]  # cut at TRL's separator
    assert reward([[{"role": "user", "content": prompt}]], [completion]) == pytest.approx([min(expected)], abs=1e-5)
    with LiveServer(create_app(reward.scorer, ServeOptions(max_wait_ms=20), model_name="trl")) as url:
        answer = httpx.post(f"{url}/v1/score", json={"prompt": prompt, "completions": steps}, timeout=60).json()
    assert answer["step_scores"] == pytest.approx(expected, abs=1e-5)
