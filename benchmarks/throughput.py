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

    python benchmarks/throughput.py --device cuda --shape base --seq-len 128 --batch-size 256 --compile
    python benchmarks/throughput.py --device cpu --shape mini --vocab-size 8192 --precision fp32

The last line reads `nanobert/transformers: <ratio>x`.
"""

from __future__ import annotations

import argparse
import statistics
import time
from contextlib import nullcontext

import torch

from nanobert.config import MODEL_PRESETS, ModelConfig
from nanobert.device import resolve_device
from nanobert.errors import ArgumentParser, NanobertError, positive_int, run_script
from nanobert.hf_export import to_hf_config, to_hf_state_dict
from nanobert.model import BertForPreTraining
from nanobert.pretraining_data import masked_positions, query_layout
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


def useful_flops(config: ModelConfig, batch_size: int, seq_len: int, n_masked: float) -> float:
    """Training FLOPs (forward + backward = 3 x forward) of the work a BERT must do for one step."""
    H, L, V, inter = config.hidden_size, config.num_hidden_layers, config.vocab_size, config.intermediate_size
    tokens = batch_size * seq_len
    per_layer_params = 4 * H * H + 2 * H * inter  # qkv + output projection + feed-forward (weights only)
    encoder = 6 * L * per_layer_params * tokens + 6 * 2 * L * seq_len * H * tokens  # matmuls + QK^T and AV
    mlm_head = 6 * (H * H + H * V) * n_masked  # transform + tied decoder, masked positions only
    pooler_nsp = 6 * (H * H + 2 * H) * batch_size
    return encoder + mlm_head + pooler_nsp


class Side:
    """One contender: a model, its optimizer, and how to run one training step on a batch."""

    def __init__(self, name, model, step_inputs, device, amp_dtype, compile_model):
        self.name = name
        self.model = model.to(device).train()
        self.module = torch.compile(self.model) if compile_model else self.model
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=1e-4, fused=True)
        self.step_inputs = step_inputs
        self.device, self.amp_dtype = device, amp_dtype
        self.times, self.peak_mem = [], 0

    def step(self, batch):
        autocast = torch.autocast(self.device.type, dtype=self.amp_dtype) if self.amp_dtype else nullcontext()
        with autocast:
            out = self.module(**self.step_inputs(batch))
        out.loss.backward()
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def main() -> None:
    p = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shape", choices=list(MODEL_PRESETS), default="mini")
    p.add_argument("--seq-len", type=positive_int, default=128)
    p.add_argument("--batch-size", type=positive_int, default=32)
    p.add_argument("--vocab-size", type=int, default=30522, help="30522 = BERT's; the CPU target uses 8192")
    p.add_argument(
        "--device", choices=["cpu", "cuda"], default="cuda" if torch.cuda.is_available() else "cpu"
    )
    p.add_argument("--compile", action="store_true", help="torch.compile both models")
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
    args = p.parse_args()
    check_args(args)
    config = ModelConfig(  # before any work too: it checks --dropout
        vocab_size=args.vocab_size,
        max_position_embeddings=max(512, args.seq_len),
        hidden_dropout_prob=args.dropout,
        attention_probs_dropout_prob=args.dropout,
        **MODEL_PRESETS[args.shape],
    )
    if args.threads:
        torch.set_num_threads(args.threads)
    from transformers import BertConfig
    from transformers import BertForPreTraining as HFBertForPreTraining

    device = resolve_device(args.device)
    precision = args.precision or ("bf16" if device.type == "cuda" else "fp32")
    amp_dtype = torch.bfloat16 if precision == "bf16" else None
    peak = args.peak_tflops * 1e12 if device.type == "cuda" else matmul_peak(amp_dtype)
    torch.manual_seed(0)
    ours = BertForPreTraining(config)
    hf_config = BertConfig(**to_hf_config(config))
    hf_config._attn_implementation = args.hf_attn  # constructor-time choice of transformers' attention
    theirs = HFBertForPreTraining(hf_config)
    theirs.load_state_dict(to_hf_state_dict(ours.state_dict(), config), strict=False)
    batches = make_batches(4, args.batch_size, args.seq_len, args.vocab_size, args.mask_prob, seed=0)
    batches = [{k: v.to(device) for k, v in b.items()} for b in batches]

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

    sides = [
        Side("nanobert", ours, ours_inputs, device, amp_dtype, args.compile),
        Side("transformers", theirs, theirs_inputs, device, amp_dtype, args.compile),
    ]
    for side in sides:  # warm-up, compile included, not timed
        for i in range(args.warmup):
            side.step(batches[i % len(batches)])
        sync(device)
    for _ in range(args.rounds):  # alternate, so drifts in clock or load hit both sides alike
        for side in sides:
            if device.type == "cuda":
                torch.cuda.reset_peak_memory_stats(device)
            sync(device)
            t0 = time.perf_counter()
            for i in range(args.steps):
                side.step(batches[i % len(batches)])
            sync(device)
            side.times.append((time.perf_counter() - t0) / args.steps)
            if device.type == "cuda":
                side.peak_mem = max(side.peak_mem, torch.cuda.max_memory_allocated(device))

    n_masked = statistics.mean(float((b["labels"] != -100).sum()) for b in batches)
    flops = useful_flops(config, args.batch_size, args.seq_len, n_masked)
    tokens = args.batch_size * args.seq_len
    print(
        f"shape {args.shape} (L={config.num_hidden_layers}, H={config.hidden_size}, V={config.vocab_size}), "
        f"batch {args.batch_size} x seq {args.seq_len}, device {args.device}"
        + (
            f" ({torch.cuda.get_device_name(device)})"
            if device.type == "cuda"
            else f" ({torch.get_num_threads()} threads)"
        )
        + f", {precision}, compile={args.compile}, transformers attn={args.hf_attn}, "
        + ("nanobert's last layer in full, " if args.full_last_layer else "")
        + f"median of {args.rounds} rounds x {args.steps} steps"
    )
    print(f"{'model':14s} {'tokens/s':>12s} {'seqs/s':>10s} {'ms/step':>9s} {'MFU':>7s} {'peak mem':>10s}")
    rates = {}
    for side in sides:
        t = statistics.median(side.times)
        rates[side.name] = tokens / t
        mem = f"{side.peak_mem / 2**30:.2f} GiB" if device.type == "cuda" else "n/a"
        mfu = flops / t / peak
        print(
            f"{side.name:14s} {tokens / t:12,.0f} {args.batch_size / t:10,.1f} {t * 1e3:9.1f} "
            f"{mfu:7.1%} {mem:>10s}"
        )
    where = "measured here" if device.type == "cpu" else "--peak-tflops"
    print(f"useful work {flops / tokens / 1e6:.1f} MFLOP/token; {precision} matmul peak ", end="")
    print(f"{peak / 1e12:.3f} TFLOP/s ({where})")
    print(f"nanobert/transformers: {rates['nanobert'] / rates['transformers']:.2f}x")


def matmul_peak(dtype: torch.dtype | None, n: int = 2048, repeats: int = 8) -> float:
    """FLOP/s of the best of a few (n x n) @ (n x n) products on the CPU in `dtype` (None = fp32)."""
    a = torch.randn(n, n, dtype=dtype or torch.float32)
    b = torch.randn(n, n, dtype=dtype or torch.float32)
    a @ b  # warm-up
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - start)
    return 2 * n**3 / best


if __name__ == "__main__":
    raise SystemExit(run_script("throughput.py", main))
