"""The hybrid objective (GPT-BERT): both kinds of batch predict the token after each position from one head;
next-word batches never look ahead, masked ones read both ways; a toy run both fills masks and continues
text; a run resumes exactly; the checkpoint answers the commands of both halves."""

import dataclasses
import json

import pytest
import torch
from helpers import TINY_MODEL, TINY_SET, write_corpus

from nanobert.causal_model import BertForHybridLM
from nanobert.cli import main
from nanobert.config import ModelConfig, TrainConfig
from nanobert.data.masking import MaskingCollator
from nanobert.errors import NanobertError
from nanobert.objectives.hybrid import HybridCollator, hybrid_held_out, hybrid_loss, shift_labels
from nanobert.objectives.registry import OBJECTIVES
from nanobert.tokenizer import CLS_ID, IGNORE_INDEX, MASK_ID, NUM_SPECIAL_TOKENS

VOCAB = TINY_MODEL["vocab_size"]
WINDOWS = [[CLS_ID, *range(NUM_SPECIAL_TOKENS + r, NUM_SPECIAL_TOKENS + r + 20)] for r in range(5)]


def collator(causal_fraction: float, seed: int = 3) -> HybridCollator:
    return HybridCollator(MaskingCollator(VOCAB, mask_prob=0.3, seed=seed), causal_fraction, seed)


def test_shift_labels_moves_each_label_to_the_output_before_it():
    labels = torch.tensor([[-100, 7, -100, 9]])
    assert shift_labels(labels).tolist() == [[7, -100, 9, -100]]


def test_a_hybrid_batch_labels_output_t_with_the_token_at_t_plus_1_for_both_kinds():
    original = torch.tensor(WINDOWS)
    next_word = collator(causal_fraction=1.0)(WINDOWS)
    assert next_word["causal"].all() and torch.equal(next_word["input_ids"], original)
    assert torch.equal(next_word["labels"][:, :-1], original[:, 1:])  # every output: the next token
    assert (next_word["labels"][:, -1] == IGNORE_INDEX).all()

    masked = collator(causal_fraction=0.0)(WINDOWS)
    assert not masked["causal"].any() and "next_sentence_label" not in masked
    labelled = masked["labels"] != IGNORE_INDEX
    assert 0 < int(labelled.sum()) < labelled.numel()
    rows, cols = labelled.nonzero(as_tuple=True)
    # the label at t is the original token at t + 1, and position t + 1 is the one the masking chose
    assert torch.equal(masked["labels"][rows, cols], original[rows, cols + 1])
    changed = masked["input_ids"] != original
    assert (changed[:, 1:] <= labelled[:, :-1]).all()  # nothing corrupted that is not predicted
    assert (masked["input_ids"][rows, cols + 1] == MASK_ID).float().mean() > 0.5  # 80/10/10


def test_a_masking_rate_set_on_the_hybrid_collator_masks_its_masked_batches_at_it():
    """The stream sets each epoch's rate (final_mask_prob) on the collator; the hybrid one passes it on."""
    hybrid = collator(causal_fraction=0.0)
    few = int((hybrid(WINDOWS)["labels"] != IGNORE_INDEX).sum())
    hybrid.mask_prob = 0.6
    assert hybrid.masking.mask_prob == 0.6 and int((hybrid(WINDOWS)["labels"] != IGNORE_INDEX).sum()) > few


def test_the_causal_fraction_draws_batches_from_the_seed_and_resumes_exactly():
    a = collator(0.5)
    kinds = [bool(a(WINDOWS)["causal"][0]) for _ in range(40)]
    assert 8 < sum(kinds) < 32  # both kinds, at about the fraction
    b = collator(0.5)
    for _ in range(17):
        b(WINDOWS)
    state = b.state_dict()
    expected = [b(WINDOWS) for _ in range(5)]
    c = collator(0.5, seed=99)
    c.load_state_dict(state)
    for want in expected:
        got = c(WINDOWS)
        assert all(torch.equal(got[k], want[k]) for k in want)


