import pytest

from prmkit.config import config_to_yaml, load_config, parse_overrides
from prmkit.errors import PRMError


def test_defaults_and_overrides(tmp_path):
    cfg_file = tmp_path / "c.yaml"
    cfg_file.write_text("model: {base: some/model}\ntraining: {lr: 0.001, batch_size: 2}\n")
    config = load_config(cfg_file, ["training.lr=1e-4", "lora.target_modules=[q_proj, v_proj]", "data.max_length=64"])
    assert config.model.base == "some/model"
    assert config.training.lr == pytest.approx(1e-4)  # override wins over the file
    assert config.training.batch_size == 2  # file wins over the default
    assert config.lora.target_modules == ["q_proj", "v_proj"]
    assert config.data.max_length == 64
    assert config.data.separator == "\n\n"
    assert config.loss.type == "bce"


def test_all_problems_reported_together_in_user_spelling(tmp_path):
    cfg_file = tmp_path / "c.yaml"
    cfg_file.write_text("training: {lrr: 0.1, batch_size: 0}\nmodle: {}\n")
    with pytest.raises(PRMError) as err:
        load_config(cfg_file, ["loss.type=hinge", "nonsense"])
    message = str(err.value)
    assert "training.lrr: unknown key; did you mean training.lr?" in message
    assert "modle: unknown key; did you mean model?" in message
    assert "training.batch_size" in message
    assert "loss.type" in message
    assert "override 'nonsense'" in message
    assert "5 problem(s)" in message


def test_contradictory_settings_are_rejected():
    with pytest.raises(PRMError, match="data.val and data.val_fraction"):
        load_config(None, ["data.val=v.jsonl", "data.val_fraction=0.1"])
    with pytest.raises(PRMError, match="warmup_ratio and training.warmup_steps"):
        load_config(None, ["training.warmup_ratio=0.1", "training.warmup_steps=5"])
    with pytest.raises(PRMError, match="lora.r set but model.finetune is 'full'"):
        load_config(None, ["model.finetune=full", "lora.r=8"])
    with pytest.raises(PRMError, match="epochs and training.max_steps"):
        load_config(None, ["training.epochs=2", "training.max_steps=10"])


@pytest.mark.parametrize("overrides", [["training.max_steps=10", "training.head_init=probe"],
                                       ["model.finetune=full", "training.warmup_steps=5"]])
def test_a_resolved_config_loads_again_as_it_is(tmp_path, overrides):
    # RUN/config.yaml and `prmkit config` list every key with its default; resuming reads that file back
    config = load_config(None, overrides)
    saved = tmp_path / "config.yaml"
    saved.write_text(config_to_yaml(config))
    assert load_config(saved) == config


def test_missing_or_malformed_file(tmp_path):
    with pytest.raises(PRMError, match="not found"):
        load_config(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("training: [unclosed\n")
    with pytest.raises(PRMError, match="not valid YAML"):
        load_config(bad)
    scalar = tmp_path / "scalar.yaml"
    scalar.write_text("just a string\n")
    with pytest.raises(PRMError, match="expected a mapping"):
        load_config(scalar)


def test_override_values_are_data_not_code():
    tree, problems = parse_overrides(["model.base=!!python/object/apply:os.system ['echo hi']", "a.b=true"])
    assert tree["a"]["b"] is True
    assert isinstance(tree["model"]["base"], str)  # unsafe YAML tags are never constructed
    assert problems == []


def test_head_lr_under_fsdp_with_flat_parameters_is_refused():
    flat = ["distributed.fsdp=full_shard auto_wrap", "distributed.fsdp_config={version: 1, use_orig_params: false}"]
    with pytest.raises(PRMError, match=r"training.head_lr=0.001 cannot be honoured under FSDP version 1 with "
                                       r"use_orig_params false: .* set distributed.fsdp_config.use_orig_params=true"):
        load_config(None, [*flat, "training.head_lr=1e-3"])
    with pytest.raises(PRMError, match="head_lr"):  # transformers' fsdp_ spelling of the same keys
        load_config(None, ["distributed.fsdp=full_shard", "training.head_lr=1e-3",
                           "distributed.fsdp_config={fsdp_version: '1', fsdp_use_orig_params: 'false'}"])
    load_config(None, flat)  # without head_lr: nothing to honour
    load_config(None, ["distributed.fsdp=full_shard", "distributed.fsdp_config={version: 1}", "training.head_lr=1e-3"])
    load_config(None, ["distributed.fsdp=full_shard", "distributed.fsdp_config={use_orig_params: false}",
                       "training.head_lr=1e-3"])  # FSDP version 2 (the default) keeps every weight apart


def test_ranking_and_best_metric_settings_that_cannot_be_honoured_are_refused_together():
    with pytest.raises(PRMError) as err:
        load_config(None, ["loss.ranking_weight=0.5", "training.packing=true", "training.group_by_length=true",
                           "training.best_metric=within_problem_auroc", "training.save_steps=10",
                           "training.eval_steps=4"])
    message = str(err.value)
    assert "loss.ranking_weight=0.5 with training.packing=true" in message and "set training.packing=false" in message
    assert "loss.ranking_weight=0.5 with training.group_by_length=true" in message
    assert "training.best_metric=within_problem_auroc needs validation data; set data.val" in message
    assert "training.save_steps=10 must be a multiple of training.eval_steps=4" in message
    with pytest.raises(PRMError, match="loss.ranking_score=last set but loss.ranking_weight is 0"):
        load_config(None, ["loss.ranking_score=last"])
    with pytest.raises(PRMError, match="loss.ranking_weight"):
        load_config(None, ["loss.ranking_weight=-1"])
    config = load_config(None, ["loss.ranking_weight=0.5", "loss.ranking_score=last", "data.val=v.jsonl",
                                "training.best_metric=loss", "training.eval_steps=5", "training.save_steps=10"])
    assert (config.loss.ranking_weight, config.loss.ranking_score, config.training.best_metric) == (0.5, "last", "loss")
