"""Every default of `prmkit search`, written once. A field name is also the keyword argument and, with dashes, the
command-line flag (`beam_width` = `--beam-width`). The starting points are search-and-learn's: n=4, beam width 4,
temperature 0.8, steps cut at a blank line, a chain scored by its last step. Sampling settings that belong to the
policy's backend (device, batch size, system prompt, vLLM settings) are `prmkit.generation.GenerationOptions`."""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

from prmkit.errors import PRMError
from prmkit.evaluation.selection import RULES, SETTINGS
from prmkit.generation.options import GenerationOptions
from prmkit.scoring.aggregate import AGGREGATION_NAMES

GENERATION = GenerationOptions()
# vLLM claims this share of the GPU's memory when it starts (the policy's weights, then as much KV cache as fits) and
# never gives it back; the PRM shares that GPU and needs the rest for its weights and scoring batches. vLLM's own
# default, 0.9, leaves the PRM a tenth of the GPU; search-and-learn gives vLLM half for the same pairing.
POLICY_GPU_MEMORY_UTILIZATION = 0.5
# greedy: one sample at temperature 0; the selection rules (prmkit.evaluation.selection) choose among n samples:
# majority, best-of-n, weighted-best-of-n, softmax-weighted, filtered-majority, majority-of-bests; beam / dvts:
# PRM-guided step search.
SAMPLING = tuple(RULES)  # the methods that choose among whole samples
TREE_METHODS = ("beam", "dvts")
METHODS = ("greedy", *SAMPLING, *TREE_METHODS)
SELECTION_FIELDS = (*(name for settings in SETTINGS.values() for name in settings), "confidence_weight")


