"""Nothing gets in: no model code runs unless asked, no pickle is unpickled unless asked, config values are data.

The payloads here are harmless stand-ins for an attack: each would create a marker file if it ever ran, and every
test checks that the marker is still absent.
"""

from __future__ import annotations

import ast
import json
import os
import pickle
import shutil
from pathlib import Path

import pytest
import torch

import prmkit
from prmkit.config import load_config
from prmkit.data.synthetic import generate_records
from prmkit.errors import PRMError
from prmkit.files import write_jsonl
from prmkit.model import PRMMetadata, load_prm, load_token_classifier, load_tokenizer
from prmkit.training.trainer import train

SOURCE = Path(prmkit.__file__).parent


class Payload:
    """Unpickling this calls os.makedirs(marker): the shape of any pickle exploit, made visible."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return os.makedirs, (self.marker,)


def pickled_payload(path: Path, marker: Path) -> None:
    with open(path, "wb") as handle:
        pickle.dump({"model.embed_tokens.weight": Payload(marker)}, handle, protocol=2)


def model_folder_with_pickle_weights(tiny_llama: Path, folder: Path, marker: Path) -> Path:
    """The tiny model's config and tokenizer, with weights only in a malicious pytorch_model.bin."""
    shutil.copytree(tiny_llama, folder)
    (folder / "model.safetensors").unlink()
    pickled_payload(folder / "pytorch_model.bin", marker)
    return folder


def test_pickle_weights_are_refused_without_opt_in(tiny_llama, tmp_path):
    marker = tmp_path / "pwned"
    folder = model_folder_with_pickle_weights(tiny_llama, tmp_path / "model", marker)
    with pytest.raises(PRMError, match=r"pickle files \(pytorch_model.bin\).*model.allow_pickle=true"):
        load_token_classifier(str(folder))
    assert not marker.exists()


def test_with_opt_in_transformers_still_unpickles_weights_only(tiny_llama, tmp_path):
    # allow_pickle lets transformers read the file, with torch.load(weights_only=True): the payload cannot run
    marker = tmp_path / "pwned"
    folder = model_folder_with_pickle_weights(tiny_llama, tmp_path / "model", marker)
    with pytest.raises(PRMError, match="holds more than tensors.*os.makedirs"):
        load_token_classifier(str(folder), allow_pickle=True)
    assert not marker.exists()


def test_honest_pickle_weights_load_only_with_opt_in(tiny_llama, tmp_path):
    folder = tmp_path / "model"
    shutil.copytree(tiny_llama, folder)
    state = load_token_classifier(str(tiny_llama)).state_dict()
    (folder / "model.safetensors").unlink()
    torch.save(state, folder / "pytorch_model.bin")
    with pytest.raises(PRMError, match="allow_pickle"):
        load_token_classifier(str(folder))
    model = load_token_classifier(str(folder), allow_pickle=True)
    torch.testing.assert_close(model.state_dict()["model.embed_tokens.weight"], state["model.embed_tokens.weight"])


def test_config_json_cannot_point_transformers_at_a_pickle(tiny_llama, tmp_path):
    folder = tmp_path / "model"
    shutil.copytree(tiny_llama, folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "transformers_weights": "adapter_model.bin"}))
    with pytest.raises(PRMError, match="transformers_weights='adapter_model.bin'"):
        load_token_classifier(str(folder))


def test_models_load_with_use_safetensors_and_without_remote_code(tiny_llama, monkeypatch, capsys):
    from transformers import AutoModelForTokenClassification

    seen = {}
    original = AutoModelForTokenClassification.from_pretrained

    def spy(*args, **kwargs):
        seen.update(kwargs)
        return original(*args, **kwargs)

    monkeypatch.setattr(AutoModelForTokenClassification, "from_pretrained", spy)
    load_token_classifier(str(tiny_llama))
    assert seen["use_safetensors"] is True and seen["trust_remote_code"] is False
    assert load_config(None).model.trust_remote_code is False and load_config(None).model.allow_pickle is False
    assert "trust_remote_code" not in capsys.readouterr().err


def test_trust_remote_code_on_is_announced_on_stderr(tiny_llama, tmp_path, capsys):
    folder = shutil.copytree(tiny_llama, tmp_path / "model")  # a path not loaded before: the warning is once per path
    load_tokenizer(str(folder), trust_remote_code=True)
    load_token_classifier(str(folder), trust_remote_code=True)
    assert capsys.readouterr().err.count("warning: model.trust_remote_code is on") == 1


def test_remote_code_does_not_run_by_default(tmp_path):
    marker = tmp_path / "pwned"
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({
        "model_type": "shady", "auto_map": {"AutoConfig": "shady.ShadyConfig",
                                            "AutoModelForTokenClassification": "shady.ShadyModel"}}))
    (folder / "shady.py").write_text(f"import os\nos.makedirs({str(marker)!r})\n")
    with pytest.raises(PRMError, match="trust_remote_code"):
        load_token_classifier(str(folder))
    assert not marker.exists()


