"""Task-adaptive pretraining: more masked-LM, on the task's own text, before fine-tuning on its labels.

Gururangan et al. (2020), "Don't Stop Pretraining", continue masked-LM pretraining on the unlabelled text of
a task's training set (TAPT) before fine-tuning, and find it helps most where the pretraining corpus and the
task differ. Ours differ a lot: the CPU recipe pretrains on 217k words of Wikipedia, and SST-2's training
file holds 67k phrases from film reviews (935k word pieces), in a vocabulary whose sentiment words the
pretraining text rarely uses. Five epochs of it lift SST-2 dev accuracy from the CPU preset's checkpoints
on every run measured, TREC-6 too (records 2026-11-26-task-adaptive-pretraining, 2026-11-26-trec-adaptation).

`adapt_encoder` trains the checkpoint's BertForPreTraining on the task's encoded training rows, masked the
standard way (15%, 80/10/10, a fresh draw every batch; the [CLS] A [SEP] (B [SEP]) layout the task uses;
labels and NSP unused) for `cfg.adapt_epochs` epochs through the loop every job runs, scores masked-LM
accuracy on fixed masks of held-out rows (the dev file's; only reported, nothing is chosen by them) before
and after, and copies the adapted encoder into the task model. OUT/adapt/ records it like a pretraining
run: metrics.jsonl and best/, a pretraining checkpoint of the adapted model that fill-mask, attention and
the other tools read.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from nanobert.checkpoints.checkpoint import save_checkpoint
from nanobert.checkpoints.kinds import PRETRAINING
from nanobert.config import FinetuneConfig, TrainConfig, config_to_dict
from nanobert.data.labelled import Encoded, ExampleStream
from nanobert.data.masking import MaskingCollator
from nanobert.data.nsp import Instance
from nanobert.engine.loop import Job, Plan, fit
from nanobert.engine.optimizer import build_optimizer
from nanobert.engine.precision import training_precision
from nanobert.engine.run_log import RunLog, prepare_out_dir
from nanobert.engine.run_state import RunState
from nanobert.errors import NanobertError
from nanobert.finetuning.task import copy_encoder, seed_run
from nanobert.model import BertForPreTraining
from nanobert.objectives.mlm_nsp import mlm_nsp_metrics

MASK_PROB = 0.15  # BERT's standard rate: adaptation polishes a model, it does not pretrain one fast
WARMUP_RATIO = TrainConfig.warmup_ratio  # pretraining's
EVAL_SEED = TrainConfig.eval_seed  # the same masks before and after adaptation
ADAPT_DIR = "adapt"


def check_adaptation(cfg: FinetuneConfig, from_scratch: bool) -> None:
    """Adaptation continues a pretrained encoder; asked of the from-scratch control it is a mistake."""
    if cfg.adapt_epochs and from_scratch:
        raise NanobertError(
            "--adapt-epochs continues pretraining a checkpoint's encoder; the from-scratch control has none "
            "(drop --adapt-epochs or --from-scratch)"
        )


class MaskedRows(ExampleStream):
    """Endless masked batches of encoded task rows, for the adaptation loop.

    Each epoch is a fresh order (a pure function of seed and epoch): rows sorted by length with random ties,
    cut into batches, the batches shuffled. Rows of one length share a batch, so short phrases cost little
    padding. Every batch is masked afresh by a seeded MaskingCollator.
    """

    def __init__(self, data: Encoded, batch_size: int, seed: int, vocab_size: int):
        self.lengths = np.array([len(ids) for ids in data.input_ids])
        self.collator = MaskingCollator(vocab_size, mask_prob=MASK_PROB, seed=seed, pad_to_multiple_of=8)
        super().__init__(data, batch_size, seed)

    def batches(self, epoch: int) -> list[np.ndarray]:
        rng = np.random.default_rng([self.seed, epoch])
        order = np.lexsort((rng.random(len(self.lengths)), self.lengths))
        batches = [order[i : i + self.batch_size] for i in range(0, len(order), self.batch_size)]
        return [batches[i] for i in rng.permutation(len(batches))]

    def collate(self, index: np.ndarray) -> dict[str, torch.Tensor]:
        return masked_batch(self.data, index, self.collator)


def rows_as_instances(data: Encoded, index: Iterable[int]) -> list[Instance]:
    """Rows `index` of `data` in the shape the masking collator takes (their NSP label, 0, goes unused)."""
    return [Instance(data.input_ids[i], data.token_type_ids[i], 0) for i in index]


def masked_batch(data: Encoded, index: np.ndarray, collator: MaskingCollator) -> dict[str, torch.Tensor]:
    """Rows `index` of `data`, padded and masked, for training: without the NSP label (the loss has none)."""
    batch = collator(rows_as_instances(data, index))
    batch.pop("next_sentence_label")
    return batch


def mlm_loss(model: BertForPreTraining, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The masked-LM loss alone, in chunks without the (N, V) logits."""
    return {"loss": model(**batch, return_logits=False).mlm_loss}


def held_out_batches(rows: Encoded, batch_size: int, vocab_size: int) -> list[dict[str, torch.Tensor]]:
    """Fixed masks of `rows` for before-and-after scoring. They keep the collator's dummy NSP label
    (`mlm_nsp_metrics` wants one; its NSP figures are dropped)."""
    collator = MaskingCollator(vocab_size, mask_prob=MASK_PROB, seed=EVAL_SEED)
    starts = range(0, len(rows), batch_size)
    return [collator(rows_as_instances(rows, range(i, min(i + batch_size, len(rows))))) for i in starts]


