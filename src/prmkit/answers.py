"""Final answers: find one in a solution, put it in a normal form, and check it against a gold answer.

`extract_answer` reads the answer a solution commits to; `canonical_answer` gives equal answers one spelling,
so answers can be grouped (`vote`, the majority vote); `AnswerChecker` decides whether an answer equals a gold
answer. Plain numbers are compared here, exactly; everything else (fractions, roots, intervals, matrices, sets)
goes to math-verify in worker processes. math-verify stops a slow comparison with `signal.alarm`, which only
works in the main thread of a process and can leave sympy stuck inside C code; a worker process that runs past
its time is killed and replaced instead, so a pathological answer costs one item, never the caller.
"""

from __future__ import annotations

import logging
import multiprocessing
import re
import time
from collections import OrderedDict, deque
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from multiprocessing.connection import wait
from typing import Sequence

from prmkit.errors import PRMError

_BOX = re.compile(r"\\(?:boxed|fbox)\b")
_ANSWER_IS = re.compile(r"answer\s*(?:is|:)\s*:?\s*(.+)", re.IGNORECASE)
_HASHES = re.compile(r"####\s*(.+)")
_NUMBER = re.compile(r"[+-]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|[+-]?\.\d+")
_BASED = re.compile(r"(\d[0-9A-Fa-f]*)_\{?(\d+)\}?")  # a numeral in a stated base: 2516_8, 4210_{5}
# A `\text{}` after a number is a unit only where the answer, or one of its parts, ends there: before the end, a
# separator or a product. Before anything else (`2\text{ and }3`) it joins two parts and keeps its words.
_UNIT_ENDS = r"(?=\s*(?:\.?\s*$|[,;)\]]|\\[}\]]|\\times(?![a-zA-Z])|\\cdot(?![a-zA-Z])))"
_PLAIN_NUMBER = re.compile(r"[+-]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d*)?|[+-]?\.\d+")


def extract_answer(text: str | None, *, last_number: bool = True) -> str | None:
    """The final answer of a solution, in this order of preference: the last balanced `\\boxed{...}` or
    `\\fbox{...}`; else the last "The answer is X" / "answer: X" (X to the end of its sentence); else GSM8K's
    last "#### X"; else the last number in the text. None when none of these occurs, and when the text opens a
    box but never closes one (a solution cut off while writing its answer). Surrounding `$`, spaces and a
    trailing period are stripped. `last_number=False` leaves out the last rule: only an answer the text states."""
    if not text:
        return None
    boxed = _last_box(text)
    if boxed is None and _BOX.search(text):
        return None
    number = _last_number(text) if last_number else None
    for found in (boxed, _last_phrase(text), _last_match(_HASHES, text), number):
        if found is not None:
            cleaned = _clean(found)
            if cleaned:
                return cleaned
    return None


def sample_answer(text: str | None, finish_reason: str | None) -> str | None:
    """The final answer of a generated sample: `extract_answer`'s, except that a sample that ran out of tokens
    (`finish_reason` "length") has only an answer it states (a box, "the answer is", "####"). Its last number
    belongs to working it never finished ("7 * 2 = 14 and then we add"), and grading it would credit
    intermediate results as answers."""
    return extract_answer(text, last_number=finish_reason != "length")


def gold_answer(text: str) -> str:
    """A gold answer field as an answer: GSM8K's `answer` holds the worked solution ending "#### N" (-> "N");
    any other text is the answer itself."""
    found = _last_match(_HASHES, text)
    return _clean(found) if found is not None else text.strip()


