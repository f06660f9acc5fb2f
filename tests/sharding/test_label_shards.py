"""`prmkit label` in shards, with a policy whose draws depend on each generate call's seed and on every prompt in
the call (as the transformers backend samples a padded batch from one seed): merged shards equal the one-process
file byte for byte for several counts, a killed shard resumes, and a merge of missing, unfinished, changed or
mixed shards is refused with what to do."""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "labeling"))

from fake_policy import FakePolicy  # noqa: E402

from prmkit.cli import main  # noqa: E402
from prmkit.data.synthetic import generate_records  # noqa: E402
from prmkit.errors import PRMError  # noqa: E402
from prmkit.files import write_jsonl  # noqa: E402
from prmkit.generation.base import Sample  # noqa: E402
from prmkit.labeling import LabelOptions, label_file  # noqa: E402
from prmkit.shard_merge import merge_shards  # noqa: E402
from prmkit.shards import Shard  # noqa: E402

OPTIONS = LabelOptions(k=3, problems_per_batch=2)


class CallStream(FakePolicy):
    """Rollouts reach the gold answer by a draw from one random stream per generate call, seeded by the call's
    seed: a problem's labels depend on the seed of its batch and on the other prompts drawn before it."""

    def generate(self, prompts, n=1, *, seed=None, **kwargs):
        self.stream = random.Random(seed)
        return super().generate(prompts, n, seed=seed, **kwargs)

    def _sample(self, prompt: str, j: int) -> Sample:
        sample = super()._sample(prompt, j)
        problem = prompt.split("<<prefix>>")[0]
        if self.stream.random() < 0.5 and "Going on" in sample.text:
            wrong = str(int(self.truth[problem]["gold_answer"]) + 7)
            return Sample(f"Going on. The answer is \\boxed{{{wrong}}}.", 7, "eos")
        return sample


@pytest.fixture(scope="module")
def records():
    return generate_records(9, seed=11)


@pytest.fixture
def data(tmp_path, records):
    path = tmp_path / "problems.jsonl"
    write_jsonl(records, path)
    return path


def one_process(records, data, tmp_path, options=OPTIONS) -> bytes:
    label_file(CallStream(records), data, tmp_path / "one.jsonl", options)
    return (tmp_path / "one.jsonl").read_bytes()


@pytest.mark.parametrize("count", [2, 3, 5])
def test_merged_shards_are_the_one_process_file_byte_for_byte(records, data, tmp_path, count):
    whole = one_process(records, data, tmp_path)
    out = tmp_path / "labels.jsonl"
    for index in reversed(range(count)):  # the order shards run in does not matter
        result = label_file(CallStream(records), data, out, OPTIONS, shard=Shard(index, count))
        assert result.output == str(Shard(index, count).file(out))
    assert not out.exists()  # shards write only their own files
    merged = merge_shards(out)
    assert out.read_bytes() == whole
    assert (merged.count, merged.records, merged.command) == (count, len(records), "label")
    provenance = json.loads(merged.provenance.read_text())
    assert [s["file"] for s in provenance["shards"]] == [f"labels.shard-{i}-of-{count}.jsonl" for i in range(count)]
    assert provenance["settings"]["k"] == 3 and provenance["problems"]["count"] == len(records)
    assert sum(s["records"] for s in provenance["shards"]) == provenance["records"] == len(records)


def test_a_shard_makes_the_generate_calls_one_process_makes_for_its_batches(records, data, tmp_path):
    single, shard = CallStream(records), CallStream(records)
    label_file(single, data, tmp_path / "one.jsonl", OPTIONS)
    label_file(shard, data, tmp_path / "two.jsonl", OPTIONS, shard=Shard(1, 2))
    # batches of 2 problems: 0..4; shard 1/2 takes batches 1 and 3, one call each (mc needs one round)
    assert shard.calls == [single.calls[1], single.calls[3]]


def test_sampled_solutions_shard_and_merge_too(records, data, tmp_path):
    options = OPTIONS.replace(solutions=2)
    whole = one_process(records, data, tmp_path, options)
    out = tmp_path / "labels.jsonl"
    for index in range(2):
        label_file(CallStream(records), data, out, options, shard=Shard(index, 2))
    merge_shards(out)
    assert out.read_bytes() == whole


