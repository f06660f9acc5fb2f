"""The policy's confidence in `prmkit search` rows: every sampled solution's `logprob` and `mean_logprob`, from the
tiny model's real generator (equal to `completion_logprobs` recomputed on the tokens it generated) and summed along
a beam's path; absent where the policy gives none."""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from search_fakes import ScriptedPolicy, StepScorer  # noqa: E402

from prmkit.files import write_jsonl  # noqa: E402
from prmkit.generation import GenerationOptions, load_generator  # noqa: E402
from prmkit.generation.confidence import completion_logprobs  # noqa: E402
from prmkit.search.options import SearchOptions  # noqa: E402
from prmkit.search.run import run_search  # noqa: E402


@pytest.fixture
def data(tmp_path) -> Path:
    path = tmp_path / "problems.jsonl"
    write_jsonl([{"prompt": "Tom has 3 apples.", "gold_answer": "3"},
                 {"prompt": "What is the total cost?", "gold_answer": "24"}], path)
    return path


def rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_search_rows_carry_the_logprob_the_function_recomputes_from_the_generated_tokens(tiny_llama, data, tmp_path):
    generator = load_generator(str(tiny_llama), GenerationOptions(max_new_tokens=10, generation_batch_size=4,
                                                                  system_prompt=None))
    drawn = []  # (prompt ids, generated ids) of every sequence `generate` returned
    real_generate = generator.model.generate

    def recording_generate(input_ids, attention_mask, **kwargs):
        output = real_generate(input_ids=input_ids, attention_mask=attention_mask, **kwargs)
        for ids, mask, sequence in zip(input_ids, attention_mask, output):
            drawn.append((ids[mask.bool()].tolist(), sequence[input_ids.shape[1]:].tolist()))
        return output

    generator.model.generate = recording_generate
    out = tmp_path / "out.jsonl"
    run_search(StepScorer(), generator, data, out, SearchOptions(method="best-of-n", n=3, max_new_tokens=10))
    counted = [(prompt, ids[:generator._sample(ids, ()).tokens]) for prompt, ids in drawn]
    expected = completion_logprobs(generator.model, [p for p, _ in counted], [c for _, c in counted], batch_size=1)
    written = [c for row in rows(out) for c in row["candidates"]]
    assert len(written) == len(expected) == 6
    assert sorted(c["logprob"] for c in written) == pytest.approx(sorted(e.logprob for e in expected), abs=1e-5)
    for candidate in written:
        assert candidate["mean_logprob"] == pytest.approx(candidate["logprob"] / candidate["tokens"])
    chosen = rows(out)[0]
    assert chosen["logprob"] in [c["logprob"] for c in chosen["candidates"]]


class ConfidentPolicy(ScriptedPolicy):
    """The scripted policy, with a log-prob of -0.25 per generated token on every sample."""

    def generate(self, *args, **kwargs):
        return [[replace(s, logprob=-0.25 * s.tokens) for s in row] for row in super().generate(*args, **kwargs)]


def two_steps(problem: str, prefix: str, k: int) -> str:
    return "First 3 + 4 = 7 [0.8]\n\nSo \\boxed{7} [0.9]" if not prefix else "So \\boxed{7} [0.9]"


def test_a_beams_logprob_sums_its_steps_and_a_policy_without_logprobs_writes_none(data, tmp_path):
    options = SearchOptions(method="beam", n=2, beam_width=2, max_rounds=3)
    run_search(StepScorer(), ConfidentPolicy(two_steps), data, tmp_path / "beam.jsonl", options)
    for row in rows(tmp_path / "beam.jsonl"):
        assert row["steps"] == ["First 3 + 4 = 7 [0.8]", "So \\boxed{7} [0.9]"]  # two rounds, two steps
        for solution in row["candidates"]:
            assert solution["logprob"] == pytest.approx(-0.25 * solution["tokens"]) and solution["tokens"] > 0
            assert solution["mean_logprob"] == pytest.approx(-0.25)
        # the row's own `tokens` counts every token the problem cost; its mean_logprob is the chosen path's
        assert row["mean_logprob"] == pytest.approx(-0.25) and row["logprob"] == row["candidates"][0]["logprob"]
    run_search(StepScorer(), ScriptedPolicy(two_steps), data, tmp_path / "plain.jsonl", options)
    plain = rows(tmp_path / "plain.jsonl")[0]
    assert "logprob" not in plain and "mean_logprob" not in plain["candidates"][0]


def test_search_no_logprobs_writes_the_same_rows_without_the_confidence(tiny_run, tiny_llama, data, tmp_path, capsys,
                                                                         monkeypatch):
    """`prmkit search` computes the policy's confidence by default; with --no-logprobs it runs no extra forward and
    writes the same samples, answers and choices without `logprob`/`mean_logprob`, and eval has no confidence rows."""
    import prmkit.generation.hf as hf
    from prmkit.cli import main
    from prmkit.evaluation.within_problem import CONFIDENCE

    common = [str(tiny_run), str(data)]
    flags = ["--policy", str(tiny_llama), "--method", "best-of-n", "--n", "3", "--max-new-tokens", "8", "--device",
             "cpu", "--problems-per-batch", "2"]
    assert main(["search", *common, str(tmp_path / "default.jsonl"), *flags]) == 0

    def forbidden(*args, **kwargs):
        raise AssertionError("completion_logprobs ran with --no-logprobs")

    monkeypatch.setattr(hf, "completion_logprobs", forbidden)
    assert main(["search", *common, str(tmp_path / "plain.jsonl"), *flags, "--no-logprobs"]) == 0
    default, plain = rows(tmp_path / "default.jsonl"), rows(tmp_path / "plain.jsonl")
    assert all(c["mean_logprob"] < 0 and c["logprob"] < 0 for r in default for c in r["candidates"])
    assert "mean_logprob" in default[0]
    confidence = ("logprob", "mean_logprob")
    for before, after in zip(default, plain, strict=True):
        assert not set(confidence) & set(after) and not any(set(confidence) & set(c) for c in after["candidates"])
        assert {k: v for k, v in before.items() if k not in confidence and k != "candidates"} == \
            {k: v for k, v in after.items() if k != "candidates"}
        assert [{k: v for k, v in c.items() if k not in confidence} for c in before["candidates"]] == \
            after["candidates"]
    capsys.readouterr()
    assert main(["eval", str(tiny_run), str(tmp_path / "plain.jsonl"), "--out", str(tmp_path / "eval"),
                 "--device", "cpu"]) == 0
    split = json.loads((tmp_path / "eval" / "metrics.json").read_text())["splits"]["plain"]
    assert CONFIDENCE not in split["within_problem"]["by_n"]["methods"]
    assert "confidence_auroc" not in split["within_problem"] and "policy_confidence" not in split["best_of_n"]
