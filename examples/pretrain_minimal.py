"""Pretrain a small BERT (masked words + next sentence) in one flat loop of plain PyTorch.

The short path beside the engine: the pieces `nanobert pretrain` trains with (the WordPiece tokenizer, NSP
pairs, the masking collator, BertForPreTraining, AdamW and its schedule) and none of its machinery (held-out
evaluation, checkpoints, resume, data parallelism, the precision and depth choices). The defaults are the
`toy` preset's, so this is `nanobert pretrain --data toy` in fp32 (which also stops once its held-out
evaluation finds the corpus memorised): tests/test_pretrain_minimal.py holds its first 20 losses to the
engine's.

    python examples/pretrain_minimal.py                      # the toy corpus: 2,000 steps, about a minute
    python examples/pretrain_minimal.py --data my_text.txt --steps 3000 --vocab-size 4000

Read src/nanobert/model.py for the model, and src/nanobert/engine/loop.py for what the full loop adds.
"""

import argparse
import itertools
import time

import torch

from nanobert.config import ModelConfig
from nanobert.data.corpus import load_documents
from nanobert.data.masking import MaskingCollator
from nanobert.data.nsp import nsp_epoch_batches
from nanobert.engine.optimizer import build_optimizer, lr_multiplier
from nanobert.model import BertForPreTraining
from nanobert.tokenizer import IGNORE_INDEX, encode_documents, load_tokenizer, train_tokenizer

# ----------------------------------------------------------------------------------------------------------
# Settings: the `toy` preset's (src/nanobert/pretraining/recipes.py, PRESETS["toy"]) and TrainConfig's
# defaults


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", default="toy", help="toy, a WikiText name or directory, or a text file")
    p.add_argument("--tokenizer", help="a saved tokenizer directory, instead of training one")
    p.add_argument("--seed", type=int, default=1337)
    p.add_argument("--vocab-size", type=int, default=200)
    p.add_argument("--seq-len", type=int, default=64)
    p.add_argument("--batch-size", type=int, default=32)
    # NSP instance sets per epoch: the toy corpus gives only ~8 pairs a set
    p.add_argument("--dupe-factor", type=int, default=4)
    p.add_argument("--steps", type=int, default=2000)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--warmup", type=float, default=0.025, help="share of the steps warming up")
    p.add_argument("--decay", type=float, default=0.3, help="share of the steps decaying, at the end")
    p.add_argument("--stop-after", type=int, help="end after this many steps, the schedule unchanged")
    p.add_argument("--log-every", type=int, default=50)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> list[float]:
    """Train and return every step's loss (MLM + NSP)."""
    args = parse_args(argv)
    torch.manual_seed(args.seed)  # the model's initial weights; the data has seeds of its own

    # data: documents (lists of sentences) -> a WordPiece vocabulary -> token ids per sentence
    documents = load_documents(args.data)
    if args.tokenizer:  # a saved vocabulary (the same corpus trains the same one: this saves the time)
        tokenizer = load_tokenizer(args.tokenizer)
    else:
        sentences = (sentence for document in documents for sentence in document)
        tokenizer = train_tokenizer(sentences, args.vocab_size, min_frequency=1)
    tokenized = encode_documents(tokenizer, documents)
    vocab_size = tokenizer.get_vocab_size()

    # the model: BERT "tiny" (2 layers of 128); no dropout, and pre-LN for the high learning rate
    config = ModelConfig(
        vocab_size=vocab_size,
        hidden_size=128,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=512,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
        pre_layer_norm=True,
    )
    model = BertForPreTraining(config)
    print(f"{sum(p.numel() for p in model.parameters()) / 1e6:.2f}M parameters, vocabulary {vocab_size}")
    # AdamW, no weight decay on biases and LayerNorm weights (betas 0.9 / 0.999, eps 1e-6, as BERT)
    optimizer = build_optimizer(model, args.lr, weight_decay=0.01)

    # batches: each epoch pairs the sentences afresh ([CLS] A [SEP] B [SEP], B following A or not), and the
    # collator pads each batch and masks 15% of its tokens anew (80% [MASK], 10% random, 10% kept)
    collator = MaskingCollator(vocab_size, mask_prob=0.15, pad_to_multiple_of=8, seed=args.seed)

    def stream():
        for epoch in itertools.count():
            for instances in nsp_epoch_batches(
                tokenized, args.seq_len, args.batch_size, args.seed, epoch, args.dupe_factor
            ):
                yield collator(instances)

    # the loop: learning rate, forward, backward, clip, step
    losses, batches, start = [], stream(), time.perf_counter()
    model.train()
    for step in range(args.stop_after or args.steps):
        # linear warmup, the peak held, a linear decay to 0 over the last 30%: by the share of the run done
        lr = args.lr * lr_multiplier((step + 1) / args.steps, args.warmup, decay_ratio=args.decay)
        for group in optimizer.param_groups:
            group["lr"] = lr
        # (B, T) input_ids, token_type_ids, attention_mask, labels (-100: unmasked); (B,) next_sentence_label
        batch = next(batches)
        out = model(**batch)  # the loss is MLM (masked positions only) + NSP
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(out.loss.item())
        if (step + 1) % args.log_every == 0 or step + 1 in (args.steps, args.stop_after):
            ms = (time.perf_counter() - start) / (step + 1) * 1e3
            print(
                f"step {step + 1:5d} | loss {out.loss.item():.6f} | mlm {out.mlm_loss.item():.4f} | "
                f"nsp {out.nsp_loss.item():.4f} | lr {lr:.2e} | {ms:.0f} ms/step"
            )

    # what it learnt: fill the masks of a fresh batch (the toy corpus is small enough to memorise)
    model.eval()
    with torch.no_grad():
        batch = next(batches)
        out = model(**batch)
    targets = batch["labels"][batch["labels"] != IGNORE_INDEX]  # the order of out.prediction_logits' rows
    mlm_accuracy = (out.prediction_logits.argmax(-1) == targets).float().mean().item()
    guessed = out.seq_relationship_logits.argmax(-1)  # (B,): 0 = B follows A, 1 = B is random
    nsp_accuracy = (guessed == batch["next_sentence_label"]).float().mean().item()
    print(f"fresh batch: masked-word accuracy {mlm_accuracy:.3f}, next-sentence accuracy {nsp_accuracy:.3f}")
    return losses


if __name__ == "__main__":
    main()