def canonical_answer(text: str | None) -> str | None:
    """One spelling per answer, for grouping equal answers. The rules, in order:

    - a whole-answer `\\boxed{X}` / `\\fbox{X}` becomes X; `$` signs (math mode or dollars) are dropped;
    - `\\left` / `\\right`, LaTeX spacing (`\\,` `\\;` `\\:` `\\!` `\\quad` `~`) and all whitespace are dropped;
    - `\\dfrac` / `\\tfrac` become `\\frac`; `\\frac12` becomes `\\frac{1}{2}`, `\\sqrt2` becomes `\\sqrt{2}`;
    - `\\text{...}` (also `\\mbox`, `\\mathrm`) right after a number and before the end of the answer, a
      separator (`,` `;` `)` `]`) or a product (`\\times`, `\\cdot`) is a unit and is dropped (`5\\text{ cm}^2` ->
      `5`); elsewhere it is replaced by its content (`\\text{(C)}` -> `(C)`, `2\\text{ and }3` -> `2and3`, never
      `23`);
    - degrees (`^\\circ`) and a trailing percent sign are dropped (`50\\%` -> `50`), as MATH's own normaliser
      does; `x = 5` (one letter on the left) becomes `5`;
    - an integer fraction `a/b` becomes `\\frac{a}{b}`;
    - a plain number loses thousands separators, a leading `+`, trailing zeros and a trailing point
      (`1,000` -> `1000`, `5.0` -> `5`, `-0.50` -> `-0.5`, `.5` -> `0.5`).

    Two answers with the same canonical form are treated as equal; different forms may still be equal
    mathematically (`0.5` and `\\frac{1}{2}`), which is what `AnswerChecker` decides. None stays None."""
    if text is None:
        return None
    s = text.strip()
    boxed = _last_box(s)
    if boxed is not None and _BOX.match(s) and s.rstrip(". $").endswith("}"):
        s = boxed
    s = s.replace("\\$", "").replace("$", "")
    s = re.sub(r"\\(?:left|right)(?![a-zA-Z])", "", s)
    s = re.sub(r"\\(?:[,;:! ]|qquad|quad)", "", s).replace("~", "")
    s = re.sub(r"\\[dt]frac(?![a-zA-Z])", r"\\frac", s)
    s = re.sub(r"(\d)\s*\\(?:text|mbox|mathrm)\{[^{}]*\}(?:\^\{?\d\}?)?" + _UNIT_ENDS, r"\1", s)
    s = re.sub(r"\\(?:text|mbox|mathrm)\{([^{}]*)\}", r"\1", s)
    s = re.sub(r"\^\{?\\circ\}?", "", s)
    s = re.sub(r"\s+", "", s).rstrip(".")
    s = re.sub(r"\\?%$", "", s)
    equation = re.fullmatch(r"[a-zA-Z]=(.+)", s)
    if equation:
        s = equation.group(1)
    s = re.sub(r"\\frac(\d)(\d)", r"\\frac{\1}{\2}", s)
    s = re.sub(r"\\frac\{([^{}]*)\}(\d)", r"\\frac{\1}{\2}", s)
    s = re.sub(r"\\frac(\d)\{", r"\\frac{\1}{", s)
    s = re.sub(r"\\sqrt(\d)", r"\\sqrt{\1}", s)
    s = re.sub(r"(\d)\{,\}(\d)", r"\1,\2", s)
    fraction = re.fullmatch(r"(-?\d+)/(\d+)", s)
    if fraction:
        s = f"\\frac{{{fraction.group(1)}}}{{{fraction.group(2)}}}"
    number = _as_number(s)
    return _number_text(number) if number is not None else s


def vote(answers: Sequence[str | None], weights: Sequence[float] | None = None) -> list[list[int]]:
    """Majority vote over final answers, the one rule for search and evaluation: answers are grouped by
    `canonical_answer` (so "1,000" and "1000" vote together), a missing answer (None) votes for nothing, and each
    group counts its candidates, or the sum of their `weights` when given. Returns the winning groups (candidate
    indices), several on a tie, in order of first appearance; empty when no candidate has an answer."""
    if weights is not None and len(weights) != len(answers):
        raise ValueError(f"{len(weights)} weights for {len(answers)} answers")
    groups: dict[str, list[int]] = {}
    for index, answer in enumerate(answers):
        key = canonical_answer(answer)
        if key is not None:
            groups.setdefault(key, []).append(index)
    totals = [len(group) if weights is None else sum(weights[i] for i in group) for group in groups.values()]
    best = max(totals, default=None)
    return [group for group, total in zip(groups.values(), totals) if total == best]


@dataclass
class CheckCounts:
    checked: int = 0  # items asked about
    fast: int = 0  # decided here: plain numbers, equal canonical forms, missing answers
    cached: int = 0  # (answer, gold) pairs already decided in this checker
    verified: int = 0  # decided by math-verify in a worker
    timeouts: int = 0  # items that ran past `timeout` (counted wrong)
    crashes: int = 0  # items whose worker died or raised (counted wrong)
    workers_replaced: int = 0