@dataclass(frozen=True)
class SearchOptions:
    method: str = "best-of-n"  # one of METHODS (ignored with budgets, which run budget_methods)
    n: int = 4  # samples (greedy: always 1), or beams for beam and dvts
    beam_width: int = 4  # beam: children per kept beam (n / beam_width beams kept); dvts: n / beam_width subtrees
    temperature: float = GENERATION.temperature  # greedy always samples at 0
    max_new_tokens: int = GENERATION.max_new_tokens  # per generation: a whole solution, or one step in beam/dvts
    delimiter: str = "\n\n"  # where a solution is cut into steps, and the stop string of one beam step
    aggregate: str = "last"  # a chain's score from its step scores (prmkit.scoring.aggregate)
    max_rounds: int = 40  # beam/dvts: step rounds; the last one generates to the end of the solution
    seed: int = GENERATION.seed  # with the same seed, options and batches, a run gives the same samples
    problems_per_batch: int = 8  # problems searched together: one generate and one score_many call per round
    budgets: tuple[int, ...] | None = None  # e.g. (1, 2, 4, 8): accuracy of every method at each N
    budget_methods: tuple[str, ...] = METHODS  # what a budgets run compares
    # The selection rules' settings (prmkit.evaluation.selection.SETTINGS; `prmkit search-tune` chooses them on a
    # validation split). Majority-of-bests draws its resamples from `seed` and the problem's text.
    vote_temperature: float = SETTINGS["softmax-weighted"]["vote_temperature"].default
    keep_fraction: float = SETTINGS["filtered-majority"]["keep_fraction"].default
    mob_fraction: float = SETTINGS["majority-of-bests"]["mob_fraction"].default
    mob_resamples: int = SETTINGS["majority-of-bests"]["mob_resamples"].default
    # Every sampling rule: each score x (the policy's per-token probability of that sample) ** weight before the
    # rule reads it (prmkit.evaluation.selection.blend_confidence); 0 is the PRM alone, inf the policy alone.
    confidence_weight: float = 0.0
    problem_field: str | None = None  # the problem's field in DATA; None: the first of data.problems.PROBLEM_FIELDS
    gold_field: str | None = None  # the gold answer's field; None: the first of data.problems.GOLD_FIELDS
    limit: int | None = None  # search only the first N problems
    overwrite: bool = False  # start OUT afresh instead of continuing it

    def __post_init__(self):
        problems = []
        if self.method not in METHODS:
            problems.append(f"method={self.method!r} is not known; use one of {', '.join(METHODS)}")
        if self.n < 1:
            problems.append(f"n={self.n}; use 1 or more samples")
        if self.beam_width < 1:
            problems.append(f"beam_width={self.beam_width}; use 1 or more")
        elif self.method in TREE_METHODS and not self.budgets and self.n % self.beam_width:
            problems.append(f"n={self.n} is not a multiple of beam_width={self.beam_width}; {self.method} keeps "
                            f"n / beam_width beams: use e.g. --n {self.beam_width * max(1, self.n // self.beam_width)}")
        if self.temperature < 0:
            problems.append(f"temperature={self.temperature}; use 0 (greedy) or more")
        if self.max_new_tokens < 1:
            problems.append(f"max_new_tokens={self.max_new_tokens}; use a positive number of tokens")
        if not self.delimiter:
            problems.append("delimiter is empty; give the string that separates steps, e.g. '\\n\\n'")
        if self.aggregate not in AGGREGATION_NAMES:
            problems.append(f"aggregate={self.aggregate!r} is not known; use one of {', '.join(AGGREGATION_NAMES)}")
        if self.max_rounds < 1:
            problems.append(f"max_rounds={self.max_rounds}; use 1 or more")
        if self.problems_per_batch < 1:
            problems.append(f"problems_per_batch={self.problems_per_batch}; use 1 or more")
        if self.budgets is not None:
            if not self.budgets or any(not isinstance(b, int) or b < 1 for b in self.budgets):
                problems.append(f"budgets={self.budgets}; give positive sample counts, e.g. 1,2,4,8")
            unknown = [m for m in self.budget_methods if m not in METHODS]
            if unknown or not self.budget_methods:
                problems.append(f"budget_methods={','.join(self.budget_methods)}; use some of {', '.join(METHODS)}")
            tree = [m for m in self.budget_methods if m in TREE_METHODS]
            if tree and self.beam_width >= 1 and not any(b % self.beam_width == 0 for b in self.budgets):
                problems.append(f"no budget in {','.join(map(str, self.budgets))} is a multiple of beam_width="
                                f"{self.beam_width}, so {' and '.join(tree)} would not run; add one (e.g. "
                                f"{self.beam_width}), lower --beam-width, or leave them out with --budget-methods")
        if self.limit is not None and self.limit < 1:
            problems.append(f"limit={self.limit}; use a positive number of problems")
        if not self.vote_temperature >= 0:
            problems.append(f"vote_temperature={self.vote_temperature}; use 0 (best-of-n), a positive number or inf "
                            "(majority)")
        for name in ("keep_fraction", "mob_fraction"):
            if not 0 < getattr(self, name) <= 1:
                problems.append(f"{name}={getattr(self, name)}; use a share of the samples in (0, 1], e.g. 0.5")
        if not self.confidence_weight >= 0:
            problems.append(f"confidence_weight={self.confidence_weight}; use 0 (the PRM alone), a positive number "
                            "or inf (the policy's confidence alone)")
        if self.mob_resamples < 1:
            problems.append(f"mob_resamples={self.mob_resamples}; use 1 or more bootstrap resamples, e.g. 200")
        if problems:
            raise PRMError("; ".join(problems))
        if self.budgets is not None:
            object.__setattr__(self, "budgets", tuple(sorted(set(self.budgets))))

    def replace(self, **changes) -> "SearchOptions":
        return replace(self, **changes)

    def identity(self) -> dict:
        """The options that decide a problem's result, as written into each output row: a run continues an
        output file only with the same ones (limit and overwrite say how much and where, not what)."""
        values = asdict(self)
        for key in ("limit", "overwrite"):
            values.pop(key)
        if self.budgets is None:
            values.pop("budget_methods")
        # A budgets row holds every sample, whatever the selection settings (the report applies them), and a method
        # row depends only on its own rule's settings.
        used = () if self.budgets else self.selection(self.method)
        for key in SELECTION_FIELDS:
            if key not in used:
                values.pop(key)
        return {k: list(v) if isinstance(v, tuple) else v for k, v in values.items()}

    def selection(self, rule: str) -> dict:
        """The settings of one selection rule, as `prmkit.search.select.choose_index` takes them: the rule's own,
        and the confidence weight where it is not 0 (a file written without it continues as before)."""
        settings = {name: getattr(self, name) for name in SETTINGS.get(rule, {})}
        if self.confidence_weight and rule in SAMPLING and rule != "majority":  # majority reads no score
            settings["confidence_weight"] = self.confidence_weight
        return settings

    def tree_budgets(self) -> tuple[int, ...]:
        """The budgets at which beam and dvts run: multiples of beam_width (n / beam_width beams must be whole)."""
        return tuple(b for b in self.budgets or () if b % self.beam_width == 0)


def parse_budgets(text: str) -> tuple[int, ...]:
    """`1,2,4,8` -> (1, 2, 4, 8), with a message naming the flag for anything else."""
    try:
        values = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        values = ()
    if not values:
        raise PRMError(f"--budgets {text!r}: give comma-separated sample counts, e.g. --budgets 1,2,4,8")
    return values


def parse_methods(text: str) -> tuple[str, ...]:
    """`best-of-n,beam` -> ("best-of-n", "beam"); unknown names are reported by SearchOptions."""
    return tuple(part.strip() for part in text.split(",") if part.strip())
