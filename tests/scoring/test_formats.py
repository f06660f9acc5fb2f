"""Public PRM formats read by PRMScorer: each against the released model's own reading (its model card's text
and arithmetic, with full-vocabulary logits or the head applied by hand to the same weights), batched and cut by
max_length."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch
from public_prms import CHAINS, build_causal_prm, build_qwen_prm
from safetensors import safe_open
from transformers import AutoTokenizer

from prmkit.errors import PRMError
from prmkit.scoring.formats import QWEN_SYSTEM, detect_format
from prmkit.scoring.scorer import PRMScorer

sys.path.insert(0, str(Path(__file__).parents[1] / "serving"))  # serve_helpers.LiveServer, for the server test


@pytest.fixture(scope="module")
def qwen(tmp_path_factory):
    return build_qwen_prm(tmp_path_factory.mktemp("qwen-prm"))


@pytest.fixture(scope="module")
def shepherd(tmp_path_factory):
    return build_causal_prm(tmp_path_factory.mktemp("math-shepherd"), "math-shepherd")


@pytest.fixture(scope="module")
def rlhflow(tmp_path_factory):
    return build_causal_prm(tmp_path_factory.mktemp("rlhflow"), "rlhflow")


@torch.no_grad()
def qwen_by_hand(folder, backbone, head, prompt, steps):
    """The Qwen2.5-Math-PRM card: its chat text, encode, P(class 1) of the head at each <extra_0>."""
    tokenizer = AutoTokenizer.from_pretrained(folder)
    text = (f"<|im_start|>system\n{QWEN_SYSTEM}<|im_end|>\n<|im_start|>user\n{prompt}<|im_end|>\n"
            f"<|im_start|>assistant\n{'<extra_0>'.join(steps)}<extra_0><|im_end|>\n")
    ids = tokenizer.encode(text, return_tensors="pt")
    probabilities = head(backbone(input_ids=ids).last_hidden_state).softmax(-1)[0, :, 1]
    return probabilities[ids[0] == tokenizer.convert_tokens_to_ids("<extra_0>")].tolist()


@torch.no_grad()
def shepherd_by_hand(folder, model, prompt, steps, tag_text="ки"):
    """The math-shepherd-mistral-7b-prm card: full-vocabulary logits of the "+" and "-" tokens at each "ки"."""
    tokenizer = AutoTokenizer.from_pretrained(folder)
    candidates = tokenizer.encode("+ -", add_special_tokens=False)  # the card's [1:] drops a BOS this one lacks
    tag = tokenizer.encode(tag_text)[-1]
    ids = torch.tensor([tokenizer.encode(f"{prompt} " + f" {tag_text}\n".join(steps) + f" {tag_text}")])
    scores = model(ids).logits[:, :, candidates].softmax(-1)[:, :, 0]
    return scores[ids == tag].tolist()


@torch.no_grad()
def rlhflow_by_hand(folder, model, prompt, steps):
    """The RLHFlow card: one forward pass per step over the conversation so far, P("+") at position -3."""
    tokenizer = AutoTokenizer.from_pretrained(folder)
    candidates = [tokenizer.encode("+", add_special_tokens=False)[-1], tokenizer.encode("-", add_special_tokens=False)[-1]]
    conversation, scores = [], []
    for k, step in enumerate(steps):
        conversation += [{"role": "user", "content": f"{prompt} {step}" if k == 0 else step},
                         {"role": "assistant", "content": "+"}]
        encoded = tokenizer.apply_chat_template(conversation, tokenize=True)
        ids = torch.tensor([encoded["input_ids"] if isinstance(encoded, dict) or hasattr(encoded, "keys")
                            else encoded])
        scores.append(model(ids).logits[:, -3, candidates].softmax(-1)[0, 0].item())
    return scores


def by_hand(style, built, prompt, steps):
    if style == "qwen":
        return qwen_by_hand(*built, prompt, steps)
    return (shepherd_by_hand if style == "math-shepherd" else rlhflow_by_hand)(*built, prompt, steps)


@pytest.mark.parametrize("style", ["qwen", "math-shepherd", "rlhflow"])
def test_each_format_scores_every_step_as_its_model_card_reads_it(style, request):
    built = request.getfixturevalue({"qwen": "qwen", "math-shepherd": "shepherd", "rlhflow": "rlhflow"}[style])
    scorer = PRMScorer.from_pretrained(built[0], device="cpu", batch_size=8)
    assert scorer.prm_format == style  # detected from the folder
    batched = scorer.score_many(CHAINS)
    for (prompt, steps), scores in zip(CHAINS, batched):
        expected = by_hand(style, built, prompt, steps)
        assert len(scores) == len(steps) == len(expected)
        assert scores == pytest.approx(expected, abs=1e-5)
        assert scorer.score(prompt, steps) == pytest.approx(scores, abs=1e-5)  # one by one = in a padded batch
    # the scores differ between steps: a position off by one would still give probabilities, but not these
    assert len({round(s, 6) for s in batched[2]}) == 4


def test_a_tied_lm_head_gives_its_good_and_bad_rows_from_the_embeddings(tmp_path):
    built = build_causal_prm(tmp_path / "tied", "math-shepherd", seed=1, tied=True)
    with safe_open(str(tmp_path / "tied" / "model.safetensors"), framework="pt") as weights:
        assert "lm_head.weight" not in weights.keys()  # the head's rows can only come from the embeddings
    scorer = PRMScorer.from_pretrained(built[0], device="cpu", prm_format="math-shepherd")
    prompt, steps = CHAINS[0]
    assert scorer.score(prompt, steps) == pytest.approx(shepherd_by_hand(*built, prompt, steps), abs=1e-5)


@pytest.mark.parametrize("style", ["qwen", "math-shepherd", "rlhflow"])
def test_steps_past_max_length_are_none_and_the_rest_score_as_uncut(style, request):
    folder = request.getfixturevalue({"qwen": "qwen", "math-shepherd": "shepherd", "rlhflow": "rlhflow"}[style])[0]
    whole = PRMScorer.from_pretrained(folder, device="cpu")
    prompt, steps = CHAINS[2]
    positions = whole.tokenize(prompt, steps).step_positions
    assert len(positions) == 4
    cut = PRMScorer.from_pretrained(folder, device="cpu", max_length=positions[1] + 1)
    tokenized = cut.tokenize(prompt, steps)
    assert (tokenized.steps_kept, tokenized.steps_dropped, len(tokenized.input_ids)) == (2, 2, positions[1] + 1)
    scores = cut.score_many([(prompt, steps), CHAINS[1]])[0]
    assert scores[2:] == [None, None]
    assert scores[:2] == pytest.approx(whole.score(prompt, steps)[:2], abs=1e-5)
    shorter = PRMScorer.from_pretrained(folder, device="cpu", max_length=positions[0])  # not even the first step
    assert shorter.score(prompt, steps) == [None] * 4


def test_the_format_is_detected_from_config_and_tokenizer(qwen, shepherd, rlhflow, tiny_run, tiny_llama):
    assert detect_format(qwen[0])[0] == "qwen"
    assert detect_format(shepherd[0])[0] == "math-shepherd"
    assert detect_format(rlhflow[0])[0] == "rlhflow"
    assert detect_format(tiny_run)[0] == "prmkit"
    with pytest.raises(PRMError, match="--prm-format"):
        detect_format(tiny_llama)  # a causal LM with no chat template and "ки" in two tokens: not a PRM it knows
    with pytest.raises(PRMError, match="no config.json"):
        detect_format(tiny_llama.parent)
    with pytest.raises(PRMError, match="hf download Qwen/Qwen2.5-Math-PRM-7B --local-dir prms/Qwen2"):
        PRMScorer.from_pretrained("Qwen/Qwen2.5-Math-PRM-7B")  # a hub id, offline and not in the cache


def test_an_explicit_format_overrides_detection_and_an_unknown_one_is_refused(rlhflow, tiny_llama, capsys):
    with pytest.raises(PRMError, match="2 steps but 0 step tags 'ки'"):  # its tokenizer splits the default tag
        PRMScorer.from_pretrained(rlhflow[0], device="cpu", prm_format="math-shepherd").score(*CHAINS[1])
    # the same folder read with a step tag its tokenizer has as one token
    scorer = PRMScorer.from_pretrained(rlhflow[0], device="cpu", prm_format="math-shepherd", step_tag="<|eot_id|>")
    assert scorer.prm_format == "math-shepherd"
    assert "reading" not in capsys.readouterr().err  # nothing was guessed
    prompt, steps = CHAINS[1]
    assert scorer.score(prompt, steps) == pytest.approx(
        shepherd_by_hand(*rlhflow, prompt, steps, tag_text="<|eot_id|>"), abs=1e-5)
    PRMScorer.from_pretrained(rlhflow[0], device="cpu")
    assert "as a rlhflow PRM" in capsys.readouterr().err
    with pytest.raises(PRMError, match="prm_format='shepherd' is not known; use one of prmkit, qwen"):
        PRMScorer.from_pretrained(rlhflow[0], prm_format="shepherd")
    with pytest.raises(PRMError, match="step_tag='<x>' given for a qwen PRM, which does not read it"):
        PRMScorer.from_pretrained(rlhflow[0], prm_format="qwen", step_tag="<x>")
    with pytest.raises(PRMError, match="qwen PRM: .*weights lack 6 tensor.*q_proj.bias"):  # a Llama has no biases
        PRMScorer.from_pretrained(tiny_llama, device="cpu", prm_format="qwen")


def test_a_step_holding_the_step_tag_is_refused_not_misread(shepherd, qwen):
    scorer = PRMScorer.from_pretrained(shepherd[0], device="cpu")
    with pytest.raises(PRMError, match="2 steps but 3 step tags 'ки'"):
        scorer.score("What is 2 + 2?", ["2 + 2 = 4 ки so", "The answer is 4."])
    scorer = PRMScorer.from_pretrained(qwen[0], device="cpu")
    with pytest.raises(PRMError, match="1 steps but 2 step tags '<extra_0>'"):
        scorer.score("What is 2 + 2?<extra_0>", ["The answer is 4."])
    assert scorer.score("What is 2 + 2?", []) == []


def test_prmkit_score_and_eval_read_a_public_prm_folder_with_or_without_the_flag(qwen, tmp_path, capsys):
    from prmkit.cli import main
    from prmkit.files import write_jsonl

    rows = [{"prompt": p, "completions": s, "labels": [1] * (len(s) - 1) + [0]} for p, s in CHAINS]
    write_jsonl(rows, tmp_path / "chains.jsonl")
    expected = PRMScorer.from_pretrained(qwen[0], device="cpu").score_many(CHAINS)
    assert main(["score", str(qwen[0]), str(tmp_path / "chains.jsonl"), str(tmp_path / "scored.jsonl"),
                 "--device", "cpu", "--prm-format", "qwen"]) == 0
    scored = [json.loads(line) for line in (tmp_path / "scored.jsonl").read_text().splitlines()]
    assert [row["step_scores"] for row in scored] == [pytest.approx(s, abs=1e-6) for s in expected]
    assert main(["eval", str(qwen[0]), str(tmp_path / "chains.jsonl"), "--device", "cpu",
                 "--out", str(tmp_path / "eval")]) == 0  # detected
    assert "as a qwen PRM" in capsys.readouterr().err
    metrics = json.loads((tmp_path / "eval" / "metrics.json").read_text())
    assert metrics["splits"]["chains"]["steps"] == 9 and metrics["max_length"] == 512  # the tiny backbone's context
    with pytest.raises(SystemExit):
        main(["score", str(qwen[0]), "in.jsonl", "out.jsonl", "--prm-format", "shepherd"])



def test_the_rl_reward_and_the_server_score_a_public_prm_as_the_scorer_does(rlhflow):
    import httpx
    from serve_helpers import LiveServer

    from prmkit.scoring.reward import PRMReward
    from prmkit.serving.app import create_app
    from prmkit.serving.options import ServeOptions

    prompt, steps = CHAINS[0]
    expected = rlhflow_by_hand(*rlhflow, prompt, steps)
    reward = PRMReward(rlhflow[0], device="cpu", aggregate="min")
    completion = [{"role": "assistant", "content": "\n\n".join(steps)}]  # cut at blank lines
    assert reward([[{"role": "user", "content": prompt}]], [completion]) == pytest.approx([min(expected)], abs=1e-5)
    with LiveServer(create_app(reward.scorer, ServeOptions(max_wait_ms=20), model_name="rlhflow")) as url:
        answer = httpx.post(f"{url}/v1/score", json={"prompt": prompt, "completions": steps}, timeout=60).json()
    assert answer["step_scores"] == pytest.approx(expected, abs=1e-5)


def test_pickle_weights_are_refused_unless_allowed_and_then_read_tensors_only(shepherd, tmp_path):
    import shutil

    folder = tmp_path / "pickled"
    shutil.copytree(shepherd[0], folder)
    (folder / "model.safetensors").unlink()
    torch.save(shepherd[1].state_dict(), folder / "pytorch_model.bin")
    with pytest.raises(PRMError, match="only as pickle files"):
        PRMScorer.from_pretrained(folder, device="cpu")
    prompt, steps = CHAINS[1]
    scores = PRMScorer.from_pretrained(folder, device="cpu", allow_pickle=True).score(prompt, steps)
    assert scores == pytest.approx(shepherd_by_hand(*shepherd, prompt, steps), abs=1e-5)


def test_a_public_prm_loads_without_the_code_its_config_names(qwen):
    config = json.loads((qwen[0] / "config.json").read_text())
    assert config["auto_map"]["AutoModel"] == "modeling_qwen2_rm.Qwen2ForProcessRewardModel"
    assert not list(qwen[0].glob("*.py"))  # the code it names is not there: loading must not need it
    scorer = PRMScorer.from_pretrained(qwen[0], device="cpu", trust_remote_code=False)
    assert type(scorer.model.model).__name__ == "Qwen2Model"
    assert type(scorer.model.model).__module__.startswith("transformers.models.qwen2")


def test_a_hub_model_id_is_read_through_the_hub_cache(qwen, tmp_path, monkeypatch):
    """`owner/name` that is no local folder is fetched by huggingface_hub's snapshot_download; offline (as in every
    test) it is read from the cache, laid out here as the hub's client writes it."""
    import shutil

    import huggingface_hub.constants
    from prmkit.cli import main
    from prmkit.files import write_jsonl

    snapshot = tmp_path / "cache" / "models--acme--tiny-qwen-prm" / "snapshots" / "0123abcd"
    shutil.copytree(qwen[0], snapshot)
    (snapshot.parents[1] / "refs").mkdir()
    (snapshot.parents[1] / "refs" / "main").write_text("0123abcd")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    by_id = PRMScorer.from_pretrained("acme/tiny-qwen-prm", device="cpu")
    assert by_id.prm_format == "qwen"
    assert by_id.score_many(CHAINS) == PRMScorer.from_pretrained(qwen[0], device="cpu").score_many(CHAINS)
    write_jsonl([{"prompt": p, "completions": s, "labels": [1] * len(s)} for p, s in CHAINS], tmp_path / "c.jsonl")
    assert main(["eval", "acme/tiny-qwen-prm", str(tmp_path / "c.jsonl"), "--device", "cpu"]) == 0
    assert (tmp_path / "eval" / "acme--tiny-qwen-prm" / "eval" / "c" / "metrics.json").is_file()
    with pytest.raises(PRMError, match="acme/absent: no such local folder .*not fetched either.*hf download"):
        PRMScorer.from_pretrained("acme/absent", device="cpu")
