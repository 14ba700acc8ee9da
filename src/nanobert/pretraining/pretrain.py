"""Pretraining with masked-LM + next-sentence prediction (or, with `objective="causal"`, GPT's next-word
task on the same stack): the job behind `nanobert pretrain`.

Follows nanoGPT's train.py and litgpt's pretrain.py: `pretrain()` is setup (data, tokenizer, model, optimizer,
batch stream), the shared loop (`engine.loop.fit`), and a summary. The loop is the one every job runs; what is
particular to pretraining is handed to it: the objective's loss and held-out evaluation (`OBJECTIVES`), and
checkpoints that carry everything a resume needs.

Reproducibility: everything random flows from `seed`: the model init and dropout (torch's global RNG), the
NSP instances and batch order (pure functions of (seed, epoch)), and the masking (the collator's own
generator). A checkpoint stores the data position and all RNG states, so `--resume` continues the exact run,
in its own directory or in a new `--out`.

Data parallelism (`torchrun --nproc_per_node N -m nanobert pretrain ...`, one or many machines): `batch_size`
is the *global* batch. Every process builds the same global batches (same seeds) and masks them with the same
collator, then trains on its strided share of the rows (`streams.shard_batch`); each process's MLM and NSP
means are weighted by its share of the batch's masked tokens and rows, so DistributedDataParallel's averaged
gradient is exactly the gradient of the global batch's loss. A run therefore means the same thing on 1 or N
processes; more processes make each step faster, not bigger. Only rank 0 evaluates, logs and writes
checkpoints; a checkpoint holds every rank's RNG state and resumes on any number of processes.
"""

from __future__ import annotations

import dataclasses
import math
import random
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, NamedTuple

import torch
from tokenizers import Tokenizer
from torch.nn.parallel import DistributedDataParallel

from nanobert.causal_model import BertLMHeadModel
from nanobert.checkpoints.checkpoint import (
    checkpoint_tokenizer,
    load_language_model,
    load_trainer_state,
    read_config,
    refuse_going_back,
    save_checkpoint,
)
from nanobert.checkpoints.kinds import checkpoint_kind, wrong_kind
from nanobert.config import ModelConfig, TrainConfig
from nanobert.data.shards import PreparedSplit
from nanobert.data.sources import DataSources
from nanobert.data.streams import BatchStream, CorpusInstances, feeder
from nanobert.device import autocast_dtype, hardware_description, resolve_device
from nanobert.engine.distributed import Distributed, from_environment
from nanobert.engine.loop import Job, Outcome, Plan, fit, run_summary
from nanobert.engine.optimizer import build_optimizer
from nanobert.engine.precision import training_precision
from nanobert.engine.run_log import (
    METRICS_NAME,
    RunLog,
    checkpoint_bytes,
    prepare_out_dir,
    reproduced_by,
    write_summary,
)
from nanobert.engine.run_state import RunState, restore_rng
from nanobert.errors import NanobertError
from nanobert.initialization import keep_roles
from nanobert.model import BertForPreTraining
from nanobert.objectives.mlm_nsp import nsp_not_learned
from nanobert.objectives.registry import OBJECTIVES, Objective, objective_of
from nanobert.pretraining.longer import longer_command, longer_note
from nanobert.pretraining.recipes import training_notes
from nanobert.pretraining.resume import continue_records, refuse_a_finished_run
from nanobert.pretraining.size_rule import choose_size
from nanobert.tokenizer import encode_documents, load_tokenizer, tokenizer_digest, train_tokenizer
from nanobert.use.plots import plot_curves


@dataclass
class _Setup:
    """Everything `pretrain` builds before the loop starts."""

    ctx: Distributed
    device: torch.device
    cfg: TrainConfig
    objective: Objective
    sources: DataSources
    out_dir: Path
    model: BertForPreTraining | BertLMHeadModel
    tokenizer: Any
    stream: BatchStream
    eval_batches: list[dict[str, torch.Tensor]]
    held_out_note: str
    counts: tuple[int, int]  # training documents and sentences
    resume: Path | None = None
    resume_state: dict | None = None
    size_note: str | None = None  # how the run chose its size (`size_rule.choose_size`)
    precision: dict[str, str] | None = None  # the autocast chosen and why, once `_job` has chosen
    longer: bool = False  # the resume goes on as one longer run (`longer.py`)


