"""Held-out metrics: per masked token over the whole split, the fixed protocol, and `evaluate_checkpoint`."""

import math

import pytest
import torch
import torch.nn.functional as F
from helpers import train_tiny_checkpoint, write_corpus

from nanobert.errors import NanobertError
from nanobert.model import BertForPreTraining
from nanobert.objectives.evaluate import (
    EVAL_MASK_PROB,
    evaluate_checkpoint,
    evaluate_model,
    prepare_eval_batches,
)
from nanobert.tokenizer import IGNORE_INDEX

DOCS = [[[5 + (d * 11 + s * 3 + t) % 90 for t in range(4 + s % 5)] for s in range(7)] for d in range(6)]


def test_eval_batches_are_fixed_and_use_standard_masking():
    a = prepare_eval_batches(DOCS, max_seq_len=40, batch_size=5, vocab_size=99, eval_seed=0)
    b = prepare_eval_batches(DOCS, max_seq_len=40, batch_size=5, vocab_size=99, eval_seed=0)
    assert len(a) > 1 and all(torch.equal(x[k], y[k]) for x, y in zip(a, b, strict=True) for k in x)
    masked = sum(int((x["labels"] != IGNORE_INDEX).sum()) for x in a)
    candidates = sum(int(((x["input_ids"] > 4) | (x["labels"] != IGNORE_INDEX)).sum()) for x in a)
    assert masked / candidates == pytest.approx(EVAL_MASK_PROB, abs=0.04)
    c = prepare_eval_batches(DOCS, max_seq_len=40, batch_size=5, vocab_size=99, eval_seed=1)
    assert any(not torch.equal(x["labels"], y["labels"]) for x, y in zip(a, c, strict=False))


def test_metrics_are_per_masked_token_over_the_split(tiny_config):
    """Not a mean of batch means: batches with more masked tokens weigh more."""
    torch.manual_seed(0)
    model = BertForPreTraining(tiny_config)
    batches = prepare_eval_batches(DOCS, max_seq_len=40, batch_size=3, vocab_size=99)
    metrics = evaluate_model(model, batches, "cpu")
    model.eval()
    losses, correct, nsp = [], 0, []
    with torch.no_grad():
        for batch in batches:
            out = model(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"])
            keep = batch["labels"] != IGNORE_INDEX
            logits, labels = out.prediction_logits[keep], batch["labels"][keep]
            losses += F.cross_entropy(logits, labels, reduction="none").tolist()
            correct += int((logits.argmax(-1) == labels).sum())
            nsp += F.cross_entropy(
                out.seq_relationship_logits, batch["next_sentence_label"], reduction="none"
            ).tolist()
    assert metrics["mlm_loss"] == pytest.approx(sum(losses) / len(losses), rel=1e-5)
    assert metrics["mlm_accuracy"] == pytest.approx(correct / len(losses))
    assert metrics["mlm_perplexity"] == pytest.approx(math.exp(metrics["mlm_loss"]), rel=1e-9)
    assert metrics["nsp_loss"] == pytest.approx(sum(nsp) / len(nsp), rel=1e-5)
    assert model.training is False  # evaluate_model put back the mode it found (eval here)


def test_evaluate_checkpoint_on_another_split_and_its_errors(tmp_path):
    checkpoint = train_tiny_checkpoint(tmp_path)
    other = write_corpus(tmp_path / "other.txt", n_docs=3, seed=7)
    on_other = evaluate_checkpoint(str(checkpoint), valid_file=str(other), device="cpu")
    own = evaluate_checkpoint(str(checkpoint), device="cpu")
    assert set(on_other) == set(own) and on_other != own
    with pytest.raises(NanobertError, match="--batch-size"):
        evaluate_checkpoint(str(checkpoint), batch_size=0)
    with pytest.raises(NanobertError, match="does not exist"):
        evaluate_checkpoint(str(tmp_path / "missing"))
    (tmp_path / "corpus.txt").rename(tmp_path / "moved.txt")  # the recorded source is gone (or relative)
    with pytest.raises(NanobertError, match=r"corpus\.txt, as its run recorded it, .*pass --valid FILE"):
        evaluate_checkpoint(str(checkpoint), device="cpu")


def test_causal_metrics_are_per_predicted_token(tiny_config):
    import dataclasses

    from nanobert.causal_model import BertLMHeadModel
    from nanobert.objectives.evaluate import prepare_causal_eval_batches

    torch.manual_seed(0)
    model = BertLMHeadModel(dataclasses.replace(tiny_config, is_decoder=True))
    batches = prepare_causal_eval_batches(DOCS, seq_len=16, batch_size=4)
    assert all(b["input_ids"][:, 0].eq(2).all() for b in batches)  # every window starts with [CLS]
    metrics = evaluate_model(model, batches, "cpu")
    model.eval()
    losses, correct = [], 0
    with torch.no_grad():
        for b in batches:
            logits = model(b["input_ids"], None, b["attention_mask"]).logits
            for row in range(logits.size(0)):
                for t in range(logits.size(1) - 1):
                    target = int(b["labels"][row, t + 1])
                    if target != IGNORE_INDEX:
                        losses.append(F.cross_entropy(logits[row, t], torch.tensor(target)).item())
                        correct += int(logits[row, t].argmax()) == target
    n_tokens = sum(len(s) for d in DOCS for s in d) + len(DOCS)  # every token and each document's [SEP]
    assert len(losses) == n_tokens
    assert metrics["lm_loss"] == pytest.approx(sum(losses) / len(losses), rel=1e-5)
    assert metrics["lm_accuracy"] == pytest.approx(correct / len(losses))
    assert metrics["lm_perplexity"] == pytest.approx(math.exp(metrics["lm_loss"]))