def fake_run_folder(tiny_llama: Path, folder: Path, adapter: bool) -> Path:
    shutil.copytree(tiny_llama, folder)
    PRMMetadata(base_model=str(tiny_llama), base_path=str(tiny_llama), finetune="lora" if adapter else "full",
                loss="bce", separator="\n\n", max_length=64).save(folder)
    (folder / "model.safetensors").unlink()
    if adapter:
        (folder / "adapter_config.json").write_text("{}")
        pickled_payload(folder / "adapter_model.bin", folder / "pwned")
    else:
        pickled_payload(folder / "pytorch_model.bin", folder / "pwned")
    return folder


@pytest.mark.parametrize("adapter", [True, False])
def test_scoring_loader_refuses_pickle_adapters_and_models(tiny_llama, tmp_path, adapter):
    folder = fake_run_folder(tiny_llama, tmp_path / "run", adapter)
    with pytest.raises(PRMError, match="allow_pickle"):
        load_prm(folder)
    assert not (folder / "pwned").exists()


@pytest.fixture(scope="module")
def trained_run(tiny_llama, tmp_path_factory):
    folder = tmp_path_factory.mktemp("secure-run")
    write_jsonl(generate_records(16, seed=5), folder / "train.jsonl")
    overrides = [f"model.base={tiny_llama}", f"data.train={folder / 'train.jsonl'}", "data.max_length=128",
                 f"output_dir={folder}", "run_name=run", "training.max_steps=2", "training.save_steps=1",
                 "training.batch_size=4", "lora.r=4"]
    train(load_config(None, overrides))
    return folder / "run", overrides


def test_resume_unpickles_trainer_files_weights_only(trained_run, tmp_path):
    """Resuming reads optimizer.pt, scheduler.pt and rng_state.pth with torch.load; transformers passes
    weights_only=True, so a tampered file fails to load instead of running code."""
    run, overrides = trained_run
    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    marker = tmp_path / "pwned"
    pickled_payload(copy / "checkpoint-1" / "optimizer.pt", marker)
    with pytest.raises(PRMError, match="holds more than tensors.*os.makedirs"):
        train(load_config(None, [*overrides, f"output_dir={tmp_path}", f"training.resume={copy / 'checkpoint-1'}"]))
    assert not marker.exists()


def test_resume_refuses_a_checkpoint_with_pickle_weights(trained_run, tmp_path):
    run, overrides = trained_run
    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    checkpoint = copy / "checkpoint-1"
    (checkpoint / "adapter_model.safetensors").unlink()
    pickled_payload(checkpoint / "adapter_model.bin", tmp_path / "pwned")
    with pytest.raises(PRMError, match=r"pickle files \(adapter_model.bin\)"):
        train(load_config(None, [*overrides, f"output_dir={tmp_path}", f"training.resume={checkpoint}"]))
    assert not (tmp_path / "pwned").exists()


@pytest.mark.parametrize("tag", ["!!python/object/apply:os.makedirs", "!!python/object/new:os.makedirs",
                                 "!!python/name:os.makedirs", "!!python/object:pathlib.Path"])
def test_python_tags_in_a_config_file_are_refused(tmp_path, tag):
    marker = tmp_path / "pwned"
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(f"model:\n  base: {tag} [{marker}]\n")
    with pytest.raises(PRMError, match=r"cfg.yaml: not valid YAML .*python"):
        load_config(cfg)
    assert not marker.exists()


def test_python_tags_in_overrides_stay_plain_text(tmp_path):
    marker = tmp_path / "pwned"
    config = load_config(None, [f"model.base=!!python/object/apply:os.makedirs [{marker}]"])
    assert config.model.base.startswith("!!python") and not marker.exists()


BUILTINS = {"eval", "exec", "compile", "__import__"}  # called by bare name; model.eval() is fine
UNSAFE_METHODS = {"import_module", "unsafe_load", "full_load", "load_module", "exec_module"}
UNSAFE_MODULES_FOR_LOAD = {"pickle", "yaml", "torch", "dill", "marshal", "joblib"}


def test_source_never_evaluates_imports_or_unpickles_data():
    """A static guard over src/prmkit: no eval/exec/dynamic import, no yaml.load or pickle/torch.load, no
    hard-coded trust_remote_code=True, and every AutoModel*.from_pretrained passes use_safetensors."""
    problems = []
    for path in sorted(SOURCE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Call):
                continue
            where = f"{path.relative_to(SOURCE)}:{node.lineno}"
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            owner = getattr(func.value, "id", "") if isinstance(func, ast.Attribute) else ""
            builtin = isinstance(func, ast.Name) and name in BUILTINS
            if builtin or name in UNSAFE_METHODS or (name == "load" and owner in UNSAFE_MODULES_FOR_LOAD):
                problems.append(f"{where}: {owner + '.' if owner else ''}{name}()")
            for keyword in node.keywords:
                if keyword.arg == "trust_remote_code" and isinstance(keyword.value, ast.Constant) \
                        and keyword.value.value is True:
                    problems.append(f"{where}: trust_remote_code=True")
            if name == "from_pretrained" and owner.startswith("AutoModel") \
                    and "use_safetensors" not in {k.arg for k in node.keywords}:
                problems.append(f"{where}: {owner}.from_pretrained without use_safetensors")
    assert not problems, problems
