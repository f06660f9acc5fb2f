"""The wire formats of `prmkit serve`: JSON bodies in, validated chains out, and the answer of each endpoint.

Everything here runs on arrival, before a request joins a batch, so a bad request is refused with a 4xx that names
the field and never reaches the model (where one bad chain would fail the whole batch it shares with others).

    POST /v1/score     {"prompt", "steps": [str]} | {"prompt", "completion": str} | {"prompt", "candidates": [...]}
    POST /get_reward   OpenRLHF's remote reward: {"query": [str], "prompts": [str], "labels": [...]}
    POST /classify     vLLM's classify, as verl's reward loop calls it: {"model", "input": str | [str]}

The answers reuse `prmkit score`'s keys (see `attach_scores`), so a row scores the same everywhere.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass

from prmkit.errors import PRMError
from prmkit.scoring.aggregate import AGGREGATIONS, aggregate, chain_reward, is_truncated
from prmkit.scoring.inputs import ParsedRow, bound_steps, completion_text, prompt_text, split_steps
from prmkit.scoring.scored_rows import attach_scores
from prmkit.serving.batcher import Chain
from prmkit.serving.options import ServeOptions


class WireError(Exception):
    """A request refused before scoring: HTTP status, a short kind (the `errors` metric label), the field."""

    def __init__(self, status: int, kind: str, field: str, message: str, *, retry: bool = False):
        super().__init__(message)
        self.status, self.kind, self.field, self.message = status, kind, field, message
        self.retry = retry  # a 503 the client should retry: answered with Retry-After

    def payload(self) -> dict:
        return {"error": {"kind": self.kind, "field": self.field, "message": self.message}}


def invalid(field: str, message: str) -> WireError:
    return WireError(422, "invalid", field, f"{field}: {message}")


def parse_json(body: bytes) -> dict:
    try:
        value = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise WireError(400, "not_json", "body", f"body: not valid JSON ({err}); send a JSON object with "
                                                 "Content-Type: application/json") from None
    if not isinstance(value, dict):
        raise WireError(422, "invalid", "body", f"body: expected a JSON object, got {type(value).__name__}")
    return value


@dataclass
class Reader:
    """Checks one request's fields against the server's limits; every error names the field and the fix."""
    options: ServeOptions
    separator: str

    def text(self, value, field: str, *, allow_empty: bool = False) -> str:
        if not isinstance(value, str):
            raise invalid(field, f"expected a string, got {_kind(value)}")
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate from a "\ud800" escape: the tokenizer would fail the batch
            raise invalid(field, "is not valid Unicode (a lone surrogate escape); send UTF-8 text") from None
        if not allow_empty and not value.strip():
            raise invalid(field, "is empty; send the problem text")
        return value

    def prompt(self, value, field: str) -> str:
        if not isinstance(value, str):
            try:
                value = prompt_text(value)  # chat messages: the last user message is the problem
            except PRMError as err:
                raise invalid(field, str(err)) from None
        return self.text(value, field)

    def steps(self, value, field: str) -> list[str]:
        """A list of step strings. How many steps and how long each may be is not refused here: a chain over the
        size limits is scored as far as it goes and answered as truncated (see `bound`)."""
        if not isinstance(value, list):
            raise invalid(field, f"expected a list of step strings, got {_kind(value)}")
        for i, step in enumerate(value):
            self.text(step, f"{field}[{i}]", allow_empty=True)
        return value

    def cut(self, text: str, field: str) -> list[str]:
        """A raw completion cut at the run's separator (empty pieces dropped, as training wrote steps)."""
        return split_steps(text, self.separator)

    def bound(self, chains: list[Chain]) -> tuple[list[Chain], list[int]]:
        """The chains as the model reads them under --max-steps and --max-step-chars, and how many steps each
        leaves unscored (`bound_steps`, the rule the in-process PRMReward follows)."""
        bounded = [bound_steps(steps, self.options.max_steps, self.options.max_step_chars) for _, steps in chains]
        return [(prompt, kept) for (prompt, _), (kept, _) in zip(chains, bounded)], [cut for _, cut in bounded]

    def chains(self, value, field: str) -> list:
        if not isinstance(value, list) or not value:
            raise invalid(field, f"expected a non-empty list, got {_kind(value)}")
        self.count(len(value), field, "chains", self.options.max_request_chains, "--max-request-chains")
        return value

    @staticmethod
    def count(n: int, field: str, what: str, limit: int, flag: str) -> None:
        if n > limit:
            raise WireError(422, "too_large", field, f"{field}: {n} {what}; the limit is {limit} per request "
                                                     f"({flag}); send fewer or raise the limit")


