"""The training loop every job runs: stop checks, learning rate, step, log, evaluate, save.

Follows nanoGPT's train.py and litgpt's `fit`. A job (pretraining, fine-tuning) sets up a `Job`, what the
loop needs from it: the model, the optimizer, a batch feeder (`data.feeder.Feeder`), a loss function, an
evaluation function and a way to save, and a `Plan`: how long, how often to log, evaluate and save. `fit`
then runs the loop and the end of the run (a final evaluation, a resumable last/ checkpoint), and returns
what happened; the job writes its own summary. Nothing here knows whether the batches are masked sentences
or labelled examples. What a run remembers, and the rule that picks best/, are in run_state.py.

Host synchronisation (`.item()`) happens only at log and evaluation intervals. Under data parallelism
(`distributed.py`) every rank runs the same loop; the stop decision, the logged losses and the RNG states in
a checkpoint are agreed across ranks, and only rank 0 evaluates and writes.

A plan that holds the peak rate and then decays may keep the last state at the peak (pre-decay/,
`Plan.keep_pre_decay`), from which a longer run continues with its schedule replanned (pretraining's).

Faults: SIGINT/SIGTERM stop the run at the next step with a resumable last/ (saved at once, then again after
the final evaluation); a non-finite loss or weight stops the run with an error *before* anything is saved,
so the last good checkpoint stays as it was.
"""

from __future__ import annotations

import math
import signal
import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from nanobert.data.feeder import Feeder
from nanobert.device import autocast
from nanobert.engine.distributed import Distributed
from nanobert.engine.optimizer import decay_start, lr_multiplier, set_learning_rate
from nanobert.engine.run_log import RunLog
from nanobert.engine.run_state import RunState, rng_state, trainer_state
from nanobert.errors import NanobertError


@dataclass
class Plan:
    """How long a run is and how often it logs, evaluates and saves. One of total_steps / time_budget."""

    learning_rate: float
    warmup_ratio: float
    total_steps: int | None = None
    time_budget: float | None = None  # seconds; the schedule then follows elapsed time
    min_lr_ratio: float = 0.0
    decay_ratio: float = 1.0  # the share of the run the decay spans, at its end (`optimizer.lr_multiplier`)
    grad_accum_steps: int = 1
    grad_clip: float = 1.0
    log_interval: int = 20
    eval_interval: int = 200
    checkpoint_interval: int | None = None  # steps between resumable last/ saves; None: none mid-run
    stop_after: int | None = None  # end after this many total steps without changing the schedule
    early_stopping_patience: int | None = None
    stop_at_accuracy: float | None = None  # stop once an evaluation reaches it on every accuracy (`reached`)
    resumable: bool = True  # checkpoints carry trainer state, and the run ends with a last/ checkpoint
    keep_pre_decay: bool = False  # a resumable PRE_DECAY checkpoint where a held peak gives way to the decay

    def progress(self, step: int, elapsed: float) -> float:
        """The fraction of the run done before step `step + 1`: steps over the planned steps, or seconds of
        training over the time budget (the learning-rate schedule's clock)."""
        return (step + 1) / self.total_steps if self.total_steps else elapsed / self.time_budget

    def in_decay(self, progress: float) -> bool:
        """Whether a step at `progress` trains in the schedule's decay, below the peak rate."""
        return progress > decay_start(self.warmup_ratio, self.decay_ratio)

    def holds_peak(self) -> bool:
        """Whether the schedule holds the peak rate between the warmup and the decay (decay_ratio < 1)."""
        return decay_start(self.warmup_ratio, self.decay_ratio) > self.warmup_ratio


# The checkpoint of the last step at the peak rate, before the decay began (`Plan.keep_pre_decay`).
PRE_DECAY = "pre-decay"


