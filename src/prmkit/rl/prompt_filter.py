"""Prompts worth training on: each prompt's pass rate under the policy, estimated from k samples, and the prompts
whose rate lies in a band kept (DAPO's dynamic sampling, PRIME's 0.2-0.8 filter).

Why: GRPO learns from the spread of rewards within a group. A prompt whose k samples are all right or all wrong
gives every completion the same outcome reward, so its advantages are 0 and the step is spent on nothing (TRL logs
the share of such groups as `frac_reward_zero_std`). Keeping prompts with pass rate in [low, high] (both edges
included) before training spends every step on prompts that still have something to teach. The per-prompt counts
also say how sharp the policy is: a policy that writes the same solution k times (few distinct samples, pass rates
all 0 or 1) has no room to explore at that temperature, and no filter fixes that.

The pure part (`pass_rate`, `in_band`, `prompt_stats`, `summarize`) works on lists of verdicts and answers. The
sampling part (`filter_prompts`) takes any prmkit generator (`prmkit.generation.load_generator`: transformers or
vLLM), k samples per prompt in one generate call per batch of prompts, and grades each sample's final answer
(`prmkit.answers.sample_answer`, `AnswerChecker`) against the row's gold answer. Sample the policy at the
temperature and max_new_tokens the trainer will use: the pass rate is the policy's at those settings.

OUTPUT gets one line per prompt (its row number, the problem, the gold answer, the counts, each sample's answer and
verdict, and the settings that drew them), appended a batch of prompts at a time and synced, so a killed run
continues where it stopped: lines of other settings are refused, a torn last line is redone, and a half-written
batch is sampled again whole with its own seed (`prmkit.data.problems`), so the lines come out as an unbroken run
writes them. The band is not one of those settings: a rerun with another band samples nothing and only chooses
again. The kept rows (the input rows as they were, in input order) go to KEPT, rewritten whole at the end.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from prmkit.answers import AnswerChecker, canonical_answer, sample_answer
from prmkit.data.problems import (ResumableRows, batch_option_problems, batches, derive_seed, problem_gold,
                                  problem_text, read_problem_rows)
from prmkit.display import progress_bar
from prmkit.errors import PRMError
from prmkit.files import write_jsonl

BAND = (0.2, 0.8)  # PRIME's band
EDGE = 1e-9  # a rate this close to a band edge is on it: 1/5 is kept by a band from 0.2 whatever the rounding
GENERATION_KEYS = ("backend", "seed", "temperature", "top_p", "max_new_tokens", "generation_batch_size",
                   "system_prompt")  # the generator's options that decide the samples (`logprobs` changes none)


# --- the pure part: verdicts in, pass rates and a summary out ---


def pass_rate(correct: Sequence[bool]) -> float:
    """The share of a prompt's samples that are right."""
    if not correct:
        raise ValueError("a pass rate needs at least one sample")
    return sum(map(bool, correct)) / len(correct)


def in_band(rate: float, band: tuple[float, float] = BAND) -> bool:
    """Whether `rate` lies in [low, high], both edges included (within EDGE)."""
    low, high = band
    return low - EDGE <= rate <= high + EDGE


def band_problems(band: tuple[float, float]) -> list[str]:
    """What is wrong with a band, in the user's spelling; empty when it is good."""
    if len(band) != 2 or not all(isinstance(v, (int, float)) and math.isfinite(v) for v in band):
        return [f"band={','.join(map(str, band))}: give two numbers LOW,HIGH, e.g. 0.2,0.8"]
    low, high = band
    if not 0 <= low <= high <= 1:
        return [f"band={low},{high}: give 0 <= LOW <= HIGH <= 1, e.g. 0.2,0.8 (0,1 keeps every prompt)"]
    return []


def parse_band(text: str) -> tuple[float, float]:
    """"0.2,0.8" as (0.2, 0.8); PRMError naming the flag and the fix otherwise."""
    try:
        low, high = (float(part) for part in text.split(","))
    except ValueError:
        raise PRMError(f"--band {text}: give two numbers LOW,HIGH, e.g. 0.2,0.8") from None
    problems = band_problems((low, high))
    if problems:
        raise PRMError(problems[0].replace("band=", "--band ", 1))
    return low, high


def prompt_stats(correct: Sequence[bool], answers: Sequence[str | None], texts: Sequence[str]) -> dict:
    """One prompt's counts from its k samples: verdicts, final answers (None: none found) and texts. Answers are
    told apart by `canonical_answer` (`1,000` and `1000` are one answer), texts by their stripped characters."""
    assert len(correct) == len(answers) == len(texts), (len(correct), len(answers), len(texts))
    stated = [canonical_answer(a) for a in answers if a is not None]
    return {"k": len(correct), "correct_samples": sum(map(bool, correct)), "pass_rate": pass_rate(correct),
            "distinct_answers": len(set(stated)), "distinct_samples": len({t.strip() for t in texts}),
            "no_answer": len(answers) - len(stated)}


