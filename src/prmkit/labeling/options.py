"""Every default of `prmkit label`, written once. A field name is also the keyword argument and, with dashes, the
command-line flag (`problems_per_batch` = `--problems-per-batch`). Sampling settings that belong to the policy's
backend (device, batch size, system prompt, temperature, seed, max_new_tokens) are
`prmkit.generation.GenerationOptions`; the labels depend on them too, so they are written into every record."""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

from prmkit.data.problems import batch_option_problems
from prmkit.errors import PRMError

# mc: Math-Shepherd's Monte-Carlo estimate, k rollouts from every step; omega: OmegaPRM-style binary search for
# the first step after which no rollout reaches the gold answer.
METHODS = ("mc", "omega")
LABEL_KINDS = ("soft", "hard")
AFTER_ERROR = ("negative", "null")


@dataclass(frozen=True)
class LabelOptions:
    method: str = "mc"  # one of METHODS
    k: int = 8  # rollouts per measured step
    label: str | None = None  # what goes in `labels`: soft (fraction of rollouts right) or hard (any right);
    # None: the method's own, soft for mc, hard for omega (omega measures too few steps for soft labels)
    after_error: str | None = None  # omega: steps after the first failing one, negative or null (not trained
    # on); None: negative. mc labels every step on its own and takes no after_error.
    solutions: int | None = None  # sample N solutions per problem; None: label the rows' own solutions
    delimiter: str = "\n\n"  # cuts a solution string into steps; joins a prefix for the rollouts
    problem_field: str | None = None  # the problem's field; None: the first of data.problems.PROBLEM_FIELDS
    gold_field: str | None = None  # the gold answer's field; None: the first of data.problems.GOLD_FIELDS
    problems_per_batch: int = 4  # problems labelled together: their rollouts share each generate call
    checker_workers: int = 2  # processes checking non-numeric answers with math-verify
    check_timeout: float = 5.0  # seconds per answer check; a check that runs longer counts as wrong
    limit: int | None = None  # label only the first N problems
    overwrite: bool = False  # start OUTPUT afresh instead of continuing it

    def __post_init__(self):
        problems = []
        if self.method not in METHODS:
            problems.append(f"method={self.method!r} is not known; use one of {', '.join(METHODS)}")
        if self.k < 1:
            problems.append(f"k={self.k}; use 1 or more rollouts per step")
        if self.label is not None and self.label not in LABEL_KINDS:
            problems.append(f"label={self.label!r} is not known; use soft or hard")
        if self.method == "omega" and self.label == "soft":
            problems.append("label=soft needs method=mc: omega measures only the steps its search visits (their "
                            "values are kept in each record's `values`); use --label hard or --method mc")
        if self.after_error is not None and self.after_error not in AFTER_ERROR:
            problems.append(f"after_error={self.after_error!r} is not known; use negative or null")
        if self.method == "mc" and self.after_error is not None:
            problems.append("after_error is omega's: mc labels every step from its own rollouts; drop "
                            "--after-error or use --method omega")
        if self.solutions is not None and self.solutions < 1:
            problems.append(f"solutions={self.solutions}; use 1 or more, or leave it unset to label the rows' "
                            "own solutions")
        if not self.delimiter:
            problems.append("delimiter is empty; give the string that separates steps, e.g. '\\n\\n'")
        problems += batch_option_problems(self, "problems")
        if problems:
            raise PRMError("; ".join(problems))

    def replace(self, **changes) -> "LabelOptions":
        return replace(self, **changes)

    @property
    def label_kind(self) -> str:
        return self.label or ("soft" if self.method == "mc" else "hard")

    @property
    def after_error_kind(self) -> str | None:
        return None if self.method == "mc" else self.after_error or "negative"

    def identity(self) -> dict:
        """The options that decide a record, as written into its provenance (with the generator's): a run
        continues an output file only with the same ones. Fields, limit, workers and overwrite say what is read,
        how fast and where, not what a record holds."""
        values = asdict(self)
        for key in ("problem_field", "gold_field", "checker_workers", "check_timeout", "limit", "overwrite"):
            values.pop(key)
        values.pop("label")
        values["labels"], values["after_error"] = self.label_kind, self.after_error_kind
        return values

