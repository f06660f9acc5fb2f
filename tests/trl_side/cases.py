"""The rows both tokenizations read in test_trl_side.py: TRL's stepwise layout (prompt, completions, labels) with the
settings TRL's PRMTrainer takes, and the differences from TRL each case is expected to show, by name.

Every case shows PROMPT_SEPARATOR (prmkit ends the prompt with the separator, TRL runs the first step straight on);
the names in `differences` are the others, and the test asserts exactly those."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

# The named differences (test_trl_side.py asserts each one where a case lists it, and the rest equal)
PROMPT_SEPARATOR = "prompt-separator"  # prmkit: [bos] prompt SEP step SEP ...; TRL: [bos] prompt step SEP ...
CUT_STEP_SHOWN = "cut-step-shown"  # TRL keeps the first tokens of a step that max_length cuts, unlabelled
SEPARATOR_SHIFT = "separator-shift"  # a step that fits TRL's layout does not fit prmkit's, longer by the separator
PROMPT_CUT = "prompt-cut"  # TRL keeps the prompt's start and no step; prmkit drops the prompt's start for a step
COMPLETION_BUDGET = "completion-budget"  # TRL's max_completion_length; prmkit has one budget, max_length
SOFT_LABEL = "soft-label"  # TRL turns a label into int(label): 0.7 trains as 0; prmkit keeps 0.7
UNLABELLED_STEP = "unlabelled-step"  # TRL fails on a None label; prmkit shows the step without a label
EVAL_LAST_STEP = "eval-last-step"  # train_on_last_step_only: TRL's eval rows label every step; prmkit's the last
EMPTY_SPAN = "empty-span"  # an empty step and an empty separator: TRL's labels lose step with the tokens
EMPTY_STEP = "empty-step"  # a step of no text or only spaces: prmkit's record check refuses it, TRL trains on it

SAMPLES = Path(__file__).resolve().parents[3] / "shared" / "data" / "prm_format_samples"
STEPS = ["Tom has 3 apples and buys 12 more.", "So he has 3 + 12 = 15 apples.", "The answer is 15."]


@dataclass
class Case:
    name: str
    row: dict
    separator: str = "\n"
    max_length: int | None = None  # TRL's; prmkit reads the same number (a large one where TRL has none)
    max_completion_length: int | None = None
    last_step_only: bool = False
    is_eval: bool = False
    tokenizer: str = "bos"  # "bos" or "nobos": the tiny tokenizer with and without a BOS token
    fit_steps: int | None = None  # max_length set to end exactly at this many steps of TRL's layout
    differences: tuple[str, ...] = field(default_factory=tuple)

    def trl_payload(self, folders: dict[str, str], *, whole: bool = False) -> dict:
        """The arguments of TRL's tokenize_row; `whole`: untruncated, every step labelled (the layout before any
        setting acts), with a None label read as True so that TRL can tokenize it."""
        row = self.row
        if whole:
            row = dict(row, labels=[True if label is None else label for label in row["labels"]])
        return {"tokenizer": folders[self.tokenizer], "row": row, "step_separator": self.separator,
                "max_length": None if whole else self.max_length,
                "max_completion_length": None if whole else self.max_completion_length,
                "train_on_last_step_only": False if whole else self.last_step_only,
                "is_eval": True if whole else self.is_eval}


def row(prompt: str, completions: list[str], labels: list) -> dict:
    return {"prompt": prompt, "completions": completions, "labels": labels}


def cases() -> list[Case]:
    long_chain = [f"Step {k}: {k} + {k} = {2 * k}." for k in range(1, 41)]
    return [
        Case("plain", row("What is 3 + 12?", STEPS, [True, True, False])),
        Case("plain, no BOS", row("What is 3 + 12?", STEPS, [True, False, False]), tokenizer="nobos"),
        Case("blank-line separator", row("What is 3 + 12?", STEPS, [True, True, True]), separator="\n\n"),
        Case("two-token separator", row("What is 3 + 12?", STEPS, [False, True, True]), separator=" ки\n"),
        Case("unicode", row("Combien font 3 × 4 ? 🍎 ки «réponse»", ["3 × 4 = 12 ½·2", "答案是 12。", "✓ 12"],
                            [True, False, True])),
        Case("unicode, no BOS", row("Σ 1..4 = ?", ["1+2+3+4 = 10 ∎", "Ответ: 10"], [True, True]),
             tokenizer="nobos"),
        Case("empty and blank steps", row("What is 3 + 12?", ["", " ", "\t", "15"], [True, False, True, True]),
             differences=(EMPTY_STEP,)),
        Case("one step", row("2 + 2?", ["4"], [True])),
        Case("long chain cut by max_length", row("Add each number to itself.", long_chain, [True] * 40),
             max_length=128, differences=(CUT_STEP_SHOWN,)),
        Case("cut where only the separator does not fit", row("Add.", long_chain[:6], [True] * 6), fit_steps=4,
             differences=(SEPARATOR_SHIFT,)),
        Case("prompt longer than max_length", row("Add each number to itself. " * 12, STEPS, [True, True, False]),
             max_length=48, differences=(PROMPT_CUT,)),
        Case("long chain cut by max_completion_length", row("Add each number to itself.", long_chain, [True] * 40),
             max_completion_length=100, differences=(COMPLETION_BUDGET,)),
        Case("long chain, both limits, no BOS", row("Add each number to itself.", long_chain, [False] * 40),
             max_length=150, max_completion_length=120, tokenizer="nobos",
             differences=(CUT_STEP_SHOWN, COMPLETION_BUDGET)),
        Case("soft labels", row("What is 3 + 12?", STEPS, [0.7, 1.0, 0.2]), differences=(SOFT_LABEL,)),
        Case("unlabelled step", row("What is 3 + 12?", STEPS, [True, None, False]),
             differences=(UNLABELLED_STEP,)),
        Case("last step only, training", row("What is 3 + 12?", STEPS, [True, True, False]), last_step_only=True),
        Case("last step only, evaluation", row("What is 3 + 12?", STEPS, [True, True, False]), last_step_only=True,
             is_eval=True, differences=(EVAL_LAST_STEP,)),
        Case("empty step, empty separator", row("What is 3 + 12?", ["15", "", "So 15."], [True, False, True]),
             separator="", differences=(EMPTY_SPAN, EMPTY_STEP)),
    ]


def real_cases() -> list[Case]:
    """Real rows, where ../shared/data is here: the Math-Shepherd and PRM800K samples through TRL's recipes
    (`prmkit data recipe`), as TRL's users' datasets hold them."""
    from prmkit.data.recipes import build
    from prmkit.data.rows import read_rows

    found = []
    for recipe, name in (("math-shepherd", "samples_math-shepherd.jsonl"), ("prm800k", "samples_prm800k.jsonl")):
        if (SAMPLES / name).is_file():
            rows, _ = build(recipe, read_rows(SAMPLES / name), name)
            found += [Case(f"{recipe} sample {number}", rows[number]) for number in range(0, len(rows), 4)
                      if rows[number]["completions"]]
    return found