def pretrain(
    model_config: ModelConfig,
    train_config: TrainConfig,
    sources: DataSources,
    out_dir: str | Path,
    *,
    resume: str | Path | None = None,
    stop_after: int | None = None,
    overwrite: bool = False,
    preset: str | None = None,
    tokenizer_dir: str | Path | None = None,
    announce: str | None = None,
    quiet: bool = False,
    longer: bool = False,
) -> dict[str, Any]:
    """Train BertForPreTraining with MLM + NSP, or BertLMHeadModel on the next word with
    `train_config.objective="causal"`; write best/, last/, metrics.jsonl, summary.json, curves.png.

    With `resume` (a checkpoint directory), weights, optimizer, data position and RNG states come from it and
    the run continues its original plan; `train_config` then only changes the length (max_steps counts all
    steps). `out_dir` may be the resumed run's directory or a new one, which then receives the run's earlier
    records too. With `longer`, the resume (RUN/pre-decay, or RUN/last before the decay) continues its run as
    one longer run (`longer.py`), in its own folder too, where the shorter run is first kept aside.
    `stop_after` ends the run after that many total steps without changing its schedule.
    `tokenizer_dir` reuses a saved tokenizer instead of training one (a trained one is a function of the
    training text and the vocabulary settings alone, `train_tokenizer`). `sources.prepared` streams a corpus
    written by `nanobert prepare` (its tokenizer comes with it).

    Under torchrun (WORLD_SIZE > 1 in the environment) this runs data-parallel; see the module docstring.
    Returns the summary dict (also written to summary.json, by rank 0).
    """
    objective_of(train_config, model_config if resume is None else None)  # a wrong objective fails first
    step = read_config(resume).get("step", 0) if resume is not None and stop_after is not None else None
    if step is not None and stop_after <= step:  # it would train nothing and re-record the evaluation
        raise NanobertError(f"--stop-after {stop_after} is not past {resume}'s step {step}; give a later one")
    wall_start = time.perf_counter()
    ctx, device = from_environment(resolve_device(train_config.device))
    try:
        args = (model_config, train_config, sources, Path(out_dir), resume, overwrite, tokenizer_dir)
        setup = _setup(ctx, device, *args, longer)
        job, plan, run, log = _job(setup, stop_after, preset, quiet)
        if announce:
            log.say(f"nanobert: {announce}")
        _say_plan(setup, plan, run, log)
        outcome = fit(job, plan, run, log)
        return _finish(setup, run, outcome, wall_start, preset, log)
    finally:
        ctx.close()


def _setup(
    ctx: Distributed,
    device: torch.device,
    model_config: ModelConfig,
    cfg: TrainConfig,
    sources: DataSources,
    out_dir: Path,
    resume: str | Path | None,
    overwrite: bool,
    tokenizer_dir: str | Path | None,
    longer: bool,
) -> _Setup:
    """Check the input, then build the tokenizer, model, held-out batches and batch stream; the output
    directory is created only once all of that loaded, so bad input fails before anything is written."""
    if cfg.batch_size < ctx.world_size:
        raise NanobertError(
            f"batch_size {cfg.batch_size} is the global batch and must be at least the number of processes "
            f"({ctx.world_size})"
        )
    resume_state = None
    if resume is not None:
        resume = Path(resume)
        kind = checkpoint_kind(read_config(resume))  # a one-line error for anything that is not a checkpoint
        if kind not in {objective.kind for objective in OBJECTIVES.values()}:
            raise wrong_kind(resume, kind, "a pretraining run to resume")
        resume_state = load_trainer_state(resume)
    in_place = resume is not None and out_dir.resolve() == resume.resolve().parent
    if in_place and not overwrite and not longer:  # a longer run keeps the shorter one aside instead
        refuse_going_back(resume, out_dir / "last")
    if not in_place:
        prepare_out_dir(out_dir, overwrite, create=False, inputs=(tokenizer_dir,))
    random.seed(cfg.seed)
    torch.manual_seed(cfg.seed)
    objective = objective_of(cfg)
    data = _data_and_model(ctx, device, model_config, cfg, sources, resume, tokenizer_dir)
    vocab_size = data.model.config.vocab_size
    held_out: list[dict[str, torch.Tensor]] = []  # only rank 0 evaluates
    shape = (cfg.max_seq_len, cfg.eval_batch_size, vocab_size, cfg.eval_seed)
    ctx.on_main(lambda: held_out.extend(objective.held_out(data.held_out, *shape)))
    stream = objective.stream(  # checks that the corpus fills a batch, so before anything is written
        data.source, cfg, objective.collator(cfg, data.tokenizer, vocab_size), ctx.rank, ctx.world_size
    )
    if resume_state is not None:
        refuse_a_finished_run(resume, resume_state, _plan(cfg, stream, None))
    model, cfg, size_note = (
        (data.model, cfg, None) if resume else choose_size(ctx, device, cfg, data.model, stream)
    )
    if ctx.is_main and not in_place:
        prepare_out_dir(out_dir, overwrite, need=checkpoint_bytes(model, trainer_state=True))
    return _Setup(
        ctx, device, cfg, objective, sources, out_dir, model, data.tokenizer, stream, held_out,
        data.note, data.counts, resume, resume_state, size_note, longer=longer,
    )  # fmt: skip