class AnswerChecker:
    """Checks final answers against gold answers; use it as a context manager so its workers are shut down.

    Predictions are extracted answers (what `extract_answer` returns; None, an answer that could not be found,
    is wrong). For whole solution texts use `check_solutions`, which extracts first. Golds are GSM8K numbers
    ("1,234") or MATH LaTeX answers ("\\frac{\\sqrt{3}}{2}"); a whole GSM8K solution as gold goes through
    `gold_answer` first.

    Decided in this process: a missing answer (wrong), two plain numbers (compared exactly as decimals:
    "1,000" = "1000.0"), two answers with the same canonical form (right). Everything else goes to math-verify
    in `workers` spawned processes, started on first need, with `timeout` seconds per item; an item that runs
    longer, or whose worker dies, counts as wrong and is counted in `counts`, and its worker is replaced."""

    CACHE_SIZE = 65536
    START_TIMEOUT = 120.0  # seconds a fresh worker may take to import math-verify (sympy) on a busy machine

    def __init__(self, workers: int = 2, timeout: float = 5.0):
        if workers < 1:
            raise PRMError(f"workers={workers}; use 1 or more worker processes")
        if not timeout > 0:
            raise PRMError(f"timeout={timeout}; use a positive number of seconds per answer")
        self.workers, self.timeout = workers, float(timeout)
        self.counts = CheckCounts()
        self._pool: list[_Worker] = []
        self._cache: OrderedDict[tuple[str, str], bool] = OrderedDict()
        self._context = multiprocessing.get_context("spawn")

    def __enter__(self) -> "AnswerChecker":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def check(self, prediction: str | None, gold: str) -> bool:
        return self.check_many([prediction], [gold])[0]

    def check_solutions(self, solutions: Sequence[str], golds: Sequence[str]) -> list[bool]:
        return self.check_many([extract_answer(text) for text in solutions], golds)

    def check_many(self, predictions: Sequence[str | None], golds: Sequence[str]) -> list[bool]:
        if len(predictions) != len(golds):
            raise PRMError(f"check_many got {len(predictions)} predictions for {len(golds)} golds; give one "
                           "gold answer per prediction")
        results: list[bool | None] = [None] * len(predictions)
        slow: dict[tuple[str, str], list[int]] = {}
        for index, (prediction, gold) in enumerate(zip(predictions, golds)):
            self.counts.checked += 1
            quick = fast_check(prediction, gold)
            if quick is not None:
                self.counts.fast += 1
                results[index] = quick
            elif (prediction, gold) in self._cache:
                self.counts.cached += 1
                results[index] = self._cache[(prediction, gold)]
            else:
                slow.setdefault((prediction, gold), []).append(index)
        for key, verdict in self._run(list(slow)).items():
            self._remember(key, verdict)
            for index in slow[key]:
                results[index] = verdict
            self.counts.cached += len(slow[key]) - 1
        return [bool(value) for value in results]

    def close(self) -> None:
        for worker in self._pool:
            worker.stop()
        self._pool = []

    def _remember(self, key: tuple[str, str], verdict: bool) -> None:
        self._cache[key] = verdict
        if len(self._cache) > self.CACHE_SIZE:
            self._cache.popitem(last=False)

    def _run(self, items: list[tuple[str, str]]) -> dict[tuple[str, str], bool]:
        """Spread items over the workers: each worker holds at most one item, with a deadline; a worker past
        its deadline is killed and replaced."""
        verdicts: dict[tuple[str, str], bool] = {}
        pending = deque(items)
        while len(self._pool) < min(self.workers, len(items)):
            self._pool.append(_Worker(self._context))
        while pending or any(worker.item is not None for worker in self._pool):
            for worker in self._pool:
                if worker.ready and worker.item is None and pending:
                    worker.send(pending.popleft(), time.monotonic() + self.timeout)
            wait_s = min(worker.deadline for worker in self._pool) - time.monotonic()
            for conn in wait([worker.conn for worker in self._pool], min(max(0.0, wait_s), self.START_TIMEOUT)):
                worker = next(w for w in self._pool if w.conn is conn)
                try:
                    kind, value = worker.conn.recv()
                except (EOFError, OSError):
                    kind, value = "died", None
                if kind == "ready":
                    worker.ready = True
                elif kind == "error":
                    self.close()
                    raise PRMError(f"the answer-checking worker could not start: {value}; install math-verify "
                                   "(pip install math-verify)")
                elif kind == "ok":
                    self.counts.verified += 1
                    verdicts[worker.item] = bool(value)
                    worker.item = None
                else:  # the worker raised or died on this item
                    if worker.item is not None:
                        self.counts.crashes += 1
                        verdicts[worker.item] = False
                    self._replace(worker)
            now = time.monotonic()
            for worker in list(self._pool):
                if worker.deadline <= now:
                    if worker.item is None:
                        self.close()
                        raise PRMError(f"an answer-checking worker did not start within {self.START_TIMEOUT:.0f}"
                                       " s; the machine may be overloaded")
                    self.counts.timeouts += 1
                    verdicts[worker.item] = False
                    self._replace(worker)
        return verdicts

    def _replace(self, worker: "_Worker") -> None:
        worker.stop()
        self._pool[self._pool.index(worker)] = _Worker(self._context)
        self.counts.workers_replaced += 1


