"""Exact step labels for a policy's solution of a synthetic problem, judged against the problem's gold chain.

The rule, for step i of a solution:
- every equation "<expression> = c" it writes is true arithmetic, in exact fractions (so an integer division that
  leaves a remainder is false); an expression may chain operations (`3 + 4 + 5 = 12`, usual precedence and
  parentheses) and numbers may be negative (`5 - 8 = -3`, `-2 * 3 = -6`);
- every operand of those equations is a number the problem states or a result an earlier step reached (a written
  minus sign may negate a known number);
- the result of each equation is a value the gold chain computes (any of its steps: the order of independent steps
  may differ from the gold chain's);
- every other number the step writes is already known: stated by the problem, reached before, or reached by this
  step (a step that computes 36 and then calls it 38 states a wrong value that a later step would carry); a number
  of the problem or reached before may be restated without its sign ("a loss of 3" after reaching -3);
- a step that states an answer (\\boxed{}, "The answer is") states the gold answer;
- and every earlier step is correct: a step built on a wrong one is wrong, even when its own arithmetic holds, as
  the synthetic data and omega's `negative` policy label it. The results of a wrong step never become known, so
  its value carried into a later step is wrong there too.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction

_DIGITS = r"(?:\d{1,3}(?:,\d{3})+(?!\d)|\d+)(?:\.\d+)?"
# a number in prose (not an exponent's, "m^2"); its minus sign counts where it starts a word ("is -3"), not inside
# one ("5-8" is 5 and 8)
NUMBER = re.compile(rf"(?<![\d.^])(?:(?<![\w)])-)?{_DIGITS}")
RESULT = re.compile(rf"\s*\$?\s*(-?{_DIGITS})")
OPERATORS = ("+", "-", "*", "x", "/", "(")
TOKEN = re.compile(rf"\s*(?:({_DIGITS})|([-+*/x()]))")
EXPRESSION_CHARS = frozenset("0123456789.,+-*/x() \t$")
STEP_NUMBERING = re.compile(r"^\s*(?:[Ss]tep\s*\d+\s*[:.)]|\d+[.)]\s)")
STATED_ANSWER = re.compile(r"\\boxed\{([^{}]*)\}|[Tt]he answer is:?\s*\$?(-?[\d.,]+)")
# one spelling per operator, one character for one, so spans found in the spelled text hold in the original
SPELLINGS = str.maketrans({"×": "*", "·": "*", "÷": "/", "−": "-", "–": "-"})


@dataclass(frozen=True)
class Equation:
    operands: tuple[Fraction, ...]  # in writing order, a literal's sign included ("-2 * 3" -> -2, 3)
    value: Fraction | None  # the expression's exact value; None where it divides by zero
    result: Fraction  # the number after "="
    start: int  # where the expression starts in the step
    result_start: int  # the result's span in the step (minimal pairs rewrite it)
    result_end: int

    @property
    def true(self) -> bool:
        return self.value is not None and self.value == self.result


def number(text: str) -> Fraction | None:
    """A written number as an exact fraction ("1,000" -> 1000, "-2.5" -> -5/2); None when it is not one."""
    try:
        return Fraction(text.replace(",", "").rstrip("."))
    except (ValueError, ZeroDivisionError):
        return None


def _tokens(expression: str) -> list[str] | None:
    """Numbers and operators; a '-' written against a number where no operand precedes it is the number's sign
    ("-2 * 3", "5 - -3"), a spaced one is an operator. None when something else is left."""
    out: list[str] = []
    at = 0
    while at < len(expression):
        match = TOKEN.match(expression, at)
        if not match:
            return None if expression[at:].strip() else out
        token = match.group(1) or match.group(2)
        if match.group(1) and out and out[-1] == "-" and expression[match.start(1) - 1] == "-" \
                and (len(out) == 1 or out[-2] in OPERATORS):
            out[-1] = "-" + token
        else:
            out.append(token)
        at = match.end()
    return out


class _Parser:
    """Recursive descent over tokens: sums of products of (signed) numbers and parenthesised sums."""

    def __init__(self, tokens: list[str]):
        self.tokens, self.at, self.operands, self.operators = tokens, 0, [], 0

    def peek(self) -> str | None:
        return self.tokens[self.at] if self.at < len(self.tokens) else None

    def sum(self) -> Fraction | None:
        value = self.product()
        while self.peek() in ("+", "-"):
            op = self.tokens[self.at]
            self.at, self.operators = self.at + 1, self.operators + 1
            right = self.product()
            value = None if value is None or right is None else value + right if op == "+" else value - right
        return value

    def product(self) -> Fraction | None:
        value = self.atom()
        while self.peek() in ("*", "x", "/"):
            op = self.tokens[self.at]
            self.at, self.operators = self.at + 1, self.operators + 1
            right = self.atom()
            if value is None or right is None or (op == "/" and right == 0):
                value = None
            else:
                value = value / right if op == "/" else value * right
        return value

    def atom(self) -> Fraction | None:
        token = self.peek()
        if token == "(":
            self.at += 1
            value = self.sum()
            if self.peek() != ")":
                raise ValueError("unbalanced")
            self.at += 1
            return value
        if token is None or token in OPERATORS or token == ")":
            raise ValueError("no operand")
        self.at += 1
        value = number(token)
        self.operands.append(value)
        return value


def _evaluate(tokens: list[str]) -> tuple[Fraction | None, tuple[Fraction, ...]] | None:
    """(value, operands) of an expression with at least one operator that uses every token; else None."""
    parser = _Parser(tokens)
    try:
        value = parser.sum()
    except ValueError:
        return None
    if parser.at != len(tokens) or parser.operators == 0:
        return None
    return value, tuple(parser.operands)


def equations(step: str) -> list[Equation]:
    """Every "<expression> = <number>" in a step, in order. The expression is the longest run of arithmetic
    before the "=" that parses, so the words before it ("so its area is 9 * 4 = 36") are left out."""
    text = step.translate(SPELLINGS)
    found = []
    for equals in re.finditer("=", text):
        result = RESULT.match(text, equals.end())
        if not result:
            continue
        start = equals.start()
        while start > 0 and text[start - 1] in EXPRESSION_CHARS:
            start -= 1
        while start < equals.start():
            tokens = _tokens(text[start:equals.start()].replace("$", " "))
            parsed = _evaluate(tokens) if tokens else None
            if parsed:
                value, operands = parsed
                found.append(Equation(operands, value, number(result.group(1)), start, result.start(1),
                                      result.end(1)))
                break
            # drop one leading token (a word's last letter "x", a dash, an unmatched parenthesis, a list's comma)
            first = TOKEN.match(text, start)
            start = first.end() if first and first.end() <= equals.start() else start + 1
    return found


def _known(value: Fraction, known: set) -> bool:
    return value in known or -value in known


def step_is_right(step: str, known: set, gold_values: set, gold_answer: str) -> tuple[bool, set]:
    """Whether one step is right on its own, given the numbers known before it, and the results it reaches."""
    reached: set = set()
    found = equations(step)
    for equation in found:
        if not equation.true or equation.result not in gold_values \
                or not all(_known(operand, known | reached) for operand in equation.operands):
            return False, reached
        reached.add(equation.result)
    answers = [m.group(1) if m.group(1) is not None else m.group(2) for m in STATED_ANSWER.finditer(step)]
    if any(number(answer) is None or number(answer) != number(gold_answer) for answer in answers):
        return False, reached
    # what is left once the equations, the stated answers and a "Step 2:" numbering are cut out
    prose = step.translate(SPELLINGS)
    for equation in reversed(found):
        prose = prose[:equation.start] + " " + prose[equation.result_end:]
    prose = STEP_NUMBERING.sub(" ", STATED_ANSWER.sub(" ", prose))
    stated = [number(n) for n in NUMBER.findall(prose)]
    if not all(value is not None and _known(value, known | reached) for value in stated):
        return False, reached
    return True, reached


def known_numbers(prompt: str) -> set:
    """The numbers a problem states."""
    return {value for value in map(number, NUMBER.findall(prompt.translate(SPELLINGS))) if value is not None}


def exact_labels(prompt: str, steps: list[str], gold_values: list, gold_answer: str) -> list[int]:
    """1 for each right step, 0 for a wrong one and for every step after it."""
    known = known_numbers(prompt)
    labels: list[int] = []
    for step in steps:
        right, reached = step_is_right(step, known, {Fraction(v) for v in gold_values}, gold_answer)
        if not right or (labels and labels[-1] == 0):
            labels.append(0)
            continue
        labels.append(1)
        known |= reached
    return labels