class _Data(NamedTuple):
    tokenizer: Tokenizer
    model: BertForPreTraining | BertLMHeadModel
    source: CorpusInstances | list[list[list[int]]] | PreparedSplit  # what the objective's stream walks
    counts: tuple[int, int]  # training documents and sentences
    held_out: list[list[list[int]]]
    note: str  # where the held-out split came from


def _data_and_model(
    ctx: Distributed,
    device: torch.device,
    model_config: ModelConfig,
    cfg: TrainConfig,
    sources: DataSources,
    resume: Path | None,
    tokenizer_dir: str | Path | None,
) -> _Data:
    """The tokenizer (resumed, given, the prepared corpus's, or trained), the model (resumed or new), the
    training source and the tokenized held-out split that `sources` decides."""
    prepared = sources.prepared_corpus()
    if prepared is not None and tokenizer_dir is not None:
        raise NanobertError("--tokenizer cannot be combined with --prepared: the prepared corpus holds one")
    documents = sources.documents() if prepared is None else None
    if resume is not None:
        model, config = load_language_model(resume, map_location=device)
        tokenizer = checkpoint_tokenizer(resume, model, config)
        if checkpoint_kind(config) != objective_of(cfg).kind:
            raise NanobertError(
                f"{resume} holds a {checkpoint_kind(config)} model; it cannot resume {cfg.objective}"
            )
    else:
        if prepared is not None:
            tokenizer = prepared.tokenizer()
        else:
            tokenizer = _new_tokenizer(ctx, cfg, documents[0], tokenizer_dir)
        model = _new_model(model_config, cfg, tokenizer.get_vocab_size(), device)
    ctx.seed_dropout(cfg.seed)  # the same initial weights everywhere, but each rank its own dropout
    if prepared is None:
        train_docs, held_docs, note = documents
        # the objective's check of the corpus: it fails now (one document for NSP, too few tokens for one
        # next-word window), not at the first batch
        source = objective_of(cfg).source(encode_documents(tokenizer, train_docs), cfg)
        counts = (len(train_docs), sum(map(len, train_docs)))
        return _Data(tokenizer, model, source, counts, encode_documents(tokenizer, held_docs), note)
    if tokenizer.get_vocab() != prepared.tokenizer().get_vocab():
        raise NanobertError(
            f"the checkpoint's tokenizer differs from the one in {sources.prepared}; "
            "resume with the prepared corpus it was trained on"
        )
    split = prepared.split("train")
    held_out, note = sources.held_out(tokenizer)
    return _Data(tokenizer, model, split, (len(split), split.num_sentences()), held_out, note)


def _new_tokenizer(
    ctx: Distributed, cfg: TrainConfig, train_docs: list, tokenizer_dir: str | Path | None
) -> Tokenizer:
    """A saved tokenizer, or one trained on the training documents (once, on rank 0, so that every rank has
    the very same vocabulary)."""
    if tokenizer_dir is not None:
        return load_tokenizer(tokenizer_dir)

    def train() -> Tokenizer:
        sentences = (s for d in train_docs for s in d)
        return train_tokenizer(sentences, cfg.vocab_size, min_frequency=cfg.tokenizer_min_frequency)

    if not ctx.enabled:
        return train()
    return Tokenizer.from_str(ctx.on_main(lambda: train().to_str()))


def _new_model(model_config: ModelConfig, cfg: TrainConfig, vocab_size: int, device: torch.device):
    """A freshly initialised model for the objective, whose vocabulary is the trained tokenizer's."""
    objective = objective_of(cfg)
    model_config = dataclasses.replace(model_config, vocab_size=vocab_size, is_decoder=objective.is_decoder)
    if cfg.max_seq_len > model_config.max_position_embeddings:
        raise NanobertError(
            f"max_seq_len {cfg.max_seq_len} exceeds max_position_embeddings "
            f"{model_config.max_position_embeddings}"
        )
    return objective.model(model_config).to(device)


