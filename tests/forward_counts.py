"""What a scorer's model reads: the tests of prefix reuse and kept caches count tokens, not seconds."""

from __future__ import annotations


def tokens_read(scorer, chains) -> tuple[list, int]:
    """The scores, and the tokens the model read for them (padding included)."""
    seen = []
    hook = scorer.model.register_forward_pre_hook(
        lambda module, args, kwargs: seen.append(kwargs["input_ids"].numel()), with_kwargs=True)
    try:
        return scorer.score_many(chains), sum(seen)
    finally:
        hook.remove()