def test_a_next_word_batch_never_attends_forward_and_a_masked_one_does():
    """The causal probe of test_model.py on the hybrid's own batches, through its loss's call."""
    torch.manual_seed(0)
    model = BertForHybridLM(dataclasses.replace(ModelConfig(**TINY_MODEL), is_decoder=True)).eval()
    for causal_fraction, sees_ahead in ((1.0, False), (0.0, True)):
        batch = collator(causal_fraction)(WINDOWS)
        later = batch["input_ids"].clone()
        later[:, 12:] = torch.randint(NUM_SPECIAL_TOKENS, VOCAB, later[:, 12:].shape)
        causal = bool(batch["causal"][0])
        with torch.no_grad():
            a = model(batch["input_ids"], causal=causal).logits[:, :12]
            b = model(later, causal=causal).logits[:, :12]
        assert torch.allclose(a, b, atol=1e-6) is not sees_ahead


def test_the_loss_reads_each_batch_in_its_own_direction():
    """A masked batch's loss differs from the same batch read causally: the direction reaches the model."""
    torch.manual_seed(0)
    model = BertForHybridLM(dataclasses.replace(ModelConfig(**TINY_MODEL), is_decoder=True)).eval()
    batch = collator(0.0)(WINDOWS)
    both_ways = hybrid_loss(model, {**batch, "loss_share": torch.ones(2)})["loss"]
    flipped = {**batch, "causal": torch.ones_like(batch["causal"]), "loss_share": torch.ones(2)}
    assert not torch.allclose(both_ways, hybrid_loss(model, flipped)["loss"])
    with torch.no_grad():  # the loss is the mean cross-entropy of the labelled outputs' logits
        logits = model(batch["input_ids"], causal=False).logits
    keep = batch["labels"] != IGNORE_INDEX
    expected = torch.nn.functional.cross_entropy(logits[keep], batch["labels"][keep])
    assert torch.allclose(both_ways, expected, atol=1e-5)


def test_held_out_batches_are_both_kinds_and_fixed_by_the_seed():
    docs = [[[NUM_SPECIAL_TOKENS + (d + s + i) % 50 for i in range(6)] for s in range(5)] for d in range(4)]
    first = hybrid_held_out(docs, 24, 4, VOCAB, eval_seed=0)
    again = hybrid_held_out(docs, 24, 4, VOCAB, eval_seed=0)
    assert {bool(b["causal"][0]) for b in first} == {False, True}
    assert all(torch.equal(x["labels"], y["labels"]) for x, y in zip(first, again, strict=True))
    other = hybrid_held_out(docs, 24, 4, VOCAB, eval_seed=1)
    assert any(not torch.equal(x["labels"], y["labels"]) for x, y in zip(first, other, strict=True))


def test_the_record_is_registered_and_checks_its_fraction():
    assert OBJECTIVES["hybrid"].kind == "hybrid_lm" and OBJECTIVES["hybrid"].model is BertForHybridLM
    with pytest.raises(NanobertError, match="causal_fraction"):
        TrainConfig(objective="hybrid", causal_fraction=1.5)


# ----------------------------------------------------------------------------------------------------------
# Runs through the CLI


def pretrain(tmp_path, out, *extra):
    corpus = write_corpus(tmp_path / "corpus.txt")
    valid = write_corpus(tmp_path / "valid.txt", n_docs=3, seed=1)
    argv = ["pretrain", "--objective", "hybrid", "--train", str(corpus), "--valid", str(valid)]
    return main([*argv, "--out", str(out), "--device", "cpu", "--quiet", "--set", *TINY_SET, *extra])


def test_a_hybrid_run_resumes_bit_for_bit(tmp_path):
    full, split = tmp_path / "full", tmp_path / "split"
    hybrid = ["--set", "hidden_dropout_prob=0.1", "causal_fraction=0.4"]
    assert pretrain(tmp_path, full, "--max-steps", "10", *hybrid) == 0
    tokenizer = ["--tokenizer", str(full / "last")]
    assert pretrain(tmp_path, split, "--max-steps", "10", "--stop-after", "4", *tokenizer, *hybrid) == 0
    assert main(["pretrain", "--resume", str(split / "last"), "--quiet"]) == 0

    def losses(run):
        records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
        return [(r["step"], r["loss"], r["lr"]) for r in records if r["split"] == "train"]

    assert losses(split) == losses(full) and len(losses(full)) == 10
    final = lambda run: json.loads((run / "summary.json").read_text())["final"]  # noqa: E731
    assert final(split) == final(full)
    assert {"mlm_accuracy", "lm_perplexity", "loss"} <= set(final(full))


