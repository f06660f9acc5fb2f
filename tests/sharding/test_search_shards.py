"""`prmkit search` in shards, with a policy that draws a whole generate call from the call's seed (so a problem's
samples depend on the other prompts of its batch): merged shards equal the one-process file byte for byte, for
one method and for a budgets run, whose report the merge computes on the merged rows; a killed shard resumes."""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "search"))

from search_fakes import ScriptedPolicy, StepScorer  # noqa: E402

from prmkit.cli import main  # noqa: E402
from prmkit.errors import PRMError  # noqa: E402
from prmkit.files import write_jsonl  # noqa: E402
from prmkit.search.options import SearchOptions  # noqa: E402
from prmkit.search.run import merged_budget_files, run_search  # noqa: E402
from prmkit.shard_merge import merge_shards  # noqa: E402
from prmkit.shards import Shard  # noqa: E402


class OneStreamPerCall(ScriptedPolicy):
    def __init__(self, dies_after: int | None = None):
        super().__init__(self.draw)
        self.stream, self.left = random.Random(), dies_after

    def generate(self, prompts, n=1, *, seed=None, **kwargs):
        if self.left == 0:
            raise RuntimeError("killed")
        self.left = None if self.left is None else self.left - 1
        self.stream = random.Random(seed)
        return super().generate(prompts, n, seed=seed, **kwargs)

    def draw(self, problem: str, prefix: str, k: int) -> str:
        step, score, answer = self.stream.randint(1, 99), self.stream.random(), self.stream.randint(3, 5)
        return f"Step {step} [{score:.3f}]\n\nSo \\boxed{{{answer}}}"


@pytest.fixture
def data(tmp_path) -> Path:
    path = tmp_path / "problems.jsonl"
    write_jsonl([{"prompt": f"How many apples in basket {i}?", "gold_answer": "4", "id": i} for i in range(7)]
                + [{"prompt": "How many plums?"}], path)
    return path


@pytest.mark.parametrize("options", [
    SearchOptions(method="best-of-n", n=4, problems_per_batch=2),
    SearchOptions(method="beam", n=4, beam_width=2, max_rounds=3, problems_per_batch=3),
    SearchOptions(method="majority-of-bests", n=4, problems_per_batch=1, mob_resamples=20),
], ids=["best-of-n", "beam", "majority-of-bests"])
def test_merged_search_shards_are_the_one_process_file_byte_for_byte(data, tmp_path, options):
    run_search(StepScorer(), OneStreamPerCall(), data, tmp_path / "one.jsonl", options)
    out = tmp_path / "search.jsonl"
    for index in range(3):
        summary = run_search(StepScorer(), OneStreamPerCall(), data, out, options, shard=Shard(index, 3))
        assert summary.out == Shard(index, 3).file(out)
    merged = merge_shards(out)
    assert (merged.command, merged.records) == ("search", 8)
    assert out.read_bytes() == (tmp_path / "one.jsonl").read_bytes()
    assert merged_budget_files(out, merged.shards[0]["settings"]) is None  # one method: no budget report


def test_a_budgets_search_merges_to_the_one_process_rows_and_report(data, tmp_path, capsys):
    options = SearchOptions(budgets=(1, 2, 4), beam_width=2, max_rounds=2, problems_per_batch=2, vote_temperature=0.5)
    single = run_search(StepScorer(), OneStreamPerCall(), data, tmp_path / "one.jsonl", options)
    out = tmp_path / "budgets.jsonl"
    for index in range(2):
        shard = run_search(StepScorer(), OneStreamPerCall(), data, out, options, shard=Shard(index, 2))
        assert shard.report is None and not shard.files  # a shard's rows are not all the rows: no report
    assert main(["merge", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "merged 2 shards of prmkit search: 8 rows" in printed and "accuracy at budgets" in printed
    assert out.read_bytes() == (tmp_path / "one.jsonl").read_bytes()
    merged_report = json.loads((tmp_path / "budgets.budgets.json").read_text())
    assert merged_report == single.report  # the selection settings (vote_temperature) travel with the shards
    assert merged_report["selection"]["softmax-weighted"] == {"vote_temperature": 0.5}
    assert (tmp_path / "budgets.budgets.png").stat().st_size > 10_000


def test_a_killed_search_shard_resumes_and_shards_of_another_search_are_refused(data, tmp_path):
    options = SearchOptions(method="best-of-n", n=4, problems_per_batch=1)
    run_search(StepScorer(), OneStreamPerCall(), data, tmp_path / "one.jsonl", options)
    out = tmp_path / "search.jsonl"
    run_search(StepScorer(), OneStreamPerCall(), data, out, options, shard=Shard(0, 2))
    with pytest.raises(RuntimeError, match="killed"):
        run_search(StepScorer(), OneStreamPerCall(dies_after=2), data, out, options, shard=Shard(1, 2))
    with pytest.raises(PRMError, match=r"shard 1/2: stopped with 2 of its 4 problems written; run its command again "
                                       r"with --shard 1/2"):
        merge_shards(out)
    resumed = run_search(StepScorer(), OneStreamPerCall(), data, out, options, shard=Shard(1, 2))
    assert (resumed.resumed, resumed.searched) == (2, 2)
    merge_shards(out)
    assert out.read_bytes() == (tmp_path / "one.jsonl").read_bytes()

    run_search(StepScorer(), OneStreamPerCall(), data, out, options.replace(n=2, overwrite=True), shard=Shard(1, 2))
    with pytest.raises(PRMError, match=r"shard 1/2 was made with other settings than shard 0/2 \(.*settings.options.n: "
                                       r"4 vs 2"):
        merge_shards(out, overwrite=True)
