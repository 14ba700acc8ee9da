"""Pretraining: setup, one flat loop, evaluation and saving.

Follows nanoGPT's train.py and litgpt's pretrain.py.

`pretrain()` is the whole job behind `nanobert pretrain`. The loop is deliberately plain: take a batch,
forward and backward (with gradient accumulation and bf16 autocast where the hardware runs bf16 natively:
CUDA, or a CPU with AVX512-BF16 or AMX), clip, step AdamW at the
scheduled learning rate, and now and then log, evaluate and checkpoint. Host synchronisation (`.item()`)
happens only at log and evaluation intervals.

Reproducibility: everything random flows from `seed`: the model init and dropout (torch's global RNG), the
NSP instances and batch order (pure functions of (seed, epoch)), and the masking (the collator's own
generator). A checkpoint stores the data position and all RNG states, so `--resume` continues the exact run.

Data parallelism (`torchrun --nproc_per_node N -m nanobert pretrain ...`, one or many machines): `batch_size`
is the *global* batch. Every process builds the same global batches (same seeds) and masks them with the same
collator, then trains on its strided share of the rows; each process's MLM and NSP means are weighted by its
share of the batch's masked tokens and rows, so DistributedDataParallel's averaged gradient is exactly the
gradient of the global batch's loss. A run therefore means the same thing on 1 or N processes (the same
learning rate for the same batch_size x grad_accum_steps, the same steps per epoch, the same losses up to
float rounding); more processes make each step faster, not bigger. Only rank 0 evaluates, logs and writes
checkpoints; a checkpoint holds every rank's RNG state and resumes on any number of processes.

Faults: SIGINT/SIGTERM stop at the next step with a resumable last/ (saved at once, then again after the
final evaluation); last/ is also saved at every evaluation (or every `checkpoint_interval` steps); writes
are atomic, so a kill -9 mid-write leaves the previous checkpoint loadable; a non-finite loss or weight
stops the run with an error *before* anything is saved, so the last good checkpoint stays as it was.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import platform
import random
import signal
import sys
import time
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from nanobert.checkpoint import (
    load_pretraining_checkpoint,
    load_train_config,
    load_trainer_state,
    read_config,
    save_checkpoint,
)
from nanobert.config import ModelConfig, TrainConfig, config_from_dict
from nanobert.corpus import WIKITEXT_HF_NAMES, Document, load_documents
from nanobert.distributed import Distributed, from_environment
from nanobert.errors import NanobertError
from nanobert.evaluate import evaluate_model, prepare_eval_batches, tokenize_documents
from nanobert.model import BertForPreTraining, decay_parameter_groups
from nanobert.prepare import PreparedCorpus, PreparedSplit, WindowedInstances
from nanobert.pretraining_data import (
    IGNORE_INDEX,
    Instance,
    MaskingCollator,
    batches,
    create_instances,
    nsp_documents,
    query_layout,
)
from nanobert.tokenizer import load_tokenizer, train_tokenizer

DEFAULT_DATA = "wikitext-2-raw-v1"


# ----------------------------------------------------------------------------------------------------------
# Small pure pieces


def lr_multiplier(progress: float, warmup_ratio: float, min_lr_ratio: float = 0.0) -> float:
    """Linear warmup to 1 over the first `warmup_ratio` of training, then linear decay to `min_lr_ratio`.

    `progress` is the fraction of the run done: steps over planned steps, or seconds over the time budget,
    which is how the schedule adapts when a time budget sets the length.
    """
    progress = min(max(progress, 0.0), 1.0)
    if warmup_ratio > 0 and progress < warmup_ratio:
        return progress / warmup_ratio
    decay = (1.0 - progress) / max(1.0 - warmup_ratio, 1e-12)
    return min_lr_ratio + (1.0 - min_lr_ratio) * decay


def resolve_device(name: str) -> torch.device:
    """'auto' picks CUDA when present; asking for CUDA without one is a user error, not a crash."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise NanobertError("--device cuda was requested but no CUDA GPU is available; use --device cpu")
    return torch.device(name)


def autocast_dtype(precision: str, device: torch.device) -> torch.dtype | None:
    """The autocast dtype: bf16 when asked for, or for "auto" where bf16 is fast; None means fp32.

    "auto" is bf16 on CUDA and on a CPU with native bf16 matmuls (AVX512-BF16 or AMX), where bf16 autocast
    about doubles training speed (benchmarks/README.md); elsewhere oneDNN emulates bf16, slower than fp32.
    """
    native = device.type == "cuda" or (device.type == "cpu" and cpu_has_native_bf16())
    if precision == "bf16" and not native:
        print(
            "nanobert: note: this CPU has no native bf16, so precision bf16 is slow; "
            "--set precision=fp32 is faster",
            file=sys.stderr,
        )
    if precision == "bf16" or (precision == "auto" and native):
        return torch.bfloat16
    return None


def cpu_has_native_bf16() -> bool:
    """Whether oneDNN runs bf16 matmuls natively on this CPU (AVX512-BF16 or AMX)."""
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False


