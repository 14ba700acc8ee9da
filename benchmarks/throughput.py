"""Training throughput, nanobert vs transformers' BertForPreTraining, side by side in one process.

Both models get the same config, the same initial weights (through nanobert's key map), the same random
batches (15% of tokens masked, or `--mask-prob`; 80/10/10 is irrelevant for speed so chosen tokens become
[MASK]), the same precision (`--precision`: fp32, or bf16 autocast on both sides; default bf16 on CUDA, fp32
on the CPU), the same optimizer (torch's fused AdamW, as nanobert's trainer uses) and the same process, with
the allocator setting every nanobert job makes on a CPU (`device.keep_freed_memory`), so both sides have it.
They are timed alternately in rounds after a warm-up (which absorbs torch.compile), and the median round is
reported.

Utilisation is reported against the dense peak of the same precision: on a CPU that peak is measured by this
script, in this process, as the best of a few large square matrix multiplies (so "MFU" there means the share
of what this machine's matrix multiply actually reaches); on a GPU, `--peak-tflops` (H100 bf16: 989).

nanobert is fed the way its trainer feeds it: the query layout computed on the host (`query_positions` and
`mlm_positions`, so its last layer computes only [CLS] and the masked positions) and no attention mask when a
batch has no padding. transformers is fed its standard inputs.

Useful FLOPs count the encoder (6 x parameters x tokens, plus attention scores and values), the MLM head at
masked positions only and the pooler/NSP head, so a model that decodes every position gets no credit for it.
The last encoder layer is counted in full, as the issue defines useful FLOPs, although nanobert's last layer
skips the queries no loss reads; its utilisation figure includes that saving.

For CUDA graphs (`--cuda-graphs`), nanobert's step must be graph-safe: the same shapes every step (the
query layout of every batch padded to one width and one count, `static_layout`; `--static-shapes` does only
that) and no host synchronisation inside the step (`--check-syncs` runs one eager step of each side under
`HostSyncs` and reports the operations that would synchronise). nanobert is then compiled with
`mode="reduce-overhead"` (CUDA graphs); transformers keeps `--compile`'s default mode, the issue's baseline.
Warm-up (compilation, graph capture) is timed apart from the rounds and reported as such; `--json PATH`
writes every figure, rewritten as soon as each one is known, so a run stopped at a time limit still says what
it reached (benchmarks/gpu_check.py reads it).

    python benchmarks/throughput.py --device cuda --shape base --seq-len 128 --batch-size 256 --compile
    python benchmarks/throughput.py --device cuda --shape mini --cuda-graphs --json mini.json
    python benchmarks/throughput.py --device cpu --shape mini --vocab-size 8192 --precision fp32

The last line reads `nanobert/transformers: <ratio>x`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from contextlib import nullcontext
from pathlib import Path

import torch
from flops import matmul_peak, useful_flops
from step_profile import host_syncs, profile_steps, sync

from nanobert.config import ModelConfig
from nanobert.data.masking import masked_positions, query_layout
from nanobert.device import resolve_device
from nanobert.errors import ArgumentParser, NanobertError, positive_int, run_script
from nanobert.hf.names import to_hf_config, to_hf_state_dict
from nanobert.model import BertForPreTraining
from nanobert.pretraining.recipes import MODEL_PRESETS
from nanobert.tokenizer import NUM_SPECIAL_TOKENS


def non_negative_int(text: str) -> int:
    """argparse type of --warmup: a whole number of at least 0."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of at least 0")
    return value


def check_args(args: argparse.Namespace) -> None:
    """What the argument types cannot say, checked before the models are built and timed."""
    if args.vocab_size <= NUM_SPECIAL_TOKENS:  # the random batches draw their words from the ids above these
        raise NanobertError(
            f"--vocab-size {args.vocab_size} leaves no room for words after the {NUM_SPECIAL_TOKENS} special "
            f"tokens; use more than {NUM_SPECIAL_TOKENS} (BERT's is 30522)"
        )
    if not 0 < args.mask_prob <= 1:  # NaN fails this too
        raise NanobertError(f"--mask-prob must be in (0, 1], got {args.mask_prob:g} (BERT's is 0.15)")
    if not args.peak_tflops > 0:  # utilisation divides by it
        raise NanobertError(f"--peak-tflops must be positive, got {args.peak_tflops:g}")


