"""A max_length beyond what the backbone reads (its position table: 512 tokens for the tiny models) is refused in
training before the run folder is touched, and in scoring when a run's folder is loaded, with the limit named. A
validation file none of whose rows fits data.max_length is refused, not trained without the evaluation asked for."""

from __future__ import annotations

import json
import shutil

import pytest

from prmkit.config import load_config
from prmkit.data.synthetic import generate_records
from prmkit.errors import PRMError
from prmkit.files import write_jsonl
from prmkit.model import METADATA_FILE
from prmkit.scoring.scorer import PRMScorer
from prmkit.training.trainer import train


@pytest.mark.parametrize("arch", ["llama", "gpt2"])  # max_position_embeddings, n_positions
def test_training_refuses_a_max_length_beyond_the_backbone_context(arch, tiny_llama, tiny_gpt2, tmp_path):
    model = {"llama": tiny_llama, "gpt2": tiny_gpt2}[arch]
    write_jsonl(generate_records(4, seed=1), tmp_path / "train.jsonl")
    overrides = [f"model.base={model}", f"data.train={tmp_path / 'train.jsonl'}", f"output_dir={tmp_path / 'runs'}",
                 "training.max_steps=1", "training.batch_size=2"]
    with pytest.raises(PRMError, match=r"data\.max_length=513 .* reads at most 512 tokens .* data\.max_length=512"):
        train(load_config(None, [*overrides, "data.max_length=513"]))
    assert not (tmp_path / "runs").exists()  # refused before the run folder was made
    train(load_config(None, [*overrides, "data.max_length=512"]))  # the context itself is fine
    assert (tmp_path / "runs" / "prm" / METADATA_FILE).is_file()


def test_scoring_refuses_a_max_length_beyond_the_model_context(tiny_run, tmp_path):
    with pytest.raises(PRMError, match=r"max_length=600 is beyond .* at most 512 tokens; use max_length=512"):
        PRMScorer.from_pretrained(tiny_run, device="cpu", max_length=600)
    assert PRMScorer.from_pretrained(tiny_run, device="cpu", max_length=512).metadata.max_length == 512

    # a run folder whose prmkit.json asks for more than the model reads, scored without an override
    folder = tmp_path / "run"
    shutil.copytree(tiny_run, folder, ignore=shutil.ignore_patterns("checkpoint-*"))
    metadata = json.loads((folder / METADATA_FILE).read_text())
    (folder / METADATA_FILE).write_text(json.dumps({**metadata, "max_length": 1024}))
    with pytest.raises(PRMError, match=r"says max_length=1024, beyond the model's context of 512 tokens; "
                                       r"pass max_length=512"):
        PRMScorer.from_pretrained(folder, device="cpu")
    scorer = PRMScorer.from_pretrained(folder, device="cpu", max_length=512)
    assert len(scorer.score("What is 2 + 3?", ["2 + 3 = 5."])) == 1


def test_validation_rows_none_of_which_fits_max_length_are_refused(tiny_llama, tmp_path):
    """Evaluation was asked for; training without it would pass silently for a run that was evaluated."""
    write_jsonl(generate_records(4, seed=1), tmp_path / "train.jsonl")
    long_row = {"prompt": "What is 1 + 1?", "completions": ["1 + 1 = 2. " * 40], "labels": [1]}
    write_jsonl([long_row], tmp_path / "val.jsonl")
    config = load_config(None, [f"model.base={tiny_llama}", f"data.train={tmp_path / 'train.jsonl'}",
                                f"data.val={tmp_path / 'val.jsonl'}", "data.max_length=128",
                                f"output_dir={tmp_path / 'runs'}", "training.max_steps=1", "training.batch_size=2"])
    with pytest.raises(PRMError, match=r"no validation row has a labelled step within data\.max_length=128"):
        train(config)
