"""HTML chain reports (self-contained, escaped, markers in place) and PNG plots."""

import json

from prmkit.evaluation.report import (
    log_history,
    plot_calibration,
    plot_roc,
    plot_training_loss,
    score_colour,
    write_chain_report,
)

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def chains():
    return [
        {"prompt": "What is <b>2</b> + 3?", "steps": ["2 + 3 = 6 <script>alert(1)</script>", "So 6 & done."],
         "scores": [0.2, 0.9], "labels": [0.0, None], "predicted_first_error": 0},
        {"prompt": "q2", "steps": ["fine", "wrong", "cut"], "scores": [0.8, 0.3, None], "first_error": 1},
        {"prompt": "q3", "steps": ["ok"], "scores": [0.95], "first_error": -1, "title": "row <7>", "score": 0.95},
    ]


def test_chain_report_is_escaped_self_contained_and_marked(tmp_path):
    path = write_chain_report(tmp_path / "sub" / "r.html", chains(), title="eval <run>", threshold=0.5,
                              summary={"F1": 0.4567, "note": "a < b"})
    page = path.read_text(encoding="utf-8")
    assert path.is_file() and page.startswith("<!DOCTYPE html>")
    # nothing from the data is live markup, and nothing is fetched from elsewhere
    assert "<script" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "&lt;b&gt;2&lt;/b&gt;" in page and "So 6 &amp; done." in page and "row &lt;7&gt;" in page
    assert "eval &lt;run&gt;" in page and "a &lt; b" in page and "0.4567" in page
    assert "http" not in page and "<link" not in page and "src=" not in page
    # chain 1: gold first error from the labels, predicted given -> both on step 0, a match
    first = page.split('<section class="chain">')[1]
    assert 'class="step gold pred"' in first and "match" in first and "score 0.200" in first
    # chain 2: predicted from the threshold (0.3 < 0.5 -> step 1), gold given; the cut step is marked unscored
    second = page.split('<section class="chain">')[2]
    assert 'class="step gold pred"' in second and "not scored" in second and "unscored" in second
    assert page.count('<section class="chain">') == 3
    assert "gold first error: none" in page.split('<section class="chain">')[3]


def test_score_colour_runs_red_to_green():
    assert score_colour(0.0) == "hsl(0,70%,80%)" and score_colour(1.0) == "hsl(120,70%,80%)"
    assert score_colour(7.0) == score_colour(1.0) and score_colour(None) == "#e6e6e6"


def write_state(folder, steps):
    folder.mkdir(parents=True)
    history = [{"step": s, "loss": 1.0 / s} for s in steps] + [{"step": steps[-1], "eval_loss": 0.5}]
    (folder / "trainer_state.json").write_text(json.dumps({"log_history": history}))


def test_training_loss_from_the_newest_checkpoint(tmp_path):
    run = tmp_path / "run"
    write_state(run / "checkpoint-2", [1, 2])
    write_state(run / "checkpoint-10", [1, 2, 5, 10])  # newest by step number, not by name
    assert max(e["step"] for e in log_history(run)) == 10
    png = plot_training_loss(run, tmp_path / "loss.png")
    assert png.read_bytes().startswith(PNG_MAGIC)
    # a checkpoint folder on its own, and a folder with no history at all
    assert plot_training_loss(run / "checkpoint-2", tmp_path / "c2.png").is_file()
    assert plot_training_loss(tmp_path / "empty", tmp_path / "none.png") is None


def test_roc_and_calibration_pngs(tmp_path):
    series = {"a": ([0.9, 0.8, 0.3, 0.1], [1, 0, 1, 0]), "b": ([0.7, 0.2], [1.0, 0.0])}
    assert plot_roc(series, tmp_path / "roc.png").read_bytes().startswith(PNG_MAGIC)
    assert plot_calibration(series, tmp_path / "cal.png").read_bytes().startswith(PNG_MAGIC)
    assert plot_roc({"one class": ([0.5, 0.6], [1, 1])}, tmp_path / "none.png") is None
