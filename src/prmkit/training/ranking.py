"""The ranking term in the Trainer: batches of whole prompt groups, the pairs counted over an optimizer step, the
term added to the step loss and logged as `ranking_loss`.

Normalisation follows the step loss (prmkit.loss): each micro-batch's pair losses are summed and divided by the
pairs of the whole accumulated batch (all processes, as transformers counts `num_items_in_batch`), so gradient
accumulation neither multiplies the term nor turns it into a mean of means.
"""

from __future__ import annotations

from functools import partial

import torch
from torch.utils.data import DataLoader
from transformers.trainer_utils import seed_worker

from prmkit.loss import chain_scores, ranking_loss, ranking_pairs, step_mask
from prmkit.training.siblings import CHAIN_CORRECT, GROUP_IDS, SiblingBatchSampler, Siblings

RANKING_PAIRS = "ranking_pairs"  # batch key: the pairs of the optimizer step this micro-batch belongs to


def batch_pairs(batch: dict) -> int:
    """(right, wrong) pairs of one prompt within a collated batch."""
    usable = step_mask(batch["labels"]).any(dim=-1)
    return int(ranking_pairs(batch[GROUP_IDS], batch[CHAIN_CORRECT], usable).sum())


class SiblingRanking:
    """Trainer mixin, active when `ranking_weight` > 0 (the training rows then carry `group` and `correct`, and the
    collator is a SiblingCollator)."""

    ranking_weight: float = 0.0
    ranking_score: str = "min"
    train_siblings: Siblings | None = None
    _ranking_sum: torch.Tensor | None = None  # ranking terms since the last training log
    _ranking_from: int | None = None  # the optimizer step that sum starts at

    def get_train_dataloader(self):
        if not self.ranking_weight:
            return super().get_train_dataloader()
        args = self.args
        sampler = SiblingBatchSampler(self.train_siblings.groups, self.train_siblings.correct,
                                      self._train_batch_size, args.seed)
        loader = DataLoader(self.train_dataset, batch_sampler=sampler, collate_fn=self.data_collator,
                            num_workers=args.dataloader_num_workers, pin_memory=args.dataloader_pin_memory,
                            persistent_workers=args.dataloader_persistent_workers and args.dataloader_num_workers > 0,
                            worker_init_fn=partial(seed_worker, num_workers=args.dataloader_num_workers,
                                                   rank=args.process_index))
        return self.accelerator.prepare(loader)

    def get_batch_samples(self, epoch_iterator, num_batches, device):
        """The engine fetches an optimizer step's micro-batches at once (to count their labelled steps); their pairs
        are counted here and handed to each micro-batch."""
        batch_samples, num_items = super().get_batch_samples(epoch_iterator, num_batches, device)
        if self.ranking_weight and batch_samples and GROUP_IDS in batch_samples[0]:
            pairs = torch.tensor(sum(batch_pairs(batch) for batch in batch_samples), device=device)
            if self._counts_across_processes():
                pairs = self.accelerator.gather(pairs).sum()
            for batch in batch_samples:
                batch[RANKING_PAIRS] = pairs
        return batch_samples, num_items

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        groups, correct = inputs.pop(GROUP_IDS, None), inputs.pop(CHAIN_CORRECT, None)
        pairs = inputs.pop(RANKING_PAIRS, None)
        if not (self.ranking_weight and model.training and groups is not None):
            return super().compute_loss(model, inputs, return_outputs=return_outputs,
                                        num_items_in_batch=num_items_in_batch)
        labels = inputs["labels"]  # the engine pops them from `inputs`
        loss, outputs = super().compute_loss(model, inputs, return_outputs=True, num_items_in_batch=num_items_in_batch)
        scores, usable = chain_scores(outputs["logits"].squeeze(-1), labels, self.ranking_score)
        # The engine scales the step loss by the process count when it counted items across processes (DDP then
        # averages the gradients); the ranking term, normalised by the pairs of all processes, gets the same scale.
        term = ranking_loss(scores, groups, correct, usable, pairs)
        if self._counts_across_processes():
            term = term * self.accelerator.num_processes
        self._note_ranking(term.detach())
        loss = loss + self.ranking_weight * term
        return (loss, outputs) if return_outputs else loss

    def log(self, logs: dict, *args, **kwargs) -> None:
        """`ranking_loss` beside each training `loss`: the unweighted ranking term, per optimizer step, averaged
        over the steps since the last log (`loss` already holds ranking_weight times it)."""
        if "loss" in logs and self._ranking_sum is not None:
            steps = max(self.state.global_step - self._ranking_from, 1)
            logs["ranking_loss"] = self.accelerator.reduce(self._ranking_sum, "mean").item() / steps
            self._ranking_sum, self._ranking_from = None, None
        super().log(logs, *args, **kwargs)

    def _note_ranking(self, term: torch.Tensor) -> None:
        if self._ranking_sum is None:
            self._ranking_sum = torch.zeros((), device=term.device)
            self._ranking_from = self.state.global_step
        self._ranking_sum += term

    def _counts_across_processes(self) -> bool:
        return self.args.average_tokens_across_devices and self.args.world_size > 1
