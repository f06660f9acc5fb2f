"""training.torch_compile: the compiled model computes what the eager one does (loss, gradients, a whole run's
losses and its saved PRM's scores), compiles once for chains of every length, and a machine that cannot compile
is refused before the run starts."""

import contextlib
import json
import logging
import shutil

import pytest
import torch
import torch._inductor.compile_fx
import torch._inductor.config as inductor

from prmkit.config import load_config
from prmkit.data.synthetic import generate_records
from prmkit.errors import PRMError
from prmkit.files import write_jsonl
from prmkit.loss import step_loss
from prmkit.model import apply_lora, load_token_classifier, load_tokenizer
from prmkit.scoring.scorer import PRMScorer
from prmkit.tokenize import StepCollator, tokenize_records
from prmkit.training.trainer import train


def uneven_records(count: int) -> list[dict]:
    """Chains of one to seven steps, one problem each, so batches come in many lengths."""
    return [{"prompt": f"What is {i} + 12?",
             "completions": [f"Step {k}: {i} + {k} = {i + k}." for k in range(1 + i % 7)],
             "labels": [float((i + k) % 3 != 0) for k in range(1 + i % 7)]} for i in range(count)]


@pytest.mark.parametrize("kind,finetune", [("tiny_llama", "lora"), ("tiny_gpt2", "full")])
def test_compiled_model_gives_the_eager_loss_and_gradients(kind, finetune, request):
    model_dir = request.getfixturevalue(kind)
    tokenizer = load_tokenizer(str(model_dir))
    chains, _ = tokenize_records(tokenizer, uneven_records(6), separator="\n\n", max_length=256)
    batch = StepCollator(tokenizer.pad_token_id)([{"input_ids": c.input_ids, "labels": c.labels} for c in chains])
    labels = batch.pop("labels")
    assert (batch["attention_mask"] == 0).any()  # uneven lengths: the batch has padding to keep out of the loss
    results = []
    for compiled in (False, True):
        torch.manual_seed(0)  # the same random head and adapters for both
        model = load_token_classifier(str(model_dir))
        model.config.pad_token_id = tokenizer.pad_token_id
        if finetune == "lora":
            model = apply_lora(model, r=4, alpha=8, dropout=0.0, target_modules="all-linear", new_token_ids=[])
        forward = torch.compile(model, dynamic=True) if compiled else model
        loss = step_loss("bce", forward(**batch).logits.squeeze(-1), labels)
        loss.backward()
        results.append((loss.item(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}))
    (eager_loss, eager_grads), (compiled_loss, compiled_grads) = results
    assert compiled_loss == pytest.approx(eager_loss, rel=1e-5)
    assert eager_grads.keys() == compiled_grads.keys() and eager_grads
    for name, grad in eager_grads.items():
        torch.testing.assert_close(compiled_grads[name], grad, rtol=1e-4, atol=1e-6, msg=name)


@contextlib.contextmanager
def recompile_reasons():
    """The guard failures that made torch.compile compile a region again, as dynamo logs them."""
    reasons: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: reasons.append(record.getMessage())
    logger = logging.getLogger("torch._dynamo.guards.__recompiles")
    torch._logging.set_logs(recompiles=True)
    logger.addHandler(handler)
    try:
        yield reasons
    finally:
        logger.removeHandler(handler)
        torch._logging.set_logs()


def run_pair(root, base, *overrides):
    """The same run eager and compiled: (log history, scores of the final PRM on held-out chains) of each, and
    why torch.compile compiled a region again in the compiled one."""
    write_jsonl(generate_records(40, seed=5), root / "train.jsonl")  # three to six steps: batches of many lengths
    held_out = [(r["prompt"], r["completions"]) for r in generate_records(6, seed=11)]
    results = {}
    for compiled in (False, True):
        run = f"compiled-{compiled}"
        with recompile_reasons() as reasons:
            train(load_config(None, [
                f"model.base={base}", f"data.train={root / 'train.jsonl'}", "data.max_length=160",
                f"output_dir={root}", f"run_name={run}", "training.max_steps=8", "training.batch_size=4",
                "training.logging_steps=1", "training.lr=5e-3", "data.val_fraction=0.2", "training.eval_steps=4",
                "training.save_steps=4", f"training.torch_compile={compiled}", *overrides]))
        history = json.loads((root / run / "trainer_state.json").read_text())["log_history"]
        scores = PRMScorer.from_pretrained(root / run, device="cpu").score_many(held_out)
        checkpoint = PRMScorer.from_pretrained(root / run / "checkpoint-4", device="cpu").score_many(held_out)
        results[compiled] = (history, scores, checkpoint, reasons)
    return results


