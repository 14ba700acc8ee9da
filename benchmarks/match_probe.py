"""Does a checkpoint still read the pair? A word's share of attention on the same word in the other segment.

For each checkpoint and each layer and head, on sentence pairs `[CLS] A [SEP] B [SEP]` (STS-B's dev pairs by
default), over the word pieces of B that also occur in A (special tokens aside): the share of the piece's
attention that falls on its copies in A (`b_on_a`), and the same from A to B (`a_on_b`); beside them
`b_on_self` (on itself) and `cls_on_b` (`[CLS]`'s share on segment B). At the roles start a "what" head puts
about 0.75 of a B word's attention on its copy in A; a model that lost the match puts under 0.1 there.

With `--terms FILE` (a pretraining corpus: its pairs are built and masked as the checkpoint's training
masks them) it also says what each term of the loss does to those heads: for the match figure `b_on_a` of
every head, its first-order change under a gradient step of the MLM term and of the NSP term on the
layer's query/key/value weights (`mlm_moves_match`, `nsp_moves_match`: < 0 erodes the match), and the
cosine between each term's step and the direction that raises the match.

    python benchmarks/match_probe.py RUN/best [CKPT ...] --pairs $G/stsb/dev.tsv --limit 400 \\
        [--terms $S/dev.raw] --out probe.jsonl
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from nanobert.checkpoints.checkpoint import checkpoint_tokenizer, load_language_model, read_config
from nanobert.data.corpus import load_documents
from nanobert.data.masking import MaskingCollator
from nanobert.data.tables import read_table
from nanobert.errors import ArgumentParser, run_script
from nanobert.files import check_input_file
from nanobert.objectives.mlm_nsp import eval_instances
from nanobert.tokenizer import IGNORE_INDEX, NUM_SPECIAL_TOKENS, encode_documents, encode_pairs, pad


def parse_args() -> argparse.Namespace:
    p = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("checkpoints", nargs="+", type=Path, metavar="CKPT")
    p.add_argument("--pairs", type=Path, required=True, help="a table of sentence pairs (STS-B's dev.tsv)")
    p.add_argument("--text-col", default="sentence1")
    p.add_argument("--text-pair-col", default="sentence2")
    p.add_argument("--limit", type=int, default=400, help="the first N pairs")
    p.add_argument("--terms", type=Path, help="a pretraining corpus: also measure each loss term's pull")
    p.add_argument("--term-pairs", type=int, default=128, help="pretraining pairs for --terms")
    p.add_argument(
        "--untrained",
        action="store_true",
        help="probe each checkpoint's untrained start instead (its config, "
        "fresh weights drawn with its seed: what `finetune --from-scratch` starts from)",
    )
    p.add_argument("--out", type=Path, help="append one JSON line per checkpoint here")
    return p.parse_args()


def probe_batch(tokenizer, pairs: Path, text_col: str, pair_col: str, limit: int) -> dict[str, torch.Tensor]:
    table = read_table(check_input_file(pairs, "--pairs"), None, None, header=True)
    a, b = table.column(text_col)[:limit], table.column(pair_col)[:limit]
    ids, types = encode_pairs(tokenizer, a, b, max_length=128)
    input_ids, mask = pad(ids)
    token_type_ids, _ = pad(types)
    return {"input_ids": input_ids, "token_type_ids": token_type_ids, "attention_mask": mask.long()}


def copies(batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, T, T) bool: key j holds the query i's word piece in the other segment (no specials); (B, T) bool:
    the query has at least one such copy."""
    ids, seg, real = batch["input_ids"], batch["token_type_ids"], batch["attention_mask"].bool()
    word = real & (ids >= NUM_SPECIAL_TOKENS)
    same = (ids[:, :, None] == ids[:, None, :]) & word[:, :, None] & word[:, None, :]
    other = seg[:, :, None] != seg[:, None, :]
    match = same & other
    return match, match.any(-1)


def match_shares(attentions, batch: dict[str, torch.Tensor]) -> list[list[dict[str, torch.Tensor]]]:
    """Per layer and head, the figures of the module docstring (tensors, differentiable)."""
    match, has_copy = copies(batch)
    seg = batch["token_type_ids"]
    in_b, in_a = has_copy & (seg == 1), has_copy & (seg == 0)
    real_b = batch["attention_mask"].bool() & (seg == 1)
    eye = torch.eye(match.size(-1), dtype=torch.bool)
    figures = []
    for probs in attentions:  # (B, nh, T, T)
        on_copy = (probs * match[:, None]).sum(-1)  # (B, nh, T)
        on_self = (probs * eye).sum(-1)
        cls_on_b = (probs[:, :, 0] * real_b[:, None]).sum(-1)  # (B, nh)
        figures.append(
            [
                {
                    "b_on_a": on_copy[:, h][in_b].mean(),
                    "a_on_b": on_copy[:, h][in_a].mean(),
                    "b_on_self": on_self[:, h][in_b].mean(),
                    "cls_on_b": cls_on_b[:, h].mean(),
                }
                for h in range(probs.size(1))
            ]
        )
    return figures