def _plan(cfg: TrainConfig, stream: BatchStream, stop_after: int | None) -> Plan:
    """The run's length (a step count from max_steps or epochs, or a time budget) and its intervals."""
    steps_per_epoch = stream.steps_per_epoch()
    total_steps = cfg.max_steps
    if cfg.epochs is not None:
        total_steps = max(1, math.ceil(cfg.epochs * steps_per_epoch))
    if total_steps is None and cfg.time_budget is None:
        raise NanobertError("set the run length: --max-steps, --epochs or --time-budget")
    return Plan(
        learning_rate=cfg.learning_rate,
        warmup_ratio=cfg.warmup_ratio,
        total_steps=total_steps,
        time_budget=cfg.time_budget if total_steps is None else None,
        min_lr_ratio=cfg.min_lr_ratio,
        decay_ratio=cfg.decay_ratio,
        grad_accum_steps=cfg.grad_accum_steps,
        grad_clip=cfg.grad_clip,
        log_interval=cfg.log_interval,
        eval_interval=cfg.eval_interval,
        checkpoint_interval=cfg.checkpoint_interval or cfg.eval_interval,
        stop_after=stop_after,
        early_stopping_patience=cfg.early_stopping_patience,
        stop_at_accuracy=cfg.stop_at_accuracy,
        keep_pre_decay=True,  # what a longer run continues from (`longer.py`)
    )


def _job(setup: _Setup, stop_after: int | None, preset: str | None, quiet: bool):
    """What the loop needs: optimizer, feeder, loss, evaluation and saving, restored from a resume."""
    s, cfg, model, device = setup, setup.cfg, setup.model, setup.device
    betas = (cfg.adam_beta1, cfg.adam_beta2)
    optimizer = build_optimizer(model, cfg.learning_rate, cfg.weight_decay, betas=betas, eps=cfg.adam_eps)
    run = RunState()
    if s.resume_state is not None:
        optimizer.load_state_dict(s.resume_state["optimizer"])
        s.stream.load_state_dict(s.resume_state["data"])
        run = RunState.from_dict(s.resume_state["run"])
        restore_rng(s.resume_state["rng"], s.ctx, device, cfg.seed, run.step)
    plan = _plan(cfg, s.stream, stop_after)
    s.stream.set_progress(plan.progress(run.step, run.train_time))  # a resumed run's, before any prefetch
    if cfg.keep_roles:  # before compile and DDP wrap the model: the hooks ride along
        keep_roles(model, optimizer)
    train_model = torch.compile(model) if cfg.compile else model  # keep `model` unwrapped for saving
    if s.ctx.enabled:
        device_ids = [device.index] if device.type == "cuda" else None
        train_model = DistributedDataParallel(train_model, device_ids=device_ids)
    objective = s.objective
    amp_dtype, why = _precision(s, objective)
    s.precision = {"chosen": "bf16" if amp_dtype else "fp32", "why": why}
    extra = {"data": dataclasses.asdict(s.sources), "preset": preset, "precision": s.precision["chosen"]}

    def save(name: str, run: RunState, state: dict | None) -> Path:
        schedule = {"in_decay": run.in_decay, "pre_decay_step": run.pre_decay_step}  # `longer.py` reads it
        path, tokenizer, extras = s.out_dir / name, s.tokenizer, {**extra, "step": run.step, **schedule}
        return save_checkpoint(path, model, cfg, tokenizer, state, extra=extras, kind=objective.kind)

    job = Job(
        model=model,
        train_model=train_model,
        optimizer=optimizer,
        feeder=feeder(s.stream, device),
        data_state=s.stream.state_dict(),
        loss=objective.loss if (w := cfg.nsp_loss_weight) == 1 else partial(objective.loss, nsp_weight=w),
        evaluate=lambda: objective.metrics(model, s.eval_batches, device, amp_dtype),
        save=save,
        device=device,
        amp_dtype=amp_dtype,
        ctx=s.ctx,
        metric=objective.metric,
        higher_is_better=objective.higher_is_better,
        best_margin=cfg.best_margin,
        tiebreak=objective.tiebreak,
        saved=(s.resume, run.step) if s.resume is not None else None,
        on_progress=s.stream.set_progress,
    )
    log = RunLog(s.out_dir, plan.total_steps, run.step, quiet, write=s.ctx.is_main)
    log.say(f"nanobert: precision {why}")
    log.say(f"nanobert: {reproduced_by(cfg, s.tokenizer)}")
    for note in (s.size_note, *training_notes(cfg, model.config.attention_init, preset)):
        if note:
            log.say(f"nanobert: {note}")
    if s.resume is not None:
        kept = continue_records(s.resume, s.out_dir, run, log, s.ctx.is_main, s.longer)
        if s.longer:
            log.say(f"nanobert: {longer_note(s.resume, run.step, cfg, kept)}")
    return job, plan, run, log