def adapt_encoder(
    pretrained: BertForPreTraining,
    model: torch.nn.Module,
    tokenizer: Any,
    train: Encoded,
    held_out: Encoded,
    cfg: FinetuneConfig,
    out_dir: Path,
    quiet: bool,
) -> dict[str, Any]:
    """Adapt `pretrained` on `train`'s text (module docstring), then load its encoder into the task model
    `model.bert`; score masked-LM on `held_out` before and after. Returns what the summary records."""
    device = next(model.parameters()).device
    pretrained.to(device)
    adapt_dir = out_dir / ADAPT_DIR
    prepare_out_dir(adapt_dir, overwrite=True, resumable=False)  # out_dir is this run's: only stale logs here
    job, plan, why = _job(pretrained, tokenizer, train, held_out, cfg, adapt_dir, device)
    run, log = RunState(), RunLog(adapt_dir, plan.total_steps, 0, quiet)
    before = job.evaluate()
    log.record({"split": "held_out", "step": 0, **before})
    log.say(
        f"nanobert: adapting the encoder to the task's text first: {cfg.adapt_epochs} epochs of masked-LM "
        f"({plan.total_steps} steps of {cfg.adapt_batch_size} rows); held-out masked-LM accuracy "
        f"{before['mlm_accuracy']:.3f} before; precision {why}"
    )
    outcome = fit(job, plan, run, log)
    if outcome.signalled:  # the user asked to stop: not the fine-tuning either
        log.say(
            f"nanobert: adaptation stopped at step {run.step}; its model so far is in {adapt_dir / 'best'}"
        )
        raise KeyboardInterrupt
    copy_encoder(pretrained, model, pooler=not cfg.fresh_pooler)
    seed_run(cfg.seed)  # fine-tuning draws (dropout, shuffles) as they would be without adaptation
    return {
        "epochs": cfg.adapt_epochs,
        "steps": run.step,
        "learning_rate": cfg.adapt_learning_rate,
        "batch_size": cfg.adapt_batch_size,
        "precision": "bf16" if job.amp_dtype else "fp32",
        "held_out_before": before,
        "held_out_after": outcome.final,
        "train_time_s": round(run.train_time, 2),
        "checkpoint": str(adapt_dir / "best"),
    }


def _job(
    pretrained: BertForPreTraining,
    tokenizer: Any,
    train: Encoded,
    held_out: Encoded,
    cfg: FinetuneConfig,
    adapt_dir: Path,
    device: torch.device,
) -> tuple[Job, Plan, str]:
    """What the loop needs: masked batches of `train`, the masked-LM loss, one evaluation on fixed masks of
    `held_out` at the end, the adapted model saved as adapt_dir/best; and why the precision is what it is."""
    vocab_size = pretrained.config.vocab_size
    stream = MaskedRows(train, cfg.adapt_batch_size, cfg.seed, vocab_size)
    scored = held_out_batches(held_out, cfg.eval_batch_size, vocab_size)
    amp_dtype, why = _precision(pretrained, train, cfg, device)

    def evaluate() -> dict[str, float]:
        metrics = mlm_nsp_metrics(pretrained, scored, device, amp_dtype)
        return {k: v for k, v in metrics.items() if k.startswith("mlm_")}

    def save(name: str, run: RunState, state: dict | None) -> Path:
        extra = {"adapted_with": config_to_dict(cfg), "adapt_step": run.step}
        return save_checkpoint(adapt_dir / name, pretrained, None, tokenizer, extra=extra, kind=PRETRAINING)

    steps = cfg.adapt_epochs * stream.batches_per_epoch()
    plan = Plan(
        learning_rate=cfg.adapt_learning_rate,
        warmup_ratio=WARMUP_RATIO,
        total_steps=steps,
        grad_clip=cfg.grad_clip,
        log_interval=cfg.log_interval,
        eval_interval=steps,  # once, at the end
        checkpoint_interval=None,
        resumable=False,
    )
    job = Job(
        model=pretrained,
        train_model=pretrained,
        optimizer=build_optimizer(pretrained, cfg.adapt_learning_rate, cfg.weight_decay, eps=cfg.adam_eps),
        feeder=stream,
        data_state=stream.state_dict(),
        loss=mlm_loss,
        evaluate=evaluate,
        save=save,
        device=device,
        amp_dtype=amp_dtype,
        metric="mlm_accuracy",
        eval_split="held_out",
        divergence_hint="lower --adapt-learning-rate",
    )
    return job, plan, why


def _precision(
    pretrained: BertForPreTraining, train: Encoded, cfg: FinetuneConfig, device: torch.device
) -> tuple[torch.dtype | None, str]:
    """`engine.precision.training_precision` on a masked batch of the first training rows."""
    first = np.arange(min(cfg.adapt_batch_size, len(train)))
    sample = masked_batch(train, first, MaskingCollator(pretrained.config.vocab_size, mask_prob=MASK_PROB))
    return training_precision(cfg.precision, pretrained, mlm_loss, sample, device, "adapt")


__all__ = ["MaskedRows", "adapt_encoder", "check_adaptation", "held_out_batches"]