def hardware_description(device: torch.device, world_size: int = 1) -> dict[str, Any]:
    info = {
        "device": device.type,
        "world_size": world_size,
        "torch": torch.__version__,
        "cpu_count": os.cpu_count(),
        "platform": platform.platform(),
        "torch_threads": torch.get_num_threads(),
    }
    if device.type == "cuda":
        info["gpu"] = torch.cuda.get_device_name(device)
    return info


# ----------------------------------------------------------------------------------------------------------
# Data


@dataclass
class DataSources:
    """Where the train and held-out documents come from (recorded in every checkpoint's config.json)."""

    data: str | None = DEFAULT_DATA
    train_file: str | None = None
    valid_file: str | None = None
    prepared: str | None = None  # a directory written by `nanobert prepare` (then data/train_file are unused)

    def load(self) -> tuple[list[Document], list[Document], str]:
        """(train documents, held-out documents, a note on where the held-out split came from)."""
        train_src = self.train_file or self.data
        if train_src is None:
            raise NanobertError("no training data: pass --data NAME|DIR|FILE or --train FILE")
        train = load_documents(train_src, split="train")
        if self.valid_file:
            return train, load_documents(self.valid_file, split="valid"), f"held out: {self.valid_file}"
        source = self.data if not self.train_file else None
        if source == "toy":  # the toy corpus is memorised: it is its own held-out set
            return train, train, "held out: the toy corpus itself (a memorisation demo)"
        if source is not None and (source in WIKITEXT_HF_NAMES or Path(source).is_dir()):
            return train, load_documents(source, split="valid"), f"held out: the validation split of {source}"
        # A single file and no --valid: hold out its last documents, so the numbers are not training loss.
        if len(train) >= 6:
            n = max(2, len(train) // 10)
            return train[:-n], train[-n:], f"held out: the last {n} documents of {train_src} (pass --valid)"
        return (
            train,
            train,
            f"held out: none given and {train_src} is too small to split, so the TRAINING data",
        )


MLM_POSITIONS_MULTIPLE = 64  # masked-position count padded to this, so compiled shapes stay few
QUERY_WIDTH_MULTIPLE = 8  # the last layer's queries per row, likewise ([CLS] + ~15% of 128 = ~20)


class CorpusInstances:
    """A tokenized corpus held in memory; each epoch is one window holding all of it.

    The in-memory twin of `prepare.WindowedInstances` (same interface), for corpora that fit in RAM.
    """

    def __init__(self, tokenized: list[list[list[int]]], cfg: TrainConfig):
        self.tokenized, self.cfg = tokenized, cfg

    def num_windows(self, epoch: int) -> int:
        return 1

    def window_fraction(self, epoch: int, window: int) -> float:
        return 1.0

    def batches(self, epoch: int, window: int) -> list[list[Instance]]:
        cfg = self.cfg
        instances = [
            inst
            for dupe in range(cfg.dupe_factor)  # each set pairs and splits the documents afresh
            for inst in create_instances(
                self.tokenized,
                cfg.max_seq_len,
                seed=cfg.seed,
                epoch=epoch * cfg.dupe_factor + dupe,
                short_seq_prob=cfg.short_seq_prob,
            )
        ]
        return batches(instances, cfg.batch_size, seed=cfg.seed, epoch=epoch, bucket=cfg.bucket_by_length)


def shard_batch(batch: dict[str, torch.Tensor], rank: int, world_size: int) -> dict[str, torch.Tensor]:
    """This rank's rows of a collated global batch, plus `loss_share` (2,): its share of the global loss.

    Rank r takes rows r, r + world_size, ... (strided, so length-bucketed rows spread evenly).
    `loss_share` is (this rank's masked tokens / the batch's, its rows / the batch's): the rank's mean MLM and
    NSP losses times these shares sum over ranks to the global batch's means, so with the sum scaled by
    world_size, DDP's averaged gradient is the global batch's gradient. A rank left without rows (a final
    batch smaller than the world) trains on row 0 with share 0, so it still joins the gradient all-reduce.
    A single process gets the whole batch with shares (1, 1).
    """
    if world_size == 1:
        batch["loss_share"] = torch.ones(2)
        return batch
    rows = batch["input_ids"].shape[0]
    mine = torch.arange(rows)[rank::world_size]
    masked = batch["labels"] != IGNORE_INDEX
    if len(mine) == 0:
        mine, share = torch.zeros(1, dtype=torch.long), torch.zeros(2)
    else:
        mlm_share = int(masked[mine].sum()) / max(int(masked.sum()), 1)
        share = torch.tensor([mlm_share, len(mine) / rows])
    out = {k: v.index_select(0, mine) for k, v in batch.items()}
    out["loss_share"] = share
    return out


class BatchStream:
    """Endless pre-collated training batches: epoch after epoch of fresh NSP instances and masks.

    `source` is a tokenized corpus (a list, see `CorpusInstances`) or a `WindowedInstances` over a prepared
    corpus; an epoch is its windows in turn. With `world_size > 1` every rank walks the same global batches
    and keeps its share (`shard_batch`). Its position (epoch, window, index) plus the collator's generator
    state is all a resume needs.
    """

    def __init__(
        self,
        source: list[list[list[int]]] | Any,
        cfg: TrainConfig,
        collator: MaskingCollator,
        rank: int = 0,
        world_size: int = 1,
    ):
        self.source = CorpusInstances(source, cfg) if isinstance(source, list) else source
        self.cfg, self.collator, self.rank, self.world_size = cfg, collator, rank, world_size
        self.epoch, self.window, self.index = 0, 0, 0
        self._batches: list | None = None

    def _load(self) -> list:
        if self._batches is None:
            self._batches = self.source.batches(self.epoch, self.window)
        return self._batches

    def batches_per_epoch(self) -> int:
        """Exact for an in-memory corpus; for a prepared one, estimated from the current window's share."""
        n = len(self._load())
        return max(1, round(n / self.source.window_fraction(self.epoch, self.window)))

    def epochs_done(self, state: dict[str, Any]) -> float:
        """Epochs completed at data position `state` (windows counted as equal parts of an epoch)."""
        windows = self.source.num_windows(state["epoch"])
        within = state["index"] / max(len(self._load()), 1)
        return state["epoch"] + (state.get("window", 0) + within) / windows

    def next(self) -> dict[str, torch.Tensor]:
        """The next batch, ready for the device: collated, masked, with the query layout computed here."""
        while self.index >= len(self._load()):
            self.window, self.index, self._batches = self.window + 1, 0, None
            if self.window >= self.source.num_windows(self.epoch):
                self.epoch, self.window = self.epoch + 1, 0
        batch = self.collator(self._load()[self.index])
        self.index += 1
        batch = shard_batch(batch, self.rank, self.world_size)
        # [CLS] and the masked positions, so the model's last layer computes only those (model.py).
        batch["query_positions"], batch["mlm_positions"] = query_layout(
            batch["labels"], MLM_POSITIONS_MULTIPLE, QUERY_WIDTH_MULTIPLE
        )
        if bool(batch["attention_mask"].all()):
            # No padding: no mask, which lets SDPA use its fastest (flash) kernel. Decided here, on the host.
            del batch["attention_mask"]
        return batch

    def state_dict(self) -> dict[str, Any]:
        return {
            "epoch": self.epoch,
            "window": self.window,
            "index": self.index,
            "collator": self.collator.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.epoch, self.index = int(state["epoch"]), int(state["index"])
        self.window = int(state.get("window", 0))  # checkpoints from before windows had one per epoch
        self._batches = None
        self.collator.load_state_dict(state["collator"])


class Prefetcher:
    """Prepares batches on a background thread (pinned, ready for non-blocking copies) while the GPU trains.

    Each batch travels with the stream state *after* it, so a checkpoint records the data position of the
    last batch actually trained on, not of the ones waiting in the queue; resume stays exact.
    """

    def __init__(self, stream: BatchStream, depth: int = 4, pin_memory: bool = True):
        import queue
        import threading

        self.stream, self.pin_memory = stream, pin_memory
        self.queue: queue.Queue = queue.Queue(maxsize=depth)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._work, daemon=True)
        self.thread.start()

    def _work(self) -> None:
        try:
            while not self.stop.is_set():
                batch = self.stream.next()
                if self.pin_memory:
                    batch = {k: v.pin_memory() for k, v in batch.items()}
                item = (batch, self.stream.state_dict())
                while not self.stop.is_set():
                    try:
                        self.queue.put(item, timeout=0.1)
                        break
                    except Exception:  # queue.Full: check the stop flag and retry
                        continue
        except BaseException as e:  # surface data errors in the training thread
            self.queue.put((e, None))

    def next(self) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        batch, state = self.queue.get()
        if isinstance(batch, BaseException):
            raise batch
        return batch, state

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=5)