def summarize(stats: Sequence[dict], band: tuple[float, float] = BAND) -> dict:
    """What a set of prompts says about the policy, from `prompt_stats` of each: per-sample accuracy, pass@k (the
    share of prompts with a right sample among their k), the shares all right and all wrong (groups with no reward
    spread), mean distinct answers and samples per prompt, the pass-rate histogram, and how many the band keeps."""
    if not stats:
        raise ValueError("a summary needs at least one prompt")
    samples = sum(s["k"] for s in stats)
    rates = [s["pass_rate"] for s in stats]
    kept = sum(in_band(rate, band) for rate in rates)
    all_right = sum(s["correct_samples"] == s["k"] for s in stats)
    all_wrong = sum(s["correct_samples"] == 0 for s in stats)
    ks = sorted({s["k"] for s in stats})
    histogram: dict[str, int] = {}
    for rate in sorted(rates):
        histogram[f"{rate:.3f}"] = histogram.get(f"{rate:.3f}", 0) + 1
    return {"prompts": len(stats), "k": ks[0] if len(ks) == 1 else ks, "samples": samples,
            "per_sample_accuracy": sum(s["correct_samples"] for s in stats) / samples,
            "pass_at_k": sum(s["correct_samples"] > 0 for s in stats) / len(stats),
            "all_right_share": all_right / len(stats), "all_wrong_share": all_wrong / len(stats),
            "zero_spread_share": (all_right + all_wrong) / len(stats),
            "mean_distinct_answers": sum(s["distinct_answers"] for s in stats) / len(stats),
            "mean_distinct_samples": sum(s["distinct_samples"] for s in stats) / len(stats),
            "band": list(band), "kept": kept, "kept_share": kept / len(stats), "pass_rates": histogram}


# --- the sampling part ---


@dataclass(frozen=True)
class FilterOptions:
    k: int = 8  # samples per prompt
    band: tuple[float, float] = BAND  # keep prompts with pass rate in [low, high]
    problem_field: str | None = None  # the problem's field; None: the first of data.problems.PROBLEM_FIELDS
    gold_field: str | None = None  # the gold answer's field; None: the first of data.problems.GOLD_FIELDS
    problems_per_batch: int = 8  # prompts sampled together in one generate call
    checker_workers: int = 2  # processes checking non-numeric answers with math-verify
    check_timeout: float = 5.0  # seconds per answer check; a check that runs longer counts as wrong
    limit: int | None = None  # only the first N prompts
    overwrite: bool = False  # start OUTPUT afresh instead of continuing it

    def __post_init__(self):
        problems = band_problems(self.band)
        if self.k < 1:
            problems.append(f"k={self.k}; use 1 or more samples per prompt")
        problems += batch_option_problems(self, "prompts")
        if problems:
            raise PRMError("; ".join(problems))


@dataclass(frozen=True)
class Prompt:
    row: int  # the row number in INPUT, as every prmkit command counts rows
    text: str
    gold: str
    value: dict  # the row as read, written to KEPT unchanged


@dataclass
class FilterResult:
    output: str
    kept_path: str
    prompts: int  # in the input (up to limit)
    sampled: int  # by this run
    resumed: int  # lines already in OUTPUT
    tokens: int  # generated by this run
    seconds: float
    summary: dict = field(default_factory=dict)  # `summarize` over every prompt of the input


def read_prompts(path: str | Path, options: FilterOptions) -> list[Prompt]:
    """Every prompt of INPUT (the first `limit`) with its gold answer, or one error listing every bad row."""

    def parse(number: int, value) -> Prompt:
        text = problem_text(value, options.problem_field, '{"prompt": ..., "answer": ...}')
        named = options.gold_field
        gold = None if named and value.get(named) is None else problem_gold(value, named, required=False)
        if gold is None:
            how = "give it there" if named else "give it there, or name its field with --gold-field"
            raise PRMError(f"field '{named or 'gold_answer/answer'}': missing or empty; a pass rate is measured "
                           f"against a gold answer: {how}")
        return Prompt(row=number, text=text, gold=gold, value=value)

    return read_problem_rows(path, parse, limit=options.limit, purpose="filtered",
                             expected="one prompt per row with its gold answer")


class Output(ResumableRows):
    """OUTPUT: the lines already there (by row number), checked against this run, and appending new ones. A line's
    `settings` must equal this run's whole, and its prompt and gold answer those of its input row: a pass rate
    measured against another gold answer is another measurement."""

    tool = "prmkit rl-filter"
    holds = "one line per prompt"
    made = "sampled"
    needs = ("row", "settings")

    def drawn_by(self, record: dict) -> dict | None:
        settings = record["settings"]
        return settings if isinstance(settings, dict) else None

    def other_row(self, record: dict, prompt: Prompt | None) -> str | None:
        same = prompt is None or (prompt.text, prompt.gold) == (record.get("prompt"), record.get("gold_answer"))
        return None if same else "another prompt or gold answer"


