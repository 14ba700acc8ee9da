"""Tests for nanobert.tokenizer: fixed special ids, the BERT template, save/load and transformers parity."""

from __future__ import annotations

from pathlib import Path

import pytest

from nanobert.errors import NanobertError
from nanobert.tokenizer import (
    CLS_ID,
    MASK_ID,
    MIN_VOCAB_SIZE,
    NUM_SPECIAL_TOKENS,
    PAD_ID,
    SEP_ID,
    SPECIAL_TOKENS,
    UNK_ID,
    encode_documents,
    encode_pair,
    encode_pairs,
    encode_sentences,
    load_tokenizer,
    pad,
    save_tokenizer,
    train_tokenizer,
    truncate_pair,
)

# A few hundred words with capitals, accents, numbers and punctuation, so every normalizer step matters.
CORPUS = [
    "The cat sleeps on the warm mat, and the dog sleeps by the door.",
    "Dark clouds move over the hills; cold rain falls all afternoon!",
    "We cut onions and garlic for the soup, then fry them in olive oil.",
    "Our train leaves the city at 6.30 and reaches the harbour by noon.",
    "The Café near the station serves crêpes, coffee and fresh bread.",
    "In 1999 the museum opened a new hall for paintings and statues.",
    "Is the weather nice today? The sun is bright and the wind is calm.",
    "She reads a book about ships, sailors and the open sea.",
] * 8

TEXTS = [
    "The cat sleeps on the warm mat.",
    "CAFÉ Crêpes, coffee & BREAD!",
    "In 1999 it cost 6.30 (approx.)",
    "A zyxwvut appears.",
    "the [UNK] token and [MASK] stay whole",
    "tab\tand  double  spaces",
]


@pytest.fixture(scope="module")
def tokenizer():
    # An odd size, so nothing can quietly assume a power of two.
    return train_tokenizer(CORPUS, vocab_size=150)


def test_special_tokens_have_fixed_ids(tokenizer) -> None:
    assert SPECIAL_TOKENS == ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
    assert (PAD_ID, UNK_ID, CLS_ID, SEP_ID, MASK_ID) == tuple(range(NUM_SPECIAL_TOKENS))
    assert [tokenizer.token_to_id(t) for t in SPECIAL_TOKENS] == [0, 1, 2, 3, 4]
    assert NUM_SPECIAL_TOKENS < tokenizer.get_vocab_size() <= 150


def test_tiny_vocab_never_exceeds_the_request() -> None:
    tokenizer = train_tokenizer(CORPUS, vocab_size=MIN_VOCAB_SIZE + 7)
    assert tokenizer.get_vocab_size() <= MIN_VOCAB_SIZE + 7
    assert [tokenizer.token_to_id(t) for t in SPECIAL_TOKENS] == [0, 1, 2, 3, 4]


def test_round_trip_lowercases(tokenizer) -> None:
    text = "The Cat sleeps on the warm MAT, and the dog sleeps by the door."
    ids = encode_sentences(tokenizer, [text])[0]
    assert UNK_ID not in ids and CLS_ID not in ids
    assert tokenizer.decode(ids) == text.lower()


def test_unk_literal_and_unknown_characters(tokenizer) -> None:
    assert encode_sentences(tokenizer, ["[UNK]", "[MASK]", "東"]) == [[UNK_ID], [MASK_ID], [UNK_ID]]
    assert UNK_ID in encode_sentences(tokenizer, ["the [UNK] cat"])[0]


def test_pair_template_and_token_types(tokenizer) -> None:
    a, b = "the cat sleeps", "cold rain falls"
    ids_a, ids_b = encode_sentences(tokenizer, [a, b])
    pair = encode_pair(tokenizer, a, b)
    assert pair["input_ids"] == [CLS_ID, *ids_a, SEP_ID, *ids_b, SEP_ID]
    assert pair["token_type_ids"] == [0] * (len(ids_a) + 2) + [1] * (len(ids_b) + 1)
    assert pair["attention_mask"] == [1] * len(pair["input_ids"])
    # The post-processor attached to the tokenizer builds the same thing.
    encoding = tokenizer.encode(a, b)
    assert encoding.ids == pair["input_ids"] and encoding.type_ids == pair["token_type_ids"]
    assert encode_pair(tokenizer, a)["input_ids"] == [CLS_ID, *ids_a, SEP_ID] == tokenizer.encode(a).ids


