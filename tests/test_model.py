import pytest
import torch
from transformers import AutoModelForCausalLM

from prmkit.errors import PRMError
from prmkit.model import (
    add_separator_token,
    apply_lora,
    head_name,
    load_token_classifier,
    load_tokenizer,
    parameter_counts,
)


def lora_params_expected(model, r: int, names) -> int:
    total = 0
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.Linear) and name.split(".")[-1] in names:
            total += r * (module.in_features + module.out_features)
    return total


def test_lora_really_wraps_and_trains_only_adapters_and_head(tiny_llama):
    model = load_token_classifier(str(tiny_llama))
    head = getattr(model, head_name(model))
    head_params = sum(p.numel() for p in head.parameters())
    targets = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}
    expected = lora_params_expected(model, 4, targets) + head_params
    _, total_before = parameter_counts(model)
    peft_model = apply_lora(model, r=4, alpha=8, dropout=0.0, target_modules="all-linear", new_token_ids=[])
    trainable, _ = parameter_counts(peft_model)
    assert type(peft_model).__name__.startswith("PeftModel")
    assert trainable == expected
    frozen = [n for n, p in peft_model.named_parameters() if not p.requires_grad]
    assert any("embed_tokens" in n for n in frozen) and any("q_proj.base_layer" in n for n in frozen)
    assert trainable < total_before / 2


def test_no_lm_head_and_fp32_weights(tmp_path, tiny_llama):
    # a base saved in bf16 must still load as fp32 master weights
    bf16_dir = tmp_path / "bf16"
    AutoModelForCausalLM.from_pretrained(tiny_llama, dtype=torch.bfloat16).save_pretrained(bf16_dir)
    load_tokenizer(str(tiny_llama)).save_pretrained(bf16_dir)
    model = load_token_classifier(str(bf16_dir))
    assert all(p.dtype == torch.float32 for p in model.parameters())
    vocab = model.config.vocab_size
    assert not any(isinstance(m, torch.nn.Linear) and m.out_features == vocab for m in model.modules())
    out = model(input_ids=torch.tensor([[1, 5, 7]])).logits
    assert out.shape == (1, 3, 1)  # one scalar per token, never vocabulary-sized logits


def test_gpt2_style_models_work(tiny_gpt2):
    model = load_token_classifier(str(tiny_gpt2))
    assert head_name(model) == "classifier"
    peft_model = apply_lora(model, r=2, alpha=4, dropout=0.0, target_modules="all-linear", new_token_ids=[])
    assert parameter_counts(peft_model)[0] > 0
    assert peft_model(input_ids=torch.tensor([[1, 2, 3]])).logits.shape == (1, 3, 1)


def test_added_separator_token_is_one_token_initialised_at_mean(tiny_llama):
    model = load_token_classifier(str(tiny_llama))
    tokenizer = load_tokenizer(str(tiny_llama))
    old = model.get_input_embeddings().weight.detach().clone()
    added = add_separator_token(model, tokenizer, "<step>")
    assert added == ["<step>"]
    assert tokenizer("a<step>", add_special_tokens=False)["input_ids"][-1] == tokenizer.convert_tokens_to_ids("<step>")
    new_row = model.get_input_embeddings().weight[len(old)]
    assert torch.allclose(new_row, old.mean(dim=0), atol=1e-6)
    assert add_separator_token(model, tokenizer, "<step>") == []  # idempotent


def test_top_layers_adapts_only_the_last_layers(tiny_llama):
    model = load_token_classifier(str(tiny_llama))
    targets = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}
    expected = lora_params_expected(model, 4, targets) // 2 + sum(p.numel() for p in model.score.parameters())
    peft_model = apply_lora(model, r=4, alpha=8, dropout=0.0, target_modules="all-linear", new_token_ids=[],
                            top_layers=1)
    adapted = {n.split(".layers.")[1].split(".")[0] for n, p in peft_model.named_parameters()
               if p.requires_grad and "lora_" in n}
    assert adapted == {"1"}  # tiny model has layers 0 and 1; only the last one carries adapters
    assert parameter_counts(peft_model)[0] == expected


def test_num_layers_keeps_the_first_layers_with_their_weights(tiny_llama):
    full = load_token_classifier(str(tiny_llama))
    cut = load_token_classifier(str(tiny_llama), num_layers=1)
    assert cut.config.num_hidden_layers == 1 and len(cut.model.layers) == 1
    for name, tensor in cut.model.layers[0].state_dict().items():
        assert torch.equal(tensor, full.model.layers[0].state_dict()[name]), name
    ids = torch.tensor([[1, 5, 9, 3]])
    with torch.no_grad():  # the head reads the final norm of layer 0's output, not of the last layer's
        a = cut.model(ids).last_hidden_state
        b = full.model.norm(full.model(ids, output_hidden_states=True).hidden_states[1])
    assert torch.allclose(a, b, atol=1e-6)
    with pytest.raises(PRMError, match="model.num_layers=3 but .* has 2 layers"):
        load_token_classifier(str(tiny_llama), num_layers=3)
