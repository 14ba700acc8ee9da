"""Sentence scoring side by side: nanobert's batched scorer against the way the usual libraries score.

minicons and lm-scorer load the model in transformers and score one sentence after another: for a masked
model, the sentence's masked copies as one batch through `BertForMaskedLM`, every position's logits over the
whole vocabulary, then the log-probability at each masked position; for a causal model, one forward pass of
`BertLMHeadModel` per sentence. `nanobert.use.scoring` packs the masked copies of many sentences of one length
into each batch (no padding) and decodes only the masked position of each copy.

Both score the same BLiMP sentences with the same rule in fp32, in this process and on the same threads,
taking turns (`--repeat`), from the same checkpoint (exported to transformers with `nanobert export-hf`); the
script prints each one's time, the ratio, and the largest difference between the two scores of a sentence
(which must stay within 1e-4: the two compute the same function). With native bf16 it also times nanobert in
bf16.

    python benchmarks/score_speed.py RUN/best --data ../shared/data/blimp --limit 20
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import torch

from nanobert.checkpoints.kinds import CAUSAL_LM
from nanobert.device import cpu_has_native_bf16, cpu_name
from nanobert.errors import ArgumentParser, NanobertError, positive_int, run_script
from nanobert.hf.export_hf import export_hf
from nanobert.tokenizer import MASK_ID
from nanobert.use.blimp import load_blimp
from nanobert.use.inference import load
from nanobert.use.scoring import RULE_CAUSAL, RULE_WITHIN_WORD, masked_spans, score_sentences

MAX_DIFFERENCE = 1e-4  # nats: the two implementations compute the same sum


def transformers_model(checkpoint: Path, causal: bool, out: Path):
    """The checkpoint exported with export-hf, loaded as the libraries load it, and its tokenizer."""
    from transformers import AutoTokenizer, BertForMaskedLM, BertLMHeadModel

    export_hf(checkpoint, out)
    model_class = BertLMHeadModel if causal else BertForMaskedLM
    model = model_class.from_pretrained(out, attn_implementation="sdpa").eval()
    return model, AutoTokenizer.from_pretrained(out)


@torch.no_grad()
def library_scores(model, tokenizer, texts: list[str], rule: str) -> list[float]:
    """One sentence after another, as minicons does: a masked model's copies of a sentence in one batch with
    full (copies, T, V) logits; a causal model's sentence in one forward pass."""
    totals = []
    for text in texts:
        enc = tokenizer(text, return_tensors="pt")
        ids = enc["input_ids"]  # (1, T): [CLS] pieces [SEP]; a causal export's tokenizer adds no [SEP]
        if rule == RULE_CAUSAL:
            logp = model(input_ids=ids).logits[0, :-1].log_softmax(-1)  # (T - 1, V)
            totals.append(logp.gather(1, ids[0, 1:, None]).sum().item())
            continue
        pieces = ids.size(1) - 2
        spans = masked_spans(enc.word_ids()[1:-1], rule)
        copies = ids.repeat(pieces, 1)  # (n, T)
        for row, (target, end) in enumerate(spans):
            copies[row, target + 1 : end + 1] = MASK_ID
        logp = model(input_ids=copies, token_type_ids=torch.zeros_like(copies)).logits.log_softmax(-1)
        rows = torch.arange(pieces)
        totals.append(logp[rows, rows + 1, ids[0, 1:-1]].sum().item())
    return totals


def timed(fn):
    start = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - start


def parse_args() -> argparse.Namespace:
    p = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("checkpoint", metavar="CKPT", help="a pretrained checkpoint, e.g. RUN/best")
    p.add_argument("--data", required=True, help="BLiMP's data/ folder, e.g. ../shared/data/blimp")
    p.add_argument("--limit", type=positive_int, default=20, help="pairs per paradigm (default 20)")
    p.add_argument("--rule", choices=["within_word", "original"], default=RULE_WITHIN_WORD)
    p.add_argument("--repeat", type=positive_int, default=2, help="timed turns of each (median kept)")
    p.add_argument("--json", metavar="FILE", help="also write the figures here")
    return p.parse_args()