class Synchronous:
    """The same interface as Prefetcher, preparing each batch when asked (CPU training: no idle device)."""

    def __init__(self, stream: BatchStream):
        self.stream = stream

    def next(self) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        batch = self.stream.next()
        return batch, self.stream.state_dict()

    def close(self) -> None:
        pass


def word_start_table(tokenizer: Any, vocab_size: int) -> torch.Tensor:
    """For whole-word masking: True for ids that begin a word (no '##' continuation prefix)."""
    table = torch.ones(vocab_size, dtype=torch.bool)
    for token, idx in tokenizer.get_vocab().items():
        if token.startswith("##") and idx < vocab_size:
            table[idx] = False
    return table


# ----------------------------------------------------------------------------------------------------------
# Output directory, logging


class RunLog:
    """metrics.jsonl plus human-readable progress on stderr (a tqdm bar on a terminal, plain lines otherwise).

    Progress goes to stderr so that stdout carries only the command's result (JSON). With `write=False` (the
    other ranks of a data-parallel run) nothing is written at all.
    """

    def __init__(
        self, out_dir: Path, total_steps: int | None, start_step: int, quiet: bool = False, write: bool = True
    ):
        self.path = out_dir / "metrics.jsonl"
        self.quiet, self.write = quiet or not write, write
        self.bar = None
        if not quiet and sys.stderr.isatty():
            from tqdm.auto import tqdm

            self.bar = tqdm(total=total_steps, initial=start_step, unit="step", dynamic_ncols=True)

    def truncate_after(self, step: int) -> None:
        """Drop records past `step` (a resumed run rewrites them)."""
        if not self.write or not self.path.exists():
            return
        kept = [
            line
            for line in self.path.read_text().splitlines()
            if line.strip() and json.loads(line)["step"] <= step
        ]
        self.path.write_text("".join(line + "\n" for line in kept))

    def record(self, entry: dict[str, Any]) -> None:
        if not self.write:
            return
        with open(self.path, "a") as f:
            f.write(json.dumps(entry) + "\n")

    def say(self, text: str) -> None:
        if self.quiet:
            return
        if self.bar is not None:
            self.bar.write(text)
        else:
            print(text, file=sys.stderr, flush=True)

    def progress(self, step: int, total: int | None, loss: float, tokens_per_s: float, eta_s: float | None):
        if self.quiet:
            return
        if self.bar is not None:
            if total is not None and self.bar.total != total:
                self.bar.total = total
            self.bar.n = step
            self.bar.set_postfix(loss=f"{loss:.3f}", tok_s=f"{tokens_per_s:,.0f}")
            self.bar.refresh()
        else:
            eta = f"{eta_s:5.0f}s" if eta_s is not None else "    ?"
            of = f"/{total}" if total else ""
            print(
                f"step {step}{of}  loss {loss:.4f}  tokens/s {tokens_per_s:,.0f}  eta {eta}",
                file=sys.stderr,
                flush=True,
            )

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def prepare_out_dir(out_dir: Path, overwrite: bool, resuming_inside: bool, create: bool = True) -> None:
    """Refuse to mix two runs in one directory unless asked; never delete anything before that check.

    `create=False` only checks (the other ranks of a data-parallel run; rank 0 clears and creates).
    """
    artefacts = [out_dir / n for n in ("metrics.jsonl", "best", "last", "summary.json")]
    if resuming_inside:
        return
    if any(p.exists() for p in artefacts):
        if not overwrite:
            raise NanobertError(
                f"{out_dir} already holds a run; pass --overwrite to replace it, "
                f"--resume {out_dir}/last to continue it, or choose another --out"
            )
        for name in ("metrics.jsonl", "summary.json", "curves.png"):
            if create:
                (out_dir / name).unlink(missing_ok=True)
    if create:
        out_dir.mkdir(parents=True, exist_ok=True)


