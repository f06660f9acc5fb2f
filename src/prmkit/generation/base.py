"""What every generation backend returns and how a problem becomes a policy prompt.

A backend takes finished prompt strings and returns, for each prompt, `n` `Sample`s: the text generated (cut just
before the first stop string it produced, if any), how many tokens that cost, why it ended, and the policy's
log-probability of those tokens. Labelling and search only ever see this contract, so the transformers and vLLM
backends are interchangeable.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol, Sequence

from prmkit.errors import PRMError
from prmkit.generation.options import GenerationOptions

FinishReason = Literal["stop", "eos", "length"]


@dataclass(frozen=True)
class Sample:
    text: str  # the generated text, without the stop string that ended it
    tokens: int  # tokens generated, the stop string's included, padding not
    finish_reason: FinishReason  # stop: a stop string; eos: the model ended; length: max_new_tokens reached
    stop: str | None = None  # the stop string that ended it, when finish_reason is "stop"
    # The sum of the log-probs of the `tokens` generated tokens under the policy's raw distribution (temperature 1,
    # no top-p), the policy's own confidence in the sample; None where the backend did not compute it.
    logprob: float | None = None


class Generator(Protocol):
    name: str  # backend and model, for provenance: "transformers:/path/to/model"
    options: GenerationOptions

    def prompt(self, problem: str, prefix: str = "") -> str:
        """The policy's prompt for a problem (chat template, system prompt) with `prefix`, the solution so far,
        already written by the assistant."""
        ...

    def generate(self, prompts: Sequence[str], n: int = 1, *, stop: Sequence[str] = (),
                 max_new_tokens: int | None = None, temperature: float | None = None,
                 seed: int | None = None) -> list[list[Sample]]:
        """`n` samples per prompt, in prompt order. Unset keywords take the generator's options."""
        ...

    def close(self) -> None:
        ...


def chat_prompt(tokenizer, problem: str, prefix: str, system_prompt: str | None) -> str:
    """The chat template's text for (system, user=problem) with the assistant's turn opened and `prefix` in it.
    A tokenizer without a chat template (a bare test model) gets plain text in the same order."""
    if getattr(tokenizer, "chat_template", None):
        messages = ([{"role": "system", "content": system_prompt}] if system_prompt else [])
        messages.append({"role": "user", "content": problem})
        opened = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        return opened + prefix
    head = f"{system_prompt}\n\n" if system_prompt else ""
    return f"{head}{problem}\n\n{prefix}"


def cut_at_stop(text: str, stop: Sequence[str]) -> tuple[str, str | None]:
    """`text` up to the earliest stop string in it, and that string (None when none occurs)."""
    best: tuple[int, str] | None = None
    for candidate in stop:
        at = text.find(candidate)
        if at != -1 and (best is None or at < best[0]):
            best = (at, candidate)
    return (text, None) if best is None else (text[:best[0]], best[1])


def check_stop(stop: Sequence[str]) -> tuple[str, ...]:
    if isinstance(stop, str):
        raise PRMError(f"stop must be a list of strings, got the string {stop!r}; wrap it: [{stop!r}]")
    if any(not s for s in stop):
        raise PRMError("stop contains an empty string; an empty stop string would end every sample at once")
    return tuple(stop)

