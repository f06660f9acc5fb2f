"""The README a newcomer reads: its contents list, its links, and the commands it asks them to paste.

Every `##`/`###` heading is in the contents list, in order; every link to a heading (in README.md and docs/*.md)
lands on one, by GitHub's anchor rules. Every `prmkit` command in a bash block parses as the CLI parses it, the
example configs it names load, and every `runs/...` or `data/...` path it reads was written by a command before it
(the README's one path convention: the quickstart trains `runs/prm`). The quickstart itself runs on a tiny model.
"""

from __future__ import annotations

import json
import re
import shlex
from argparse import Namespace
from pathlib import Path

import pytest

from prmkit.cli import build_parser, main
from prmkit.config import load_config
from prmkit.demo import DemoOptions

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
FENCE = re.compile(r"^```(\w*)\s*$")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
# The folders this README's examples write into; a path there must have been written before it is read.
CONVENTION_FOLDERS = ("runs/", "data/")


def prose_lines(text: str) -> list[str]:
    """The lines outside fenced code blocks (a `# comment` in a bash block is no heading)."""
    lines, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
        elif not fenced:
            lines.append(line)
    return lines


def fenced_blocks(text: str) -> list[tuple[str, str]]:
    """(language, body) of every fenced block, in document order."""
    blocks, language, body = [], None, []
    for line in text.splitlines():
        match = FENCE.match(line)
        if match and language is None:
            language, body = match.group(1), []
        elif match:
            blocks.append((language, "\n".join(body)))
            language = None
        elif language is not None:
            body.append(line)
    return blocks


def headings(text: str) -> list[tuple[int, str]]:
    return [(len(m.group(1)), m.group(2).strip()) for line in prose_lines(text)
            if (m := re.match(r"^(#{1,6}) (.+)$", line))]


def github_slug(title: str) -> str:
    """GitHub's heading anchor: the rendered text lowercased, punctuation other than - and _ dropped, spaces to -."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", title).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(text: str) -> list[str]:
    """Every heading's anchor in order; a repeated slug gets -1, -2, ... as GitHub numbers them."""
    seen: dict[str, int] = {}
    result = []
    for _, title in headings(text):
        slug = github_slug(title)
        result.append(f"{slug}-{seen[slug]}" if slug in seen else slug)
        seen[slug] = seen.get(slug, 0) + 1
    return result


def contents_section(text: str) -> str:
    return text.split("\n## Contents\n", 1)[1].split("\n## ", 1)[0]


def expected_contents(text: str) -> str:
    """The contents list the README should hold: every ## and ### heading after the contents, nested by level."""
    lines = []
    for (level, title), anchor in zip(headings(text), anchors(text)):
        if level in (2, 3) and title != "Contents":
            lines.append(f"{'  ' * (level - 2)}- [{title}](#{anchor})")
    return "\n".join(lines)


def test_github_slug_follows_githubs_rules_on_this_readmes_kinds_of_heading():
    assert github_slug("Python: `PRMScorer`") == "python-prmscorer"
    assert github_slug("RL reward: `PRMReward` for TRL's GRPOTrainer") == "rl-reward-prmreward-for-trls-grpotrainer"
    assert github_slug("Accuracy at budgets: `--budgets`") == "accuracy-at-budgets---budgets"
    assert github_slug("The whole loop on one CPU: `bench/loop.py`") == "the-whole-loop-on-one-cpu-benchlooppy"
    assert anchors("## Options\n\n```\n# not a heading\n```\n## Options\n") == ["options", "options-1"]


def test_the_contents_list_names_every_section_in_order():
    text = README.read_text(encoding="utf-8")
    listed = re.findall(r"\]\(#([^)]+)\)", contents_section(text))
    wanted = re.findall(r"\]\(#([^)]+)\)", expected_contents(text))
    assert listed == wanted, "the contents list should read:\n" + expected_contents(text)


@pytest.mark.parametrize("page", [README, *DOCS], ids=lambda p: str(p.relative_to(ROOT)))
def test_every_link_lands_on_a_file_and_heading_that_exist(page):
    broken = []
    for line in prose_lines(page.read_text(encoding="utf-8")):
        for target in LINK.findall(re.sub(r"`[^`]*`", "", line)):
            if target.startswith(("http://", "https://", "mailto:")):
                continue
            path, _, anchor = target.partition("#")
            linked = (page.parent / path).resolve() if path else page
            if not linked.exists():
                broken.append(f"{target}: no file {linked}")
            elif anchor and anchor not in anchors(linked.read_text(encoding="utf-8")):
                broken.append(f"{target}: no heading with that anchor in {linked.name}")
    assert not broken, f"{page.name}:\n" + "\n".join(broken)


def without_comment(line: str) -> str:
    """The line up to a bash comment: a `#` that starts a word outside quotes (shlex's comments=True would also
    end `data.val=owner/name#split` at its `#`)."""
    quote = None
    for index, char in enumerate(line):
        if quote:
            quote = None if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and (index == 0 or line[index - 1].isspace()):
            return line[:index]
    return line


def prmkit_commands(block: str) -> list[list[str]]:
    """The arguments after `prmkit` (or `-m prmkit`, `.venv/bin/prmkit`) of every command line in a block."""
    commands = []
    for line in block.replace("\\\n", " ").splitlines():
        line = line.removeprefix("$ ")
        words = shlex.split(without_comment(line))
        starts = [i for i, word in enumerate(words) if Path(word).name == "prmkit"]
        if starts:
            commands.append(words[starts[0] + 1:])
    return commands