def term_batch(checkpoint: Path, tokenizer, corpus: Path, n: int, vocab_size: int) -> dict[str, torch.Tensor]:
    """`n` pairs of `corpus` (half of them B from another document), masked as the run trained."""
    mask_prob = read_config(checkpoint).get("train", {}).get("mask_prob", 0.15)
    pairs = eval_instances(encode_documents(tokenizer, load_documents(corpus)), 128)
    pairs = pairs[:: max(1, len(pairs) // n)][:n]
    return MaskingCollator(vocab_size, mask_prob=mask_prob, seed=0)(pairs)


def term_pulls(model, probe: dict, batch: dict) -> list[list[dict[str, float]]]:
    """Per layer and head: how a gradient step of each loss term moves that head's b_on_a (first order)."""
    weights = [layer.attention.qkv.weight for layer in model.bert.layers]
    out = model(**{k: batch[k] for k in ("input_ids", "token_type_ids", "attention_mask")})
    labels = batch["labels"]
    mlm = torch.nn.functional.cross_entropy(
        out.prediction_logits[labels != IGNORE_INDEX], labels[labels != IGNORE_INDEX]
    )
    nsp = torch.nn.functional.cross_entropy(out.seq_relationship_logits, batch["next_sentence_label"])
    g_mlm = torch.autograd.grad(mlm, weights, retain_graph=True)
    g_nsp = torch.autograd.grad(nsp, weights)
    enc = model.bert(**probe, output_attentions=True)
    shares = match_shares(enc.attentions, probe)
    pulls = []
    for layer, (figures, w) in enumerate(zip(shares, weights, strict=True)):
        H, nh = w.size(1), len(figures)
        hd = H // nh
        row = []
        for h, fig in enumerate(figures):
            rows = torch.cat([torch.arange(h * hd, (h + 1) * hd) + k * H for k in range(3)])  # q, k, v
            (g_match,) = torch.autograd.grad(fig["b_on_a"], w, retain_graph=True)
            entry = {}
            for name, g in (("mlm", g_mlm[layer]), ("nsp", g_nsp[layer])):
                step, up = -g[rows].reshape(-1), g_match[rows].reshape(-1)
                entry[f"{name}_moves_match"] = (step @ up).item()
                entry[f"{name}_cosine"] = torch.nn.functional.cosine_similarity(step, up, dim=0).item()
                entry[f"{name}_grad_norm"] = step.norm().item()
            row.append(entry)
        pulls.append(row)
    return pulls


def probe(checkpoint: Path, args: argparse.Namespace) -> dict:
    model, config = load_language_model(checkpoint, map_location="cpu")
    if args.untrained:  # the same architecture and start, before any step
        torch.manual_seed(config.get("train", {}).get("seed", 0))
        model = type(model)(model.config)
        config = {**config, "step": 0}
    model.eval()
    tokenizer = checkpoint_tokenizer(checkpoint, model, config)
    batch = probe_batch(tokenizer, args.pairs, args.text_col, args.text_pair_col, args.limit)
    with torch.no_grad():
        shares = match_shares(model.bert(**batch, output_attentions=True).attentions, batch)
    line = {
        "checkpoint": str(checkpoint),
        "step": config.get("step"),
        "heads": [[{k: round(v.item(), 4) for k, v in fig.items()} for fig in layer] for layer in shares],
    }
    if args.terms:
        vocab_size = model.config.vocab_size
        terms = term_batch(checkpoint, tokenizer, args.terms, args.term_pairs, vocab_size)
        line["terms"] = term_pulls(model, batch, terms)
    return line


def print_line(line: dict) -> None:
    print(f"{line['checkpoint']} (step {line['step']})")
    for layer, heads in enumerate(line["heads"]):
        for h, fig in enumerate(heads):
            text = "  ".join(f"{k} {v:.3f}" for k, v in fig.items())
            if "terms" in line:
                t = line["terms"][layer][h]
                text += f"  | MLM moves it {t['mlm_moves_match']:+.2e}  NSP {t['nsp_moves_match']:+.2e}"
            print(f"  layer {layer + 1} head {h + 1}: {text}")


def main() -> None:
    args = parse_args()
    for checkpoint in args.checkpoints:
        line = probe(checkpoint, args)
        print_line(line)
        if args.out:
            with open(args.out, "a") as f:
                f.write(json.dumps(line) + "\n")


if __name__ == "__main__":
    raise SystemExit(run_script("match_probe.py", main))
