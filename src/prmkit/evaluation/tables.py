"""`prmkit eval`'s results as rich tables: step metrics, ProcessBench and best-of-N, one row (or column) per split,
one PRMBench table per split that has PRMBench rows, the within-problem AUROC per split, and per split with
repeated prompts the choosers at each N with their intervals; the policy's confidence is a chooser beside the PRM
where the rows carry it."""

from __future__ import annotations

from rich.table import Table

from prmkit.display import format_value
from prmkit.evaluation.evaluate import EvalResult
from prmkit.evaluation.prmbench import CLASSES
from prmkit.evaluation.within_problem import ORACLE, RANDOM
from prmkit.scoring.aggregate import AGGREGATIONS


def render_tables(result: EvalResult) -> list[Table]:
    """The metrics as rich tables: step metrics, ProcessBench, PRMBench and best-of-N."""
    splits = result.splits
    tables = []
    step = Table(title="step metrics (threshold " + f"{result.threshold.value:.4g}, "
                 f"{result.threshold.source})", title_justify="left")
    columns = [("steps", "n_steps"), ("AUROC", "auroc"), ("acc", "accuracy"), ("error P", "error_precision"),
               ("error R", "error_recall"), ("error F1", "error_f1"), ("MSE", "mse"), ("ECE", "ece")]
    for title, _ in [("split", None), *columns, ("unscored", None)]:
        step.add_column(title, justify="left" if title == "split" else "right")
    for name, m in splits.items():
        if m.get("step"):
            step.add_row(name, *(format_value(m["step"].get(key)) for _, key in columns), unscored(m))
    if step.row_count:
        tables.append(step)

    pb_rows = {name: m["processbench"] for name, m in splits.items() if m.get("processbench")}
    if pb_rows:
        pb = Table(title="ProcessBench (first error = first step below the threshold)", title_justify="left")
        for title in ("split", "erroneous", "correct", "error acc", "correct acc", "F1", "oracle F1 (thr)",
                      "F1 seen (chains)", "unscored"):
            pb.add_column(title, justify="left" if title == "split" else "right")
        for name, r in pb_rows.items():
            seen = r["scored"]
            pb.add_row(name, str(r["n_error"]), str(r["n_correct"]), format_value(r["error_accuracy"]),
                       format_value(r["correct_accuracy"]), format_value(r["f1"]),
                       f"{format_value(r['oracle_f1'])} ({r['oracle_threshold']:.3g})",
                       f"{format_value(seen['f1'])} ({seen['n_error'] + seen['n_correct']})", unscored(splits[name]))
        pb.add_row("average", "", "", "", "", format_value(result.processbench_average_f1), "", "", "",
                   style="bold")
        pb.caption = ("F1 seen: over the chains whose labelled first error (for a correct chain, every step) "
                      "was scored")
        pb.caption_justify = "left"
        tables.append(pb)

    tables += [prmbench_table(name, m["prmbench"], unscored(m)) for name, m in splits.items() if m.get("prmbench")]

    bon_rows = {name: m["best_of_n"] for name, m in splits.items() if m.get("best_of_n")}
    if bon_rows:
        # methods as rows, splits as columns: a narrow terminal still shows every number
        bon = Table(title="best-of-N accuracy (ties broken at random)", title_justify="left")
        bon.add_column("choice")
        for name in bon_rows:
            bon.add_column(name, justify="right")
        bon.add_row("problems (mean N)",
                    *(f"{r['n_problems']} ({r['mean_candidates']:.1f})" for r in bon_rows.values()))
        bon.add_row("random", *(format_value(r["random"]) for r in bon_rows.values()))
        bon.add_row("majority vote", *(format_value(r["majority_vote"]) for r in bon_rows.values()))
        for how in AGGREGATIONS:
            bon.add_row(f"PRM {how}", *(format_value(r["prm"][how]) for r in bon_rows.values()))
        if any("policy_confidence" in r for r in bon_rows.values()):
            bon.add_row("policy confidence", *(format_value(r.get("policy_confidence")) for r in bon_rows.values()))
        bon.add_row("oracle (any correct)", *(format_value(r["oracle"]) for r in bon_rows.values()))
        bon.add_row("steps unscored", *(unscored(splits[name]) for name in bon_rows), style="italic")
        tables.append(bon)
    within = {name: m["within_problem"] for name, m in splits.items() if "by_n" in (m.get("within_problem") or {})}
    if within:
        tables.append(within_auroc_table(within))
    tables += [by_n_table(name, w) for name, w in within.items()]
    return tables