def python_run_paths(block: str) -> list[str]:
    """Paths in the convention folders that a Python example passes as a run folder or data file."""
    return [p for p in re.findall(r"\"([^\"]+)\"", block)
            if re.fullmatch(r"runs/[^/]+|data/.+", p)]


def reads_and_writes(args: Namespace) -> tuple[list[str], list[str]]:
    """What a parsed command reads and writes, by the CLI's own argument names."""
    reads = [args.run] if isinstance(getattr(args, "run", None), str) else []
    for name in ("input", "file", "data"):
        value = getattr(args, name, None)
        reads += value if isinstance(value, list) else [value] if isinstance(value, str) else []
    writes = [getattr(args, name) for name in ("output", "out", "out_dir", "merge", "vllm")
              if isinstance(getattr(args, name, None), (str, Path))]
    if args.command in ("train", "config") and args.config and args.config.startswith("examples/"):
        config = load_config(ROOT / args.config, args.overrides)  # must validate as the config loader reads it
        reads += [path for path in (config.data.train, config.data.val) if path]
        if args.command == "train":
            writes.append(f"{config.output_dir}/{config.run_name}")
    return reads, [str(path) for path in writes]


def check_page(text: str, written: set[str]) -> list[str]:
    """Parse every command of a page in order; return what is wrong and add what it writes to `written`."""
    parser, problems = build_parser(), []

    def was_written(path: str) -> bool:
        return any(path == w or path.startswith(w.rstrip("/") + "/") for w in written)

    for language, block in fenced_blocks(text):
        if language == "python":
            problems += [f"python reads {p}, which no earlier example writes"
                         for p in python_run_paths(block) if not was_written(p)]
            continue
        if language not in ("bash", ""):
            continue
        for argv in prmkit_commands(block) if language == "bash" else prmkit_commands(
                "\n".join(line for line in block.splitlines() if line.startswith("$ prmkit"))):
            command = "prmkit " + shlex.join(argv)
            try:
                args = parser.parse_args(argv)
            except SystemExit:
                problems.append(f"{command}: the CLI does not parse it")
                continue
            reads, writes = reads_and_writes(args)
            problems += [f"{command}: reads {path}, which no earlier example writes" for path in reads
                         if path.startswith(CONVENTION_FOLDERS) and not was_written(path)]
            if args.command in ("train", "export") and not getattr(args, "overwrite", False):
                problems += [f"{command}: writes into {path}, which an earlier example filled; pass --overwrite"
                             for path in writes if path in written]
            written.update(writes)
    return problems


def test_every_readme_and_docs_command_parses_and_reads_only_what_an_earlier_one_wrote():
    written = {str(DemoOptions().out)}  # `bash scripts/demo.sh`, the first command of the README
    problems = check_page(README.read_text(encoding="utf-8"), written)
    for page in DOCS:  # a docs page is read after the README's examples, each on its own
        problems += [f"{page.name}: {p}" for p in check_page(page.read_text(encoding="utf-8"), set(written))]
    assert not problems, "\n".join(problems)


def test_the_checker_catches_the_mistakes_it_is_for():
    page = "\n".join(["```bash", "prmkit train examples/synthetic-lora.yaml",
                      "prmkit score runs/synthetic-lora a.jsonl b.jsonl",
                      "prmkit eval runs/prm data/synth/val.jsonl --no-such-flag",
                      "prmkit train examples/synthetic-lora.yaml", "```"])
    problems = check_page(page, set())
    assert any("reads data/synth/train.jsonl" in p for p in problems)  # the config's data before `data synth`
    assert any("reads runs/synthetic-lora" in p for p in problems)
    assert any("--no-such-flag" in p and "does not parse" in p for p in problems)
    assert any("pass --overwrite" in p for p in problems)


def quickstart() -> list[list[str]]:
    section = README.read_text(encoding="utf-8").split("\n## Quickstart", 1)[1].split("\n## ", 1)[0]
    return prmkit_commands(next(body for language, body in fenced_blocks(section) if language == "bash"))


def test_the_quickstart_is_synth_train_score_eval_on_the_example_config():
    assert [argv[0] for argv in quickstart()] == ["data", "train", "score", "eval"]
    assert quickstart()[1] == ["train", "examples/synthetic-lora.yaml"]


@pytest.mark.slow
def test_the_quickstart_runs_as_pasted_on_a_tiny_model(tiny_llama, tmp_path, monkeypatch):
    """The four commands as written, in a fresh folder, with the backbone swapped for the tiny test model (and the
    sizes cut to fit it) by overrides added at the end, as a user would add them."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    tiny = {"data": ["--rows", "48", "--val-rows", "12"],
            "train": [f"model.base={tiny_llama}", "model.num_layers=null", "lora.top_layers=null", "lora.r=4",
                      "data.max_length=512", "training.max_steps=2", "training.batch_size=4",
                      "training.head_init_rows=16", "training.eval_steps=2", "training.save_steps=2"]}
    for argv in quickstart():
        assert main(argv + tiny.get(argv[0], [])) == 0, argv
    assert (tmp_path / "runs/prm/prmkit.json").is_file()
    chains = [json.loads(line) for line in (tmp_path / "data/synth/val.jsonl").read_text().splitlines()]
    scored = [json.loads(line) for line in (tmp_path / "runs/prm/val-scored.jsonl").read_text().splitlines()]
    assert [row["completions"] for row in scored] == [row["completions"] for row in chains]
    assert all(0 < p < 1 for row in scored for p in row["step_scores"])  # a bce run's probabilities, none cut
    split = json.loads((tmp_path / "runs/prm/eval/val/metrics.json").read_text())["splits"]["val"]
    assert (split["rows"], split["steps"], split["steps_unscored"]) == (12, sum(len(c["labels"]) for c in chains), 0)