def kept_path_for(output: str | Path) -> Path:
    """KEPT's default: beside OUTPUT, `rates.jsonl` -> `rates.kept.jsonl`."""
    output = Path(output)
    return output.with_name(f"{output.stem}.kept.jsonl")


def filter_prompts(generator, input_path: str | Path, output_path: str | Path,
                   options: FilterOptions = FilterOptions(), *, kept_path: str | Path | None = None,
                   progress: bool = False, on_start: Callable[[int, int], None] | None = None) -> FilterResult:
    """Sample `options.k` solutions of every prompt of `input_path` from `generator` (a prmkit Generator), write
    each prompt's counts to `output_path` (continuing it), and the rows whose pass rate lies in `options.band` to
    `kept_path` (default: `kept_path_for(output_path)`). `on_start(prompts, already_done)` is called before any
    sampling; `progress` shows a bar. A pass rate never reads a sample's log-prob: build `generator` with
    `GenerationOptions(logprobs=False)`, as `prmkit rl-filter` does, to skip computing them."""
    started = time.perf_counter()
    prompts = read_prompts(input_path, options)
    gen = generator.options
    if options.k > 1 and gen.temperature == 0:
        raise PRMError(f"temperature=0 draws one greedy solution {options.k} times, so every pass rate is 0 or 1; "
                       "sample at the temperature the trainer will use (e.g. --temperature 0.8), or use --k 1")
    settings = {"policy": generator.name, "k": options.k, "problems_per_batch": options.problems_per_batch,
                **{key: getattr(gen, key) for key in GENERATION_KEYS if hasattr(gen, key)}}
    kept_path = Path(kept_path) if kept_path is not None else kept_path_for(output_path)
    if kept_path.suffix.lower() not in (".jsonl", ".ndjson"):
        raise PRMError(f"{kept_path}: the kept rows are JSON lines; give --kept a .jsonl path")
    if kept_path.resolve() == Path(output_path).resolve():
        raise PRMError(f"{kept_path}: the kept rows and OUTPUT are one file; give --kept another path")
    output = Output(output_path, settings, prompts, overwrite=options.overwrite)
    resumed = sum(p.row in output.done for p in prompts)
    if on_start is not None:
        on_start(len(prompts), resumed)
    sampled = tokens = 0
    with AnswerChecker(workers=options.checker_workers, timeout=options.check_timeout) as checker, \
            progress_bar(progress, "sampling", total=len(prompts), unit="prompts", completed=resumed) as update:
        for number, batch in batches(prompts, options.problems_per_batch):
            if all(p.row in output.done for p in batch):
                continue
            # the whole batch, as an unbroken run samples it: a prompt's samples depend on its generate call
            groups = generator.generate([generator.prompt(p.text) for p in batch], n=options.k,
                                        seed=derive_seed(gen.seed, "rl-filter", number))
            tokens += sum(s.tokens for group in groups for s in group)
            answers = [[sample_answer(s.text, s.finish_reason) for s in group] for group in groups]
            verdicts = checker.check_many([a for group in answers for a in group],
                                          [p.gold for p in batch for _ in range(options.k)])
            fresh = []
            for i, (prompt, group) in enumerate(zip(batch, groups)):
                if prompt.row not in output.done:
                    fresh.append(_record(prompt, group, answers[i], verdicts[i * options.k:(i + 1) * options.k],
                                         settings))
            output.append(fresh)
            sampled += len(fresh)
            update(advance=len(fresh))
    records = [output.done[p.row] for p in prompts]
    write_jsonl((p.value for p, r in zip(prompts, records) if in_band(r["pass_rate"], options.band)), kept_path)
    return FilterResult(output=str(output.path), kept_path=str(kept_path), prompts=len(prompts), sampled=sampled,
                        resumed=resumed, tokens=tokens, seconds=round(time.perf_counter() - started, 2),
                        summary=summarize(records, options.band))


def _record(prompt: Prompt, samples, answers: list[str | None], verdicts: list[bool], settings: dict) -> dict:
    stats = prompt_stats(verdicts, answers, [s.text for s in samples])
    finish: dict[str, int] = {}
    for s in samples:
        finish[s.finish_reason] = finish.get(s.finish_reason, 0) + 1
    return {"row": prompt.row, "prompt": prompt.text, "gold_answer": prompt.gold, **stats,
            "answers": answers, "verdicts": list(verdicts), "tokens": sum(s.tokens for s in samples),
            "finish_reasons": dict(sorted(finish.items())), "settings": settings}


def options_dict(options: FilterOptions) -> dict:
    """The options as JSON, for a report."""
    return {**asdict(options), "band": list(options.band)}