def test_encode_pair_truncates_the_longer_side(tokenizer) -> None:
    a, b = "the cat sleeps on the warm mat", "rain"
    ids_a, ids_b = encode_sentences(tokenizer, [a, b])
    pair = encode_pair(tokenizer, a, b, max_length=len(ids_b) + 6)
    assert pair["input_ids"] == [CLS_ID, *ids_a[:3], SEP_ID, *ids_b, SEP_ID]
    assert len(pair["token_type_ids"]) == len(pair["input_ids"]) == len(ids_b) + 6
    assert len(encode_pair(tokenizer, a, max_length=4)["input_ids"]) == 4
    with pytest.raises(NanobertError, match="max_length"):
        encode_pair(tokenizer, a, b, max_length=2)


def test_save_load_gives_identical_ids(tokenizer, tmp_path: Path) -> None:
    save_tokenizer(tokenizer, tmp_path / "tok")
    loaded = load_tokenizer(tmp_path / "tok")
    assert encode_sentences(loaded, TEXTS) == encode_sentences(tokenizer, TEXTS)
    assert loaded.encode("a b", "c").type_ids == tokenizer.encode("a b", "c").type_ids
    vocab_lines = (tmp_path / "tok" / "vocab.txt").read_text(encoding="utf-8").splitlines()
    assert vocab_lines == [tokenizer.id_to_token(i) for i in range(tokenizer.get_vocab_size())]


def test_load_errors(tmp_path: Path) -> None:
    with pytest.raises(NanobertError, match="no tokenizer directory"):
        load_tokenizer(tmp_path / "missing")
    with pytest.raises(NanobertError, match="has no tokenizer.json"):
        load_tokenizer(tmp_path)
    (tmp_path / "tokenizer.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(NanobertError, match="cannot read"):
        load_tokenizer(tmp_path)


def test_transformers_bert_tokenizer_fast_agrees(tokenizer, tmp_path: Path) -> None:
    transformers = pytest.importorskip("transformers")
    save_tokenizer(tokenizer, tmp_path)
    hf = transformers.BertTokenizerFast.from_pretrained(tmp_path)
    for text in TEXTS:
        assert hf(text)["input_ids"] == tokenizer.encode(text).ids, text
    for a, b in [(TEXTS[0], TEXTS[1]), (TEXTS[2], TEXTS[4])]:
        expected = encode_pair(tokenizer, a, b)
        assert {k: hf(a, b)[k] for k in expected} == expected
    assert (hf.pad_token_id, hf.unk_token_id, hf.cls_token_id, hf.sep_token_id, hf.mask_token_id) == (
        0,
        1,
        2,
        3,
        4,
    )


def test_bad_inputs() -> None:
    with pytest.raises(NanobertError, match=f"too small.*at least {MIN_VOCAB_SIZE}"):
        train_tokenizer(CORPUS, vocab_size=NUM_SPECIAL_TOKENS)
    with pytest.raises(NanobertError, match="empty text"):
        train_tokenizer(["", "  \n"], vocab_size=99)
    with pytest.raises(NanobertError, match="larger than nanobert trains"):  # the trainer would abort
        train_tokenizer(CORPUS, vocab_size=5_000_000_000)
    with pytest.raises(NanobertError, match="min_frequency must be 0 or more"):
        train_tokenizer(CORPUS, vocab_size=99, min_frequency=-1)


def test_encode_pairs_batches_what_encode_pair_does(tokenizer) -> None:
    ids, types = encode_pairs(tokenizer, TEXTS[:3], TEXTS[3:], max_length=12)
    for a, b, i, t in zip(TEXTS[:3], TEXTS[3:], ids, types, strict=True):
        one = encode_pair(tokenizer, a, b, max_length=12)
        assert (i, t) == (one["input_ids"], one["token_type_ids"]) and len(i) <= 12
    singles, _ = encode_pairs(tokenizer, TEXTS)
    assert singles == [encode_pair(tokenizer, t)["input_ids"] for t in TEXTS]
    assert truncate_pair(10, 3, 8) == (5, 3) and truncate_pair(4, 9, 6) == (3, 3)


def test_encode_documents_keeps_the_document_structure(tokenizer) -> None:
    docs = [TEXTS[:2], [TEXTS[2]], TEXTS[3:]]
    encoded = encode_documents(tokenizer, docs)
    assert [len(d) for d in encoded] == [2, 1, 3]
    assert encoded[2][0] == tokenizer.encode(TEXTS[3], add_special_tokens=False).ids


def test_pad_is_the_one_padding_rule() -> None:
    ids, mask = pad([[5, 6, 7], [8]], pad_id=0)
    assert ids.tolist() == [[5, 6, 7], [8, 0, 0]] and mask.tolist() == [[1, 1, 1], [1, 0, 0]]
    assert pad([[5, 6, 7]], multiple_of=8)[0].shape == (1, 8)
    assert pad([[5]], width=4)[0].tolist() == [[5, 0, 0, 0]]
    with pytest.raises(NanobertError, match="pad_to"):
        pad([[1, 2, 3]], width=2)