def _precision(setup: _Setup, objective: Objective) -> tuple[torch.dtype | None, str]:
    """The run's autocast dtype: what the resumed run used, else as asked, else the faster one measured on
    this machine for this model and batch shape (decided on rank 0, the same for every rank)."""
    s, cfg = setup, setup.cfg
    if s.resume is not None and cfg.precision == "auto":
        recorded = read_config(s.resume).get("precision")
        if recorded in ("fp32", "bf16"):
            return autocast_dtype(recorded, s.device), f"{recorded}, as the resumed run chose"
    sample = objective.sample(cfg, s.model.config.vocab_size)
    return s.ctx.on_main(
        lambda: training_precision(cfg.precision, s.model, objective.loss, sample, s.device, cfg.objective)
    )


def _say_plan(setup: _Setup, plan: Plan, run: RunState, log: RunLog) -> None:
    model, ctx = setup.model, setup.ctx
    n_params = sum(p.numel() for p in model.parameters())
    steps_per_epoch = setup.stream.steps_per_epoch()
    docs, sentences = setup.counts
    log.say(
        f"nanobert: {n_params / 1e6:.2f}M parameters, vocab {model.config.vocab_size}, {docs} train "
        f"documents ({sentences} sentences), {steps_per_epoch} steps/epoch; {setup.held_out_note}"
    )
    where = f"{ctx.world_size} processes on {setup.device.type}" if ctx.enabled else str(setup.device)
    length = f"{plan.total_steps} steps" if plan.total_steps else f"a {plan.time_budget:.0f} s time budget"
    resuming = f", resuming at step {run.step}" if run.step else ""
    log.say(f"nanobert: training on {where} for {length}{resuming}")


def _finish(
    setup: _Setup, run: RunState, outcome: Outcome, wall_start: float, preset: str | None, log: RunLog
) -> dict[str, Any]:
    """summary.json and curves.png (rank 0), and the closing line."""
    s = setup
    summary = {
        **run_summary(run, outcome, wall_start, s.model, hardware_description(s.device, s.ctx.world_size)),
        "epochs": s.stream.epochs_done(outcome.data_state),
        "vocab_size": s.model.config.vocab_size,
        "tokenizer_sha1": tokenizer_digest(s.tokenizer),  # of vocab.txt, as best/ and last/ hold it
        "precision": s.precision,
        "preset": preset,
        "data": dataclasses.asdict(s.sources),
        "model": dataclasses.asdict(s.model.config),
        "train": dataclasses.asdict(s.cfg),
    }
    if not s.ctx.is_main:  # the other ranks write nothing (and the CLI prints nothing for them)
        return {**summary, "rank": s.ctx.rank}
    write_summary(s.out_dir, summary)
    try:
        plot_curves(s.out_dir / METRICS_NAME, s.out_dir / "curves.png")
    except ImportError:  # matplotlib is a dependency, but a broken install should not lose the run
        log.say("nanobert: matplotlib unavailable; curves.png not written")
    log.say(
        f"nanobert: {outcome.stop_reason} at step {run.step} in {run.train_time:.0f} s "
        f"({summary['tokens_per_s']:,.0f} tokens/s); outputs in {s.out_dir}"
    )
    longer = longer_command(s.out_dir, s.cfg, run) if outcome.stop_reason == "finished" else None
    if run.best_step is not None:
        log.say(f"nanobert: best/ is step {run.best_step}: {run.best_reason}")
        if note := nsp_not_learned(run.best(), s.eval_batches, longer or "--time-budget"):
            log.say(f"nanobert: {note}")
            longer = None  # said once
    if longer:
        log.say(f"nanobert: to train longer as one run, from before its decay began: {longer}")
    if outcome.signalled:
        log.say(f"nanobert: resume with: nanobert pretrain --resume {s.out_dir / 'last'}")
    return summary


__all__ = ["pretrain"]
