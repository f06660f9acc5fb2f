"""Does the language model under a PRM know the sums the arithmetic probe asks? Each probe row (bench/data_curve.py:
a step of a right validation sample with its equation's numbers drawn anew, true or a slip away) is scored by a
causal LM's own log-probability of the result it states, given the problem and the step up to the `=`. A model that
knows `a op b` puts more mass on the true result than on a slip, so it orders true rows above false ones of the
same words; a PRM on that backbone then has the skill to read out, and one that scores the probe at chance failed
to learn the reading, not the sums.

    python bench/data_curve.py --work /work/curve-room ...          # writes WORK/val/arithmetic-probe.jsonl
    python bench/arithmetic_knowledge.py --work /work/curve-room --models policy,smollm2-135m

The same reading on the validation samples themselves (WORK/val/prm-eval.jsonl): each sample is scored by its least
likely stated result, the lowest mean log-prob per token the model gives a result of any `a op b = c` in its steps
(given the problem and every step before), and a problem's right samples are compared with its wrong ones (the
within-problem AUROC a best-of-N needs). A sample with no equation has no score and is left out of the pairs.
`policy` is the policy that drew WORK/train's samples; any other name is a local folder or a prmkit alias
(`smollm2-135m`, the PRMs' backbone before it is cut to its first layers). Validation only: the probe is drawn from
validation problems, and this chooses nothing.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "bench"))

from data_curve import probe_figures, sampling_policy  # noqa: E402
from lifecycle.exact import equations  # noqa: E402
from lifecycle.onpolicy import DELIMITER  # noqa: E402
from prmkit.evaluation.metrics import within_problem_auroc  # noqa: E402
from prmkit.files import read_jsonl, write_json_atomic  # noqa: E402

EQUATION = re.compile(r"(\d+) ([-+*/x]) (\d+) = (\d+(?:\.\d+)?)")


def split_at_result(step: str) -> tuple[str, str]:
    """The step up to its last equation's result, and that result as written (the tokens the model is asked for)."""
    found = list(EQUATION.finditer(step))
    if not found:
        raise ValueError(f"no `a op b = c` in the probe step {step!r}")
    last = found[-1]
    return step[:last.start(4)], last.group(4)


def knowledge(rows: list[dict], result_logprobs) -> dict:
    """The probe's AUROCs with each row scored by `result_logprobs(rows)`: one log-prob of the stated result per row."""
    return probe_figures(rows, result_logprobs(rows), [bool(r["correct"]) for r in rows])


def stated_results(row: dict) -> list[tuple[str, str]]:
    """(text before the result, the result as written) for every equation of a sample's steps, the text being the
    steps before it joined as the policy lays them out and the step up to its result."""
    out = []
    for k, step in enumerate(row["completions"]):
        before = "".join(s + DELIMITER for s in row["completions"][:k])
        for equation in equations(step):
            out.append((before + step[:equation.result_start], step[equation.result_start:equation.result_end]))
    return out


def least_likely_results(rows: list[dict], logprobs) -> list[float | None]:
    """Each sample's lowest mean log-prob per token over its stated results (`logprobs(prompts, heads, results)`
    gives one (sum, tokens) per result); None for a sample that states none."""
    owners, prompts, heads, results = [], [], [], []
    for i, row in enumerate(rows):
        for head, result in stated_results(row):
            owners.append(i)
            prompts.append(row["prompt"])
            heads.append(head)
            results.append(result)
    lowest: list[float | None] = [None] * len(rows)
    for owner, (total, tokens) in zip(owners, logprobs(prompts, heads, results)):
        value = total / max(tokens, 1)
        lowest[owner] = value if lowest[owner] is None else min(lowest[owner], value)
    return lowest


def on_samples(rows: list[dict], logprobs) -> dict:
    """The within-problem AUROC of the samples ordered by their least likely stated result."""
    scores = least_likely_results(rows, logprobs)
    by_problem: dict[str, tuple[list, list]] = {}
    for row, score in zip(rows, scores):
        group = by_problem.setdefault(row.get("group", row["prompt"]), ([], []))
        group[0].append(score)
        group[1].append(bool(row["correct"]))
    within = within_problem_auroc(list(by_problem.values()))
    return {"samples": len(rows), "scored": sum(s is not None for s in scores), **within}


def model_logprobs(folder: str):
    """A `result_logprobs` for the causal LM in FOLDER: the problem in its chat template, then the step up to the
    result, teacher-forced. Its `.results` reads any (problem, text before, result) triples the same way."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from prmkit.generation.base import chat_prompt
    from prmkit.generation.confidence import completion_logprobs
    from prmkit.generation.options import DEFAULT_SYSTEM_PROMPT

    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()

    def results(problems: list[str], heads: list[str], stated: list[str]) -> list[tuple[float, int]]:
        prompts = [tokenizer(chat_prompt(tokenizer, problem, head, DEFAULT_SYSTEM_PROMPT),
                             add_special_tokens=False)["input_ids"] for problem, head in zip(problems, heads)]
        completions = [tokenizer(result, add_special_tokens=False)["input_ids"] for result in stated]
        return [(r.logprob, r.tokens) for r in completion_logprobs(model, prompts, completions, batch_size=16)]

    def score(rows: list[dict]) -> list[float]:
        split = [split_at_result(row["completions"][0]) for row in rows]
        return [total for total, _ in results([r["prompt"] for r in rows], [h for h, _ in split],
                                              [r for _, r in split])]

    score.results = results
    return score


def model_folder(name: str, work: Path) -> str:
    if name == "policy":
        return sampling_policy(work)
    from prmkit.backbones import resolve_base

    return resolve_base(name)


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", required=True, help="bench/data_curve.py's work folder (its val/ holds the probe)")
    parser.add_argument("--models", default="policy,smollm2-135m",
                        help="comma-separated: policy, a prmkit alias or a local model folder")
    parser.add_argument("--samples", action="store_true",
                        help="also order WORK/val/prm-eval.jsonl's samples by their least likely stated result")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "arithmetic_knowledge.json"))
    return parser.parse_args(argv)


def main(argv=None, result_logprobs_for=model_logprobs) -> dict:
    args = parse_args(argv)
    work = Path(args.work).resolve()
    probe_file = work / "val" / "arithmetic-probe.jsonl"
    if not probe_file.is_file():
        raise SystemExit(f"{probe_file} not found: run bench/data_curve.py --work {work} first (it draws the probe)")
    rows = read_jsonl(probe_file)
    result = {"command": "python bench/arithmetic_knowledge.py " + " ".join(sys.argv[1:] if argv is None else argv),
              "machine": f"{platform.machine()}, {os.cpu_count()} cores", "probe": str(probe_file), "models": {}}
    samples = read_jsonl(work / "val" / "prm-eval.jsonl") if args.samples else None
    for name in (m.strip() for m in args.models.split(",") if m.strip()):
        folder = model_folder(name, work)
        scorer = result_logprobs_for(folder)
        result["models"][name] = {"folder": folder, **knowledge(rows, scorer)}
        if samples is not None:
            result["models"][name]["samples"] = on_samples(samples, scorer.results)
        write_json_atomic(Path(args.out), result)
        within = result["models"][name]["within_phrasing"]["auroc"]
        print(f"{name}: the stated result's log-prob orders true above false rows of the same words "
              f"{within:.3f} of the time", flush=True)
    return result


if __name__ == "__main__":
    main()
