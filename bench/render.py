"""Render BENCHMARKS.md's tables and verdicts from bench/results/*.json, so the prose cannot drift from the data.

    .venv/bin/python bench/render.py            # rewrite the marked regions of BENCHMARKS.md
    .venv/bin/python bench/render.py --check    # exit 1 (and name the regions) if the file is not what it renders

A region is the text between `<!-- render:NAME -->` and `<!-- /render:NAME -->`; NAME is a renderer of
render_speed.py, render_quality.py or render_more.py, and the targets its verdicts are judged against are in
render_kit.TARGETS.
Text outside the regions is left as written; tests/bench/test_docs_figures.py checks that its figures come from a
results file.
"""

from __future__ import annotations

import argparse
import re
import sys
import textwrap
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from render_more import RENDERERS as MORE  # noqa: E402
from render_quality import RENDERERS as QUALITY  # noqa: E402
from render_speed import RENDERERS as SPEED  # noqa: E402

DOC = Path(__file__).resolve().parents[1] / "BENCHMARKS.md"
RENDERERS = {**SPEED, **QUALITY, **MORE}
REGION = re.compile(r"(<!-- render:(?P<name>[\w-]+) -->\n)(?P<body>.*?)(<!-- /render:(?P=name) -->)", re.DOTALL)


def regions(text: str) -> list[str]:
    """The names of the rendered regions of TEXT, in order."""
    return [match["name"] for match in REGION.finditer(text)]


def wrapped(body: str, width: int = 118) -> str:
    """A rendered verdict's lines wrapped like the prose around them (bullets with a hanging indent); tables as
    they are."""
    lines = []
    for line in body.rstrip("\n").splitlines():
        if line.startswith("|"):
            lines.append(line)
        else:
            indent = "  " if line.startswith("- ") else ""
            lines += textwrap.wrap(line, width, subsequent_indent=indent, break_long_words=False,
                                   break_on_hyphens=False)
    return "\n".join(lines)


def render(text: str) -> str:
    """TEXT with every region's body replaced by what its renderer writes now."""
    unknown = sorted(set(regions(text)) - set(RENDERERS))
    if unknown:
        raise ValueError(f"BENCHMARKS.md has regions with no renderer: {', '.join(unknown)}; "
                         f"add them to render_speed.py, render_quality.py or render_more.py, or remove the markers")
    return REGION.sub(lambda m: m.group(1) + wrapped(RENDERERS[m["name"]]()) + "\n" + m.group(4), text)


def stale(text: str) -> list[str]:
    """Regions whose body differs from what would be rendered now."""
    fresh = {m["name"]: m["body"] for m in REGION.finditer(render(text))}
    return [m["name"] for m in REGION.finditer(text) if m["body"] != fresh[m["name"]]]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="only report regions that differ; exit 1 if any")
    parser.add_argument("--doc", type=Path, default=DOC)
    args = parser.parse_args(argv)
    text = args.doc.read_text(encoding="utf-8")
    if args.check:
        differ = stale(text)
        if differ:
            print(f"{args.doc.name}: regions not rendered from the results files: {', '.join(differ)}; "
                  f"run `.venv/bin/python bench/render.py`", file=sys.stderr)
            return 1
        print(f"{args.doc.name}: {len(regions(text))} regions match bench/results")
        return 0
    args.doc.write_text(render(text), encoding="utf-8")
    print(f"{args.doc.name}: rendered {len(regions(text))} regions")
    return 0


if __name__ == "__main__":
    sys.exit(main())
