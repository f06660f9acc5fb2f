"""`prmkit eval A B C DATA`: several PRMs (prmkit runs or public PRM folders) on the same data, side by side.

Each PRM is evaluated exactly as `prmkit eval` evaluates one (same threshold rule, its own calibration when
--calibrate-on is given), into its own folder under the output; the comparison adds one table of every PRM's
headline numbers per split, comparison.json and comparison.html (that table, linking each PRM's report).
"""

from __future__ import annotations

import html
import time
from dataclasses import dataclass, replace
from pathlib import Path

from prmkit.display import format_value
from prmkit.errors import PRMError
from prmkit.evaluation.evaluate import EvalResult, evaluate
from prmkit.evaluation.options import EvalOptions
from prmkit.files import write_json_atomic, write_text_atomic
from prmkit.scoring.options import ScoringOptions

MODEL_FILES = ("prmkit.json", "config.json")  # a folder holding one of these is a model, not a data folder
# (title, where in a split's metrics); the headline number of each metric group
COLUMNS = (("steps", ("steps",)), ("AUROC", ("step", "auroc")), ("error F1", ("step", "error_f1")),
           ("ProcessBench F1", ("processbench", "f1")), ("PRMBench PRMScore", ("prmbench", "overall", "prmscore")),
           ("best-of-N (min)", ("best_of_n", "prm", "min")),
           ("within-problem AUROC (min)", ("within_problem", "auroc", "min", "auroc")),
           ("unscored", ("steps_unscored",)))


@dataclass
class Comparison:
    names: list[str]  # one per PRM, unique, in the order given
    results: list[EvalResult]
    out: Path
    seconds: float

    def rows(self) -> list[dict]:
        """One row per (split, PRM), splits in data order and PRMs in the order given within each split."""
        rows = []
        for split in self.results[0].splits:
            for name, result in zip(self.names, self.results):
                metrics = result.splits[split]
                row = {"split": split, "prm": name, "threshold": result.threshold.value}
                row.update({title: _get(metrics, path) for title, path in COLUMNS})
                rows.append(row)
        return rows

    def to_dict(self) -> dict:
        return {"prms": {name: {"run": r.run, "out": str(r.out), "processbench_average_f1": r.processbench_average_f1}
                         for name, r in zip(self.names, self.results)},
                "rows": self.rows(), "seconds": self.seconds}


def _get(metrics: dict, path: tuple[str, ...]):
    for key in path:
        if not isinstance(metrics, dict):
            return None
        metrics = metrics.get(key)
    return metrics


def is_model_folder(path: str | Path) -> bool:
    path = Path(path)
    return path.is_dir() and any((path / name).is_file() for name in MODEL_FILES)


def split_models(paths: list[str]) -> tuple[list[str], list[str]]:
    """`prmkit eval A B C DATA...`: the leading model folders, then the data (files, dataset ids)."""
    count = next((i for i, p in enumerate(paths) if not is_model_folder(p)), len(paths))
    return paths[:max(count, 1)], paths[max(count, 1):]


def prm_names(runs: list[str | Path]) -> list[str]:
    names, seen = [], {}
    for run in runs:
        name = Path(run).resolve().name or str(run)
        seen[name] = seen.get(name, 0) + 1
        names.append(name if seen[name] == 1 else f"{name}-{seen[name]}")
    return names


def compare(runs: list[str | Path], data: list[str | Path], options: EvalOptions = EvalOptions(),
            scoring: ScoringOptions = ScoringOptions(), progress=print) -> Comparison:
    """Evaluate every PRM in `runs` on `data` into OUT/<PRM name>/, then write OUT/comparison.json and
    OUT/comparison.html; OUT is `options.out`, default eval/<PRM names joined by +>."""
    if len(runs) < 2:
        raise PRMError(f"compare needs two PRMs or more, got {len(runs)}; evaluate one with prmkit eval RUN DATA")
    started = time.perf_counter()
    names = prm_names(runs)
    out = Path(options.out) if options.out else Path("eval") / "+".join(names)
    results = []
    for name, run in zip(names, runs):
        progress(f"PRM {name} ({run})")
        results.append(evaluate(run, data, replace(options, out=out / name), scoring, progress=progress))
    comparison = Comparison(names, results, out, round(time.perf_counter() - started, 2))
    write_json_atomic(out / "comparison.json", comparison.to_dict())
    write_text_atomic(out / "comparison.html", comparison_html(comparison))
    return comparison


def render_comparison(comparison: Comparison):
    """The side-by-side table (rich): a row per split and PRM, a column per headline metric, then each PRM's
    ProcessBench average."""
    from rich.table import Table

    table = Table(title="PRMs side by side", title_justify="left")
    for title in ("split", "PRM", "threshold", *(title for title, _ in COLUMNS)):
        table.add_column(title, justify="left" if title in ("split", "PRM") else "right")
    previous = None
    for row in comparison.rows():
        table.add_row("" if row["split"] == previous else row["split"], row["prm"], f"{row['threshold']:.4g}",
                      *(format_value(row[title]) for title, _ in COLUMNS), end_section=False)
        previous = row["split"]
    for name, result in zip(comparison.names, comparison.results):
        if result.processbench_average_f1 is not None:
            cells = [format_value(result.processbench_average_f1) if title == "ProcessBench F1" else ""
                     for title, _ in COLUMNS]
            table.add_row("ProcessBench average", name, "", *cells, style="bold")
    return table


def comparison_html(comparison: Comparison) -> str:
    """One page: the side-by-side table and a link to each PRM's own report (its chains coloured by score)."""
    head = "".join(f"<th>{html.escape(t)}</th>" for t in ("split", "PRM", "threshold", *(t for t, _ in COLUMNS)))
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(str(v))}</td>" for v in (
            row["split"], row["prm"], f"{row['threshold']:.4g}", *(format_value(row[t]) for t, _ in COLUMNS)))
        + "</tr>" for row in comparison.rows())
    links = "".join(f'<li><a href="{html.escape(name)}/report.html">{html.escape(name)}</a>: '
                    f"{html.escape(result.run)}, ProcessBench average F1 "
                    f"{format_value(result.processbench_average_f1)}</li>"
                    for name, result in zip(comparison.names, comparison.results))
    return ("<!doctype html><meta charset='utf-8'><title>prmkit eval: PRMs side by side</title>"
            "<style>body{font-family:sans-serif}td,th{padding:2px 8px;text-align:right}"
            "td:nth-child(-n+2),th:nth-child(-n+2){text-align:left}</style>"
            f"<h1>PRMs side by side</h1><table><tr>{head}</tr>{body}</table><h2>Each PRM's report</h2><ul>{links}</ul>")
