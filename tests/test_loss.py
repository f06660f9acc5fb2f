import pytest
import torch

from prmkit.loss import masked_bce, masked_mse, scores_from_head, step_loss
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