@dataclass
class Job:
    """What a job hands the loop.

    `loss(model, batch)` runs the forward pass (under autocast) and returns named scalar losses, "loss" (the
    one to minimise) first; `evaluate()` returns held-out metrics (rank 0; the others get the same);
    `save(name, run, trainer_state)` writes checkpoint `name` and returns its path (rank 0 only;
    trainer_state is None unless the plan is resumable). The job's selection `metric` picks best/, lower
    or higher being better.
    """

    model: nn.Module  # unwrapped: what is saved and checked for finite weights
    train_model: nn.Module  # what runs the forward pass: `model`, or its torch.compile / DDP wrapper
    optimizer: torch.optim.Optimizer
    feeder: Feeder  # .next() -> (batch on the host, data position after it); .close()
    data_state: dict[str, Any]  # the data position before the first batch
    loss: Callable[[nn.Module, dict[str, torch.Tensor]], dict[str, torch.Tensor]]
    evaluate: Callable[[], dict[str, float]]
    save: Callable[[str, RunState, dict | None], Path]
    device: torch.device
    amp_dtype: torch.dtype | None = None
    ctx: Distributed = field(default_factory=Distributed)
    metric: str = "mlm_accuracy"
    higher_is_better: bool = True
    best_margin: float = 0.0  # an evaluation this close to the best so far takes best/ too (RunState.offer)
    tiebreak: Callable[[dict], float] | None = None  # a held-out loss that settles ties and near-ties
    eval_split: str = "valid"  # the `split` of evaluation records in metrics.jsonl
    divergence_hint: str = "lower learning_rate (--set learning_rate=...) and resume or restart"
    saved: tuple[Path, int] | None = None  # the last good checkpoint, named when training diverges
    on_progress: Callable[[float], None] | None = None  # told the fraction of the run done, before each step


@dataclass
class Outcome:
    stop_reason: str
    final: dict[str, float]  # the held-out metrics at the last step
    signalled: bool
    data_state: dict[str, Any]  # the data position after the last batch trained on
    signal: int | None = None  # the signal that stopped the run (SIGTERM on a rank that only heard of it)


class SignalRecorder:
    """Records SIGINT and SIGTERM instead of acting on them, from `install()` until `restore()`."""

    def __init__(self) -> None:
        self.received: list[int] = []
        self.previous: dict[int, Any] = {}

    def _record(self, signum, _frame) -> None:
        self.received.append(signum)

    def install(self) -> None:
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                self.previous[sig] = signal.signal(sig, self._record)
            except ValueError:  # not the main thread (e.g. called from a worker thread): no handler
                pass

    def restore(self) -> None:
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)
        self.previous.clear()


# ----------------------------------------------------------------------------------------------------------
# The loop


def fit(job: Job, plan: Plan, run: RunState, log: RunLog) -> Outcome:
    """Train until the plan, --stop-after, a signal or early stopping ends the run; then finish it: a final
    evaluation if the last step had none, and a resumable last/ (saved at once after a signal)."""
    run.choose_best(job.metric, job.higher_is_better, job.best_margin, job.tiebreak)
    loop = _Loop(job, plan, run, log)
    job.model.train()  # a resumed model was loaded in eval mode: dropout back on
    # From here to the end of the run, SIGINT / SIGTERM are only recorded: they end the run at the next step
    # boundary, and one arriving during the final save cannot cut it short.
    loop.signals.install()
    try:
        try:
            reason, signalled = _train(loop)
        finally:
            job.feeder.close()
        return loop.finish(reason, signalled)
    finally:
        loop.signals.restore()
        log.close()


