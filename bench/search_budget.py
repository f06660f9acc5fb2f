"""Accuracy against test-time budget: SmolLM2-135M-Instruct as the policy, a demo PRM (`prmkit demo`) as the
verifier, on synthetic arithmetic problems from a seed the demo never trained on (by default the 3-step ones:
SmolLM2-135M solves almost none of the longer ones). Every method of `prmkit search --budgets` at each N (greedy,
majority vote, best-of-N, weighted best-of-N, beam search, DVTS), with the tokens each one generated, plus the
wall time on this machine.

    prmkit demo --out /tmp/search-demo      # the PRM (about 7 minutes on 2 CPU cores)
    python bench/search_budget.py --prm /tmp/search-demo/prm --out bench/results/search_budget.json

The output JSON holds the report of `prmkit search --budgets` (prmkit.search.report.budget_report), the
settings, the command and the timings; the Markdown table is printed for the README.
"""

from __future__ import annotations

import argparse
import platform
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from prmkit.data.synthetic import generate_records  # noqa: E402
from prmkit.files import write_json_atomic, write_jsonl  # noqa: E402
from prmkit.generation import GenerationOptions, load_generator  # noqa: E402
from prmkit.search.options import SearchOptions, parse_budgets  # noqa: E402
from prmkit.search.report import markdown_table  # noqa: E402
from prmkit.search.run import run_search  # noqa: E402

HELD_OUT_SEED = 9001  # the demo trains on seed 0 and holds out a seed derived from it; this is neither


class Timed:
    """Wraps a generator's `generate` or a scorer's `score_many` to add up its calls, seconds and sizes."""

    def __init__(self, target, method: str, verbose: bool):
        self.target, self.method, self.verbose = target, method, verbose
        self.calls, self.seconds, self.items = 0, 0.0, 0
        setattr(target, method, self._wrap(getattr(target, method)))

    def _wrap(self, function):
        def timed(*args, **kwargs):
            started = time.perf_counter()
            out = function(*args, **kwargs)
            took = time.perf_counter() - started
            self.calls, self.seconds = self.calls + 1, self.seconds + took
            self.items += sum(len(row) for row in out) if self.method == "generate" else len(out)
            if self.verbose:
                detail = (f"{len(args[0])} prompts x {args[1] if len(args) > 1 else kwargs.get('n', 1)}, stop="
                          f"{kwargs.get('stop')!r}" if self.method == "generate" else f"{len(out)} chains")
                print(f"    {self.method}: {detail}: {took:.1f} s", file=sys.stderr)
            return out
        return timed

    def summary(self) -> dict:
        return {"calls": self.calls, "seconds": round(self.seconds, 1), "items": self.items}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--prm", default="/tmp/search-demo/prm")
    parser.add_argument("--policy", default="smollm2-135m")
    parser.add_argument("--problems", type=int, default=8)
    parser.add_argument("--max-problem-steps", type=int, default=3,
                        help="keep problems whose gold solution has at most this many steps (SmolLM2-135M solves "
                             "almost none of the longer ones)")
    parser.add_argument("--budgets", type=parse_budgets, default=(1, 2, 4, 8))
    parser.add_argument("--beam-width", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=256)
    parser.add_argument("--max-rounds", type=int, default=4)
    parser.add_argument("--aggregate", default="last")
    parser.add_argument("--problems-per-batch", type=int, default=8)
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    parser.add_argument("--verbose", action="store_true", help="print every generate and score_many call")
    parser.add_argument("--work", default=None, help="folder for the problems and rows (default: a temp folder)")
    parser.add_argument("--out", default="bench/results/search_budget.json")
    args = parser.parse_args()

    import torch

    from prmkit.scoring.scorer import PRMScorer

    if args.threads:
        torch.set_num_threads(args.threads)
    work = Path(args.work or tempfile.mkdtemp(prefix="search-budget-"))
    work.mkdir(parents=True, exist_ok=True)
    problems = work / "problems.jsonl"
    pool = [r for r in generate_records(50 * args.problems, seed=HELD_OUT_SEED)
            if len(r["completions"]) <= args.max_problem_steps]
    write_jsonl([{"prompt": r["prompt"], "gold_answer": r["gold_answer"]} for r in pool[:args.problems]], problems)
    options = SearchOptions(budgets=args.budgets, beam_width=args.beam_width, max_new_tokens=args.max_new_tokens,
                            max_rounds=args.max_rounds, aggregate=args.aggregate,
                            problems_per_batch=args.problems_per_batch)

    started = time.perf_counter()
    scorer = PRMScorer.from_pretrained(args.prm, device="cpu")
    generator = load_generator(args.policy, GenerationOptions(device="cpu", max_new_tokens=args.max_new_tokens))
    loaded = time.perf_counter() - started
    generation = Timed(generator, "generate", args.verbose)
    scoring = Timed(scorer, "score_many", args.verbose)
    summary = run_search(scorer, generator, problems, work / "rows.jsonl", options, prm=str(Path(args.prm).resolve()),
                         progress=lambda done, total: print(f"  {done}/{total} problems", file=sys.stderr))
    report = summary.report
    table = markdown_table(report)
    print(table)
    result = {
        "command": "python " + " ".join(sys.argv),
        "policy": args.policy, "prm": args.prm, "problems_seed": HELD_OUT_SEED,
        "max_problem_steps": args.max_problem_steps,
        "options": options.identity(),
        "wall_s": round(time.perf_counter() - started, 1), "load_s": round(loaded, 1),
        "search_s": summary.seconds, "tokens_generated": summary.tokens,
        "generate": generation.summary(), "score_many": scoring.summary(),
        "machine": f"{platform.machine()}, {torch.get_num_threads()} torch threads, torch {torch.__version__}",
        "report": report, "table_markdown": table, "rows": str(work / "rows.jsonl"),
    }
    write_json_atomic(args.out, result)
    print(f"{summary.searched} problems in {summary.seconds:.0f} s ({summary.tokens} tokens generated) -> {args.out}")


if __name__ == "__main__":
    main()
