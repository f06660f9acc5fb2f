"""The budget report: accuracy and mean generated tokens of every method at every N, computed from the output
rows of a `--budgets` run (the sampling methods at N choose among the first N samples of each row), and shown as a
rich table (one row per method, one column per N) and a PNG of accuracy against N and against tokens."""

from __future__ import annotations

from pathlib import Path

from prmkit.display import format_value
from prmkit.search.options import SAMPLING, TREE_METHODS, SearchOptions
from prmkit.search.select import Solution, choose_index

ORACLE = "any sample right"  # pass@N: the best any chooser could do with these samples


def _solution(entry: dict) -> Solution:
    return Solution(text=entry["solution"], steps=entry["steps"], step_scores=entry["step_scores"],
                    score=entry["score"], finish_reason=entry["finish_reason"], tokens=entry["tokens"],
                    logprob=entry.get("logprob"))


def _cell(outcomes: list[tuple[bool | None, int]]) -> dict:
    """Accuracy over the problems with a gold answer, mean tokens over all problems."""
    graded = [right for right, _ in outcomes if right is not None]
    return {"accuracy": sum(graded) / len(graded) if graded else None, "correct": sum(graded),
            "graded": len(graded), "tokens": sum(t for _, t in outcomes) / len(outcomes) if outcomes else None}


def budget_report(rows: list[dict], options: SearchOptions) -> dict:
    """Accuracy and mean generated tokens per problem of every method at every N, from the output rows."""
    budgets = options.budgets
    methods: dict[str, dict[str, dict]] = {}
    with_samples = [r for r in rows if "samples" in r]
    if "greedy" in options.budget_methods:
        methods["greedy"] = {"1": _cell([(r["greedy"]["correct"], r["greedy"]["tokens"]) for r in rows])}
    for method in (m for m in SAMPLING if m in options.budget_methods):
        methods[method] = {}
        for n in budgets:
            outcomes = []
            for r in with_samples:
                first = r["samples"][:n]
                picked = choose_entry(method, first, options, r["prompt"])
                outcomes.append((picked["correct"], sum(s["tokens"] for s in first)))
            methods[method][str(n)] = _cell(outcomes)
    if with_samples:
        methods[ORACLE] = {}
        for n in budgets:
            outcomes = []
            for r in with_samples:
                first = r["samples"][:n]
                right = None if first[0]["correct"] is None else any(s["correct"] for s in first)
                outcomes.append((right, sum(s["tokens"] for s in first)))
            methods[ORACLE][str(n)] = _cell(outcomes)
    for method in (m for m in TREE_METHODS if m in options.budget_methods):
        methods[method] = {str(n): _cell([(r[method][str(n)]["correct"], r[method][str(n)]["tokens"])
                                          for r in rows]) for n in options.tree_budgets()}
    graded = sum(1 for r in rows if r.get("gold_answer") is not None)
    selection = {m: options.selection(m) for m in SAMPLING if m in options.budget_methods and options.selection(m)}
    return {"problems": len(rows), "graded": graded, "budgets": list(budgets), "beam_width": options.beam_width,
            "temperature": options.temperature, "aggregate": options.aggregate, "selection": selection,
            "methods": methods,
            "notes": ["the sampling methods at N use the first N of max(N) samples per problem (drawn once)",
                      "greedy is one sample at temperature 0, shown at N=1",
                      f"beam and dvts run once per N that is a multiple of beam_width={options.beam_width}",
                      "tokens: mean tokens generated per problem, every sample and beam counted"]}


def choose_entry(method: str, entries: list[dict], options: SearchOptions = SearchOptions(),
                 problem: str = "") -> dict:
    """The row entry a selection rule picks among sample entries (as written in the output), with the options'
    settings for that rule; `problem` (the row's prompt) seeds majority-of-bests."""
    solutions = [_solution(e) for e in entries]
    return entries[choose_index(method, solutions, seed=options.seed, problem=problem, **options.selection(method))]


def _tokens(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value / 1000:.1f}k" if value >= 1000 else f"{value:.0f}"


def columns(report: dict) -> list[int]:
    """The budgets, plus N=1 when greedy ran without it (greedy is one sample, so it sits at N=1)."""
    return sorted({*report["budgets"], *(int(n) for cells in report["methods"].values() for n in cells)})


def _rows(report: dict) -> list[tuple[str, list[str]]]:
    rows = []
    for method, cells in report["methods"].items():
        values = []
        for n in columns(report):
            cell = cells.get(str(n))
            values.append("-" if cell is None else f"{format_value(cell['accuracy'])} ({_tokens(cell['tokens'])})")
        settings = report.get("selection", {}).get(method, {})
        label = f"{method} ({', '.join(f'{k}={v}' for k, v in settings.items())})" if settings else method
        rows.append((label, values))
    return rows


def budget_table(report: dict):
    """accuracy (mean tokens per problem) for every method and N; '-' where a method has no result at that N."""
    from rich.table import Table

    graded = report["graded"]
    title = (f"accuracy at budgets ({report['problems']} problems, {graded} with a gold answer; cell: accuracy "
             f"(generated tokens per problem))")
    table = Table(title=title, title_justify="left")
    table.add_column("method")
    for n in columns(report):
        table.add_column(f"N={n}", justify="right")
    for method, values in _rows(report):
        table.add_row(method, *values)
    return table


def markdown_table(report: dict) -> str:
    """The same table as Markdown, for READMEs and benchmark notes."""
    head = "| method | " + " | ".join(f"N={n}" for n in columns(report)) + " |"
    lines = [head, "|---" * (len(columns(report)) + 1) + "|"]
    for method, values in _rows(report):
        lines.append(f"| {method} | " + " | ".join(values) + " |")
    return "\n".join(lines)


def plot_budgets(report: dict, path: str | Path) -> Path:
    """Accuracy against N (left) and against mean generated tokens per problem (right), one line per method."""
    import matplotlib

    matplotlib.use("Agg")  # no display here, and a file is all we want
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullFormatter

    figure, (by_n, by_tokens) = plt.subplots(1, 2, figsize=(11, 4.2))
    for method, cells in report["methods"].items():
        points = sorted((int(n), c["accuracy"], c["tokens"]) for n, c in cells.items() if c["accuracy"] is not None)
        if not points:
            continue
        style = dict(marker="o", linestyle=":" if method == "any sample right" else "-", label=method)
        if method == "greedy":  # one point, drawn over the N=1 points of the sampling methods
            style.update(marker="*", markersize=14, color="black", zorder=5)
        by_n.plot([p[0] for p in points], [p[1] for p in points], **style)
        by_tokens.plot([p[2] for p in points], [p[1] for p in points], **style)
    for axis, label in ((by_n, "N (samples or beams per problem)"), (by_tokens, "generated tokens per problem")):
        axis.set_xscale("log", base=2 if axis is by_n else 10)
        axis.set_xlabel(label)
        axis.set_ylabel("accuracy")
        axis.set_ylim(-0.02, 1.02)
        axis.grid(alpha=0.3)
    by_n.set_xticks(columns(report), [str(n) for n in columns(report)])
    by_tokens.xaxis.set_minor_formatter(NullFormatter())  # minor labels on a log axis run into each other
    by_n.legend(fontsize=8)
    figure.suptitle(f"{report['graded']} problems with a gold answer (temperature {report['temperature']}, "
                    f"aggregate {report['aggregate']}, beam width {report['beam_width']})", fontsize=10)
    figure.tight_layout()
    path = Path(path)
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path
