"""BENCHMARKS.md's figures come from bench/results: its rendered regions are what bench/render.py writes now, and
every decimal figure outside them (1.42x, 0.848, 16.4 s) is a number some results file holds, to the places shown.

A figure that is not a measurement (a target, a config value) is allowed only through ALLOWED, with its reason.
"""

import bisect
import json
import re
import shutil
from pathlib import Path

import pytest
import render
import render_kit
import render_speed
from render_kit import RESULTS, TARGETS

ROOT = Path(__file__).resolve().parents[2]
FIGURE = re.compile(r"(?<![\w.])(\d+\.\d+)(?:e(-?\d+))?(?![\w.]*\d)(x|%| GiB| GB| min| M\b)?")
FENCE = re.compile(r"```.*?```", re.DOTALL)
INLINE_CODE = re.compile(r"`[^`\n]*`")
HEADING = re.compile(r"^#{2,3} ", re.MULTILINE)
CITED = re.compile(r"([\w.-]+)\.json")
# The units the docs convert results into, by the unit written after the figure.
SCALES = {"%": (100, 1), " GiB": (1, 1 / 1024), " GB": (1, 1 / 1024), " min": (1 / 60, 1), " M": (1e-6,)}

ALLOWED = {
    "0.05": "lora.dropout's old default (config)",
    "0.8": "the sampling temperature (config)",
    "3.11": "a Python version",
}

# Figures of README.md and docs/*.md that no results file holds and that are not this project's measurements, by
# file and figure, with the reason. Those pages are restructured by others; a new unbacked figure may not join.
OTHER_DOCS_UNBACKED = {
    "README.md": {"3.10": "a Python version", "2.010": "an illustration of bf16 rounding (logits that tie)",
                  "2.014": "the same illustration", "2.0156": "the same illustration"},
    "scoring.md": {"2501.07301": "an arXiv identifier", "82.4": "a published figure of another paper",
                   "77.6": "a published figure of another paper", "73.5": "a published figure of another paper"},
    "serving.md": {"3.12": "a Python version"},
    "vllm.md": {"5.20": "a transformers version"},
}