def test_a_killed_shard_resumes_on_its_own_and_the_merge_waits_for_it(records, data, tmp_path, capsys):
    whole = one_process(records, data, tmp_path)
    out = tmp_path / "labels.jsonl"
    label_file(CallStream(records), data, out, OPTIONS, shard=Shard(0, 2))
    killed = CallStream(records)
    killed.fail_after = 1  # shard 1 holds batches 1 and 3: killed in its second batch
    with pytest.raises(RuntimeError, match="killed"):
        label_file(killed, data, out, OPTIONS, shard=Shard(1, 2))
    part = Shard(1, 2).file(out)
    with part.open("a", encoding="utf-8") as handle:
        handle.write('{"prompt": "cut off by the ki')  # a kill in the middle of a line
    assert main(["merge", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"cannot merge {out}: 1 of 2 shards are complete" in err
    assert "shard 1/2: stopped with 2 of its 4 problems written; run its command again with --shard 1/2" in err
    assert not out.exists()

    again = CallStream(records)
    result = label_file(again, data, out, OPTIONS, shard=Shard(1, 2))
    assert (result.kept, result.solutions) == (2, 2) and len(again.calls) == 1  # only batch 3 ran
    assert main(["merge", str(out)]) == 0
    assert out.read_bytes() == whole
    assert "merged 2 shards of prmkit label: 9 records" in capsys.readouterr().out
    assert main(["merge", str(out)]) == 0  # merging again rewrites its own output


def test_missing_changed_and_mixed_shards_are_refused_together_with_what_to_do(records, data, tmp_path):
    out = tmp_path / "labels.jsonl"
    with pytest.raises(PRMError, match=r"no shard of .*labels.jsonl in .*--shard I/N"):
        merge_shards(out)
    label_file(CallStream(records), data, out, OPTIONS, shard=Shard(0, 3))
    label_file(CallStream(records), data, out, OPTIONS.replace(k=2), shard=Shard(2, 3))
    with pytest.raises(PRMError) as refused:
        merge_shards(out)
    message = str(refused.value)
    assert "2 of 3 shards are complete" in message
    assert "shard 1/3: not started (no labels.shard-1-of-3.jsonl); run its command with --shard 1/3" in message
    assert "shard 2/3 was made with other settings than shard 0/3 (settings.k: 3 vs 2, 0/3 vs 2/3)" in message

    label_file(CallStream(records), data, out, OPTIONS, shard=Shard(1, 3))
    label_file(CallStream(records), data, out, OPTIONS.replace(overwrite=True), shard=Shard(2, 3))
    first = Shard(0, 3).file(out)
    first.write_text(first.read_text().replace('"correct": true', '"correct": false', 1))
    with pytest.raises(PRMError, match=r"shard 0/3: labels.shard-0-of-3.jsonl changed after the shard finished"):
        merge_shards(out)


def test_runs_of_two_counts_beside_one_output_need_shards_n(records, data, tmp_path):
    whole = one_process(records, data, tmp_path)
    out = tmp_path / "labels.jsonl"
    for count in (2, 3):
        for index in range(count):
            label_file(CallStream(records), data, out, OPTIONS, shard=Shard(index, count))
    with pytest.raises(PRMError, match=r"from runs of 2 and 3 shards; pass --shards N"):
        merge_shards(out)
    merge_shards(out, count=3)
    assert out.read_bytes() == whole


def test_a_shard_continues_only_its_own_problems_and_settings(records, data, tmp_path):
    out = tmp_path / "labels.jsonl"
    label_file(CallStream(records), data, out, OPTIONS, shard=Shard(0, 2))
    other = tmp_path / "other.jsonl"
    write_jsonl(records[:7], other)  # fewer problems: another input
    with pytest.raises(PRMError, match=r"shard 0/2 was started with other settings or input \(problems.count: 9 "
                                       r"vs 7; problems.sha256: .*--overwrite"):
        label_file(CallStream(records), other, out, OPTIONS, shard=Shard(0, 2))
    # shard 0's file renamed to shard 1's: its rows belong to another shard
    Shard(0, 2).file(out).rename(Shard(1, 2).file(out))
    with pytest.raises(PRMError, match=r"rows 1, 2, 5, 6, 9 belong to other shards than 1/2 of this input; pass "
                                       r"--overwrite"):
        label_file(CallStream(records), data, out, OPTIONS, shard=Shard(1, 2))


def test_an_output_that_no_merge_wrote_is_not_replaced(records, data, tmp_path):
    out = tmp_path / "labels.jsonl"
    for index in range(2):
        label_file(CallStream(records), data, out, OPTIONS, shard=Shard(index, 2))
    out.write_text("my own file\n")
    with pytest.raises(PRMError, match="exists and is not the output of a merge of these shards; pass --overwrite"):
        merge_shards(out)
    assert out.read_text() == "my own file\n"
    merge_shards(out, overwrite=True)
    assert out.read_bytes() == one_process(records, data, tmp_path)