def _train(loop: _Loop) -> tuple[str, bool]:
    """The loop itself; returns why it stopped and whether a signal asked it to."""
    job, plan, run = loop.job, loop.plan, loop.run
    while True:
        # stop checks: the plan's steps or seconds, --stop-after, a signal (one decision for all ranks)
        elapsed, signalled = loop.clock()
        reason = loop.stop_reason(elapsed, signalled)
        if reason is not None:
            return reason, signalled
        # learning rate for this step, from the fraction of the plan done; the first step of the decay
        # keeps the state before it (pre-decay/), which a longer run continues from
        done = plan.progress(run.step, elapsed)
        if loop.enters_decay(done, elapsed):
            loop.timed(lambda: loop.save(PRE_DECAY))
        run.in_decay = plan.in_decay(done)
        lr = plan.learning_rate * lr_multiplier(done, plan.warmup_ratio, plan.min_lr_ratio, plan.decay_ratio)
        set_learning_rate(job.optimizer, lr)
        if job.on_progress is not None:  # e.g. the data's sequence-length schedule
            job.on_progress(done)
        # step: forward and backward over the micro-batches, clip, update
        loop.train_step()
        run.step += 1
        # log: the only per-step host sync, every log_interval steps and at the end
        if run.step % plan.log_interval == 0 or loop.at_end():
            loop.log_window(lr)
        # evaluate and keep the best; stop early once the best is `patience` evaluations old
        if run.step % plan.eval_interval == 0:
            loop.timed(loop.evaluate)
            patience = plan.early_stopping_patience
            if patience is not None and run.evals_since_best >= patience:
                return f"early stopping: no better held-out {job.metric} in {patience} evals", False
            if plan.stop_at_accuracy is not None and run.reached(plan.stop_at_accuracy):
                return f"every held-out accuracy reached {plan.stop_at_accuracy:g}", False
        # a resumable last/ now and then (the end of the run writes one anyway)
        run.train_time = loop.elapsed()
        every = plan.checkpoint_interval
        if every and run.step % every == 0 and not loop.at_end():
            loop.timed(lambda: loop.save("last"))