# ----------------------------------------------------------------------------------------------------------
# The run


@dataclass
class RunState:
    """What a resume restores besides weights and optimizer."""

    step: int = 0
    train_time: float = 0.0  # seconds spent in the loop (the time budget counts these)
    tokens_seen: int = 0
    best_mlm_loss: float = math.inf
    best_step: int | None = None
    evals_since_best: int = 0
    total_steps: int | None = None  # the plan; None while a time budget decides the length
    history: list[dict] = field(default_factory=list)


def _rng_state(device: torch.device) -> dict[str, Any]:
    """This process's torch RNG states (dropout draws from them)."""
    state = {"torch": torch.get_rng_state()}
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def _trainer_state(optimizer, data_state: dict, run: RunState, rng_states: list[dict[str, Any]]) -> dict:
    """What a resume needs besides the weights; `rng_states` holds one entry per rank."""
    state = {
        "optimizer": optimizer.state_dict(),
        "data": data_state,
        "run": dataclasses.asdict(run),  # plain numbers and dicts: loadable with weights_only=True
        "rng": {**rng_states[0], "python": list(random.getstate()[1])},
    }
    if len(rng_states) > 1:
        state["rng"]["ranks"] = rng_states
    return state


def _restore_rng(state: dict, ctx: Distributed, device: torch.device, seed: int, step: int) -> None:
    """Each rank's RNG states from a checkpoint; a rank the checkpoint did not have gets a fresh stream."""
    ranks = state.get("ranks")
    mine = ranks[ctx.rank] if ranks and len(ranks) == ctx.world_size else state
    torch.set_rng_state(mine["torch"])
    random.setstate((3, tuple(state["python"]), None))
    if device.type == "cuda" and "cuda" in mine:
        torch.cuda.set_rng_state(mine["cuda"], device)
    if mine is state and ctx.rank > 0:  # resumed on more processes than saved: distinct dropout per rank
        torch.manual_seed(seed + 7919 * ctx.rank + step)


