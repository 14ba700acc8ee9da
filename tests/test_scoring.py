"""Sentence scores: PLL by a hand loop over masked copies, the within-word rule, the causal log-likelihood,
and agreement with the exported transformers model."""

import math

import pytest
import torch
from helpers import train_tiny_checkpoint
from tokenizers import Tokenizer, models, pre_tokenizers

from nanobert.errors import NanobertError
from nanobert.tokenizer import CLS_ID, MASK_ID, SEP_ID
from nanobert.use.inference import load
from nanobert.use.scoring import (
    RULE_CAUSAL,
    RULE_ORIGINAL,
    RULE_WITHIN_WORD,
    Comparison,
    SentenceScore,
    format_scores,
    masked_spans,
    score_sentences,
    word_ends,
)

SENTENCES = [
    "Alpha bravo charlie delta .",
    "Echo foxtrot golf .",
    "Bravo alpha .",
    "Hotel india juliet kilo .",
]


@pytest.fixture(scope="module")
def bert(tmp_path_factory):
    return load(train_tiny_checkpoint(tmp_path_factory.mktemp("bert"), steps=3))


@pytest.fixture(scope="module")
def gpt(tmp_path_factory):
    return load(train_tiny_checkpoint(tmp_path_factory.mktemp("gpt"), steps=3, objective="causal"))


def hand_pll(m, text: str, rule: str) -> list[float]:
    """One forward pass per masked copy, full logits: the definition, with nothing batched or skipped."""
    enc = m.tokenizer.encode(text, add_special_tokens=False)
    ids, words = enc.ids, enc.word_ids
    out = []
    for i in range(len(ids)):
        copy = [CLS_ID, *ids, SEP_ID]
        j = i
        while True:  # mask piece i, and with the within-word rule the later pieces of its word
            copy[j + 1] = MASK_ID
            if rule == RULE_ORIGINAL or j + 1 == len(ids) or words[j + 1] != words[i]:
                break
            j += 1
        with torch.no_grad():
            logits = m.model(torch.tensor([copy])).prediction_logits[0, i + 1]
        out.append(logits.float().log_softmax(-1)[ids[i]].item())
    return out


@pytest.mark.parametrize("rule", [RULE_WITHIN_WORD, RULE_ORIGINAL])
def test_pll_equals_a_hand_loop_over_masked_copies(bert, rule):
    # batch_tokens small enough that the four sentences spread over several batches of mixed sizes
    scores = score_sentences(bert.model, bert.tokenizer, SENTENCES, rule=rule, batch_tokens=20)
    for text, score in zip(SENTENCES, scores, strict=True):
        expected = hand_pll(bert, text, rule)
        assert score.logprobs == pytest.approx(expected, abs=1e-5)
        assert score.total == pytest.approx(sum(expected), abs=1e-4)
        assert score.rule == rule and len(score.tokens) == len(expected)


def test_within_word_rule_masks_exactly_the_later_pieces_of_the_word():
    # pieces: [the] [play ##ing ##s] [.] [un ##do] -> word ids 0 1 1 1 2 3 3
    words = [0, 1, 1, 1, 2, 3, 3]
    assert word_ends(words) == [1, 4, 4, 4, 5, 7, 7]
    assert masked_spans(words, RULE_WITHIN_WORD) == [(0, 1), (1, 4), (2, 4), (3, 4), (4, 5), (5, 7), (6, 7)]
    assert masked_spans(words, RULE_ORIGINAL) == [(i, i + 1) for i in range(7)]
    assert word_ends([None, 0, 0, None]) == [1, 3, 3, 4]  # specials are words of their own


def test_within_word_rule_differs_from_original_only_on_split_words():
    vocab = {
        t: i for i, t in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "play", "##ing"])
    }
    tokenizer = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    enc = tokenizer.encode("the playing", add_special_tokens=False)
    assert enc.tokens == ["the", "play", "##ing"]
    assert masked_spans(enc.word_ids, RULE_WITHIN_WORD) == [(0, 1), (1, 3), (2, 3)]


def test_causal_score_is_the_sum_of_next_token_logprobs(gpt):
    scores = score_sentences(gpt.model, gpt.tokenizer, SENTENCES, batch_tokens=12)
    for text, score in zip(SENTENCES, scores, strict=True):
        ids = [CLS_ID, *gpt.tokenizer.encode(text, add_special_tokens=False).ids]
        with torch.no_grad():
            logp = gpt.model(torch.tensor([ids])).logits[0].float().log_softmax(-1)
        expected = [logp[t, ids[t + 1]].item() for t in range(len(ids) - 1)]
        assert score.rule == RULE_CAUSAL
        assert score.logprobs == pytest.approx(expected, abs=1e-5)
        assert score.total == pytest.approx(sum(expected), abs=1e-4)


def test_rules_must_fit_the_model(bert, gpt):
    with pytest.raises(NanobertError, match="causal"):
        score_sentences(bert.model, bert.tokenizer, SENTENCES, rule=RULE_CAUSAL)
    with pytest.raises(NanobertError, match="within_word"):
        score_sentences(gpt.model, gpt.tokenizer, SENTENCES, rule=RULE_WITHIN_WORD)


def test_bad_sentences_are_one_line_errors(bert):
    with pytest.raises(NanobertError, match="no word pieces"):
        score_sentences(bert.model, bert.tokenizer, ["\u200b"])
    with pytest.raises(NanobertError, match="positions"):
        score_sentences(bert.model, bert.tokenizer, ["alpha " * (bert.max_length + 1)])


def test_typed_special_tokens_are_refused_unknown_words_are_not(bert):
    for text in ("alpha [MASK] bravo .", "alpha [SEP] bravo", "[CLS] alpha", "alpha [PAD]"):
        with pytest.raises(NanobertError, match="without special tokens"):
            score_sentences(bert.model, bert.tokenizer, [text])
    (score,) = score_sentences(bert.model, bert.tokenizer, ["alpha \u4e2d bravo ."])  # [UNK] is scored
    assert "[UNK]" in score.tokens


def test_three_sentences_are_labelled_a_b_c(bert):
    text = format_scores(score_sentences(bert.model, bert.tokenizer, SENTENCES[:3]))
    assert all(f"{label}: {s}" in text for label, s in zip("ABC", SENTENCES, strict=False))
    assert "prefers" not in text  # a verdict is for two sentences


def test_scoring_leaves_the_model_in_its_mode(bert):
    bert.model.train()
    try:
        score_sentences(bert.model, bert.tokenizer, SENTENCES[:1])
        assert bert.model.training
    finally:
        bert.model.eval()


def test_a_tie_is_neither_sentence():
    a = SentenceScore("a", ["a"], [-1.0], -1.0, RULE_ORIGINAL)
    b = SentenceScore("b", ["b"], [-2.0], -2.0, RULE_ORIGINAL)
    assert Comparison(a, b).preferred == "A" and Comparison(b, a).preferred == "B"
    assert Comparison(a, b).margin == pytest.approx(1.0)
    assert Comparison(a, a).preferred == "tie" and Comparison(a, a).margin == 0
    assert math.isfinite(Comparison(a, b).margin)


def test_bf16_scores_with_a_copy_and_leaves_the_model_in_fp32(bert):
    exact = score_sentences(bert.model, bert.tokenizer, SENTENCES)
    fast = score_sentences(bert.model, bert.tokenizer, SENTENCES, dtype=torch.bfloat16)
    assert next(bert.model.parameters()).dtype == torch.float32
    assert [s.total for s in fast] == pytest.approx([s.total for s in exact], abs=0.5)
    assert [s.tokens for s in fast] == [s.tokens for s in exact]