class _Loop:
    """The state the stages of `fit` share: the job, the plan, the run, and the current logging window."""

    def __init__(self, job: Job, plan: Plan, run: RunState, log: RunLog):
        self.job, self.plan, self.run, self.log = job, plan, run, log
        self.signals = SignalRecorder()
        self.data_state = job.data_state
        self.sums: dict[str, torch.Tensor] = {}
        self.window_steps, self.window_tokens = 0, 0
        self.start, self.start_step, self.time_before = time.perf_counter(), run.step, run.train_time
        self.window_start = self.start
        self.last_metrics: dict[str, float] | None = None
        # by this plan, which a resume may have changed: whether the last step trained was in the decay
        run.in_decay = run.step > 0 and plan.in_decay(plan.progress(run.step - 1, run.train_time))

    def elapsed(self) -> float:
        return self.time_before + time.perf_counter() - self.start

    def clock(self) -> tuple[float, bool]:
        """(seconds of training so far, whether to stop for a signal), agreed by every rank."""
        elapsed, signalled = self.elapsed(), bool(self.signals.received)
        if self.job.ctx.enabled:  # clocks and signals differ between processes
            elapsed, agreed = self.job.ctx.agree_max([elapsed, float(signalled)])
            signalled = agreed > 0
        return elapsed, signalled

    def stop_reason(self, elapsed: float, signalled: bool) -> str | None:
        plan, step = self.plan, self.run.step
        if plan.total_steps is not None and step >= plan.total_steps:
            return "finished"
        if plan.time_budget is not None and elapsed >= plan.time_budget:
            return "finished"
        if plan.stop_after is not None and step >= plan.stop_after:
            return "stopped after --stop-after"
        if signalled:
            received = self.signals.received
            return f"interrupted by signal {received[0] if received else 'on another rank'}"
        return None

    def enters_decay(self, done: float, elapsed: float) -> bool:
        """Whether the step about to run at progress `done` is the first in the decay, after a held peak,
        and the plan keeps the state before it (then the run state names that step, at `elapsed` seconds)."""
        run, plan = self.run, self.plan
        keeps = plan.keep_pre_decay and plan.resumable and plan.holds_peak()
        if not (keeps and plan.in_decay(done) and not run.in_decay):
            return False
        run.pre_decay_step, run.train_time = run.step, elapsed  # pre-decay/ names itself and this clock
        return True

    def at_end(self) -> bool:
        """Whether this step ends the run (by its step count or --stop-after): it is always logged."""
        step, plan = self.run.step, self.plan
        return (plan.total_steps is not None and step >= plan.total_steps) or step == plan.stop_after

    def timed(self, stage: Callable[[], Any]) -> None:
        """Run an evaluation or a save without counting its time in the tokens/s of the logging window."""
        begin = time.perf_counter()
        stage()
        self.window_start += time.perf_counter() - begin

    def train_step(self) -> None:
        """Forward and backward over grad_accum_steps micro-batches (DDP all-reduces on the last only),
        then clip the gradient norm, step the optimizer and clear the gradients."""
        job, accum = self.job, self.plan.grad_accum_steps
        for micro in range(accum):
            batch, self.data_state = job.feeder.next()
            self.window_tokens += _real_tokens(batch)
            batch = {k: v.to(job.device, non_blocking=True) for k, v in batch.items()}
            last_micro = micro == accum - 1
            sync = job.train_model.no_sync() if job.ctx.enabled and not last_micro else nullcontext()
            with sync:
                with autocast(job.device, job.amp_dtype):
                    losses = job.loss(job.train_model, batch)
                # DDP averages gradients over ranks and each rank's loss is its share of the global batch's
                (losses["loss"] * job.ctx.world_size / accum).backward()
            for name, value in losses.items():
                self.sums[name] = self.sums.get(name, 0.0) + value.detach() / accum
        if self.plan.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(job.model.parameters(), self.plan.grad_clip)
        job.optimizer.step()
        job.optimizer.zero_grad(set_to_none=True)
        self.window_steps += 1

    def log_window(self, lr: float) -> None:
        """Record the mean losses and the speed of the steps since the last log line."""
        names = list(self.sums)
        totals = torch.stack([self.sums[n] for n in names])
        tokens = self.window_tokens
        if self.job.ctx.enabled:  # the global batch's loss is the sum of the ranks' parts
            both = torch.cat([totals.double(), torch.tensor([float(tokens)], device=totals.device).double()])
            both = self.job.ctx.all_reduce_sum(both)
            totals, tokens = both[:-1], int(both[-1].item())
        means = {n: t / self.window_steps for n, t in zip(names, totals.tolist(), strict=True)}
        if not math.isfinite(means["loss"]):
            raise self.diverged(f"loss {means['loss']}")
        now = time.perf_counter()
        tokens_per_s = tokens / max(now - self.window_start, 1e-9)
        self.run.tokens_seen += tokens
        self.log.record(
            {"split": "train", "step": self.run.step, **means, "lr": lr, "tokens_per_s": tokens_per_s}
        )
        plan, eta = self.plan, math.inf
        ends = [n for n in (plan.total_steps, plan.stop_after) if n is not None]  # the first of them ends it
        if ends:  # seconds per step so far in this session, times the steps left
            steps_done = max(self.run.step - self.start_step, 1)
            eta = (now - self.start) / steps_done * (min(ends) - self.run.step)
        if plan.time_budget is not None:
            eta = min(eta, max(plan.time_budget - (self.time_before + now - self.start), 0.0))
        self.log.progress(self.run.step, self.plan.total_steps, means["loss"], tokens_per_s, eta)
        self.sums, self.window_steps, self.window_tokens, self.window_start = {}, 0, 0, time.perf_counter()

    def evaluate(self, interim: bool = False) -> dict[str, float]:
        """Held-out metrics now; a new best is saved as best/. An `interim` evaluation (where a resumable run
        stops between scheduled ones) is offered to best/ only when there is none yet."""
        job, run = self.job, self.run
        if not all_finite(job.model):
            raise self.diverged("non-finite weights")
        metrics = job.ctx.on_main(job.evaluate)
        value = metrics[job.metric]
        if not math.isfinite(value):
            raise self.diverged(f"held-out {job.metric} {value}")
        self.log.record({"split": job.eval_split, "step": run.step, **metrics})
        run.history.append({"step": run.step, **metrics})
        self.log.say(
            f"{job.eval_split} step {run.step}: " + "  ".join(f"{k} {_fmt(v)}" for k, v in metrics.items())
        )
        if interim:
            run.interim_steps.append(run.step)
        if interim and run.best_step is not None:
            reason = None
            self.log.say(
                f"step {run.step} is where the run stopped, between scheduled evaluations: best/ stays step "
                f"{run.best_step} (chosen at those only, so a resumed run picks as an uninterrupted one)"
            )
        else:
            latest = run.history[-1]
            reason = run.offer(latest, job.metric, job.higher_is_better, job.best_margin, job.tiebreak)
        if reason is not None:
            self.log.say(f"best/ is step {run.step}: {reason}")
            self.save("best")
        self.last_metrics = metrics
        return metrics

    def save(self, name: str) -> None:
        """Checkpoint `name` with (for a resumable plan) everything a resume needs; never a diverged model."""
        job = self.job
        if not all_finite(job.model):  # never let a diverged model overwrite a good checkpoint
            raise self.diverged("non-finite weights")
        state = None
        if self.plan.resumable:
            rng_states = job.ctx.gather(rng_state(job.device))  # every rank's, for an exact resume
            state = trainer_state(job.optimizer, self.data_state, self.run, rng_states)
        path = job.save(name, self.run, state) if job.ctx.is_main else Path(name)
        job.ctx.barrier()
        if name == "last" or not self.plan.resumable:  # what a divergence message can point to
            job.saved = (path, self.run.step)

    def diverged(self, what: str) -> NanobertError:
        saved = self.job.saved
        kept = (
            f"the last good checkpoint ({saved[0]}, step {saved[1]}) is kept"
            if saved is not None
            else "no checkpoint had been written yet"
        )
        return NanobertError(
            f"training diverged at step {self.run.step} ({what}); stopped without saving, so {kept}; "
            f"{self.job.divergence_hint}"
        )

    def finish(self, reason: str, signalled: bool) -> Outcome:
        """The end of the run: the last log window counted, a final evaluation if the last step had none,
        and (resumable plans) last/ saved, first of all when a signal asked to stop."""
        run = self.run
        run.train_time = self.elapsed()
        if self.window_steps:  # a time budget or a signal ends between log lines: the last steps count too
            self.log_window(self.job.optimizer.param_groups[0]["lr"])
        if signalled and self.plan.resumable:  # secure the work first: a preempted job may be killed soon
            self.save("last")
        if self.last_metrics is None or run.history[-1]["step"] != run.step:
            self.evaluate(interim=self.plan.resumable and reason != "finished")
        if self.plan.resumable:
            self.save("last")
        number = (self.signals.received or [signal.SIGTERM])[0] if signalled else None
        return Outcome(reason, self.last_metrics, signalled, self.data_state, int(number) if number else None)


