import math

import pytest
import torch

from prmkit.loss import chain_scores, masked_bce, masked_mse, ranking_loss, ranking_pairs, scores_from_head, step_loss
from prmkit.tokenize import IGNORE_INDEX

I = IGNORE_INDEX


def test_mse_is_mean_over_labelled_steps_only():
    predictions = torch.tensor([[0.5, 9.0, 1.0], [0.0, 0.2, 7.0]])
    labels = torch.tensor([[1.0, I, 1.0], [I, 0.0, I]])
    expected = ((0.5 - 1) ** 2 + 0 + 0.2 ** 2) / 3
    assert masked_mse(predictions, labels).item() == pytest.approx(expected)


def test_bce_matches_torch_on_valid_steps_and_accepts_soft_labels():
    logits = torch.tensor([[2.0, -1.0, 0.3], [0.1, 5.0, -3.0]])
    labels = torch.tensor([[1.0, I, 0.25], [I, 0.0, 0.7]])
    mask = labels != I
    expected = torch.nn.functional.binary_cross_entropy_with_logits(logits[mask], labels[mask])
    assert masked_bce(logits, labels).item() == pytest.approx(expected.item(), rel=1e-6)


def test_num_items_makes_accumulated_sum_equal_one_big_batch():
    torch.manual_seed(0)
    logits = torch.randn(4, 6)
    labels = torch.tensor([[1, I, 0, I, I, I], [I, I, I, 1, 0, 1], [0, I, I, I, I, I], [1, 1, 1, 0, 0, I]],
                          dtype=torch.float32)
    for loss in (masked_bce, masked_mse):
        whole = loss(logits, labels)
        total = int((labels != I).sum())
        parts = loss(logits[:1], labels[:1], total) + loss(logits[1:], labels[1:], torch.tensor(total))
        assert parts.item() == pytest.approx(whole.item(), rel=1e-6)
        # the mean of per-batch means differs when batches hold different step counts: the bug this avoids
        assert (loss(logits[:1], labels[:1]) + loss(logits[1:], labels[1:])).item() / 2 != pytest.approx(whole.item())


def test_no_labelled_step_gives_zero_not_nan():
    logits = torch.randn(2, 3, requires_grad=True)
    labels = torch.full((2, 3), I)
    for loss in (masked_bce, masked_mse):
        value = loss(logits, labels)
        value.backward()
        assert value.item() == 0.0 and torch.isfinite(logits.grad).all()


def test_ignored_positions_get_no_gradient():
    logits = torch.zeros(1, 3, requires_grad=True)
    masked_bce(logits, torch.tensor([[1.0, I, 0.0]])).backward()
    assert logits.grad[0, 1] == 0 and logits.grad[0, 0] != 0 and logits.grad[0, 2] != 0


def test_scores_and_dispatch():
    head = torch.tensor([0.0, 2.0])
    assert torch.allclose(scores_from_head("bce", head), torch.sigmoid(head))
    assert torch.equal(scores_from_head("mse", head), head)
    with pytest.raises(ValueError, match="unknown loss"):
        step_loss("hinge", head, head)


def test_chain_scores_read_the_min_or_the_last_labelled_step():
    head = torch.tensor([[2.0, -9.0, -1.0], [0.5, -9.0, 3.0], [7.0, 7.0, 7.0]])
    labels = torch.tensor([[1.0, I, 0.0], [1.0, I, 1.0], [I, I, I]])  # -9 sits on unlabelled tokens
    scores, has_step = chain_scores(head, labels, "min")
    assert scores.tolist() == [-1.0, 0.5, 0.0] and has_step.tolist() == [True, True, False]
    assert chain_scores(head, labels, "last")[0].tolist() == [-1.0, 3.0, 0.0]
    with pytest.raises(ValueError, match="unknown chain score"):
        chain_scores(head, labels, "mean")


def test_ranking_loss_is_the_mean_bradley_terry_loss_over_right_wrong_pairs_of_one_prompt():
    # prompt 0: right 1.0, wrong 0.0; prompt 1: right 0.0, wrongs 2.0 and -1.0; a right row of no group
    scores = torch.tensor([1.0, 0.0, 0.0, 2.0, -1.0, 5.0])
    groups = torch.tensor([0, 0, 1, 1, 1, -1])
    correct = torch.tensor([True, False, True, False, False, True])
    pairs = [(1.0, 0.0), (0.0, 2.0), (0.0, -1.0)]
    expected = sum(math.log(1 + math.exp(-(r - w))) for r, w in pairs) / 3  # (0.3133 + 2.1269 + 0.3133) / 3
    assert ranking_loss(scores, groups, correct).item() == pytest.approx(expected, rel=1e-6)
    assert expected == pytest.approx(0.917817, abs=1e-6)
    # a chain with no labelled step (usable False) takes part in no pair: prompt 1's wrong 2.0 drops out
    usable = torch.tensor([True, True, True, False, True, True])
    expected = (math.log(1 + math.exp(-1.0)) + math.log(1 + math.exp(-1.0))) / 2
    assert ranking_loss(scores, groups, correct, usable).item() == pytest.approx(expected, rel=1e-6)


def test_ranking_gradient_pushes_right_up_and_wrong_down():
    scores = torch.tensor([0.0, 0.0], requires_grad=True)
    ranking_loss(scores, torch.tensor([3, 3]), torch.tensor([True, False])).backward()
    # d/ds_r of -log sigmoid(s_r - s_w) = -(1 - sigmoid(0)) = -0.5
    assert scores.grad.tolist() == pytest.approx([-0.5, 0.5])


def test_num_pairs_makes_accumulated_ranking_terms_equal_one_big_batch():
    scores = torch.tensor([1.0, 0.0, 0.0, 2.0, -1.0])
    groups = torch.tensor([0, 0, 1, 1, 1])
    correct = torch.tensor([True, False, True, False, False])
    whole = ranking_loss(scores, groups, correct)
    parts = ranking_loss(scores[:2], groups[:2], correct[:2], num_pairs=3) \
        + ranking_loss(scores[2:], groups[2:], correct[2:], num_pairs=torch.tensor(3))
    assert parts.item() == pytest.approx(whole.item(), rel=1e-6)
    mean_of_means = (ranking_loss(scores[:2], groups[:2], correct[:2])
                     + ranking_loss(scores[2:], groups[2:], correct[2:])) / 2
    assert mean_of_means.item() != pytest.approx(whole.item())


def test_no_pair_gives_zero_ranking_loss_and_no_nan_gradient():
    head = torch.randn(3, 4, requires_grad=True)
    labels = torch.tensor([[1.0, I, I, I], [I, I, I, I], [0.0, I, I, 1.0]])
    scores, usable = chain_scores(head, labels)
    value = ranking_loss(scores, torch.tensor([0, 0, 1]), torch.tensor([True, False, True]), usable)
    value.backward()
    assert value.item() == 0.0 and torch.isfinite(head.grad).all()
    assert ranking_pairs(torch.tensor([0, 0, 1]), torch.tensor([True, False, True]), usable).sum() == 0
