"""Seeded synthetic PRM data: short arithmetic word problems solved one "a op b = c" step at a time.

Incorrect chains get one recorded error (see ERROR_KINDS) that can be spotted from the step and what came
before it; later steps carry on consistently from the wrong value, as a real model would.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass
from typing import Any, Callable, Literal, Sequence

from prmkit.errors import PRMError

ERROR_KINDS: tuple[str, ...] = ("arithmetic_slip", "wrong_carry", "wrong_operation", "misread_quantity")
_MAX_VALUE = 9_999  # at most four digits, so every number stays a few tokens long
_DELTAS = (1, 2, 3, 4, 5, 10)  # plausible slips: off by a little or by ten (_near adds swapped digits)

Ref = str  # "q2": the problem statement's third number; "s0": the result of the first step
StepText = Callable[[int, int, str], str]  # (a, b, "a op b = c") -> one sentence
Row = tuple[int, str, int, int]  # a, op, b, c as shown in a step


@dataclass(frozen=True)
class _Step:
    a: Ref
    op: str
    b: Ref
    text: StepText


@dataclass(frozen=True)
class _Problem:
    prompt: str
    numbers: tuple[int, ...]
    steps: tuple[_Step, ...]


@dataclass(frozen=True)
class _Fault:
    step: int
    kind: str
    side: int = 0  # operand replaced by wrong_carry / misread_quantity (0 = a, 1 = b)
    value: int = 0  # the wrong operand, or the wrong result of an arithmetic_slip
    op: str = ""  # the operator used by a wrong_operation


_PEOPLE = (("Mia", "she", "her"), ("Liam", "he", "his"), ("Ava", "she", "her"), ("Noah", "he", "his"),
           ("Zoe", "she", "her"), ("Omar", "he", "his"), ("Priya", "she", "her"), ("Lucas", "he", "his"),
           ("Sofia", "she", "her"), ("Kenji", "he", "his"), ("Lena", "she", "her"), ("Mateo", "he", "his"),
           ("Aisha", "she", "her"), ("Ethan", "he", "his"), ("Chloe", "she", "her"), ("Ravi", "he", "his"))
_ITEMS = ("apples", "marbles", "stickers", "cookies", "pencils", "oranges", "candies", "shells")
_VEHICLES = ("train", "bus", "truck", "boat", "cyclist")
_RELATIVES = ("aunt", "uncle", "grandmother", "grandfather", "cousin")
_ROOMS = ("kitchen", "hall", "bedroom", "office", "bathroom", "porch")


# Each template samples numbers until the gold chain stays in positive integers with exact divisions.
def _sharing(rng: random.Random) -> _Problem:
    name, p, _ = rng.choice(_PEOPLE)
    obj = rng.choice(_ITEMS)
    while True:
        bags, per, given, friends = rng.randint(2, 9), rng.randint(3, 12), rng.randint(1, 12), rng.randint(2, 6)
        if bags * per > given and (bags * per - given) % friends == 0:
            break
    prompt = (f"{name} buys {bags} bags of {obj} with {per} in each bag. {p.capitalize()} gives {given} {obj} "
              f"to a neighbour and shares the rest equally among {friends} friends. How many {obj} does each "
              f"friend get?")
    return _Problem(prompt, (bags, per, given, friends), (
        _Step("q0", "*", "q1", lambda a, b, e: f"{p.capitalize()} buys {a} bags of {b} {obj}, so {p} has {e} {obj}."),
        _Step("s0", "-", "q2", lambda a, b, e: f"After giving away {b} {obj}, {p} has {e} {obj} left."),
        _Step("s1", "/", "q3", lambda a, b, e: f"Shared among {b} friends, each friend gets {e} {obj}."),
    ))


def _selling(rng: random.Random) -> _Problem:
    name, p, poss = rng.choice(_PEOPLE)
    cups, cup_price = rng.randint(5, 30), rng.randint(2, 6)
    cookies, cookie_price = rng.randint(4, 20), rng.randint(1, 4)
    supplies = rng.randint(5, cups * cup_price + cookies * cookie_price - 1)
    prompt = (f"{name} sells {cups} cups of lemonade for {cup_price} dollars each and {cookies} cookies for "
              f"{cookie_price} dollars each. {p.capitalize()} spent {supplies} dollars on supplies. What is {poss} "
              f"profit in dollars?")
    return _Problem(prompt, (cups, cup_price, cookies, cookie_price, supplies), (
        _Step("q0", "*", "q1", lambda a, b, e: f"{a} cups of lemonade at {b} dollars each make {e} dollars."),
        _Step("q2", "*", "q3", lambda a, b, e: f"{a} cookies at {b} dollars each make {e} dollars."),
        _Step("s0", "+", "s1", lambda a, b, e: f"Together the sales bring in {e} dollars."),
        _Step("s2", "-", "q4", lambda a, b, e: f"After {b} dollars of supplies, the profit is {e} dollars."),
    ))


def _travel(rng: random.Random) -> _Problem:
    vehicle = rng.choice(_VEHICLES)
    speed1, speed2 = rng.randint(3, 18) * 5, rng.randint(3, 18) * 5
    hours1, hours2 = rng.randint(2, 5), rng.randint(2, 4)
    trip = speed1 * hours1 + speed2 * hours2 + rng.randint(1, 40) * 5
    prompt = (f"A {vehicle} travels at {speed1} km per hour for {hours1} hours, then at {speed2} km per hour for "
              f"{hours2} hours. The whole trip is {trip} km long. How many km are still left?")
    return _Problem(prompt, (speed1, hours1, speed2, hours2, trip), (
        _Step("q0", "*", "q1", lambda a, b, e: f"At {a} km per hour for {b} hours it covers {e} km."),
        _Step("q2", "*", "q3", lambda a, b, e: f"Then at {a} km per hour for {b} hours it covers {e} km."),
        _Step("s0", "+", "s1", lambda a, b, e: f"So far the {vehicle} has gone {e} km."),
        _Step("q4", "-", "s2", lambda a, b, e: f"Of the {a} km trip, {e} km are still left."),
    ))


def _ages(rng: random.Random) -> _Problem:
    name, _, poss = rng.choice(_PEOPLE)
    relative = rng.choice(_RELATIVES)
    age, gap, times, years = rng.randint(4, 15), rng.randint(2, 8), rng.randint(2, 4), rng.randint(2, 12)
    prompt = (f"{name} is {age} years old and {poss} brother is {gap} years older. Their {relative} is {times} "
              f"times as old as the brother. How old will the {relative} be in {years} years?")
    return _Problem(prompt, (age, gap, times, years), (
        _Step("q0", "+", "q1", lambda a, b, e: f"The brother is {b} years older than {a}, so he is {e} years old."),
        _Step("s0", "*", "q2", lambda a, b, e: f"The {relative} is {b} times as old, so {e} years old."),
        _Step("s1", "+", "q3", lambda a, b, e: f"In {b} years the {relative} will be {e} years old."),
    ))


def _tiling(rng: random.Random) -> _Problem:
    room1, room2 = rng.sample(_ROOMS, 2)
    l1, w1, l2, w2, price = (rng.randint(2, 9) for _ in range(5))
    prompt = (f"A {room1} is {l1} m by {w1} m and a {room2} is {l2} m by {w2} m. Tiles cost {price} dollars per "
              f"square metre. How many dollars does it cost to tile both rooms?")
    return _Problem(prompt, (l1, w1, l2, w2, price), (
        _Step("q0", "*", "q1", lambda a, b, e: f"The {room1} is {a} m by {b} m, so its area is {e} square metres."),
        _Step("q2", "*", "q3", lambda a, b, e: f"The {room2} is {a} m by {b} m, so its area is {e} square metres."),
        _Step("s0", "+", "s1", lambda a, b, e: f"Together the rooms cover {e} square metres."),
        _Step("s2", "*", "q4", lambda a, b, e: f"At {b} dollars per square metre, the tiles cost {e} dollars."),
    ))


def _savings(rng: random.Random) -> _Problem:
    name, p, _ = rng.choice(_PEOPLE)
    while True:
        wage, hours, weeks = rng.randint(5, 15), rng.randint(2, 8), rng.randint(2, 6)
        saved, rent, food, jars = rng.randint(10, 90), rng.randint(20, 200), rng.randint(10, 90), rng.randint(2, 5)
        rest = wage * hours * weeks + saved - rent - food
        if rest > 0 and rest % jars == 0:
            break
    prompt = (f"{name} earns {wage} dollars an hour for {hours} hours a week for {weeks} weeks and already has "
              f"{saved} dollars. After paying {rent} dollars rent and {food} dollars for food, {p} splits the rest "
              f"into {jars} equal jars. How much is in each jar?")
    return _Problem(prompt, (wage, hours, weeks, saved, rent, food, jars), (
        _Step("q0", "*", "q1", lambda a, b, e: f"{a} dollars an hour for {b} hours is {e} dollars a week."),
        _Step("s0", "*", "q2", lambda a, b, e: f"Over {b} weeks {p} earns {e} dollars."),
        _Step("s1", "+", "q3", lambda a, b, e: f"With the {b} dollars {p} already has, that is {e} dollars."),
        _Step("s2", "-", "q4", lambda a, b, e: f"After {b} dollars rent, {e} dollars are left."),
        _Step("s3", "-", "q5", lambda a, b, e: f"After {b} dollars for food, {e} dollars are left."),
        _Step("s4", "/", "q6", lambda a, b, e: f"Split into {b} jars, each jar gets {e} dollars."),
    ))


def _eggs(rng: random.Random) -> _Problem:
    while True:
        hens, per_day, days, box = rng.randint(3, 12), rng.randint(2, 4), rng.randint(2, 7), rng.choice((4, 5, 6, 10))
        total = hens * per_day * days
        broken = total % box + box * rng.randint(0 if total % box else 1, 2)
        if broken < total:
            break
    price = rng.randint(2, 5)
    prompt = (f"A farm has {hens} hens that each lay {per_day} eggs a day. In {days} days, {broken} eggs break. "
              f"The rest are packed in boxes of {box} that sell for {price} dollars each. How many dollars do the "
              f"boxes bring in?")
    return _Problem(prompt, (hens, per_day, days, broken, box, price), (
        _Step("q0", "*", "q1", lambda a, b, e: f"{a} hens laying {b} eggs each give {e} eggs a day."),
        _Step("s0", "*", "q2", lambda a, b, e: f"Over {b} days that is {e} eggs."),
        _Step("s1", "-", "q3", lambda a, b, e: f"After {b} eggs break, {e} eggs remain."),
        _Step("s2", "/", "q4", lambda a, b, e: f"In boxes of {b}, that makes {e} boxes."),
        _Step("s3", "*", "q5", lambda a, b, e: f"At {b} dollars per box, they bring in {e} dollars."),
    ))


def _bus(rng: random.Random) -> _Problem:
    riders, trips, days, fare = rng.randint(10, 40), rng.randint(2, 5), rng.randint(2, 5), rng.randint(2, 4)
    fuel = rng.randint(10, min(90, riders * trips * fare - 1))  # a day's fuel must cost less than a day's tickets
    prompt = (f"A bus carries {riders} people on each trip and makes {trips} trips a day for {days} days. Each "
              f"ticket costs {fare} dollars and fuel costs {fuel} dollars a day. What is the profit in dollars?")
    return _Problem(prompt, (riders, trips, days, fare, fuel), (
        _Step("q0", "*", "q1", lambda a, b, e: f"{a} people on each of {b} trips is {e} people a day."),
        _Step("s0", "*", "q2", lambda a, b, e: f"Over {b} days that is {e} people."),
        _Step("s1", "*", "q3", lambda a, b, e: f"At {b} dollars a ticket, that brings in {e} dollars."),
        _Step("q4", "*", "q2", lambda a, b, e: f"Fuel at {a} dollars a day for {b} days costs {e} dollars."),
        _Step("s2", "-", "s3", lambda a, b, e: f"The profit is {e} dollars."),
    ))


_TEMPLATES = (_sharing, _selling, _travel, _ages, _tiling, _savings, _eggs, _bus)


def _apply(op: str, a: int, b: int) -> int | None:
    if op == "/":
        if a % b:
            return None
        c = a // b
    else:
        c = a + b if op == "+" else a - b if op == "-" else a * b
    return c if 0 < c <= _MAX_VALUE else None


def _solve(problem: _Problem, fault: _Fault | None = None) -> list[Row] | None:
    """Shown (a, op, b, c) per step, with the fault injected; None if the chain leaves positive integers."""
    results: list[int] = []
    rows: list[Row] = []
    for i, step in enumerate(problem.steps):
        a, b = ((problem.numbers if ref[0] == "q" else results)[int(ref[1:])] for ref in (step.a, step.b))
        op = step.op
        hit = fault if fault is not None and fault.step == i else None
        if hit and hit.kind in ("wrong_carry", "misread_quantity"):
            a, b = (hit.value, b) if hit.side == 0 else (a, hit.value)
        if hit and hit.kind == "wrong_operation":
            op = hit.op
        c = _apply(op, a, b)
        if c is None:
            return None
        if hit and hit.kind == "arithmetic_slip":
            c = hit.value
        results.append(c)
        rows.append((a, op, b, c))
    return rows


def _near(value: int) -> set[int]:
    digits = str(value)
    swapped = {int(digits[::-1])} if len(digits) > 1 and digits[-1] != "0" else set()
    return {v for v in {value + d for d in _DELTAS} | {value - d for d in _DELTAS} | swapped if v > 0} - {value}


def _faults(problem: _Problem, kind: str, gold: list[Row]) -> dict[int, list[_Fault]]:
    """Every valid fault of this kind, by step: the chain stays in integers and its answer changes."""
    by_step: dict[int, list[_Fault]] = {}
    for k, step in enumerate(problem.steps):
        a, op, b, c = gold[k]
        if kind == "arithmetic_slip":
            options = [_Fault(k, kind, value=v) for v in sorted(_near(c))]
        elif kind == "wrong_operation":
            options = [_Fault(k, kind, op=o) for o in "+-*/" if o != op]
        else:
            # A wrong operand that matches a number already on the page would not be a visible error.
            seen = set(problem.numbers) | {row[3] for row in gold[:k]}
            source = "s" if kind == "wrong_carry" else "q"
            options = [_Fault(k, kind, side=side, value=v)
                       for side, (ref, shown) in enumerate(((step.a, a), (step.b, b))) if ref[0] == source
                       for v in sorted(_near(shown) - seen)]
        valid = [f for f in options if (rows := _solve(problem, f)) and rows[-1][3] != gold[-1][3]]
        if valid:
            by_step[k] = valid
    return by_step


def _make_record(rng: random.Random, correct: bool, kinds: Sequence[str], after_error: str) -> dict:
    while True:
        problem = rng.choice(_TEMPLATES)(rng)
        gold = _solve(problem)
        assert gold is not None, "a template produced an invalid gold chain"
        if correct:
            return _record(problem, gold, gold, None, after_error)
        # Pick the kind first so kinds stay balanced; redraw the problem if it cannot host this kind.
        kind = rng.choice(kinds)
        by_step = _faults(problem, kind, gold)
        if by_step:
            fault = rng.choice(by_step[rng.choice(sorted(by_step))])
            rows = _solve(problem, fault)
            assert rows is not None
            return _record(problem, rows, gold, fault, after_error)


def _record(problem: _Problem, rows: list[Row], gold: list[Row], fault: _Fault | None, after_error: str) -> dict:
    completions = [step.text(a, b, f"{a} {op} {b} = {c}") for step, (a, op, b, c) in zip(problem.steps, rows)]
    n = len(rows)
    if fault is None:
        labels: list[int | None] = [1] * n
    else:
        after: int | None = 0 if after_error == "negative" else None
        labels = [1] * fault.step + [0] + [after] * (n - fault.step - 1)
    return {"prompt": problem.prompt, "completions": completions, "labels": labels,
            "first_error": fault.step if fault else -1, "error_kind": fault.kind if fault else None,
            "answer": str(rows[-1][3]), "gold_answer": str(gold[-1][3])}


def _check_args(n_rows: int, seed: int, correct_fraction: float, after_error: str,
                error_kinds: Sequence[str]) -> tuple[str, ...]:
    if isinstance(n_rows, bool) or not isinstance(n_rows, int) or n_rows < 0:
        raise PRMError(f"n_rows must be a whole number >= 0, got {n_rows!r}; pass 0 or more rows")
    if isinstance(seed, bool) or not isinstance(seed, int):  # None would silently seed from the clock
        raise PRMError(f"seed must be an integer, got {seed!r}; pass e.g. seed=0 for reproducible data")
    if isinstance(correct_fraction, bool) or not isinstance(correct_fraction, (int, float)) \
            or not 0.0 <= correct_fraction <= 1.0:
        raise PRMError(f"correct_fraction must be in [0, 1], got {correct_fraction!r}; e.g. 0.3 for 30% correct chains")
    if after_error not in ("negative", "unlabelled"):
        raise PRMError(f"after_error must be 'negative' or 'unlabelled', got {after_error!r}; pick one of those")
    if isinstance(error_kinds, str):
        raise PRMError(f"error_kinds must be a sequence of kinds, got the string {error_kinds!r}; "
                       f"wrap it: ({error_kinds!r},)")
    kinds = tuple(error_kinds)
    unknown = [k for k in kinds if k not in ERROR_KINDS]
    if unknown:
        raise PRMError(f"unknown error kind(s) {unknown}; use any of {list(ERROR_KINDS)}")
    if not kinds and correct_fraction < 1.0:
        raise PRMError(f"error_kinds is empty but correct_fraction is {correct_fraction}; "
                       "name at least one error kind, or set correct_fraction=1.0")
    return kinds


def generate_records(n_rows: int, seed: int, *, correct_fraction: float = 0.3,
                     after_error: Literal["negative", "unlabelled"] = "negative",
                     error_kinds: Sequence[str] = ERROR_KINDS) -> list[dict]:
    """n_rows records; about correct_fraction of them fully correct; the same seed gives the same records."""
    kinds = _check_args(n_rows, seed, correct_fraction, after_error, error_kinds)
    rng = random.Random(seed)
    correct = set(rng.sample(range(n_rows), round(n_rows * correct_fraction)))
    return [_make_record(rng, i in correct, kinds, after_error) for i in range(n_rows)]


def _derive_seed(seed: int, tag: str) -> int:
    # Hash-derived, so neighbouring user seeds never share their held-out stream.
    return int.from_bytes(hashlib.sha256(f"{seed}/{tag}".encode()).digest()[:8], "big")


def generate_splits(train_rows: int, val_rows: int, seed: int, **kwargs: Any) -> tuple[list[dict], list[dict]]:
    """Train rows from `seed`, held-out rows from a different derived seed; no prompt appears in both
    (held-out rows whose prompt collides with a train prompt are regenerated)."""
    train = generate_records(train_rows, seed, **kwargs)
    val = generate_records(val_rows, _derive_seed(seed, "val"), **kwargs)
    train_prompts = {row["prompt"] for row in train}
    redraw = random.Random(_derive_seed(seed, "redraw"))
    for i, row in enumerate(val):
        # A redraw keeps the row's correct/incorrect status so correct_fraction still holds.
        fraction = 1.0 if row["first_error"] == -1 else 0.0
        while row["prompt"] in train_prompts:
            row = generate_records(1, redraw.getrandbits(64), **{**kwargs, "correct_fraction": fraction})[0]
        val[i] = row
    return train, val