# ---- POST /v1/score ------------------------------------------------------------------------------------------

@dataclass
class ScoreRequest:
    parsed: ParsedRow  # prompt + one step list per chain, as `prmkit score` reads a row
    aggregate: str

    @property
    def chains(self) -> list[Chain]:
        return [(self.parsed.prompt, steps) for steps in self.parsed.steps]


def read_score(body: dict, reader: Reader) -> ScoreRequest:
    """{"prompt", "steps" | "completions" | "completion" | "candidates", "aggregate"?}; the prompt may be chat
    messages and a completion or candidate a string (cut at the run's separator) or a step list."""
    if "prompt" not in body:
        raise invalid("prompt", f"missing (keys here: {sorted(body)}); send the problem as 'prompt'")
    prompt = reader.prompt(body["prompt"], "prompt")
    how = body.get("aggregate", reader.options.aggregate)
    if how not in AGGREGATIONS:
        raise invalid("aggregate", f"{how!r} is not known; use one of {', '.join(AGGREGATIONS)}")
    if "candidates" in body:
        steps, split = [], False
        for i, candidate in enumerate(reader.chains(body["candidates"], "candidates")):
            field = f"candidates[{i}]"
            if isinstance(candidate, str):
                steps.append(reader.cut(reader.text(candidate, field, allow_empty=True), field))
                split = True
            else:
                steps.append(reader.steps(candidate, field))
        return ScoreRequest(ParsedRow("candidates", prompt, steps, split), how)
    for key in ("steps", "completions"):  # "completions" as in training records
        if key in body:
            return ScoreRequest(ParsedRow("record", prompt, [reader.steps(body[key], key)], False), how)
    if "completion" in body:
        value = body["completion"]
        if not isinstance(value, str):
            try:
                value = completion_text(value)  # chat messages: the assistant turns
            except PRMError as err:
                raise invalid("completion", str(err)) from None
        text = reader.text(value, "completion", allow_empty=True)
        return ScoreRequest(ParsedRow("record", prompt, [reader.cut(text, "completion")], True), how)
    raise invalid("steps", "no chain to score; send 'steps' (a list of step strings), 'completion' (one string, "
                           "cut at the run's separator) or 'candidates' (a list, for best-of-N)")


def score_answer(request: ScoreRequest, scores: list[list[float | None]]) -> dict:
    return attach_scores({}, request.parsed, scores, request.aggregate)


# ---- POST /get_reward (OpenRLHF) -----------------------------------------------------------------------------

def read_reward(body: dict, reader: Reader, end_tokens: tuple[str, ...]) -> list[Chain]:
    """OpenRLHF sends query[i] = prompts[i] + response; the response, less trailing end-of-text tokens, is cut
    into steps. `labels` (reference answers) are accepted and not used: a PRM judges the steps themselves."""
    queries = reader.chains(body.get("query"), "query")
    prompts = body.get("prompts")
    if not isinstance(prompts, list) or len(prompts) != len(queries):
        raise invalid("prompts", f"expected a list of {len(queries)} strings (one per query), got "
                                 f"{_kind(prompts)}; the PRM needs the prompt to find where each response starts")
    chains = []
    for i, (query, prompt) in enumerate(zip(queries, prompts)):
        prompt = reader.text(prompt, f"prompts[{i}]")
        query = reader.text(query, f"query[{i}]", allow_empty=True)
        if not query.startswith(prompt):
            raise invalid(f"query[{i}]", f"does not start with prompts[{i}] ({_preview(prompt)}); each query must "
                                         "be its prompt followed by the response, as OpenRLHF sends them")
        chains.append((prompt, reader.cut(strip_end_tokens(query[len(prompt):], end_tokens), f"query[{i}]")))
    return chains


