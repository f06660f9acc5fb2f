"""Step labels without human annotators, from rollouts of a policy model: `options` (every default), `problems`
(problems, gold answers and the solutions to label; the output file, appended and resumed), `methods` (mc and
omega as rollout plans) and `runner` (rollouts batched into generate calls, answers checked, records written)."""

from prmkit.labeling.options import LabelOptions
from prmkit.labeling.runner import Budget, LabelResult, label_file

__all__ = ["Budget", "LabelOptions", "LabelResult", "label_file"]