# What the trainer feeds nanobert's BertForPreTraining from each batch (make_batches adds flat_mlm_positions)
TRAINER_KEYS = (
    "input_ids",
    "token_type_ids",
    "labels",
    "next_sentence_label",
    "query_positions",
    "mlm_positions",
)


def make_batches(n: int, batch_size: int, seq_len: int, vocab_size: int, mask_prob: float, seed: int):
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        ids = torch.randint(5, vocab_size, (batch_size, seq_len), generator=g)
        ids[:, 0] = 2  # [CLS]
        ids[:, seq_len // 2] = 3  # [SEP] between the two segments
        ids[:, -1] = 3
        chosen = torch.rand(batch_size, seq_len, generator=g) < mask_prob
        chosen[:, 0] = chosen[:, seq_len // 2] = chosen[:, -1] = False
        labels = torch.where(chosen, ids, torch.full_like(ids, -100))
        inputs = torch.where(chosen, torch.full_like(ids, 4), ids)
        token_type_ids = (
            (torch.arange(seq_len) > seq_len // 2).long().expand(batch_size, seq_len).contiguous()
        )
        nsp = torch.randint(0, 2, (batch_size,), generator=g)
        out.append(
            {
                "input_ids": inputs,
                "token_type_ids": token_type_ids,
                "labels": labels,
                "next_sentence_label": nsp,
                **dict(zip(("query_positions", "mlm_positions"), query_layout(labels, 64, 8), strict=True)),
                "flat_mlm_positions": masked_positions(labels, 64),  # for --full-last-layer
            }
        )
    return out


def static_layout(batches: list[dict]) -> list[dict]:
    """The batches with one query width M and one masked count N for all of them, so every step has the
    same shapes (what CUDA graphs replay, and what keeps torch.compile from recompiling).

    query_positions rows are padded with 0 ([CLS]: label -100 after the gather) to the widest batch's M, and
    mlm_positions are re-indexed into B*M and padded with 0 (slot 0 of row 0, [CLS], ignored by the loss) to
    the largest N; the losses are unchanged."""
    width = max(b["query_positions"].size(1) for b in batches)
    count = max(b["mlm_positions"].numel() for b in batches)
    out = []
    for b in batches:
        old = b["query_positions"].size(1)
        query = torch.nn.functional.pad(b["query_positions"], (0, width - old))
        mlm = (
            b["mlm_positions"] // old * width + b["mlm_positions"] % old
        )  # same slots, rows now `width` wide
        mlm = torch.nn.functional.pad(mlm, (0, count - mlm.numel()))
        out.append({**b, "query_positions": query, "mlm_positions": mlm})
    return out


class Side:
    """One contender: a model, its optimizer, and how to run one training step on a batch.

    compile_mode: None (eager), "default", or "reduce-overhead" (CUDA graphs: torch.compile captures the
    step's forward and backward once and replays them); backend: torch.compile's, "inductor", "eager"
    (dynamo traces the model but generates no code: the CPU dry run's quick check of the compiled path) or
    "cudagraphs" (graphs without inductor's code generation).
    """

    def __init__(self, name, model, step_inputs, device, amp_dtype, compile_mode=None, backend="inductor"):
        self.name = name
        self.model = model.to(device).train()
        self.module = self.model
        graphed = (compile_mode == "reduce-overhead" and backend == "inductor") or backend == "cudagraphs"
        self.graphs = graphed and device.type == "cuda"
        if compile_mode is not None:
            mode = compile_mode if backend == "inductor" and device.type == "cuda" else None
            self.module = torch.compile(self.model, mode=mode, backend=backend)
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=1e-4, fused=True)
        self.step_inputs = step_inputs
        self.device, self.amp_dtype = device, amp_dtype
        self.times, self.peak_mem, self.warmup_s = [], 0, None

    def step(self, batch, eager: bool = False) -> torch.Tensor:
        """One training step: forward, backward, optimizer; returns the loss, still on the device (under CUDA
        graphs, valid until the next step). No host synchronisation in here (`host_syncs`). eager=True runs
        the uncompiled model (the sync check)."""
        if self.graphs and not eager:
            torch.compiler.cudagraph_mark_step_begin()  # a new iteration: the last replay's outputs are done
        autocast = torch.autocast(self.device.type, dtype=self.amp_dtype) if self.amp_dtype else nullcontext()
        with autocast:
            out = (self.model if eager else self.module)(**self.step_inputs(batch))
        out.loss.backward()
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        return out.loss.detach()


def warm_up(sides, batches, n: int, device, clock=time.perf_counter, on_side=None) -> None:
    """n untimed steps per side, where compilation and CUDA-graph capture happen; each side's warmup_s.
    on_side() (the report) runs after each side, so a compile that outlasts a time limit still leaves the
    other side's."""
    for side in sides:
        sync(device)
        start = clock()
        for i in range(n):
            side.step(batches[i % len(batches)])
        sync(device)
        side.warmup_s = clock() - start
        if on_side is not None:
            on_side()


def time_rounds(sides, batches, steps: int, rounds: int, device, clock=time.perf_counter, on_round=None):
    """`rounds` rounds of `steps` timed steps per side, the sides alternating (a drift in clock or load hits
    both alike); each side's seconds per step per round in side.times, peak memory in side.peak_mem.
    Nothing but the steps runs between the clock reads; on_round() (the report) runs after each round."""
    for _ in range(rounds):
        for side in sides:
            if device.type == "cuda":
                torch.cuda.reset_peak_memory_stats(device)
            sync(device)
            start = clock()
            for i in range(steps):
                side.step(batches[i % len(batches)])
            sync(device)
            side.times.append((clock() - start) / steps)
            if device.type == "cuda":
                side.peak_mem = max(side.peak_mem, torch.cuda.max_memory_allocated(device))
        if on_round is not None:
            on_round()


class Report:
    """The run's figures as one JSON object, rewritten (whole, then renamed into place) at every update, so a
    run stopped by a time limit leaves what it had measured; no file when path is None."""

    def __init__(self, path: Path | None):
        self.path, self.data = path, {"finished": False}

    def update(self, **figures) -> None:
        self.data.update(figures)
        if self.path is not None:
            part = self.path.with_name(self.path.name + ".part")
            part.write_text(json.dumps(self.data, indent=1) + "\n")
            part.replace(self.path)


def side_figures(side, warmup: int, tokens: int, batch_size: int, flops: float, peak: float) -> dict:
    """One side's figures: the median round's rate, MFU, peak memory, and warm-up beyond steady steps."""
    figures = {"warmup_s": side.warmup_s, "steps_timed": len(side.times)}
    if side.times:
        t = statistics.median(side.times)
        figures.update(
            tokens_per_s=tokens / t,
            seqs_per_s=batch_size / t,
            ms_per_step=t * 1e3,
            round_ms=[round(x * 1e3, 3) for x in side.times],  # the spread: a difference below it is noise
            mfu=flops / t / peak if peak else None,
            peak_mem_gib=side.peak_mem / 2**30 if side.peak_mem else None,
            # compilation and graph capture: the warm-up's time beyond what its steps cost once compiled
            compile_s=max(side.warmup_s - warmup * t, 0.0) if side.warmup_s is not None else None,
        )
    return figures


def add_compile_options(p: argparse.ArgumentParser) -> None:
    """How both sides are compiled: --compile, --cuda-graphs, --static-shapes, --compile-backend."""
    p.add_argument("--compile", action="store_true", help="torch.compile both models")
    p.add_argument(
        "--cuda-graphs",
        action="store_true",
        help="nanobert compiled with mode=reduce-overhead (CUDA graphs) and static shapes; implies --compile "
        "(transformers: the default mode)",
    )
    p.add_argument("--static-shapes", action="store_true", help="pad every batch's query layout to one shape")
    p.add_argument(
        "--compile-backend",
        choices=["inductor", "eager", "cudagraphs"],
        default="inductor",
        help="eager: dynamo traces, no code generated (a quick CPU check of the compiled path); cudagraphs: "
        "CUDA graphs without inductor's code generation",
    )


def parse_args(argv=None) -> argparse.Namespace:
    p = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shape", choices=list(MODEL_PRESETS), default="mini")
    p.add_argument("--seq-len", type=positive_int, default=128)
    p.add_argument("--batch-size", type=positive_int, default=32)
    p.add_argument("--vocab-size", type=int, default=30522, help="30522 = BERT's; the CPU target uses 8192")
    p.add_argument(
        "--device", choices=["cpu", "cuda"], default="cuda" if torch.cuda.is_available() else "cpu"
    )
    add_compile_options(p)
    p.add_argument("--check-syncs", action="store_true", help="report host syncs in one eager step per side")
    p.add_argument(
        "--profile-steps",
        type=non_negative_int,
        default=0,
        help="after timing, profile this many steps per side: the top operations by self time (--json)",
    )
    p.add_argument("--json", type=Path, help="write every figure to this JSON file as it is measured")
    p.add_argument("--hf-attn", choices=["sdpa", "eager"], default="sdpa", help="transformers' attention")
    p.add_argument(
        "--warmup", type=non_negative_int, default=3, help="untimed steps per side (absorbs compilation)"
    )
    p.add_argument("--steps", type=positive_int, default=10, help="timed steps per side per round")
    p.add_argument("--rounds", type=positive_int, default=3)
    p.add_argument("--peak-tflops", type=float, default=989.0, help="GPU dense peak for MFU (H100 bf16: 989)")
    p.add_argument(
        "--precision", choices=["fp32", "bf16"], help="both sides (default: bf16 on CUDA, fp32 on CPU)"
    )
    p.add_argument("--dropout", type=float, default=0.1)
    p.add_argument("--mask-prob", type=float, default=0.15, help="share of tokens masked (BERT's 0.15)")
    p.add_argument(
        "--threads", type=positive_int, default=None, help="torch CPU threads (default: torch's choice)"
    )
    p.add_argument(
        "--full-last-layer",
        action="store_true",
        help="ablation: nanobert's last layer computes every position (no query_positions)",
    )
    p.add_argument(
        "--with-logits",
        action="store_true",
        help="ablation: nanobert's MLM loss from the full (N, V) logits instead of in chunks",
    )
    args = p.parse_args(argv)
    if args.cuda_graphs:
        args.compile = args.static_shapes = True
    return args


def build_sides(args, config: ModelConfig, device, amp_dtype) -> list[Side]:
    """nanobert and transformers' BertForPreTraining with the same weights, each with its optimizer."""
    from transformers import BertConfig
    from transformers import BertForPreTraining as HFBertForPreTraining

    torch.manual_seed(0)
    ours = BertForPreTraining(config)
    hf_config = BertConfig(**to_hf_config(config))
    hf_config._attn_implementation = args.hf_attn  # constructor-time choice of transformers' attention
    theirs = HFBertForPreTraining(hf_config)
    theirs.load_state_dict(to_hf_state_dict(ours.state_dict(), config), strict=False)

    def ours_inputs(b):
        # input_ids, token_type_ids, labels, next_sentence_label, the query layout; no padding mask
        # and, as the trainer asks, the loss without the (N, V) logits (chunked; --with-logits: the ablation)
        inputs = {k: b[k] for k in ("input_ids", "token_type_ids", "labels", "next_sentence_label")}
        inputs["return_logits"] = args.with_logits
        if args.full_last_layer:
            return {**inputs, "mlm_positions": b["flat_mlm_positions"]}
        return {**inputs, "query_positions": b["query_positions"], "mlm_positions": b["mlm_positions"]}

    def theirs_inputs(b):
        return {k: b[k] for k in ("input_ids", "token_type_ids", "labels", "next_sentence_label")}

    ours_mode = ("reduce-overhead" if args.cuda_graphs else "default") if args.compile else None
    theirs_mode = "default" if args.compile else None
    return [
        Side("nanobert", ours, ours_inputs, device, amp_dtype, ours_mode, args.compile_backend),
        Side("transformers", theirs, theirs_inputs, device, amp_dtype, theirs_mode, args.compile_backend),
    ]


def main() -> None:
    args = parse_args()
    check_args(args)
    config = ModelConfig(  # before any work too: it checks --dropout
        vocab_size=args.vocab_size,
        max_position_embeddings=max(512, args.seq_len),
        hidden_dropout_prob=args.dropout,
        attention_probs_dropout_prob=args.dropout,
        **MODEL_PRESETS[args.shape],
    )
    report = Report(args.json)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = resolve_device(args.device)
    precision = args.precision or ("bf16" if device.type == "cuda" else "fp32")
    amp_dtype = torch.bfloat16 if precision == "bf16" else None
    peak = args.peak_tflops * 1e12 if device.type == "cuda" else matmul_peak(amp_dtype)
    batches = make_batches(4, args.batch_size, args.seq_len, args.vocab_size, args.mask_prob, seed=0)
    if args.static_shapes:
        batches = static_layout(batches)
    batches = [{k: v.to(device) for k, v in b.items()} for b in batches]
    n_masked = statistics.mean(float((b["labels"] != -100).sum()) for b in batches)
    flops = useful_flops(config, args.batch_size, args.seq_len, n_masked)
    tokens = args.batch_size * args.seq_len
    report.update(
        settings={k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        device=torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        precision=precision,
        torch=torch.__version__,
        flops_per_token=flops / tokens,
        peak_tflops=peak / 1e12,
        peak_source="--peak-tflops" if device.type == "cuda" else "measured here",
        cuda_graphs=args.cuda_graphs and device.type == "cuda",
    )
    sides = build_sides(args, config, device, amp_dtype)

    def figures() -> dict:
        return {s.name: side_figures(s, args.warmup, tokens, args.batch_size, flops, peak) for s in sides}

    if args.check_syncs:
        report.update(
            host_syncs={s.name: host_syncs(lambda s=s: s.step(batches[0], eager=True)) for s in sides}
        )
    warm_up(sides, batches, args.warmup, device, on_side=lambda: report.update(sides=figures()))
    time_rounds(
        sides, batches, args.steps, args.rounds, device, on_round=lambda: report.update(sides=figures())
    )
    ratio = statistics.median(sides[1].times) / statistics.median(sides[0].times)
    report.update(ratio=ratio)
    if args.profile_steps:
        try:
            report.update(
                profile={s.name: profile_steps(s, batches, args.profile_steps, device) for s in sides}
            )
        except Exception as e:  # noqa: BLE001 (a profiler that fails must not cost the figures above)
            report.update(profile_error=f"{type(e).__name__}: {e}")
    report.update(finished=True)
    print_table(args, config, device, precision, sides, figures(), flops / tokens, peak)
    print(f"nanobert/transformers: {ratio:.2f}x")


def print_table(args, config, device, precision, sides, figures, flops_per_token, peak) -> None:
    print(
        f"shape {args.shape} (L={config.num_hidden_layers}, H={config.hidden_size}, V={config.vocab_size}), "
        f"batch {args.batch_size} x seq {args.seq_len}, device {args.device}"
        + (
            f" ({torch.cuda.get_device_name(device)})"
            if device.type == "cuda"
            else f" ({torch.get_num_threads()} threads)"
        )
        + f", {precision}, compile={args.compile}, cuda graphs={args.cuda_graphs}, "
        + f"transformers attn={args.hf_attn}, "
        + ("nanobert's last layer in full, " if args.full_last_layer else "")
        + f"median of {args.rounds} rounds x {args.steps} steps"
    )
    print(
        f"{'model':14s} {'tokens/s':>12s} {'seqs/s':>10s} {'ms/step':>9s} {'MFU':>7s} {'peak mem':>10s} "
        f"{'warm-up s':>10s}"
    )
    for side in sides:
        f = figures[side.name]
        mem = f"{f['peak_mem_gib']:.2f} GiB" if f["peak_mem_gib"] else "n/a"
        print(
            f"{side.name:14s} {f['tokens_per_s']:12,.0f} {f['seqs_per_s']:10,.1f} {f['ms_per_step']:9.1f} "
            f"{f['mfu']:7.1%} {mem:>10s} {f['warmup_s']:10.1f}"
        )
    where = "measured here" if device.type == "cpu" else "--peak-tflops"
    print(f"useful work {flops_per_token / 1e6:.1f} MFLOP/token; {precision} matmul peak ", end="")
    print(f"{peak / 1e12:.3f} TFLOP/s ({where})")


if __name__ == "__main__":
    raise SystemExit(run_script("throughput.py", main))
