"""The dataset card (README.md) of a folder `prmkit data recipe` writes: YAML front matter whose `configs` tell
`datasets.load_dataset` (and the hub's viewer) which files are which split, then what the data is, how it was built
and how to push and train on it."""

from __future__ import annotations

from prmkit.data.formats_base import ConversionReport

TITLES = {"math-shepherd": "Math-Shepherd", "prm800k": "PRM800K"}
ORIGINS = {
    "math-shepherd": "[Math-Shepherd](https://huggingface.co/datasets/peiyi9979/Math-Shepherd) (Wang et al., 2023): "
                     "step labels estimated by Monte-Carlo rollouts, '+' where a rollout from the step reached the "
                     "right answer. Check the source dataset's card for its licence.",
    "prm800k": "[PRM800K](https://github.com/openai/prm800k) (Lightman et al., 2023, MIT licence): human ratings "
               "(+1, 0, -1) of the steps of model-written solutions to MATH problems, phase 1.",
}
LICENCES = {"prm800k": "mit"}


def dataset_card(recipe: str, splits: dict[str, list[dict]], reports: dict[str, ConversionReport],
                 configs: list[tuple[str, dict[str, str]]]) -> str:
    """README.md for a recipe's folder: `splits` are TRL's rows, `configs` (name, {split: file}) the layouts."""
    front = ["---", "tags:", "- trl", "- prmkit", "- process-reward-model"]
    if recipe in LICENCES:
        front.append(f"license: {LICENCES[recipe]}")
    front.append("configs:")
    for name, files in configs:
        front += [f"- config_name: {name}", "  data_files:"]
        for split, path in files.items():
            front += [f"  - split: {split}", f"    path: {path}"]
    front.append("---")
    title = TITLES[recipe]
    body = [
        f"# {title}, stepwise (TRL's recipe)", "",
        f"{ORIGINS[recipe]}", "",
        f"Built with `prmkit data recipe {recipe}`, which processes the raw data as TRL's "
        f"`examples/datasets/{recipe.replace('-', '_')}.py` did before TRL removed its PRM trainer, "
        "split as TRL split it, and writes them in two layouts:", "",
        "- `data/*.parquet` (the default config): TRL's stepwise-supervision layout, `prompt` (str), `completions` "
        "(list of str, one per step) and `labels` (list of bool, one per step).",
        "- `prmkit/*.parquet` (config `prmkit`): the same rows as prmkit records, labels 1.0/0.0, rows without a step "
        "left out.", "",
        "## Processing", "",
    ]
    choices = dict.fromkeys(choice for report in reports.values() for choice in report.choices)
    body += [f"- {choice}" for choice in choices]
    skipped = {reason: n for report in reports.values() for reason, n in report.skipped.items()}
    if skipped:
        body += ["", "Source rows left out, with the reason:", ""]
        body += [f"- {reason}: {n}" for reason, n in sorted(skipped.items())]
    body += ["", "## Splits", "", "| split | rows | steps | True | False |", "|---|---|---|---|---|"]
    for split, rows in splits.items():
        labels = [label for row in rows for label in row["labels"]]
        body.append(f"| {split} | {len(rows)} | {len(labels)} | {sum(labels)} | {len(labels) - sum(labels)} |")
    body += ["", "## Use", "", "```bash",
             "hf upload OWNER/NAME . --repo-type dataset        # from this folder: push it",
             "prmkit train data.train=OWNER/NAME:prmkit#train  # train a PRM on the prmkit config", "```", "",
             "```python", "from datasets import load_dataset",
             "train = load_dataset(\"OWNER/NAME\", split=\"train\")  # TRL's layout, as trl-lib's copies", "```", ""]
    return "\n".join(front + body)