def within_auroc_table(within: dict[str, dict]) -> Table:
    """Per split, how often a right sample outscores a wrong sample of the same problem, for each chain score."""
    table = Table(title="within-problem AUROC: a right sample scored above a wrong one of the same problem "
                  "(mean over problems; pooled over pairs in brackets)", title_justify="left")
    aggregations = list(next(iter(within.values()))["auroc"])
    confident = any("confidence_auroc" in w for w in within.values())
    labelled = any("step_label_ceiling" in w for w in within.values())
    for title in ("split", "problems", "both outcomes", "pairs", "one-sided", *aggregations,
                  *(["policy confidence"] if confident else []), *(["step labels (ceiling)"] if labelled else [])):
        table.add_column(title, justify="left" if title == "split" else "right")
    for name, w in within.items():
        counts = w["auroc"][w["by_n"]["aggregation"]]
        confidence = [auroc_cell(w["confidence_auroc"]) if "confidence_auroc" in w else "-"] if confident else []
        ceiling = [auroc_cell(w["step_label_ceiling"]) if "step_label_ceiling" in w else "-"] if labelled else []
        table.add_row(name, str(w["problems"]), str(counts["problems"]), str(counts["pairs"]),
                      str(counts["one_sided"]), *(auroc_cell(w["auroc"][how]) for how in aggregations), *confidence,
                      *ceiling)
    notes = []
    if confident:
        notes.append("policy confidence: the policy's mean log-prob per token as the score, on the pairs of the "
                     "by-N chain score; a PRM that does not beat it adds nothing the policy did not know")
    if labelled:
        notes.append("step labels (ceiling): each sample scored 1 when its labels call every step right, a PRM "
                     "that never misjudges a step; below 1 where right answers were reached through wrong steps "
                     "(metrics.json: right_with_a_wrong_step), and no PRM judged by answers is expected above it")
    if notes:
        table.caption = "\n".join(notes)
        table.caption_justify = "left"
    return table


def auroc_cell(auroc: dict) -> str:
    return f"{format_value(auroc['auroc'])} ({format_value(auroc['auroc_pooled'])})"


def by_n_table(split: str, within: dict) -> Table:
    """One split's choosers at each N (a column per N): accuracy [95% interval], then each PRM chooser minus
    majority vote [paired 95% interval]; the within-problem AUROC of the same chain score in the caption."""
    result = within["by_n"]
    how = result["aggregation"]
    sizes = {result["smallest_group"], result["largest_group"]}
    samples = "-".join(map(str, sorted(sizes)))
    table = Table(title=f"{split}: choosing among each problem's first N samples (PRM chain score {how}; "
                  f"{result['problems']} problems of {samples} samples)", title_justify="left")
    table.add_column("method")
    for n in result["n"]:
        table.add_column(f"N={n}", justify="right")
    methods = result["methods"]
    order = [RANDOM, *(m for m in methods if m not in (RANDOM, ORACLE)), ORACLE]
    for name in order:
        table.add_row(name, *(interval(methods[name][str(n)]["accuracy"], methods[name][str(n)])
                              for n in result["n"]), end_section=name == ORACLE)
    for name, cells in {**result["versus_majority"], **result.get("versus_confidence", {})}.items():
        table.add_row(name, *(interval(cells[str(n)]["difference"], cells[str(n)], signed=True)
                              for n in result["n"]), style="italic")
    auroc = within["auroc"][how]
    confidence = within.get("confidence_auroc")
    policy = (f"; policy confidence (mean log-prob per token): {format_value(confidence['auroc'])} per problem, "
              f"{format_value(confidence['auroc_pooled'])} pooled" if confidence else "")
    caption = (f"within-problem AUROC ({how}): {format_value(auroc['auroc'])} per problem, "
               f"{format_value(auroc['auroc_pooled'])} pooled; {auroc['problems']} problems with both outcomes, "
               f"{auroc['pairs']} pairs, {auroc['one_sided']} one-sided{policy}. Brackets: 95% bootstrap over "
               f"problems ({result['bootstrap']['iterations']} resamples); differences paired by problem. "
               f"Correctness: {within['correct_from']}")
    table.caption = caption + (f". {result['note']}" if result.get("note") else "")
    table.caption_justify = "left"
    return table


def interval(value: float, bounds: dict, *, signed: bool = False) -> str:
    """"0.625 [0.58, 0.67]"; signed: "+0.031 [-0.01, 0.07]"."""
    return f"{value:{'+' if signed else ''}.3f} [{bounds['low']:.2f}, {bounds['high']:.2f}]"


def unscored(metrics: dict) -> str:
    """A split's steps that max_length left unscored, as a share and a count: "51% (149/294)"."""
    share, count = metrics.get("unscored_share"), metrics.get("steps_unscored", 0)
    if not count:
        return "0"
    return f"{share:.0%} ({count}/{metrics['steps']})" if share >= 0.01 else f"<1% ({count}/{metrics['steps']})"


def prmbench_table(split: str, result: dict, unscored_steps: str = "0") -> Table:
    """Overall, each error class (with the leaderboard's column name) and each dimension's mean PRMScore."""
    table = Table(title=f"PRMBench {split}: PRMScore = (F1 correct + F1 wrong) / 2, a step passes if its score "
                  f"> {result['threshold']:.4g}; steps unscored: {unscored_steps}", title_justify="left")
    for title in ("class", "chains", "correct steps", "wrong steps", "F1 correct", "F1 wrong", "PRMScore"):
        table.add_column(title, justify="left" if title == "class" else "right")

    def add(label: str, m: dict, style: str | None = None) -> None:
        table.add_row(label, str(m["chains"]), str(m["correct_steps"]), str(m["wrong_steps"]),
                      format_value(m["f1_correct"]), format_value(m["f1_wrong"]), format_value(m["prmscore"]),
                      style=style)

    add("overall", result["overall"], style="bold")
    for name, m in result["classes"].items():
        add(f"{name} ({CLASSES[name]})" if name in CLASSES else name, m)
    for dimension, value in result["dimensions"].items():
        if value is not None:
            table.add_row(f"{dimension} (mean)", "", "", "", "", "", format_value(value), style="italic")
    return table
