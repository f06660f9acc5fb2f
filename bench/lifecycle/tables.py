"""The lifecycle benchmark's report as Markdown (for BENCHMARKS.md and the README) and its PNG."""

from __future__ import annotations

from pathlib import Path


def _cell(entry: dict | None) -> str:
    if not entry:
        return "-"
    if "low" in entry:
        return f"{entry['accuracy']:.3f} [{entry['low']:.3f}, {entry['high']:.3f}]"
    return f"{entry['accuracy']:.3f}"


def budget_table(report: dict) -> str:
    table = report["table"]
    budgets = sorted({int(n) for cells in table.values() for n in cells})
    lines = ["| method | " + " | ".join(f"N={n}" for n in budgets) + " |", "|---" * (len(budgets) + 1) + "|"]
    for method, cells in table.items():
        lines.append(f"| {method} | " + " | ".join(_cell(cells.get(str(n))) for n in budgets) + " |")
    tokens = report.get("sample_tokens_per_problem", {})
    lines.append("| sampled tokens per problem | " + " | ".join(
        f"{tokens[str(n)]:.0f}" if str(n) in tokens else (f"{tokens[n]:.0f}" if n in tokens else "-")
        for n in budgets) + " |")
    return "\n".join(lines)


def comparison_table(report: dict, key: str = "comparisons") -> str:
    lines = ["| comparison | difference | 95% interval |", "|---|---:|---|"]
    for name, c in report[key].items():
        lines.append(f"| {name} | {c['difference']:+.3f} | [{c['low']:+.3f}, {c['high']:+.3f}] |")
    return "\n".join(lines)


def agreement_table(agreement: dict, k: int) -> str:
    lines = ["| method | k | chains | steps | step agreement | first-error agreement | exact-right called wrong | "
             "exact-wrong called right | rollouts | rollouts per chain | tokens |", "|---" * 11 + "|"]
    for method, a in agreement.items():
        lines.append(f"| {method} | {k} | {a['chains']} | {a['steps']} | {a['step_agreement']:.3f} | "
                     f"{a['first_error_agreement']:.3f} | {a['exact_right_steps_called_wrong']:.3f} | "
                     f"{a['exact_wrong_steps_called_right']:.3f} | {a['rollouts']:,} | "
                     f"{a['rollouts_per_chain']:.1f} | {a['tokens']:,} |")
    return "\n".join(lines)


def auroc_table(rows: list[dict]) -> str:
    lines = ["| PRM trained on | held-out step AUROC | error F1 | best-of-N (min) |", "|---|---:|---:|---:|"]
    for row in rows:
        lines.append(f"| {row['prm']} | {number(row.get('AUROC'))} | {number(row.get('error F1'))} | "
                     f"{number(row.get('best-of-N (min)'))} |")
    return "\n".join(lines)


def number(value) -> str:
    return "-" if value is None else f"{value:.3f}"


def stage_table(stages: dict) -> str:
    lines = ["| stage | seconds |", "|---|---:|"]
    lines += [f"| {name} | {s['seconds']:.0f} |" for name, s in stages.items()]
    return "\n".join(lines)


def markdown_tables(report: dict, stages: dict, k: int) -> str:
    parts = ["Search (accuracy [95% bootstrap interval]):", budget_table(report), "",
             "Paired differences against majority voting:", comparison_table(report)]
    if report.get("versus_confidence"):
        parts += ["", f"Paired differences against the policy's own confidence (score {report['confidence_score']}):",
                  comparison_table(report, "versus_confidence")]
    exact = stages.get("exact-labels")
    if exact:
        parts += ["", "Labels against the exact ones:", agreement_table(exact["agreement"], k)]
    evaluation = stages.get("eval")
    if evaluation:
        parts += ["", f"Held-out steps ({evaluation['chains']} chains, {evaluation['steps']} steps, "
                      f"{evaluation['wrong_steps']} wrong):", auroc_table(evaluation["rows"])]
    parts += ["", "Stage times:", stage_table(stages)]
    return "\n".join(parts)


def plot(report: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for method, cells in report["table"].items():
        ns = sorted(int(n) for n in cells)
        if len(ns) < 2:
            continue
        acc = [cells[str(n)]["accuracy"] for n in ns]
        line, = ax.plot(ns, acc, marker="o", label=method)
        if "low" in cells[str(ns[0])]:
            ax.fill_between(ns, [cells[str(n)]["low"] for n in ns], [cells[str(n)]["high"] for n in ns],
                            color=line.get_color(), alpha=0.08)
    greedy = report["table"].get("greedy", {}).get("1")
    if greedy:
        ax.axhline(greedy["accuracy"], color="grey", linestyle=":", label="greedy")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("N (samples, or beams)")
    ax.set_ylabel("held-out accuracy")
    ax.set_title("Policy + PRM on held-out small-number problems")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