@pytest.fixture(scope="module")
def toy_hybrid(tmp_path_factory):
    """The built-in toy corpus, learned by the hybrid objective (half the batches next-word, so that its few
    hundred steps teach both halves)."""
    run = tmp_path_factory.mktemp("hybrid") / "toy"
    argv = ["pretrain", "--data", "toy", "--objective", "hybrid", "--out", str(run), "--device", "cpu"]
    assert main([*argv, "--quiet", "--set", "precision=fp32", "causal_fraction=0.5"]) == 0
    return run / "best"


def test_the_toy_hybrid_fills_masks_and_continues_text(toy_hybrid, capsys):
    assert json.loads((toy_hybrid / "config.json").read_text())["kind"] == "hybrid_lm"
    capsys.readouterr()
    assert main(["fill-mask", str(toy_hybrid), "the cat sleeps on the warm [MASK].", "--json"]) == 0
    filled = json.loads(capsys.readouterr().out)
    assert filled["masks"][0]["candidates"][0]["token"] == "mat", filled
    assert main(["generate", str(toy_hybrid), "the cat sleeps", "--temperature", "0", "--json"]) == 0
    text = json.loads(capsys.readouterr().out)["text"]
    assert text.startswith("the cat sleeps on the warm mat."), text
    assert main(["evaluate", str(toy_hybrid), "--device", "cpu"]) == 0
    metrics = json.loads(capsys.readouterr().out)
    # the held-out windows run across the documents' ends, which no model can predict: not 1.0
    assert metrics["mlm_accuracy"] >= 0.6 and metrics["lm_accuracy"] >= 0.7, metrics


def test_the_hybrid_checkpoint_refuses_what_it_was_not_trained_for(toy_hybrid, capsys):
    assert main(["nsp", str(toy_hybrid), "a cat.", "a dog."]) == 2
    err = capsys.readouterr().err
    assert "hybrid language model" in err and "use `nanobert generate`" in err and len(err.splitlines()) == 1


def test_the_hybrid_checkpoint_scores_and_fine_tunes(toy_hybrid, tmp_path, capsys):
    pair = ["the cat sleeps on the warm mat.", "mat the warm on sleeps cat the."]
    assert main(["score", str(toy_hybrid), *pair, "--json"]) == 0
    scored = json.loads(capsys.readouterr().out)
    assert scored["preferred"] == "A", scored
    train = tmp_path / "train.tsv"
    rows = [f"{'the cat sleeps' if i % 2 else 'cold rain falls'}\t{i % 2}" for i in range(24)]
    train.write_text("\n".join(["sentence\tlabel", *rows]) + "\n")
    argv = ["finetune", str(toy_hybrid), "--train", str(train), "--dev", str(train), "--epochs", "2"]
    argv += ["--text-col", "sentence", "--label-col", "label"]
    assert main([*argv, "--out", str(tmp_path / "ft"), "--device", "cpu", "--quiet"]) == 0
    config = json.loads((tmp_path / "ft" / "best" / "config.json").read_text())
    assert config["kind"] == "sequence_classification" and not config["model"]["is_decoder"]


def test_export_says_plainly_what_transformers_cannot_hold(tmp_path, capsys):
    run = tmp_path / "run"
    assert pretrain(tmp_path, run, "--max-steps", "3") == 0
    capsys.readouterr()
    assert main(["export-hf", str(run / "best"), str(tmp_path / "hf")]) == 0
    out = capsys.readouterr().out
    assert "BertLMHeadModel" in out and "not exported: the masked reading" in out, out
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert config["architectures"] == ["BertLMHeadModel"] and config["is_decoder"]
