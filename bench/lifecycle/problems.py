"""Problems for the lifecycle benchmark: prmkit's synthetic arithmetic problems whose gold chain keeps every
number at or below MAX_VALUE.

The generator's own ranges reach four digits, where a 135M policy's arithmetic fails (a LoRA probe on those solved
8% greedily). Keeping the problems whose numbers all stay at two digits leaves every template that can produce
them (3 to 5 steps), so the policy has arithmetic it can learn and chains long enough to go wrong in the middle.
Filtering the existing generator, rather than a second one, keeps the wording and step layout of the data prmkit
already tests on.
"""

from __future__ import annotations

import re
import sys
from fractions import Fraction
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

from lifecycle.exact import equations  # noqa: E402
from prmkit.data.synthetic import generate_records  # noqa: E402

MAX_VALUE = 100
ANSWER_SENTENCE = "The answer is \\boxed{{{}}}."
# Disjoint seeds: the policy's SFT chains, the problems labelled for PRM training, the held-out problems, the
# validation problems a PRM recipe is chosen on (so the held-out ones never steer a choice), the extra problems
# bench/loop_recipes.py samples to ask whether more labelled chains would help, and the training problems
# bench/lifecycle/onpolicy.py samples at scale, and bench/rl_control.py's GRPO problems and the validation problems
# its settings are chosen on.
SEEDS = {"sft": 101, "label": 202, "held_out": 303, "validation": 505, "scale": 606, "onpolicy": 707,
         "rl_validation": 909, "rl": 808}


def small_number_problems(n: int, seed: int, max_value: int = MAX_VALUE) -> list[dict]:
    """n correct synthetic records (prompt, completions = the gold chain, gold_answer) with every number <= max_value,
    the same for the same seed."""
    kept: list[dict] = []
    batch = 0
    while len(kept) < n:
        for record in generate_records(4 * n, seed=seed * 1_000 + batch, correct_fraction=1.0):
            numbers = [int(x) for step in record["completions"] for x in re.findall(r"\d+", step)]
            if max(numbers) <= max_value:
                kept.append({"prompt": record["prompt"], "completions": record["completions"],
                             "gold_answer": record["gold_answer"]})
        batch += 1
    return kept[:n]


def gold_values(gold_steps: list[str]) -> list[int | Fraction]:
    """The result of each gold step ("... 9 * 4 = 36 ..." -> 36), read as the exact judge reads a step."""
    values = []
    for step in gold_steps:
        found = equations(step)
        assert found, f"a synthetic gold step has no equation: {step!r}"
        result = found[-1].result
        values.append(int(result) if result.denominator == 1 else result)
    return values


def solution_text(gold_steps: list[str], gold_answer: str, delimiter: str = "\n\n") -> str:
    """The policy's target: the gold steps at the delimiter, the last one closing with the boxed answer."""
    return delimiter.join([*gold_steps[:-1], f"{gold_steps[-1]} {ANSWER_SENTENCE.format(gold_answer)}"])


def problem_rows(records: list[dict]) -> list[dict]:
    """What `prmkit label` and `prmkit search` read: the problem, its gold answer, and the gold chain for the judge."""
    return [{"id": i, "prompt": r["prompt"], "gold_answer": r["gold_answer"], "gold_steps": r["completions"]}
            for i, r in enumerate(records)]


def redrawn_split(name: str, size: int, seed: int, splits: dict[str, list[dict]]) -> dict[str, list[dict]]:
    """`splits` with split `name` drawn again from `seed`, leaving out every prompt the other splits hold; the others
    stay as they are (a held-out set drawn with a new seed changes no problem a choice was made on)."""
    taken = {r["prompt"] for other, records in splits.items() if other != name for r in records}
    unique = [r for r in small_number_problems(2 * size, seed) if r["prompt"] not in taken]
    assert len(unique) >= size, f"too few unique problems for {name} with seed {seed}"
    return {**splits, name: unique[:size]}


def disjoint_splits(sizes: dict[str, int]) -> dict[str, list[dict]]:
    """One list of problems per split in SEEDS; a prompt that an earlier split holds is dropped from later ones."""
    seen: set[str] = set()
    out: dict[str, list[dict]] = {}
    for name in SEEDS:
        if name not in sizes:
            continue
        pool = small_number_problems(2 * sizes[name], SEEDS[name])
        unique = [r for r in pool if r["prompt"] not in seen]
        assert len(unique) >= sizes[name], f"too few unique problems for {name}"
        out[name] = unique[:sizes[name]]
        seen |= {r["prompt"] for r in out[name]}
    return out