def _new_run_tokenizer(
    ctx: Distributed,
    cfg: TrainConfig,
    train_docs: list[Document] | None,
    prepared: PreparedCorpus | None,
    tokenizer_dir: str | Path | None,
) -> Any:
    """The tokenizer of a fresh run: the prepared corpus's, a saved one, or one trained on the train split
    (once, on rank 0, so that every rank has the very same vocabulary)."""
    if prepared is not None:
        return prepared.tokenizer()
    if tokenizer_dir is not None:
        return load_tokenizer(tokenizer_dir)

    def train() -> Any:
        sentences = (s for d in train_docs or [] for s in d)
        return train_tokenizer(sentences, cfg.vocab_size, min_frequency=cfg.tokenizer_min_frequency)

    if not ctx.enabled:
        return train()
    from tokenizers import Tokenizer

    return Tokenizer.from_str(ctx.on_main(lambda: train().to_str()))


def _prepared_data(
    prepared: PreparedCorpus,
    train_split: PreparedSplit,
    tokenizer: Any,
    cfg: TrainConfig,
    sources: DataSources,
) -> tuple[WindowedInstances, list[list[list[int]]], str]:
    """(the windowed training source, the tokenized held-out documents, a note on where they came from)."""
    if tokenizer.get_vocab() != prepared.tokenizer().get_vocab():
        raise NanobertError(
            f"the checkpoint's tokenizer differs from the one in {sources.prepared}; "
            "resume with the prepared corpus it was trained on"
        )
    if sources.valid_file:
        valid = tokenize_documents(tokenizer, load_documents(sources.valid_file, split="valid"))
        note = f"held out: {sources.valid_file}"
    elif prepared.has_split("valid"):
        valid, note = list(prepared.split("valid")), f"held out: the valid split of {sources.prepared}"
    else:
        raise NanobertError(
            f"{sources.prepared} has no valid split; pass --valid FILE (to pretrain, or to prepare)"
        )
    return WindowedInstances(train_split, cfg), valid, note


class _SignalRecorder:
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


def _all_finite(model: torch.nn.Module) -> bool:
    """Whether every weight is finite (one host sync, done only before evaluating or saving)."""
    return bool(torch.stack([p.detach().isfinite().all() for p in model.parameters()]).all())


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
) -> dict[str, Any]:
    """Train BertForPreTraining with MLM + NSP; write best/, last/, metrics.jsonl, summary.json, curves.png.

    With `resume` (a checkpoint directory), weights, optimizer, data position and RNG states come from it and
    the run continues its original plan; `train_config` then only changes the length (max_steps counts all
    steps). `stop_after` ends the run after that many total steps without changing its schedule.
    `tokenizer_dir` reuses a saved tokenizer instead of training one: Hugging Face's WordPiece trainer breaks
    ties by hash order, so two trainings on one corpus now and then differ in a few rare pieces; sharing a
    tokenizer makes separate runs (and ablations) exactly comparable. `sources.prepared` streams a corpus
    written by `nanobert prepare` (its tokenizer comes with it).

    Under torchrun (WORLD_SIZE > 1 in the environment) this runs data-parallel; see the module docstring.
    Returns the summary dict (also written to summary.json, by rank 0).
    """
    ctx, device = from_environment(resolve_device(train_config.device))
    signals = _SignalRecorder()
    try:
        return _pretrain(
            ctx,
            device,
            signals,
            model_config,
            train_config,
            sources,
            Path(out_dir),
            resume=resume,
            stop_after=stop_after,
            overwrite=overwrite,
            preset=preset,
            tokenizer_dir=tokenizer_dir,
            announce=announce,
            quiet=quiet,
        )
    finally:
        signals.restore()
        ctx.close()