def fast_check(prediction: str | None, gold: str) -> bool | None:
    """The verdict when it needs no math-verify: False for a missing answer, the exact comparison of two plain
    numbers, True for equal canonical forms, digits and base compared for numerals in a stated base (`2516_8`;
    a side without a base matches the digits alone); None when math-verify must decide."""
    if prediction is None or not prediction.strip():
        return False
    mine, theirs = canonical_answer(prediction), canonical_answer(gold)
    if mine == theirs:
        return True
    a, b = _as_number(mine), _as_number(theirs)
    if a is not None and b is not None:
        return a == b
    based_mine, based_theirs = _BASED.fullmatch(mine), _BASED.fullmatch(theirs)
    if based_mine or based_theirs:  # math-verify reads 2516_8 as 2516 and would call 2516_9 equal to it
        digits_mine, base_mine = based_mine.group(1, 2) if based_mine else (mine, None)
        digits_theirs, base_theirs = based_theirs.group(1, 2) if based_theirs else (theirs, None)
        if digits_mine.isalnum() and digits_theirs.isalnum():
            same_base = base_mine == base_theirs or None in (base_mine, base_theirs)
            return same_base and digits_mine.upper() == digits_theirs.upper()
    return None


def verify_pair(prediction: str, gold: str) -> bool:
    """math-verify's verdict on one pair, each read as the content of a `\\boxed{}`. Runs inside a worker, so
    math-verify's own alarm is off: the parent enforces the time limit by killing the worker."""
    from math_verify import parse, verify

    gold_parsed = parse(f"\\boxed{{{gold}}}", parsing_timeout=None)
    predicted = parse(f"\\boxed{{{prediction}}}", parsing_timeout=None)
    if not gold_parsed or not predicted:
        return False
    return bool(verify(gold_parsed, predicted, timeout_seconds=None))


class _Worker:
    """One spawned process that answers (prediction, gold) pairs over a pipe."""

    def __init__(self, context):
        self.conn, child = context.Pipe()
        self.process = context.Process(target=_serve, args=(child, verify_pair), daemon=True)
        self.process.start()
        child.close()
        self.ready = False
        self.item: tuple[str, str] | None = None
        self._deadline = time.monotonic() + AnswerChecker.START_TIMEOUT

    @property
    def deadline(self) -> float:
        """When this worker is late: its item's deadline, its start deadline, or never when idle."""
        return self._deadline if self.item is not None or not self.ready else float("inf")

    def send(self, item: tuple[str, str], deadline: float) -> None:
        self.item, self._deadline = item, deadline
        self.conn.send(item)

    def stop(self) -> None:
        if self.process.is_alive():
            self.process.kill()
        self.process.join(timeout=5)
        self.conn.close()


def _serve(conn, check) -> None:
    try:
        import math_verify  # noqa: F401  (imported before "ready", so its import time is no item's time)
    except Exception as err:  # reported to the parent, which raises it as a user-facing error
        conn.send(("error", f"{type(err).__name__}: {err}"))
        return
    # Timeouts are off inside the worker on purpose; math-verify warns about that once per process.
    logging.getLogger("math_verify").setLevel(logging.ERROR)
    conn.send(("ready", None))
    while True:
        try:
            prediction, gold = conn.recv()
        except (EOFError, OSError):
            return
        try:
            conn.send(("ok", bool(check(prediction, gold))))
        except Exception as err:  # a parser bug on a strange answer: that item is wrong, the worker lives on
            conn.send(("failed", f"{type(err).__name__}: {err}"))


def _last_box(text: str) -> str | None:
    for match in reversed(list(_BOX.finditer(text))):
        at = match.end()
        while at < len(text) and text[at] == " ":
            at += 1
        if at < len(text) and text[at] == "{":
            depth = 0
            for end in range(at, len(text)):
                depth += {"{": 1, "}": -1}.get(text[end], 0)
                if depth == 0:
                    return text[at + 1:end]
        elif at > match.end():  # `\boxed 5`: the token after the space
            token = re.match(r"[^\s$]+", text[at:])
            if token:
                return token.group(0)
    return None


def _last_phrase(text: str) -> str | None:
    found = _last_match(_ANSWER_IS, text)
    if found is None:
        return None
    found = re.split(r"\.\s", found.replace("**", ""), maxsplit=1)[0]
    number_then_words = re.match(rf"\$?({_NUMBER.pattern})\s+[A-Za-z]", found)
    return number_then_words.group(1) if number_then_words else found


def _last_match(pattern: re.Pattern, text: str) -> str | None:
    matches = list(pattern.finditer(text))
    return matches[-1].group(1) if matches else None


def _last_number(text: str) -> str | None:
    matches = _NUMBER.findall(text)
    return matches[-1] if matches else None


def _clean(text: str) -> str:
    return text.strip().rstrip(".").strip().strip("$").strip().rstrip(".").strip()


def _as_number(text: str | None) -> Decimal | None:
    if text is None:
        return None
    s = text.strip().replace("\\$", "").lstrip("$").rstrip(".")
    if not _PLAIN_NUMBER.fullmatch(s):
        return None
    try:
        return Decimal(s.replace(",", ""))
    except InvalidOperation:
        return None


def _number_text(number: Decimal) -> str:
    text = format(number.normalize(), "f")
    return "0" if text in ("-0", "+0") else text