def assert_same_run(results):
    (eager_history, eager_scores, eager_checkpoint, _), (history, scores, checkpoint, recompiles) = \
        results[False], results[True]
    losses = [(h["step"], key, h[key]) for h in history for key in ("loss", "eval_loss") if key in h]
    eager_losses = [(h["step"], key, h[key]) for h in eager_history for key in ("loss", "eval_loss") if key in h]
    assert [where for *where, _ in losses] == [where for *where, _ in eager_losses] and len(losses) >= 10
    assert [value for *_, value in losses] == pytest.approx([value for *_, value in eager_losses], rel=1e-4)
    # the saved weights (a checkpoint and the final PRM) score as the eager run's do: nothing of the compiled
    # wrapper leaks into the files
    for ours, eager in ((scores, eager_scores), (checkpoint, eager_checkpoint)):
        flat, eager_flat = sum(ours, []), sum(eager, [])
        assert flat == pytest.approx(eager_flat, abs=1e-4) and len(flat) > 10
    # batches of many lengths, training and evaluation: shapes are symbolic from the first step, so no region is
    # compiled again for a new length. Regions are compiled again for other reasons: the first layer's input needs
    # no gradient, and one compiled wrapper serves modules with parameters of other shapes (GPT-2's two embeddings)
    assert recompiles
    guard_failures = [line for reason in recompiles for line in reason.splitlines()]
    assert not [line for line in guard_failures if ("size mismatch" in line or "stride mismatch" in line) and
                "_parameters" not in line]


def test_compiled_lora_run_with_packing_and_a_probe_head_trains_as_the_eager_one(tiny_llama, tmp_path):
    assert_same_run(run_pair(tmp_path, tiny_llama, "lora.r=4", "training.packing=true",
                             "training.head_init=probe"))


def test_compiled_full_fine_tune_with_gradient_checkpointing_trains_as_the_eager_one(tiny_llama, tmp_path):
    assert_same_run(run_pair(tmp_path, tiny_llama, "model.finetune=full", "training.gradient_checkpointing=true"))


def test_compiled_checkpointed_full_fine_tune_of_gpt2_trains_as_the_eager_one(tiny_gpt2, tmp_path):
    """GPT-2's dropout draws from another random stream when compiled, so runs are compared without it."""
    base = tmp_path / "gpt2-no-dropout"
    shutil.copytree(tiny_gpt2, base)
    config = json.loads((base / "config.json").read_text())
    config.update(resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, summary_first_dropout=0.0)
    (base / "config.json").write_text(json.dumps(config))
    assert_same_run(run_pair(tmp_path, base, "model.finetune=full", "training.gradient_checkpointing=true"))


def compiled_run_config(base, root):
    """A short compiled LoRA run on 8 synthetic records, into root/run."""
    write_jsonl(generate_records(8, seed=3), root / "train.jsonl")
    return load_config(None, [f"model.base={base}", f"data.train={root / 'train.jsonl'}", f"output_dir={root}",
                              "run_name=run", "data.max_length=160", "training.max_steps=2", "lora.r=4",
                              "training.torch_compile=true"])


def test_a_compile_failure_at_the_first_step_says_what_to_set(tiny_llama, tmp_path, monkeypatch):
    """torch.compile's own error, here a bare AssertionError from the compiler, becomes a PRMError that names the
    setting."""
    def failing_compiler(graph, example_inputs, **kwargs):
        raise AssertionError("a compiler that cannot compile this graph")

    monkeypatch.setattr(torch._inductor.compile_fx, "compile_fx", failing_compiler)
    with pytest.raises(PRMError, match=r"torch.compile failed on this model \(AssertionError: a compiler that cannot "
                                       r"compile this graph\) after 0 optimizer step\(s\) of this launch; "
                                       r"set training.torch_compile=false$"):
        train(compiled_run_config(tiny_llama, tmp_path))


def test_a_machine_without_a_compiler_is_refused_before_the_run_starts(tiny_llama, tmp_path):
    config = compiled_run_config(tiny_llama, tmp_path)
    with inductor.patch({"cpp.cxx": ("prmkit-test-no-such-compiler",)}), \
            pytest.raises(PRMError, match="training.torch_compile on CPU needs a C\\+\\+ compiler"):
        train(config)
    assert not (tmp_path / "run").exists()


def test_a_compiled_run_resumes_without_compilation(tiny_llama, tmp_path):
    """Compilation changes how the same arithmetic runs, not what is learnt: a compiled run that failed can go on
    eager from its last checkpoint."""
    write_jsonl(generate_records(16, seed=3), tmp_path / "train.jsonl")
    settings = [f"model.base={tiny_llama}", f"data.train={tmp_path / 'train.jsonl'}", "data.max_length=160",
                f"output_dir={tmp_path}", "run_name=run", "training.batch_size=4", "lora.r=4", "training.save_steps=2"]
    train(load_config(None, [*settings, "training.max_steps=2", "training.torch_compile=true"]))
    summary = train(load_config(None, [*settings, "training.max_steps=4", "training.resume=latest"]))
    assert summary.as_dict()["resume_changes"]["training.torch_compile"] == [True, False]
    assert json.loads((tmp_path / "run" / "trainer_state.json").read_text())["global_step"] == 4