def _pretrain(
    ctx: Distributed,
    device: torch.device,
    signals: _SignalRecorder,
    model_config: ModelConfig,
    cfg: TrainConfig,
    sources: DataSources,
    out_dir: Path,
    *,
    resume: str | Path | None,
    stop_after: int | None,
    overwrite: bool,
    preset: str | None,
    tokenizer_dir: str | Path | None,
    announce: str | None,
    quiet: bool,
) -> dict[str, Any]:
    wall_start = time.perf_counter()
    amp_dtype = autocast_dtype(cfg.precision, device)
    if cfg.batch_size < ctx.world_size:
        raise NanobertError(
            f"batch_size {cfg.batch_size} is the global batch and must be at least the number of processes "
            f"({ctx.world_size})"
        )

    # --- setup: output directory, seeds, data, tokenizer, model, optimizer
    resume_state = None
    if resume is not None:
        resume = Path(resume)
        read_config(resume)
        resume_state = load_trainer_state(resume)
    # Check the output directory now, but create it only once the data and tokenizer have loaded, so a
    # bad input fails before anything is written.
    prepare_out_dir(out_dir, overwrite, resuming_inside=resume is not None, create=False)
    random.seed(cfg.seed)
    torch.manual_seed(cfg.seed)

    prepared = PreparedCorpus(sources.prepared) if sources.prepared else None
    if prepared is not None:
        if tokenizer_dir is not None:
            raise NanobertError(
                "--tokenizer cannot be combined with --prepared: the prepared corpus holds one"
            )
        train_split = prepared.split("train")
        train_docs = None
        n_docs, n_sentences = len(train_split), train_split.num_sentences()
    else:
        train_docs, valid_docs, held_out_note = sources.load()
        n_docs, n_sentences = len(train_docs), sum(map(len, train_docs))
    if resume is not None:
        tokenizer = load_tokenizer(resume)
        model, _ = load_pretraining_checkpoint(resume, map_location=device)
        model_config = model.config
    else:
        tokenizer = _new_run_tokenizer(ctx, cfg, train_docs, prepared, tokenizer_dir)
        model_config = dataclasses.replace(model_config, vocab_size=tokenizer.get_vocab_size())
        if cfg.max_seq_len > model_config.max_position_embeddings:
            raise NanobertError(
                f"max_seq_len {cfg.max_seq_len} exceeds max_position_embeddings "
                f"{model_config.max_position_embeddings}"
            )
        model = BertForPreTraining(model_config).to(device)
    if ctx.rank > 0:  # the same initial weights everywhere, but each rank its own dropout
        torch.manual_seed(cfg.seed + 7919 * ctx.rank)
    vocab_size = model_config.vocab_size
    if prepared is not None:
        source, valid_tok, held_out_note = _prepared_data(prepared, train_split, tokenizer, cfg, sources)
    else:
        source = tokenize_documents(tokenizer, train_docs)
        nsp_documents(source)  # fail on a one-document corpus now, not at the first batch
        valid_tok = tokenize_documents(tokenizer, valid_docs)
    eval_batches: list[dict[str, torch.Tensor]] = []  # only rank 0 evaluates
    ctx.on_main(
        lambda: eval_batches.extend(
            prepare_eval_batches(valid_tok, cfg.max_seq_len, cfg.eval_batch_size, vocab_size, cfg.eval_seed)
        )
    )
    prepare_out_dir(out_dir, overwrite, resuming_inside=resume is not None, create=ctx.is_main)
    word_start = word_start_table(tokenizer, vocab_size) if cfg.whole_word_mask else None
    collator = MaskingCollator(
        vocab_size,
        mask_prob=cfg.mask_prob,
        max_predictions=cfg.max_predictions,
        pad_to_multiple_of=cfg.pad_to_multiple_of,
        seed=cfg.seed,
        whole_word_mask=cfg.whole_word_mask,
        word_start=word_start,
    )
    stream = BatchStream(source, cfg, collator, ctx.rank, ctx.world_size)

    optimizer = torch.optim.AdamW(
        decay_parameter_groups(model, cfg.weight_decay),
        lr=cfg.learning_rate,
        betas=(cfg.adam_beta1, cfg.adam_beta2),
        eps=cfg.adam_eps,
        fused=device.type == "cuda",
    )
    run = RunState()
    if resume_state is not None:
        optimizer.load_state_dict(resume_state["optimizer"])
        stream.load_state_dict(resume_state["data"])
        run = RunState(**resume_state["run"])
        _restore_rng(resume_state["rng"], ctx, device, cfg.seed, run.step)
    # The plan: a step count (max_steps, or epochs x batches per epoch), or a time budget.
    steps_per_epoch = max(1, stream.batches_per_epoch() // cfg.grad_accum_steps)
    if cfg.max_steps is not None:
        run.total_steps = cfg.max_steps
    elif cfg.epochs is not None:
        run.total_steps = max(1, math.ceil(cfg.epochs * steps_per_epoch))
    elif cfg.time_budget is None and run.total_steps is None:
        raise NanobertError("set the run length: --max-steps, --epochs or --time-budget")
    time_budget = None if cfg.max_steps is not None or cfg.epochs is not None else cfg.time_budget
    if time_budget is not None:
        run.total_steps = None

    train_model = torch.compile(model) if cfg.compile else model  # keep `model` unwrapped for saving
    if ctx.enabled:
        from torch.nn.parallel import DistributedDataParallel

        train_model = DistributedDataParallel(
            train_model, device_ids=[device.index] if device.type == "cuda" else None
        )
    log = RunLog(out_dir, run.total_steps, run.step, quiet, write=ctx.is_main)
    log.truncate_after(run.step)
    n_params = sum(p.numel() for p in model.parameters())
    plan = f"{run.total_steps} steps" if run.total_steps else f"a {time_budget:.0f} s time budget"
    if announce:
        log.say(f"nanobert: {announce}")
    log.say(
        f"nanobert: {n_params / 1e6:.2f}M parameters, vocab {vocab_size}, {n_docs} train documents "
        f"({n_sentences} sentences), {steps_per_epoch} steps/epoch; {held_out_note}"
    )
    where = f"{ctx.world_size} processes on {device.type}" if ctx.enabled else str(device)
    log.say(
        f"nanobert: training on {where} for {plan}" + (f", resuming at step {run.step}" if run.step else "")
    )
    extra = {"data": dataclasses.asdict(sources), "preset": preset}
    saved = (resume, run.step) if resume is not None else None  # the last good last/ checkpoint

    def diverged(what: str) -> NanobertError:
        kept = (
            f"the last good checkpoint ({saved[0]}, step {saved[1]}) is kept"
            if saved is not None
            else "no checkpoint had been written yet"
        )
        return NanobertError(
            f"training diverged at step {run.step} ({what}); stopped without saving, so {kept}; "
            f"lower learning_rate (--set learning_rate=...) and resume or restart"
        )

    def save(name: str) -> None:
        nonlocal saved
        if not _all_finite(model):  # never let a diverged model overwrite a good checkpoint
            raise diverged("non-finite weights")
        rng_states = ctx.gather(_rng_state(device))
        if ctx.is_main:
            save_checkpoint(
                out_dir / name,
                model,
                cfg,
                tokenizer,
                _trainer_state(optimizer, data_state, run, rng_states),
                extra={**extra, "step": run.step},
            )
        ctx.barrier()
        if name == "last":
            saved = (out_dir / "last", run.step)

    def evaluate() -> dict[str, float]:
        if not _all_finite(model):
            raise diverged("non-finite weights")
        metrics = ctx.on_main(lambda: evaluate_model(model, eval_batches, device, amp_dtype))
        if not math.isfinite(metrics["mlm_loss"]):
            raise diverged(f"held-out mlm_loss {metrics['mlm_loss']}")
        log.record({"split": "valid", "step": run.step, **metrics})
        run.history.append({"step": run.step, **metrics})
        log.say(f"eval step {run.step}: " + "  ".join(f"{k} {v:.4f}" for k, v in metrics.items()))
        if metrics["mlm_loss"] < run.best_mlm_loss:
            run.best_mlm_loss, run.best_step, run.evals_since_best = metrics["mlm_loss"], run.step, 0
            save("best")
        else:
            run.evals_since_best += 1
        return metrics

    # SIGINT / SIGTERM end the run at the next step boundary with a resumable last/ checkpoint. From here to
    # the end of the run they are only recorded (so one during the final save cannot cut it short).
    signals.install()
    interrupted = signals.received

    # --- the loop
    model.train()
    loss_sum = torch.zeros((), device=device)
    mlm_sum = torch.zeros((), device=device)
    nsp_sum = torch.zeros((), device=device)
    window_steps, window_tokens, window_start = 0, 0, time.perf_counter()
    # On a GPU the next batches are prepared on a thread while it computes; on the CPU that would only
    # compete for the same cores.
    data_state = stream.state_dict()
    feeder = Prefetcher(stream) if device.type == "cuda" else Synchronous(stream)
    loop_start, train_time_before, loop_start_step = time.perf_counter(), run.train_time, run.step
    last_metrics: dict[str, float] | None = None
    stop_reason = "finished"
    signalled = False
    checkpoint_interval = cfg.checkpoint_interval or cfg.eval_interval
    try:
        while True:
            elapsed = train_time_before + time.perf_counter() - loop_start
            signalled = bool(interrupted)
            if ctx.enabled:  # one decision for all ranks: clocks and signals differ between processes
                elapsed, agreed = ctx.agree_max([elapsed, float(signalled)])
                signalled = agreed > 0
            if run.total_steps is not None and run.step >= run.total_steps:
                break
            if time_budget is not None and elapsed >= time_budget:
                break
            if stop_after is not None and run.step >= stop_after:
                stop_reason = "stopped after --stop-after"
                break
            if signalled:
                stop_reason = f"interrupted by signal {interrupted[0] if interrupted else 'on another rank'}"
                break
            # learning rate for this step, from the fraction of the plan done
            progress = (run.step + 1) / run.total_steps if run.total_steps else elapsed / time_budget
            lr = cfg.learning_rate * lr_multiplier(progress, cfg.warmup_ratio, cfg.min_lr_ratio)
            for group in optimizer.param_groups:
                group["lr"] = lr
            # forward and backward over grad_accum_steps micro-batches (DDP all-reduces on the last only)
            for micro in range(cfg.grad_accum_steps):
                batch, data_state = feeder.next()
                if float(batch["loss_share"][1]) > 0:  # not a placeholder row (see shard_batch)
                    mask = batch.get("attention_mask")
                    window_tokens += int(mask.sum()) if mask is not None else batch["input_ids"].numel()
                batch = {k: v.to(device, non_blocking=True) for k, v in batch.items()}
                share = batch.pop("loss_share")
                last_micro = micro == cfg.grad_accum_steps - 1
                sync = train_model.no_sync() if ctx.enabled and not last_micro else nullcontext()
                autocast = torch.autocast(device.type, dtype=amp_dtype) if amp_dtype else nullcontext()
                with sync:
                    with autocast:
                        out = train_model(**batch)
                    # this rank's part of the global batch's loss; DDP averages gradients, hence x world_size
                    mlm, nsp = out.mlm_loss * share[0], out.nsp_loss * share[1]
                    loss = mlm + nsp
                    (loss * ctx.world_size / cfg.grad_accum_steps).backward()
                loss_sum += loss.detach() / cfg.grad_accum_steps
                mlm_sum += mlm.detach() / cfg.grad_accum_steps
                nsp_sum += nsp.detach() / cfg.grad_accum_steps
            # clip, step, clear
            if cfg.grad_clip > 0:
                torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            run.step += 1
            window_steps += 1
            # log (the only per-step host sync, every log_interval steps and at the end)
            now = time.perf_counter()
            is_last = run.total_steps is not None and run.step >= run.total_steps
            if run.step % cfg.log_interval == 0 or is_last or run.step == stop_after:
                if ctx.enabled:  # the global batch's loss is the sum of the ranks' parts
                    tokens = torch.tensor(float(window_tokens), device=device)
                    totals = ctx.all_reduce_sum(torch.stack([loss_sum, mlm_sum, nsp_sum, tokens]))
                    loss_sum, mlm_sum, nsp_sum = totals[0].clone(), totals[1].clone(), totals[2].clone()
                    window_tokens = int(totals[3].item())
                loss, mlm, nsp = (t.item() / window_steps for t in (loss_sum, mlm_sum, nsp_sum))
                if not math.isfinite(loss):
                    raise diverged(f"loss {loss}")
                tokens_per_s = window_tokens / max(now - window_start, 1e-9)
                run.tokens_seen += window_tokens
                log.record(
                    {
                        "split": "train",
                        "step": run.step,
                        "loss": loss,
                        "mlm_loss": mlm,
                        "nsp_loss": nsp,
                        "lr": lr,
                        "tokens_per_s": tokens_per_s,
                    }
                )
                elapsed = train_time_before + now - loop_start
                if run.total_steps:  # seconds per step so far in this session, times the steps left
                    eta = (now - loop_start) / (run.step - loop_start_step) * (run.total_steps - run.step)
                else:
                    eta = max(time_budget - elapsed, 0.0)
                log.progress(run.step, run.total_steps, loss, tokens_per_s, eta)
                loss_sum.zero_(), mlm_sum.zero_(), nsp_sum.zero_()
                window_steps, window_tokens, window_start = 0, 0, time.perf_counter()
            # evaluate and keep the best
            if run.step % cfg.eval_interval == 0:
                eval_start = time.perf_counter()
                last_metrics = evaluate()
                window_start += time.perf_counter() - eval_start  # tokens/s measures training only
                if (
                    cfg.early_stopping_patience is not None
                    and run.evals_since_best >= cfg.early_stopping_patience
                ):
                    stop_reason = (
                        f"early stopping: no better held-out MLM loss in {run.evals_since_best} evals"
                    )
                    break
            # a resumable last/ now and then (the end of the run writes one anyway)
            run.train_time = train_time_before + time.perf_counter() - loop_start
            if run.step % checkpoint_interval == 0 and not is_last and run.step != stop_after:
                save_start = time.perf_counter()
                save("last")
                window_start += time.perf_counter() - save_start
    finally:
        feeder.close()
        log.close()
    run.train_time = train_time_before + time.perf_counter() - loop_start
    run.tokens_seen += window_tokens

    # --- final evaluation and saving
    if signalled:  # secure the work first: a preempted job may be killed soon after its signal
        save("last")
    if last_metrics is None or run.history[-1]["step"] != run.step:
        last_metrics = evaluate()
    save("last")
    best = next((h for h in run.history if h["step"] == run.best_step), None)
    summary = {
        "final": {"step": run.step, **last_metrics},
        "best": best,
        "stop_reason": stop_reason,
        "steps": run.step,
        "epochs": stream.epochs_done(data_state),
        "train_time_s": round(run.train_time, 2),
        "wall_time_s": round(time.perf_counter() - wall_start, 2),
        "tokens_seen": run.tokens_seen,
        "tokens_per_s": run.tokens_seen / max(run.train_time, 1e-9),
        "parameters": n_params,
        "vocab_size": vocab_size,
        "preset": preset,
        "data": dataclasses.asdict(sources),
        "hardware": hardware_description(device, ctx.world_size),
        "model": dataclasses.asdict(model_config),
        "train": dataclasses.asdict(cfg),
    }
    if not ctx.is_main:  # the other ranks write nothing (and the CLI prints nothing for them)
        return {**summary, "rank": ctx.rank}
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    try:
        from nanobert.plots import plot_curves

        plot_curves(out_dir / "metrics.jsonl", out_dir / "curves.png")
    except ImportError:  # matplotlib is a dependency, but a broken install should not lose the run
        log.say("nanobert: matplotlib unavailable; curves.png not written")
    log.say(
        f"nanobert: {stop_reason} at step {run.step} in {run.train_time:.0f} s "
        f"({summary['tokens_per_s']:,.0f} tokens/s); outputs in {out_dir}"
    )
    if signalled:
        log.say(f"nanobert: resume with: nanobert pretrain --resume {out_dir / 'last'}")
    return summary


def resume_configs(resume: str | Path) -> tuple[ModelConfig, TrainConfig, DataSources]:
    """The configs and data sources a checkpoint was trained with (what --resume continues)."""
    config = read_config(resume)
    sources = config_from_dict(DataSources, config.get("data") or {})
    return config_from_dict(ModelConfig, config["model"]), load_train_config(config), sources


__all__ = ["DEFAULT_DATA", "DataSources", "lr_multiplier", "pretrain", "resolve_device", "resume_configs"]
