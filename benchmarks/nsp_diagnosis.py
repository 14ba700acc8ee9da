"""Why next-sentence prediction is slow to start: the CPU recipe's first steps, measured as they train.

A flat loop of the recipe (`wikitext2-cpu` at two layers, the first run's depth on the default-scale corpus:
the same data functions, collator, optimizer and schedule as `nanobert pretrain`), which every `--every`
steps writes one JSON line of what decides whether `[CLS]` can learn the pair relation:

- `grad`: the norms of the MLM loss's and the NSP loss's gradients on the encoder's weights (the same
  training batch, two backward passes), their ratio and cosine: the NSP term's share of what moves the
  encoder; and the NSP gradient's norm at `[CLS]`'s final state next to the MLM gradient's at a masked one;
- `cls_attention`: per layer, the share of `[CLS]`'s attention on itself, on its three neighbours, on the
  rest of segment A, on segment B and on the two `[SEP]`s, and its entropy over the log of the keys, on
  fixed held-out pairs; the same shares per head (`heads`); and per head what segment B's tokens read of A
  (`b_reads_a`: their attention's share across the boundary) with how well that one number tells the pair
  apart at its best cut (`b_reads_a_rule`);
- `pooler`: how much the pooled `[CLS]` varies across pairs (std over the batch / mean size), the share of
  the pooler's units in tanh's flat tails, and the spread of the NSP logit difference across pairs;
- `held_out`: MLM and NSP loss and accuracy on the fixed held-out batches (15% masking, seed 0), and the
  share of pairs answered "B follows A";
- `probe`: whether the pair is in the final states before the head reads it: linear probes (ridge, fit on
  the first half of the held-out pairs, scored on the second) of `[CLS]`'s final state and of the mean of
  every token's, beside the majority label of the scored half.

`--masking` instead measures what the training masking leaves of the words that tell two documents apart:
the accuracy of a one-feature rule (the share of B's distinct content word pieces also in A, thresholded at
its best cut) on held-out pairs, with 0%, 15% and 45% of the tokens masked as the collator masks them.

    python benchmarks/nsp_diagnosis.py --train $S/train.raw --valid $S/dev.raw --tokenizer TOK \\
        --steps 1000 --every 50 --out diag.jsonl [--set key=value ...]
    python benchmarks/nsp_diagnosis.py --train $S/train.raw --valid $S/dev.raw --tokenizer TOK --masking
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import time

import torch
from nsp_screens import STARTS, balanced_nsp_loss, force_cls_attention, nsp_on_the_mean, with_head_lr

from nanobert.cli.overrides import parse_overrides
from nanobert.data.corpus import load_documents
from nanobert.data.masking import MaskingCollator
from nanobert.data.nsp import nsp_epoch_batches
from nanobert.engine.optimizer import build_optimizer, lr_multiplier
from nanobert.initialization import keep_roles
from nanobert.model import BertForPreTraining
from nanobert.objectives.mlm_nsp import eval_instances, masking_collator, mlm_nsp_metrics
from nanobert.pretraining.recipes import preset_configs
from nanobert.tokenizer import (
    IGNORE_INDEX,
    MASK_ID,
    NUM_SPECIAL_TOKENS,
    SEP_ID,
    encode_documents,
    load_tokenizer,
)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--train", required=True)
    p.add_argument("--valid", required=True)
    p.add_argument("--tokenizer", required=True, help="a saved tokenizer directory (e.g. a run's best/)")
    p.add_argument("--preset", default="wikitext2-cpu")
    p.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="config fields, as --set")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--steps", type=int, default=1000, help="the planned steps (the schedule's length)")
    p.add_argument("--stop-after", type=int, help="end here, the schedule unchanged")
    p.add_argument("--every", type=int, default=50)
    p.add_argument("--probe-pairs", type=int, default=256, help="held-out pairs for the attention figures")
    p.add_argument("--held-out-pairs", type=int, default=1024, help="held-out pairs evaluated every --every")
    p.add_argument("--out", help="write the JSON lines here too")
    p.add_argument("--start", nargs="*", default=[], choices=sorted(STARTS), help="screened starts")
    p.add_argument("--nsp-weight", type=float, default=1.0, help="the NSP term's weight in the loss")
    p.add_argument("--mlm-weight", type=float, default=1.0, help="the MLM term's weight (0: NSP alone)")
    p.add_argument("--nsp-pooling", choices=["cls", "mean"], default="cls", help="what the NSP head reads")
    p.add_argument("--nsp-balanced", action="store_true", help="the NSP loss with each class weighted alike")
    p.add_argument("--head-lr", type=float, default=1.0, help="the pooler's and NSP head's rate, x peak")
    p.add_argument("--force-cls", choices=("uniform", "segments"), help="fix [CLS]'s last-layer attention")
    p.add_argument("--masking", action="store_true", help="measure the masking instead of training")
    return p.parse_args(argv)


def encoder_parameters(model: BertForPreTraining) -> list[torch.nn.Parameter]:
    """The weights both losses share: embeddings and layers (not the pooler, not the heads)."""
    return [p for n, p in model.named_parameters() if n.startswith(("bert.embeddings.", "bert.layers."))]


def gradient_figures(model: BertForPreTraining, batch: dict[str, torch.Tensor]) -> dict[str, float]:
    """The MLM and NSP gradients on the shared weights, and at [CLS] / a masked position's final state."""
    shared = encoder_parameters(model)
    enc = model.bert(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"])
    h = enc.last_hidden_state  # (B, T, H)
    h.retain_grad()
    out_mlm = model.mlm_head(h[batch["labels"] != IGNORE_INDEX], model.bert.embeddings.word_embeddings.weight)
    mlm = torch.nn.functional.cross_entropy(out_mlm, batch["labels"][batch["labels"] != IGNORE_INDEX])
    nsp = torch.nn.functional.cross_entropy(model.nsp_head(enc.pooler_output), batch["next_sentence_label"])
    g_mlm = torch.autograd.grad(mlm, shared + [h], retain_graph=True)
    g_nsp = torch.autograd.grad(nsp, shared + [h])
    flat_mlm = torch.cat([g.reshape(-1) for g in g_mlm[:-1]])
    flat_nsp = torch.cat([g.reshape(-1) for g in g_nsp[:-1]])
    masked = batch["labels"] != IGNORE_INDEX
    at_cls = g_nsp[-1][:, 0].norm(dim=-1).mean()  # per pair
    at_masked = g_mlm[-1][masked].norm(dim=-1).mean()  # per masked token
    return {
        "mlm_grad": flat_mlm.norm().item(),
        "nsp_grad": flat_nsp.norm().item(),
        "nsp_over_mlm": (flat_nsp.norm() / flat_mlm.norm()).item(),
        "cosine": torch.nn.functional.cosine_similarity(flat_mlm, flat_nsp, dim=0).item(),
        "at_cls_nsp": at_cls.item(),
        "at_masked_mlm": at_masked.item(),
        "mlm_loss": mlm.item(),
        "nsp_loss": nsp.item(),
    }


@torch.no_grad()
def cls_attention(model: BertForPreTraining, batch: dict[str, torch.Tensor]) -> list[dict[str, float]]:
    """Per layer (heads averaged), where [CLS]'s attention goes, over the pairs of `batch`."""
    enc = model.bert(
        batch["input_ids"], batch["token_type_ids"], batch["attention_mask"], output_attentions=True
    )
    ids, types, mask = batch["input_ids"], batch["token_type_ids"], batch["attention_mask"].bool()
    labels = batch["next_sentence_label"]
    T = ids.size(1)
    pos = torch.arange(T)
    sep = ids == SEP_ID
    regions = {
        "self": pos[None, :] == 0,
        "neighbours": (pos[None, :] >= 1) & (pos[None, :] <= 3) & ~sep,
        "segment_a": (types == 0) & (pos[None, :] > 3) & ~sep & mask,
        "segment_b": (types == 1) & ~sep & mask,
        "sep": sep,
    }
    layers = []
    for probs in enc.attentions:  # (B, nh, T, T)
        row = probs[:, :, 0, :].mean(1)  # (B, T): [CLS]'s query, heads averaged
        shares = {
            name: (row * region.expand_as(row)).sum(1).mean().item() for name, region in regions.items()
        }
        per_head = probs[:, :, 0, :]  # (B, nh, T)
        entropy = -(per_head.clamp_min(1e-12).log() * per_head).sum(-1)  # (B, nh)
        n_keys = mask.sum(1, keepdim=True).float()  # (B, 1)
        shares["entropy_share"] = (entropy / n_keys.log()).mean().item()  # 1 = uniform over the keys
        # per head: which heads [CLS] reads where (the roles start's first half "where", second half "what")
        shares["heads"] = [
            {name: (per_head[:, h] * region).sum(1).mean().item() for name, region in regions.items()}
            for h in range(per_head.size(1))
        ]
        # per head, what B's tokens read of A: the share of their attention across the segment boundary, and
        # how well that one number (averaged over B's tokens) tells the pair apart at its best cut
        into_a = (probs * ((types == 0) & mask & ~sep)[:, None, None, :]).sum(-1)  # (B, nh, T)
        in_b = ((types == 1) & mask & ~sep).float()  # (B, T)
        cross = (into_a * in_b[:, None, :]).sum(-1) / in_b.sum(-1, keepdim=True).clamp_min(1)  # (B, nh)
        shares["b_reads_a"] = cross.mean(0).tolist()
        shares["b_reads_a_rule"] = [best_cut_accuracy(cross[:, h], labels) for h in range(cross.size(1))]
        layers.append(shares)
    return layers


def best_cut_accuracy(feature: torch.Tensor, labels: torch.Tensor) -> float:
    """The accuracy of the best one-threshold rule on `feature` (either direction) for binary `labels`."""
    values, order = feature.sort()
    y = labels[order].float()
    n, pos = len(y), y.sum()
    below_pos = torch.cat([torch.zeros(1), y.cumsum(0)])  # positives below each cut
    below = torch.arange(n + 1, dtype=torch.float32)
    correct = below_pos + (n - below - (pos - below_pos))  # positives below, negatives above
    # a cut falls between two different values only (or outside them all): ties go to one side together
    between = torch.cat(
        [torch.ones(1, dtype=torch.bool), values[1:] > values[:-1], torch.ones(1, dtype=torch.bool)]
    )
    correct = correct[between]
    return (torch.maximum(correct, n - correct).max() / n).item()


def linear_probes(feats: dict[str, list[torch.Tensor]], labels: torch.Tensor, ridge: float = 10.0) -> dict:
    """Whether the pair relation is in the final states before the NSP head reads it: a linear probe (ridge
    regression on standardized features, fit on the first half of the held-out pairs, scored on the second)
    of each feature (`cls`: [CLS]'s final state; `mean`: the mean of every real token's; `b`: the mean of
    segment B's). Where a mean decodes the pair and [CLS] does not, what is missing is [CLS]'s gathering, not
    the representation; the mean of all tokens can cancel what B's mean holds (A's tokens reading B mirror
    B's reading A), so `b` is the mean a [CLS] that reads B would see."""
    y = labels.float() * 2 - 1  # +1: random B
    half = len(y) // 2
    out = {}
    for name, parts in feats.items():
        x = torch.cat(parts).float()
        x = (x - x[:half].mean(0)) / x[:half].std(0).clamp_min(1e-6)
        x = torch.cat([x, torch.ones(len(x), 1)], 1)
        a, b = x[:half], y[:half]
        w = torch.linalg.solve(a.T @ a + ridge * torch.eye(a.size(1)), a.T @ b)
        out[f"probe_{name}"] = ((x[half:] @ w).sign() == y[half:]).float().mean().item()
    out["probe_majority"] = max((y[half:] > 0).float().mean().item(), (y[half:] < 0).float().mean().item())
    return out


@torch.no_grad()
def pooler_figures(model: BertForPreTraining, batch: dict[str, torch.Tensor]) -> dict[str, float]:
    enc = model.bert(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"])
    cls, pooled = enc.last_hidden_state[:, 0], enc.pooler_output  # (B, H)
    logits = model.nsp_head(pooled)
    diff = logits[:, 0] - logits[:, 1]  # > 0: "B follows A"
    return {
        "cls_spread": (cls.std(0).mean() / cls.abs().mean()).item(),  # across pairs, relative
        "pooled_spread": (pooled.std(0).mean() / pooled.abs().mean().clamp_min(1e-9)).item(),
        "pooled_saturated": (pooled.abs() > 0.95).float().mean().item(),
        "logit_diff_mean": diff.mean().item(),
        "logit_diff_std": diff.std().item(),
        "nsp_head_norm": model.nsp_head.weight.norm().item(),
        "pooler_norm": model.bert.pooler.weight.norm().item(),
    }


def held_out_figures(model, batches) -> tuple[dict[str, float], dict[str, float]]:
    """The held-out figures and, from the same pass over the pairs, the linear probes of the final states."""
    figures = mlm_nsp_metrics(model, batches, "cpu")
    answers, feats = [], {"cls": [], "mean": [], "b": []}
    with torch.no_grad():
        for batch in batches:
            enc = model.bert(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"])
            answers.append(model.nsp_head(enc.pooler_output).argmax(-1))
            h, m = enc.last_hidden_state, batch["attention_mask"][..., None].float()
            b = m * batch["token_type_ids"][..., None]  # segment B's tokens (its [SEP] too)
            feats["cls"].append(h[:, 0])
            feats["mean"].append((h * m).sum(1) / m.sum(1))
            feats["b"].append((h * b).sum(1) / b.sum(1).clamp_min(1))
    figures["answers_follows"] = (torch.cat(answers) == 0).float().mean().item()
    labels = torch.cat([batch["next_sentence_label"] for batch in batches])
    return figures, linear_probes(feats, labels)


def snapshot(model: BertForPreTraining, step: int, batch, probe, held_out) -> dict:
    """One JSON line: the gradients on this training batch, [CLS]'s attention, the pooler, the held-out."""
    model.eval()
    line = {
        "step": step,
        "grad": gradient_figures(model, batch),
        "cls_attention": cls_attention(model, probe),
        "pooler": pooler_figures(model, probe),
    }
    line["held_out"], line["probe"] = held_out_figures(model, held_out)
    model.zero_grad(set_to_none=True)
    return line


def held_out_batches(valid_docs, vocab_size: int, cfg, args) -> tuple[list, dict]:
    """A strided sample of the held-out pairs (in the corpus's order, neighbours share a document and a label
    balance of their own), masked as the held-out batches are (15%, seed 0), and the attention probe."""
    pairs = eval_instances(valid_docs, cfg.max_seq_len)
    pairs = pairs[:: max(1, len(pairs) // args.held_out_pairs)][: args.held_out_pairs]
    collate = MaskingCollator(vocab_size, mask_prob=0.15, seed=0)
    size = cfg.eval_batch_size
    held_out = [collate(pairs[i : i + size]) for i in range(0, len(pairs), size)]
    probe = MaskingCollator(vocab_size, mask_prob=0.15, seed=0)(pairs[::4][: args.probe_pairs])
    return held_out, probe


def build_model(model_config, cfg, args) -> tuple[BertForPreTraining, torch.optim.Optimizer]:
    """The model and optimizer as the trainer builds them, with the screened interventions applied."""
    torch.manual_seed(cfg.seed)
    model = BertForPreTraining(model_config)
    for name in args.start:
        STARTS[name](model)
    if args.force_cls:
        force_cls_attention(model, args.force_cls)
    if args.nsp_pooling == "mean":
        nsp_on_the_mean(model)
    optimizer = build_optimizer(model, cfg.learning_rate, cfg.weight_decay)
    if args.head_lr != 1.0:
        optimizer = with_head_lr(model, optimizer, args.head_lr, cfg)
    if cfg.keep_roles:  # as the trainer does: the roles start's word match kept, out of weight decay too
        keep_roles(model, optimizer)
    return model, optimizer


def train(args: argparse.Namespace) -> None:
    tokenizer = load_tokenizer(args.tokenizer)
    model_over, train_over = parse_overrides(args.set)
    model_config, cfg = preset_configs(
        args.preset, num_hidden_layers=2, max_steps=args.steps, seed=args.seed, **model_over, **train_over
    )
    model_config.vocab_size = tokenizer.get_vocab_size()
    train_docs = encode_documents(tokenizer, load_documents(args.train))
    held_out, probe = held_out_batches(
        encode_documents(tokenizer, load_documents(args.valid)), model_config.vocab_size, cfg, args
    )
    model, optimizer = build_model(model_config, cfg, args)
    # the trainer's bf16 autocast when asked for (`--set precision=bf16`); snapshots stay in fp32
    autocast = (
        torch.autocast("cpu", dtype=torch.bfloat16) if cfg.precision == "bf16" else contextlib.nullcontext()
    )
    collator = masking_collator(cfg, tokenizer, model_config.vocab_size)  # the trainer's (whole words too)

    def stream():
        for epoch in itertools.count():
            for instances in nsp_epoch_batches(
                train_docs, cfg.max_seq_len, cfg.batch_size, cfg.seed, epoch, bucket=cfg.bucket_by_length
            ):
                yield collator(instances)

    batches, log = stream(), open(args.out, "w") if args.out else None
    start = time.perf_counter()
    for step in range(args.stop_after or args.steps):
        batch = next(batches)
        if step % args.every == 0:
            line = snapshot(model, step, batch, probe, held_out)
            line["seconds"] = round(time.perf_counter() - start, 1)
            print(json.dumps(line), flush=True)
            if log:
                log.write(json.dumps(line) + "\n")
                log.flush()
        model.train()
        lr = cfg.learning_rate * lr_multiplier(
            (step + 1) / cfg.max_steps, cfg.warmup_ratio, 0.0, cfg.decay_ratio
        )
        for group in optimizer.param_groups:
            group["lr"] = lr * group.get("lr_scale", 1.0)
        with autocast:
            out = model(**batch)
        nsp_loss = out.nsp_loss
        if args.nsp_balanced:
            nsp_loss = balanced_nsp_loss(out.seq_relationship_logits, batch["next_sentence_label"])
        (args.mlm_weight * out.mlm_loss + args.nsp_weight * nsp_loss).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)


def overlap_rule_accuracy(
    instances, vocab_size: int, mask_prob: float, common: set[int], seed: int = 0
) -> tuple[float, float]:
    """The best-cut accuracy of `share of B's distinct content pieces also in A`, with `mask_prob` masked
    (0: none), and the mean share of the content pieces left visible."""
    batch_ids = [x.input_ids for x in instances]
    if mask_prob > 0:
        collator = MaskingCollator(vocab_size, mask_prob=mask_prob, seed=seed)
        masked = []
        for i in range(0, len(instances), 64):
            ids = collator(instances[i : i + 64])["input_ids"]
            masked.extend(
                row[: len(x.input_ids)].tolist() for row, x in zip(ids, instances[i : i + 64], strict=True)
            )
        batch_ids = masked
    shares, labels, visible = [], [], []
    for ids, x in zip(batch_ids, instances, strict=True):
        content = [
            (t, s)
            for t, s, orig in zip(ids, x.token_type_ids, x.input_ids, strict=True)
            if orig >= NUM_SPECIAL_TOKENS and orig not in common
        ]
        kept = [(t, s) for t, s in content if t not in (MASK_ID,) and t >= NUM_SPECIAL_TOKENS]
        visible.append(len(kept) / max(len(content), 1))
        a = {t for t, s in kept if s == 0}
        b = {t for t, s in kept if s == 1}
        shares.append(len(a & b) / max(len(b), 1))
        labels.append(x.next_sentence_label)
    order = sorted(range(len(shares)), key=lambda i: shares[i])
    n, follows_total = len(order), sum(1 for y in labels if y == 0)
    # cut after rank r: the r lowest answer "random" (1), the rest "follows" (0)
    best, random_below, follows_below = 0.0, 0, 0
    for r in range(n + 1):
        correct = random_below + (follows_total - follows_below)
        best = max(best, correct / n)
        if r < n:
            if labels[order[r]] == 1:
                random_below += 1
            else:
                follows_below += 1
    return best, sum(visible) / n


def masking(args: argparse.Namespace) -> None:
    tokenizer = load_tokenizer(args.tokenizer)
    vocab_size = tokenizer.get_vocab_size()
    valid_docs = encode_documents(tokenizer, load_documents(args.valid))
    instances = eval_instances(valid_docs, 128)
    counts: dict[int, int] = {}
    for doc in valid_docs:
        for sentence in doc:
            for t in sentence:
                counts[t] = counts.get(t, 0) + 1
    common = set(sorted(counts, key=counts.get, reverse=True)[:200])  # the 200 most frequent pieces
    not_next = sum(x.next_sentence_label for x in instances) / len(instances)
    majority = max(not_next, 1 - not_next)
    for p in (0.0, 0.15, 0.45):
        acc, visible = overlap_rule_accuracy(instances, vocab_size, p, common)
        line = {"mask_prob": p, "pairs": len(instances), "overlap_rule_accuracy": round(acc, 4)}
        line.update(content_visible=round(visible, 4), majority=round(majority, 4))
        print(json.dumps(line), flush=True)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    torch.set_num_threads(max(1, torch.get_num_threads()))
    masking(args) if args.masking else train(args)


if __name__ == "__main__":
    main()