def take_turns(ours, theirs, tokenizer, texts: list[str], rule: str, repeat: int):
    """Each scorer timed `repeat` times, taking turns, so that a passing load slows both alike: (every turn's
    seconds by scorer, nanobert's fp32 scores, the library's, nanobert's bf16 scores or None without native
    bf16)."""
    times: dict[str, list[float]] = {"nanobert fp32": [], "transformers fp32": []}
    bf16 = cpu_has_native_bf16()
    if bf16:
        times["nanobert bf16"] = []
    fast = None
    for _ in range(repeat):
        mine, seconds = timed(lambda: score_sentences(ours.model, ours.tokenizer, texts, rule))
        times["nanobert fp32"].append(seconds)
        library, seconds = timed(lambda: library_scores(theirs, tokenizer, texts, rule))
        times["transformers fp32"].append(seconds)
        if bf16:
            fast, seconds = timed(
                lambda: score_sentences(ours.model, ours.tokenizer, texts, rule, dtype=torch.bfloat16)
            )
            times["nanobert bf16"].append(seconds)
    return times, mine, library, fast


def figures(texts: list[str], rule: str, times: dict, mine, library, fast) -> dict:
    """The median times, the speed-ups and the largest score differences (what --json writes)."""
    median = {k: statistics.median(v) for k, v in times.items()}
    result = {
        "cpu": cpu_name(),
        "threads": torch.get_num_threads(),
        "sentences": len(texts),
        "rule": rule,
        "seconds": median,
        "speedup_fp32": median["transformers fp32"] / median["nanobert fp32"],
        "max_abs_difference_fp32": max(abs(a.total - b) for a, b in zip(mine, library, strict=True)),
    }
    if fast is not None:
        result["speedup_bf16"] = median["transformers fp32"] / median["nanobert bf16"]
        result["max_abs_difference_bf16"] = max(
            abs(a.total - b.total) for a, b in zip(mine, fast, strict=True)
        )
    return result


def print_report(result: dict) -> None:
    """Each scorer's median time and rate, the speed-ups and the largest score differences."""
    sentences, median, bf16 = result["sentences"], result["seconds"], "speedup_bf16" in result
    print(f"{sentences:,} sentences, rule {result['rule']}, {result['threads']} threads on {result['cpu']}")
    for name, seconds in median.items():
        rate, share = sentences / seconds, seconds / median["nanobert fp32"]
        print(f"  {name:18s} {seconds:8.2f} s  {rate:8.0f} sentences/s  ({share:.2f}x nanobert's time)")
    print(f"nanobert fp32 is {result['speedup_fp32']:.2f}x transformers fp32", end="")
    print(f"; bf16 {result['speedup_bf16']:.2f}x" if bf16 else "")
    difference = result["max_abs_difference_fp32"]
    print(f"largest score difference, fp32: {difference:.2e} nats (limit {MAX_DIFFERENCE:g})")
    if bf16:
        print(f"largest score difference, bf16 against fp32: {result['max_abs_difference_bf16']:.2e} nats")


def main() -> None:
    args = parse_args()
    ours = load(args.checkpoint, device="cpu")
    rule = RULE_CAUSAL if ours.kind == CAUSAL_LM else args.rule
    texts = list(
        dict.fromkeys(s for pair in load_blimp(args.data, args.limit) for s in (pair.good, pair.bad))
    )
    try:
        import transformers  # noqa: F401
    except ImportError:
        raise NanobertError("the comparison needs transformers: pip install nanobert[hf]") from None
    with tempfile.TemporaryDirectory() as tmp:
        theirs, tokenizer = transformers_model(
            Path(args.checkpoint), ours.kind == CAUSAL_LM, Path(tmp) / "hf"
        )
        times, mine, library, fast = take_turns(ours, theirs, tokenizer, texts, rule, args.repeat)
    result = figures(texts, rule, times, mine, library, fast)
    print_report(result)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    difference = result["max_abs_difference_fp32"]
    if difference > MAX_DIFFERENCE:
        raise SystemExit(
            f"score_speed.py: the scores differ by {difference:.2e} nats, over {MAX_DIFFERENCE:g}"
        )


if __name__ == "__main__":
    raise SystemExit(run_script("score_speed.py", main))
