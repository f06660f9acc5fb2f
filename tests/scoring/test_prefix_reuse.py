"""Chains that begin with the same tokens read them once (prmkit.scoring.prefix): scores equal a full pass of every
chain to 1e-5 in fp32, on a Llama-style and a GPT-2-style PRM, for groups split over several batches, chains of
unequal length, a chain cut by max_length, a copy of a chain, completions that also share their first step, the
children of two beams (scores of the parents' steps read in the prefix pass), and chains alone with their prompt;
and the model reads fewer tokens."""

from __future__ import annotations

import pytest
from forward_counts import tokens_read

from prmkit.scoring.prefix import MIN_SHARED_TOKENS, common_prefix, shared_prefix_groups
from prmkit.scoring.scorer import PRMScorer

TOL = 1e-5


@pytest.fixture(params=["llama", "gpt2"])
def scorer(request, tiny_run, tiny_gpt2_run):
    run = tiny_run if request.param == "llama" else tiny_gpt2_run
    return PRMScorer.from_pretrained(run, device="cpu", batch_size=2)


def groups_of_chains() -> list[tuple[str, list[str]]]:
    prompt = "Compute 3 + 4 * 2 - 5, step by step."  # short enough that no chain's prompt is cut
    group = [(prompt, ["4 * 2 = 8.", "3 + 8 = 11.", "11 - 5 = 6."]), (prompt, ["3 + 4 = 7.", "7 * 2 = 14."]),
             (prompt, ["4 * 2 = 8.", "3 + 8 = 11.", "11 - 5 = 6.", "The answer is 6."]),
             (prompt, ["4 * 2 = 8.", "8 + 3 = 12."]),  # shares its first step with the first chain
             (prompt, ["4 * 2 = 8.", "3 + 8 = 11."] * 10)]  # past max_length: steps dropped
    alone = [("What is 9 - 2?", ["9 - 2 = 7."]), ("Add 5 and 6.", ["5 + 6 = 11.", "The answer is 11."])]
    return [alone[0], *group[:3], alone[1], *group[3:], group[0]]  # and a copy of a chain, as samples often are


def test_shared_prompt_scores_equal_a_full_pass_of_every_chain(scorer):
    chains = groups_of_chains()
    scorer.reuse_prefix = False
    full, full_tokens = tokens_read(scorer, chains)
    scorer.reuse_prefix = True
    reused, reused_tokens = tokens_read(scorer, chains)
    assert [len(s) for s in reused] == [len(s) for s in full]
    for want, got in zip(full, reused):
        assert [w is None for w in want] == [g is None for g in got]
        assert [g for g in got if g is not None] == pytest.approx([w for w in want if w is not None], abs=TOL)
    assert any(s is None for s in full[6])  # the long chain was cut, and stays cut
    assert reused_tokens < full_tokens


def test_chains_cluster_by_their_common_prefix_and_lone_chains_stay_alone(scorer):
    chains = groups_of_chains()
    tokenized = [scorer.tokenize(p, s) for p, s in chains]
    groups, rest = shared_prefix_groups(tokenized, list(range(len(chains))), [p for p, _ in chains])
    assert sorted(rest) == [0, 4]  # alone with their prompts
    assert sorted(i for _, members in groups for i in members) == [1, 2, 3, 5, 6, 7]
    for shared, members in groups:
        assert shared >= MIN_SHARED_TOKENS
        assert all(tokenized[m].input_ids[:shared] == tokenized[members[0]].input_ids[:shared] for m in members)
        assert all(shared < len(tokenized[m].input_ids) for m in members)  # each keeps a token to run after it


def test_tree_search_children_share_their_parents_whole_prefix(scorer):
    """Two beams of three steps, four children each (one new step): two clusters, each sharing its parent's
    prompt and steps, so the steps before the new one are scored in the prefix pass; scores equal a full pass."""
    prompt = "Compute 3 + 4 * 2 - 5, step by step."
    parents = [["4 * 2 = 8.", "3 + 8 = 11.", "11 - 5 = 6."], ["3 + 4 = 7.", "7 * 2 = 14.", "14 - 5 = 9."]]
    endings = ["The answer is 6.", "So 6.", "The answer is 9.", "Done: 6."]
    chains = [(prompt, parent + [end]) for parent in parents for end in endings]
    tokenized = [scorer.tokenize(p, s) for p, s in chains]
    groups, rest = shared_prefix_groups(tokenized, list(range(len(chains))), [p for p, _ in chains])
    assert rest == [] and sorted(sorted(m) for _, m in groups) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    for shared, members in groups:
        assert shared > tokenized[members[0]].step_positions[2]  # the parent's three steps are in the prefix
    scorer.reuse_prefix = False
    full, full_tokens = tokens_read(scorer, chains)
    scorer.reuse_prefix = True
    reused, reused_tokens = tokens_read(scorer, chains)
    for want, got in zip(full, reused):
        assert got == pytest.approx(want, abs=TOL)
    assert reused_tokens < full_tokens / 2


def test_a_group_sharing_few_tokens_takes_the_ordinary_path(scorer):
    chains = [("Hi", ["1 + 1 = 2."]), ("Hi", ["2 + 2 = 4."])]
    tokenized = [scorer.tokenize(p, s) for p, s in chains]
    groups, rest = shared_prefix_groups(tokenized, [0, 1], ["Hi", "Hi"])
    assert groups == [] and rest == [0, 1]
