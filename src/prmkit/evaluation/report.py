"""Reports a person reads: an HTML page of scored chains and PNG plots (ROC, calibration, training loss).

The HTML page is one self-contained file (inline CSS, no scripts, no external assets), so it can be mailed or
attached to an issue. Every piece of text from the data goes through `html.escape`: chains are model output and
may hold anything, `<script>` included. Plots use matplotlib's Agg backend, which needs no display.
"""

from __future__ import annotations

import html
import json
import math
from pathlib import Path
from typing import Sequence

from prmkit.display import format_value
from prmkit.evaluation.metrics import reliability_bins, roc_curve
from prmkit.evaluation.processbench import first_error_from_labels, predict_first_error
from prmkit.training.checkpoints import complete_checkpoints

CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;margin:2rem auto;max-width:60rem;color:#1d1d1f;
     padding:0 1rem;line-height:1.45}
h1{font-size:1.5rem}h2{font-size:1.15rem;margin-top:2.2rem;border-bottom:1px solid #ccc}
table.summary{border-collapse:collapse;margin:1rem 0}
table.summary td{border:1px solid #ddd;padding:.25rem .6rem}table.summary td:first-child{font-weight:600}
.legend{display:flex;align-items:center;gap:.5rem;font-size:.85rem;margin:.5rem 0 1.5rem}
.ramp{width:12rem;height:.9rem;border:1px solid #aaa;
      background:linear-gradient(to right,hsl(0,70%,80%),hsl(60,70%,80%),hsl(120,70%,80%))}
.chain{border:1px solid #ccc;border-radius:6px;margin:1.2rem 0;padding:.6rem .9rem}
.chain-head{font-size:.85rem;color:#555;margin-bottom:.4rem}
.ok{color:#1a7f37;font-weight:600}.miss{color:#b3261e;font-weight:600}
.prompt{white-space:pre-wrap;background:#f4f4f6;padding:.5rem;border-radius:4px;margin-bottom:.5rem}
.step{white-space:pre-wrap;padding:.35rem .5rem;margin:.25rem 0;border-radius:4px;border-left:6px solid transparent}
.step .meta{float:right;font-size:.8rem;font-family:ui-monospace,monospace;margin-left:1rem;white-space:nowrap}
.step.gold{border-left-color:#b3261e}.step.pred{outline:2px dashed #222;outline-offset:-2px}
.badge{display:inline-block;font-size:.72rem;font-weight:600;padding:0 .35rem;border-radius:3px;margin-left:.3rem}
.badge.gold{background:#b3261e;color:#fff}.badge.pred{background:#222;color:#fff}
.unscored{background:#e6e6e6;color:#666}
"""


def score_colour(score: float | None) -> str:
    """Red (0) through yellow to green (1); scores outside [0, 1] (an MSE head) are clipped for the colour only."""
    if score is None or not math.isfinite(score):
        return "#e6e6e6"
    hue = 120.0 * min(max(score, 0.0), 1.0)
    return f"hsl({hue:.0f},70%,80%)"


def write_chain_report(path, chains: list[dict], *, title: str, threshold: float | None = 0.5,
                       summary: dict | None = None) -> Path:
    """Write an HTML page of chains, each step coloured by its score, and return its path.

    Each chain: `prompt`, `steps`, `scores` (None for a step that was not scored), optional `labels`,
    `first_error` (gold; derived from `labels` when absent), `predicted_first_error` (derived from `threshold`
    when absent), and optional `title` and `score` (the chain's aggregate) for its header line.
    """
    parts = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
             f"<title>{_esc(title)}</title><style>{CSS}</style></head><body>", f"<h1>{_esc(title)}</h1>"]
    if summary:
        rows = "".join(f"<tr><td>{_esc(key)}</td><td>{_esc(format_value(value, '.4g'))}</td></tr>"
                       for key, value in summary.items())
        parts.append(f'<table class="summary">{rows}</table>')
    legend = "step score: 0" + '<span class="ramp"></span>' + "1"
    if threshold is not None:
        legend += f" &middot; predicted first error = first step scoring below {_esc(format_value(threshold, '.4g'))}"
    legend += (' &middot; <span class="badge gold">gold first error</span>'
               ' <span class="badge pred">predicted first error</span>')
    parts.append(f'<div class="legend">{legend}</div>')
    parts.extend(_chain_html(number, chain, threshold) for number, chain in enumerate(chains, start=1))
    parts.append("</body></html>")
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text("\n".join(parts) + "\n", encoding="utf-8")
    return target


def _chain_html(number: int, chain: dict, threshold: float | None) -> str:
    steps: Sequence[str] = chain["steps"]
    scores = list(chain.get("scores") or [])
    scores += [None] * (len(steps) - len(scores))
    labels = chain.get("labels")
    gold = chain.get("first_error")
    if gold is None and labels is not None:
        gold = first_error_from_labels(labels)
    predicted = chain.get("predicted_first_error")
    if predicted is None and threshold is not None and any(s is not None for s in scores):
        predicted = predict_first_error(scores, threshold)

    head = [f"#{number}"]
    if chain.get("title"):
        head.append(_esc(str(chain["title"])))
    if chain.get("score") is not None:
        head.append(f"chain score {_esc(format_value(chain['score'], '.4g'))}")
    if gold is not None:
        head.append(f"gold first error: {_step_name(gold)}")
    if predicted is not None:
        head.append(f"predicted: {_step_name(predicted)}")
    if gold is not None and predicted is not None:
        head.append('<span class="ok">match</span>' if gold == predicted else '<span class="miss">miss</span>')

    body = [f'<section class="chain"><div class="chain-head">{" &middot; ".join(head)}</div>',
            f'<div class="prompt">{_esc(chain.get("prompt", ""))}</div>']
    for index, step in enumerate(steps):
        score = scores[index]
        label = labels[index] if labels is not None and index < len(labels) else None
        classes = ["step"] + (["gold"] if index == gold else []) + (["pred"] if index == predicted else [])
        if score is None:
            classes.append("unscored")
        meta = f"step {index}: " + ("not scored" if score is None else f"score {score:.3f}")
        if label is not None:
            meta += f" &middot; label {_esc(format_value(label, '.4g'))}"
        badges = ('<span class="badge gold">gold first error</span>' if index == gold else "") + \
                 ('<span class="badge pred">predicted first error</span>' if index == predicted else "")
        body.append(f'<div class="{" ".join(classes)}" style="background:{score_colour(score)}">'
                    f'<span class="meta">{meta}{badges}</span>{_esc(step)}</div>')
    body.append("</section>")
    return "\n".join(body)


def _step_name(index: int) -> str:
    return "none" if index < 0 else f"step {index}"


def _esc(text) -> str:
    return html.escape(str(text), quote=True)


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")  # no display here, and a file is all we want
    import matplotlib.pyplot as plt

    return plt


def log_history(run_dir) -> list[dict]:
    """The trainer's log history for a run folder or checkpoint: the most complete of trainer_state.json in the
    folder itself, `log_history` in summary.json, and the newest checkpoint-*/trainer_state.json."""
    folder = Path(run_dir)
    sources = [folder / "trainer_state.json", folder / "summary.json"]
    checkpoints = complete_checkpoints(folder)
    if checkpoints:
        sources.append(checkpoints[-1] / "trainer_state.json")
    best: list[dict] = []
    for source in sources:
        try:
            history = json.loads(source.read_text(encoding="utf-8")).get("log_history") or []
        except (OSError, ValueError, AttributeError):
            continue
        if _last_step(history) > _last_step(best) or (history and not best):
            best = history
    return best


def _last_step(history: list[dict]) -> int:
    return max((int(entry.get("step", 0)) for entry in history), default=-1)


def plot_training_loss(run_dir, path) -> Path | None:
    """Training (and evaluation, where logged) loss against optimizer step; None when no log history exists
    (a merged export, or a run that has not logged yet)."""
    history = log_history(run_dir)
    train = [(e["step"], e["loss"]) for e in history if "loss" in e and "step" in e]
    evals = [(e["step"], e["eval_loss"]) for e in history if "eval_loss" in e and "step" in e]
    if not train and not evals:
        return None
    plt = _pyplot()
    figure, axes = plt.subplots(figsize=(6, 3.6), dpi=110)
    if train:
        axes.plot(*zip(*train), marker=".", label="training loss")
    if evals:
        axes.plot(*zip(*evals), marker="o", linestyle="--", label="validation loss")
    from matplotlib.ticker import MaxNLocator

    axes.xaxis.set_major_locator(MaxNLocator(integer=True))
    axes.set_xlabel("optimizer step")
    axes.set_ylabel("loss")
    axes.set_title(f"training loss: {Path(run_dir).name}")
    axes.grid(alpha=0.3)
    axes.legend()
    return _save(figure, path)


def plot_roc(series: dict[str, tuple[Sequence[float], Sequence[float]]], path, *,
             title: str = "step ROC curve") -> Path | None:
    """One ROC curve per named (scores, labels) pair; labels binarised at 0.5. None when no series has both
    classes."""
    from prmkit.evaluation.metrics import auroc

    curves = []
    for name, (scores, labels) in series.items():
        hard = [float(label) >= 0.5 for label in labels]
        if any(hard) and not all(hard):
            curves.append((name, roc_curve(scores, hard), auroc(scores, hard)))
    if not curves:
        return None
    plt = _pyplot()
    figure, axes = plt.subplots(figsize=(4.6, 4.4), dpi=110)
    for name, (fpr, tpr), area in curves:
        axes.plot(fpr, tpr, label=f"{name} (AUROC {area:.3f})")
    axes.plot([0, 1], [0, 1], color="grey", linestyle=":", label="chance")
    axes.set_xlabel("false positive rate (wrong steps passed)")
    axes.set_ylabel("true positive rate (correct steps passed)")
    axes.set_title(title)
    axes.legend(loc="lower right", fontsize="small")
    return _save(figure, path)


def plot_calibration(series: dict[str, tuple[Sequence[float], Sequence[float]]], path, *, bins: int = 10,
                     title: str = "step calibration") -> Path | None:
    """Reliability curve: mean label against mean score in equal-width score bins, one line per series."""
    if not any(len(scores) for scores, _ in series.values()):
        return None
    plt = _pyplot()
    figure, axes = plt.subplots(figsize=(4.6, 4.4), dpi=110)
    axes.plot([0, 1], [0, 1], color="grey", linestyle=":", label="perfect calibration")
    for name, (scores, labels) in series.items():
        filled = [b for b in reliability_bins(scores, labels, bins) if b["count"]]
        if filled:
            axes.plot([b["mean_score"] for b in filled], [b["mean_label"] for b in filled], marker="o", label=name)
    axes.set_xlim(0, 1)
    axes.set_ylim(0, 1)
    axes.set_xlabel("mean step score in bin")
    axes.set_ylabel("fraction of correct steps in bin")
    axes.set_title(title)
    axes.legend(loc="upper left", fontsize="small")
    return _save(figure, path)


def _save(figure, path) -> Path:
    import matplotlib.pyplot as plt

    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    figure.tight_layout()
    figure.savefig(target)
    plt.close(figure)
    return target