# ----------------------------------------------------------------------------------------------------------
# Small pieces: tokens in a batch, finite weights, RNG and trainer state


def _fmt(value: float) -> str:
    return str(value) if isinstance(value, int) else f"{value:.4f}"


def _real_tokens(batch: dict[str, torch.Tensor]) -> int:
    """Non-padding tokens of a host batch; none for a data-parallel placeholder (`streams.shard_batch`)."""
    share = batch.get("loss_share")
    if share is not None and float(share[1]) == 0:
        return 0
    mask, ids = batch.get("attention_mask"), batch.get("input_ids")
    return int(mask.sum()) if mask is not None else ids.numel() if ids is not None else 0


def all_finite(model: nn.Module) -> bool:
    """Whether every weight is finite (one host sync, done only before evaluating or saving)."""
    return bool(torch.stack([p.detach().isfinite().all() for p in model.parameters()]).all())


def run_summary(run: RunState, outcome: Outcome, wall_start: float, model: nn.Module, hardware: dict) -> dict:
    """The part of summary.json every job shares: final and best held-out metrics, steps, time, speed, and on
    a GPU the peak memory torch allocated in this process (None on a CPU)."""
    device = next(model.parameters()).device
    peak = torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else None
    return {
        "final": {"step": run.step, **outcome.final},
        "best": run.best(),
        "best_reason": run.best_reason,  # why best/ holds that step
        "stop_reason": outcome.stop_reason,
        "stopped_by_signal": outcome.signal,  # a stopped run is no finished one: the CLI exits 128 + this
        "steps": run.step,
        "train_time_s": round(run.train_time, 2),
        "wall_time_s": round(time.perf_counter() - wall_start, 2),
        "tokens_seen": run.tokens_seen,
        "tokens_per_s": run.tokens_seen / max(run.train_time, 1e-9),
        "parameters": sum(p.numel() for p in model.parameters()),
        "peak_gpu_memory_gib": peak,
        "hardware": hardware,
    }


__all__ = [
    "Job",
    "Outcome",
    "Plan",
    "SignalRecorder",
    "all_finite",
    "fit",
    "run_summary",
]