def strip_end_tokens(text: str, end_tokens: tuple[str, ...]) -> str:
    """OpenRLHF decodes with special tokens kept, so a response ends with the policy's EOS; the PRM never saw it."""
    text = text.rstrip()
    stripped = True
    while stripped:
        stripped = False
        for token in end_tokens:
            if token and text.endswith(token):
                text, stripped = text[: -len(token)].rstrip(), True
    return text


def reward_answer(scores: list[list[float | None]], options: ServeOptions) -> dict:
    """`rewards` and `scores` (OpenRLHF's dynamic filtering reads the latter) are the chain rewards; OpenRLHF
    concatenates each `extra_logs` value as a tensor of one number per sample, so the ragged per-step scores go in
    `step_scores` beside it and `extra_logs` holds per-sample numbers."""
    rewards = [chain_reward(s, options.aggregate, options.floor, options.truncated) for s in scores]

    def per_chain(how: str) -> list[float]:
        return [options.floor if (v := aggregate(s, how)) is None else float(v) for s in scores]

    truncated = [is_truncated(s) for s in scores]
    return {"rewards": rewards, "scores": rewards, "step_scores": scores, "truncated": truncated,
            "extra_logs": {"prm_steps": [len(s) for s in scores], "prm_truncated": [float(t) for t in truncated],
                           "prm_unscored_steps": [sum(v is None for v in s) for s in scores],
                           "prm_min_step": per_chain("min"), "prm_mean_step": per_chain("mean"),
                           "prm_last_step": per_chain("last")}}


# ---- POST /classify (vLLM, as verl calls it) -----------------------------------------------------------------

def read_classify(body: dict, reader: Reader) -> list[Chain]:
    """Each `input` string is a chain in the PRM's own layout: prompt, separator, step, separator, step ... (the
    first piece is the prompt). `messages` ([{"role", "content"}]: user = prompt, assistant = the answer) is read
    instead when given. vLLM's other fields (activation, truncate_prompt_tokens, ...) are accepted and ignored."""
    if "messages" in body:
        messages = body["messages"]
        try:
            prompt, completion = prompt_text(messages), completion_text(
                [m for m in messages if m.get("role") == "assistant"])
        except (PRMError, AttributeError, TypeError):
            raise invalid("messages", "expected a list of {'role', 'content'} messages with a user and an "
                                      "assistant turn") from None
        return [(reader.text(prompt, "messages"), reader.cut(completion, "messages"))]
    value = body.get("input")
    inputs = [value] if isinstance(value, str) else reader.chains(value, "input")
    chains = []
    for i, text in enumerate(inputs):
        field = "input" if isinstance(value, str) else f"input[{i}]"
        if not isinstance(text, str):
            raise invalid(field, f"expected text, got {_kind(text)}; token ids are not accepted")
        pieces = reader.cut(reader.text(text, field), field)
        chains.append((pieces[0], pieces[1:]))
    return chains


def classify_answer(scores: list[list[float | None]], options: ServeOptions, model: str) -> dict:
    """vLLM's answer less `usage`: one item per input whose `probs` holds one number, the chain reward, which is
    what verl reads (data[-1].probs[-1]); the per-step scores ride along in `step_scores`."""
    data = [{"index": i, "label": f"prm_{options.aggregate}",
             "probs": [chain_reward(s, options.aggregate, options.floor, options.truncated)], "num_classes": 1,
             "step_scores": s, "truncated": is_truncated(s)} for i, s in enumerate(scores)]
    return {"id": f"classify-{uuid.uuid4().hex}", "object": "list", "created": int(time.time()), "model": model,
            "data": data}


def _kind(value) -> str:
    if value is None:
        return "nothing"
    return f"{type(value).__name__} {_preview(json.dumps(value, default=str))}"


def _preview(text: str, limit: int = 40) -> str:
    return repr(text if len(text) <= limit else text[:limit] + "...")
