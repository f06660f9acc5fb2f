"""bench/calculator.py: only a true row's stated result is learned, and training on it makes the model more sure of
that result."""

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

import calculator

RECORD = {"prompt": "Tom has 12 apples and buys 7 more. How many?", "correct": True, "labels": [1, 1],
          "completions": ["He has 12 + 7 = 19 apples.", "The answer is \\boxed{19}."]}


def test_only_true_sums_are_kept_to_learn_from():
    rows = calculator.true_rows([RECORD], per_solution=16)
    assert rows and all(r["labels"] == [1] for r in rows)
    for row in rows:
        a, b, result = (int(n) for n in row["completions"][0].split("has ")[1].split(" apples")[0]
                        .replace("+", " ").replace("=", " ").split())
        assert a + b == result


def test_only_the_stated_results_tokens_are_labelled(tiny_llama):
    tokenizer = AutoTokenizer.from_pretrained(tiny_llama)
    step = "He has 31 + 4 = 35 apples."
    ids, labels = calculator.result_example(tokenizer, [1, 2, 3], step)
    assert ids[:3] == [1, 2, 3] and len(ids) == len(labels)
    learned = [token for token, label in zip(ids, labels) if label != calculator.IGNORE]
    assert learned and tokenizer.decode(learned).strip() == "35"
    assert labels[:3] == [calculator.IGNORE] * 3


def test_training_makes_the_model_surer_of_the_true_results(tiny_llama):
    tokenizer = AutoTokenizer.from_pretrained(tiny_llama)
    model = AutoModelForCausalLM.from_pretrained(tiny_llama, dtype=torch.float32)
    examples = [calculator.result_example(tokenizer, [1], f"So {a} + 3 = {a + 3} in all.") for a in (10, 20, 40)]

    def loss():
        ids, labels, mask = next(calculator.batches(examples, len(examples), 1, seed=0))
        with torch.no_grad():
            return float(model(input_ids=ids, attention_mask=mask, labels=labels).loss)

    before = loss()
    log = calculator.train(model, examples, batch_size=3, steps=30, lr=1e-2, seed=0, log_every=10)
    assert [entry["step"] for entry in log] == [10, 20, 30]
    assert loss() < before / 2
    assert not model.training


def test_batches_pass_over_every_example_before_repeating_one():
    examples = [([i, i], [i, calculator.IGNORE]) for i in range(5)]
    seen = [int(ids[row, 0]) for ids, _, _ in calculator.batches(examples, 2, 5, seed=1) for row in range(2)]
    assert sorted(seen[:5]) == [0, 1, 2, 3, 4] and sorted(seen[5:10]) == [0, 1, 2, 3, 4]


def test_only_the_top_layers_and_the_final_norm_train(tiny_llama):
    model = AutoModelForCausalLM.from_pretrained(tiny_llama, dtype=torch.float32)
    trainable, total = calculator.freeze_below(model, 1)
    top = model.model.layers[-1]
    assert all(p.requires_grad for p in top.parameters()) and model.model.norm.weight.requires_grad
    assert not any(p.requires_grad for p in model.model.layers[0].parameters())
    assert not model.get_input_embeddings().weight.requires_grad
    assert trainable == sum(p.numel() for p in top.parameters()) + model.model.norm.weight.numel() < total