def numbers(name: str) -> list[float]:
    """Every number in one results file (by name, without .json), sorted."""
    text = (RESULTS / f"{name}.json").read_text(encoding="utf-8")
    return sorted({abs(float(token)) for token in re.findall(r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?", text)})


def held(figure: str, exponent: str | None, values: list[float], unit: str = "") -> bool:
    """Whether a value, in the unit written after FIGURE, rounds to FIGURE at the places it is written with."""
    places = len(figure.split(".")[1])
    target = float(figure) * 10 ** int(exponent or 0)
    tolerance = 0.5 * 10 ** (-places) * 10 ** int(exponent or 0) * (1 + 1e-9)
    for scale in SCALES.get(unit, (1,)):
        low, high = (target - tolerance) / scale, (target + tolerance) / scale
        i = bisect.bisect_left(values, low)
        if i < len(values) and values[i] <= high:
            return True
    return False


def sections(text: str) -> list[tuple[str, list[str]]]:
    """TEXT cut at its ## and ### headings, each piece with the results files it (or its ## section) cites."""
    pieces, parent = [], []
    starts = [0] + [m.start() for m in HEADING.finditer(text)] + [len(text)]
    for start, end in zip(starts, starts[1:]):
        piece = text[start:end]
        cited = [name for name in dict.fromkeys(CITED.findall(piece)) if (RESULTS / f"{name}.json").is_file()]
        if piece.startswith("## "):
            parent = cited
        pieces.append((piece, cited or parent))
    return pieces


def prose(text: str, keep_boxes: bool = False) -> str:
    """TEXT without code (commands, config) and without rendered regions, which the render check covers."""
    text = render.REGION.sub("", text)
    text = FENCE.sub(lambda m: m.group(0) if keep_boxes and "│" in m.group(0) else "", text)
    return INLINE_CODE.sub("", text)


def unbacked(text: str, rendered: str, keep_boxes: bool = False, values: list[float] | None = None) -> list[str]:
    """Figures of TEXT's prose that neither a rendered table nor a results file its section cites holds (every
    results file where a section cites none)."""
    everything = sorted({v for path in RESULTS.glob("*.json") for v in numbers(path.stem)})
    in_tables = {(figure, exponent) for figure, exponent, _ in FIGURE.findall(rendered)}
    allowed = set(ALLOWED) | {f"{value:g}" for _, value, _ in TARGETS.values()}
    missing = []
    for piece, cited in sections(text):
        pool = values if values is not None else (
            sorted({v for name in cited for v in numbers(name)}) if cited else everything)
        for line in prose(piece, keep_boxes).splitlines():
            for figure, exponent, unit in FIGURE.findall(line):
                if figure in allowed or (figure, exponent) in in_tables or held(figure, exponent, pool, unit):
                    continue
                missing.append(f"{figure}{'e' + exponent if exponent else ''}{unit}: {line.strip()[:100]}")
    return missing


def rendered_regions() -> str:
    return "\n".join(m["body"] for m in render.REGION.finditer((ROOT / "BENCHMARKS.md").read_text(encoding="utf-8")))


def test_benchmarks_tables_are_what_the_results_render():
    assert render.main(["--check"]) == 0


def test_check_fails_on_a_retyped_table(tmp_path):
    text = (ROOT / "BENCHMARKS.md").read_text(encoding="utf-8")
    first = next(render.REGION.finditer(text))
    retyped = first["body"].replace("1", "2", 1)
    assert retyped != first["body"]
    doc = tmp_path / "BENCHMARKS.md"
    doc.write_text(text[:first.start("body")] + retyped + text[first.end("body"):], encoding="utf-8")
    assert render.stale(doc.read_text(encoding="utf-8")) == [first["name"]]
    assert render.main(["--check", "--doc", str(doc)]) == 1


def test_a_region_without_renderer_is_an_error():
    with pytest.raises(ValueError, match="no renderer: made_up"):
        render.render("<!-- render:made_up -->\nx\n<!-- /render:made_up -->\n")


def test_figure_matching_rounds_at_the_places_written():
    values = sorted([1.4206, 0.8479, 5.364e-07, 3.0, 0.0059, 2048.0])
    assert held("1.42", None, values) and held("0.848", None, values) and held("5.4", "-7", values)
    assert held("0.6", None, values, "%") and held("2.0", None, values, " GiB") and held("0.05", None, values, " min")
    assert not held("1.43", None, values) and not held("0.86", None, values) and not held("0.6", None, values)
    missing = unbacked("speeds 1.42x and 9.99x, `9.98` in code, Qwen2.5 and TRL 1.16.0", "", values=values)
    assert [entry.split(":")[0] for entry in missing] == ["9.99x"]
    assert unbacked("a table's 7.77", "| 7.77 |", values=values) == []


def test_every_benchmarks_figure_is_in_a_results_file():
    missing = unbacked((ROOT / "BENCHMARKS.md").read_text(encoding="utf-8"), rendered_regions())
    assert not missing, "figures in BENCHMARKS.md that no results file holds:\n" + "\n".join(missing)


OTHER_DOCS = ["README.md", *sorted(path.relative_to(ROOT).as_posix() for path in (ROOT / "docs").glob("*.md"))]


@pytest.mark.parametrize("page", OTHER_DOCS)
def test_no_new_unbacked_figures_in_the_other_docs(page):
    missing = unbacked((ROOT / page).read_text(encoding="utf-8"), rendered_regions(), keep_boxes=True)
    known = OTHER_DOCS_UNBACKED.get(Path(page).name, {})
    new = [entry for entry in missing if entry.split(":")[0] not in known]
    assert not new, f"{page}: figures that no results file holds:\n" + "\n".join(new)


def test_an_interleaved_peers_run_takes_over_the_verdicts(tmp_path, monkeypatch):
    for path in RESULTS.glob("*.json"):
        shutil.copy(path, tmp_path / path.name)
    rounds = [{"rows_per_s": rate, "peak_rss_gb": 3.0, "wall_s": 240 / rate, "sgemm_gflops": 100.0}
              for rate in (1.3, 1.2, 1.4)]
    trl = [dict(r, rows_per_s=1.0) for r in rounds]
    (tmp_path / "peers.json").write_text(json.dumps({
        "systems": {"trl": {"rows_per_s": 1.0, "peak_rss_gb": 3.0, "runs": trl},
                    "pk-lora": {"rows_per_s": 1.3, "peak_rss_gb": 2.4, "runs": rounds}},
        "ratios": {"pk-lora / trl": {"rows_per_s": 1.3, "rows_per_s_per_round": [1.3, 1.2, 1.4], "peak_rss": 0.8},
                   "pk-full / soup": {"rows_per_s": 1.16, "rows_per_s_per_round": [1.16, 1.1, 1.2],
                                      "peak_rss": 0.9}}}))
    monkeypatch.setattr(render_kit, "RESULTS", tmp_path)
    monkeypatch.setattr(render_speed, "RESULTS", tmp_path)
    render_kit.load.cache_clear()
    try:
        verdicts = render_speed.peers_verdicts()
        assert "TRL): met, 1.30x** (`peers.json`, ratio of medians over 3 interleaved rounds, per-round 1.20-1.40x" \
            in verdicts
        assert "soup-cli): met, 1.16x** (`peers.json`" in verdicts and "RSS (<= 0.9x TRL): met, 0.80x" in verdicts
        assert "1.300 (1.200-1.400)" in render_speed.peers_latest_table()
    finally:
        render_kit.load.cache_clear()
