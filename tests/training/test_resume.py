"""A resumed run keeps the settings it started with: a change that would make it train differently is refused with
the key and both values, the length of the run and how it is logged may change, and RUN/config.yaml stays the
config the run started with."""

from __future__ import annotations

import json
import shutil

import pytest

from prmkit.config import load_config
from prmkit.data.synthetic import generate_records
from prmkit.errors import PRMError
from prmkit.files import write_jsonl
from prmkit.training.trainer import train


def overrides(model_dir, data, out, *extra):
    return [f"model.base={model_dir}", f"data.train={data / 'train.jsonl'}", "data.max_length=160",
            f"output_dir={out}", "run_name=run", "training.max_steps=2", "training.batch_size=4",
            "training.save_steps=1", "training.logging_steps=1", "training.lr=5e-3", "lora.r=4", *extra]


@pytest.fixture(scope="module")
def started(tiny_llama, tmp_path_factory):
    """A finished two-step run with a checkpoint at each step, and a second training file."""
    root = tmp_path_factory.mktemp("started")
    write_jsonl(generate_records(16, seed=1), root / "train.jsonl")
    write_jsonl(generate_records(16, seed=2), root / "other.jsonl")
    train(load_config(None, overrides(tiny_llama, root, root)))
    return root


@pytest.fixture
def run_copy(started, tmp_path):
    shutil.copytree(started / "run", tmp_path / "run")
    return tmp_path


@pytest.mark.parametrize("override, key, before, after", [
    ("data.train={other}", "data.train", "{data}/train.jsonl", "{data}/other.jsonl"),
    ("data.max_length=128", "data.max_length", "160", "128"),
    ("data.separator=' ки '", "data.separator", r"'\n\n'", "' ки '"),
    ("training.lr=1e-3", "training.lr", "0.005", "0.001"),
    ("training.batch_size=2", "training.batch_size", "4", "2"),
])
def test_resume_refuses_a_change_that_alters_the_run(tiny_llama, started, run_copy, override, key, before, after):
    original = (run_copy / "run" / "config.yaml").read_text()
    fill = dict(other=started / "other.jsonl", data=started)
    config = load_config(None, overrides(tiny_llama, started, run_copy, "training.resume=latest",
                                         override.format(**fill)))
    with pytest.raises(PRMError) as err:
        train(config)
    message = str(err.value)
    expected = f"{key} is {after.format(**fill)}, the run started with {before.format(**fill)}"
    assert expected.replace("'", "") in message.replace("'", "")
    assert f"set {key} back" in message and "another run_name" in message
    assert (run_copy / "run" / "config.yaml").read_text() == original


def test_resume_may_extend_the_run_and_keeps_its_starting_config(tiny_llama, started, run_copy):
    original = (run_copy / "run" / "config.yaml").read_text()
    summary = train(load_config(None, overrides(tiny_llama, started, run_copy, "training.resume=latest",
                                                "training.max_steps=3", "training.logging_steps=2")))
    assert summary.optimizer_steps == 3 and summary.resumed_from.endswith("checkpoint-2")
    assert (run_copy / "run" / "config.yaml").read_text() == original
    assert load_config(run_copy / "run" / "config.yaml").training.max_steps == 2
    changes = json.loads((run_copy / "run" / "summary.json").read_text())["resume_changes"]
    assert changes == {"output_dir": [str(started), str(run_copy)],  # the run folder was copied here
                       "training.logging_steps": [1, 2], "training.max_steps": [2, 3]}
