"""A lowercase WordPiece tokenizer with fixed special ids, trained with Hugging Face `tokenizers`.

It follows the uncased BERT tokenizer of Devlin et al. (2019) and google-research/bert `tokenization.py`:
lowercase, strip accents, split on whitespace and punctuation, then greedy longest-match WordPiece with
`##` continuation pieces, and `[CLS] A [SEP] B [SEP]` with token types 0/1. The pipeline is the one
transformers' `BertTokenizer` builds (`models/bert/tokenization_bert.py`), so a saved directory loads in
`transformers.BertTokenizerFast.from_pretrained` and gives the same ids.

The five special tokens always take ids 0..4 in the order of `SPECIAL_TOKENS`; the model and the data code
rely on these numbers through `ModelConfig`, never on a lookup that could reorder them. Beside them,
`IGNORE_INDEX` (-100) marks a label with nothing to predict: the data code writes it, the model's losses
skip it.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

from nanobert.errors import NanobertError, raise_user_os_error

__all__ = [
    "check_tokenizer_options",
    "CLS_ID",
    "DEFAULT_VOCAB_SIZE",
    "IGNORE_INDEX",
    "MASK_ID",
    "MIN_VOCAB_SIZE",
    "NUM_SPECIAL_TOKENS",
    "PAD_ID",
    "SEP_ID",
    "SPECIAL_TOKENS",
    "UNK_ID",
    "encode_documents",
    "encode_pair",
    "encode_pairs",
    "count_cut",
    "cut_to_window",
    "encode_sentences",
    "load_tokenizer",
    "pad",
    "save_tokenizer",
    "tokenizer_digest",
    "train_tokenizer",
    "truncate_pair",
]

# Fixed order: the position in this tuple is the token id. BERT's own vocab puts [PAD] at 0 as well, so
# zero-initialised padding and `padding_idx=0` mean the same thing everywhere.
SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
PAD_ID, UNK_ID, CLS_ID, SEP_ID, MASK_ID = 0, 1, 2, 3, 4
NUM_SPECIAL_TOKENS = 5
# Not a token: the label of a position with nothing to predict (an unmasked or padded one), Hugging Face's
# value and torch's `ignore_index` default. Only token labels use it, never next-sentence labels.
IGNORE_INDEX = -100

# WikiText-2 has about 33k distinct words in 2M tokens; 8192 WordPieces keeps most frequent words whole
# while every piece is still seen often enough to learn, and it is the size the project's reported runs
# (and their comparison with a transformers BERT of the same shape) use.
DEFAULT_VOCAB_SIZE = 8192

# Room for the five special tokens and the 26 lowercase letters; anything smaller cannot spell English.
MIN_VOCAB_SIZE = 32
MAX_VOCAB_SIZE = 1 << 20  # 1,048,576 pieces, 4x the largest multilingual vocabularies

# What transformers reads from a saved directory; BERT-base used 512 positions.
_MODEL_MAX_LENGTH = 512
_TOKENIZER_FILE = "tokenizer.json"
_VOCAB_FILE = "vocab.txt"


def _empty_tokenizer() -> Tokenizer:
    """An untrained WordPiece pipeline: the same steps, in the same order, as transformers' BertTokenizer."""
    tokenizer = Tokenizer(
        models.WordPiece(unk_token="[UNK]", continuing_subword_prefix="##", max_input_chars_per_word=100)
    )
    # strip_accents=None means "strip when lowercasing", the uncased-BERT behaviour ("Café" -> "cafe").
    tokenizer.normalizer = normalizers.BertNormalizer(
        lowercase=True, clean_text=True, handle_chinese_chars=True, strip_accents=None
    )
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.decoder = decoders.WordPiece(prefix="##")
    return tokenizer


def _add_post_processor(tokenizer: Tokenizer) -> None:
    """Attach the `[CLS] A [SEP]` / `[CLS] A [SEP] B [SEP]` template with token types 0 and 1."""
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", CLS_ID), ("[SEP]", SEP_ID)],
    )


def _check_special_ids(tokenizer: Tokenizer) -> None:
    """Raise if the special tokens are not at ids 0..4 (a bug, or a tokenizer from somewhere else)."""
    for expected_id, token in enumerate(SPECIAL_TOKENS):
        actual = tokenizer.token_to_id(token)
        if actual != expected_id:
            raise NanobertError(
                f"tokenizer has {token} at id {actual}, expected {expected_id}; "
                f"train a new one with nanobert so that they are {', '.join(SPECIAL_TOKENS)} = 0..4"
            )


def check_tokenizer_options(vocab_size: int, min_frequency: int) -> None:
    """NanobertError for a vocabulary size or minimum frequency `train_tokenizer` cannot use; callers that
    read a large sample first (`nanobert prepare`) check before reading it."""
    if vocab_size < MIN_VOCAB_SIZE:
        raise NanobertError(
            f"vocab_size {vocab_size} is too small to hold the {NUM_SPECIAL_TOKENS} special tokens and an "
            f"alphabet; use a vocab_size of at least {MIN_VOCAB_SIZE} (the default is {DEFAULT_VOCAB_SIZE})"
        )
    if vocab_size > MAX_VOCAB_SIZE:  # the trainer would try to allocate for it, and abort the process
        raise NanobertError(
            f"vocab_size {vocab_size} is larger than nanobert trains ({MAX_VOCAB_SIZE:,}; BERT uses ~30,000)"
        )
    if min_frequency < 0:
        raise NanobertError(f"min_frequency must be 0 or more, got {min_frequency}")


def train_tokenizer(
    texts: Iterable[str], vocab_size: int = DEFAULT_VOCAB_SIZE, min_frequency: int = 2
) -> Tokenizer:
    """Train a lowercase WordPiece tokenizer on `texts` (sentences or paragraphs, any length).

    Returns a `tokenizers.Tokenizer` with `SPECIAL_TOKENS` at ids 0..4, the BERT pair template attached,
    and at most `vocab_size` tokens. On a small corpus the trainer runs out of pieces worth merging and
    the vocabulary is smaller than asked; `tokenizer.get_vocab_size()` is the real size to give the model.
    `min_frequency` is how often a piece must occur to be kept. Raises NanobertError when `vocab_size` is
    below `MIN_VOCAB_SIZE` or `texts` holds no non-blank text.
    """
    check_tokenizer_options(vocab_size, min_frequency)
    # Materialise once: we need to know it is non-empty before training, and the trainer iterates anyway.
    texts = [text for text in texts if text and not text.isspace()]
    if not texts:
        raise NanobertError("cannot train a tokenizer on empty text; check that the corpus has sentences")

    # The trainer breaks ties between equally frequent merges by the ids of the two pieces, and it numbers
    # the `##` continuation pieces in the order it meets them in a hash map, which changes from process to
    # process (huggingface/tokenizers issue 1794): on a corpus small enough to run out of merges the same
    # text gave a different vocabulary now and then. So nothing is left for the hash order to decide: the
    # alphabet is chosen here (`_alphabet`), and every `##` twin is handed to the trainer with the special
    # tokens, so every piece the merges start from has a fixed id before the trainer reads a word.
    alphabet = _alphabet(texts, (vocab_size - NUM_SPECIAL_TOKENS) // 2)
    # On a large corpus the trainer also stops at a size inside a run of equally frequent merges; training
    # a little past vocab_size and keeping the most used pieces (ties by string) makes the cut canonical.
    margin = max(8, vocab_size // 32)
    candidate = _empty_tokenizer()
    trainer = trainers.WordPieceTrainer(
        vocab_size=vocab_size + margin,
        min_frequency=min_frequency,
        special_tokens=[*SPECIAL_TOKENS, *(f"##{c}" for c in alphabet)],
        initial_alphabet=alphabet,
        # Exactly the alphabet above: the characters given get the trainer's highest count, so the limit
        # drops just the ones `_alphabet` left out.
        limit_alphabet=len(alphabet),
        continuing_subword_prefix="##",
        show_progress=False,
    )
    candidate.train_from_iterator(texts, trainer=trainer, length=len(texts))
    tokenizer = _empty_tokenizer()
    tokenizer.model = models.WordPiece(
        vocab=_canonical_vocab(candidate, texts, vocab_size),
        unk_token="[UNK]",
        continuing_subword_prefix="##",
        max_input_chars_per_word=100,
    )
    # Register the specials (already at ids 0..4) as special tokens: a literal "[MASK]" stays whole.
    tokenizer.add_special_tokens(list(SPECIAL_TOKENS))
    _add_post_processor(tokenizer)
    _check_special_ids(tokenizer)
    assert tokenizer.get_vocab_size() <= vocab_size, (tokenizer.get_vocab_size(), vocab_size)
    return tokenizer


def _alphabet(texts: list[str], limit: int) -> list[str]:
    """The characters the vocabulary spells with: those of the normalised words, the `limit` most frequent
    when there are more (ties by code point), sorted by code point. Room for each and its `##` twin is what
    keeps the promise "at most vocab_size" on tiny vocabularies; real corpora have far fewer characters."""
    normalizer = _empty_tokenizer().normalizer
    counts: Counter[str] = Counter()
    for text in texts:
        counts.update(normalizer.normalize_str(text))
    # What the pre-tokenizer splits on is no word's character (clean_text turned every space into " ").
    chars = [c for c in counts if not c.isspace()]
    kept = sorted(chars, key=lambda c: (-counts[c], c))[:limit]
    return sorted(kept)


def _canonical_vocab(candidate: Tokenizer, texts: list[str], vocab_size: int) -> dict[str, int]:
    """A deterministic vocabulary of at most `vocab_size` from a trained candidate tokenizer.

    Order: the special tokens (ids 0..4), then the alphabet (single characters and their `##` twins, all
    kept so every word stays encodable) sorted by string, then the other pieces by how often the candidate
    encoder uses them on `texts` (most used first, ties by string), cut at `vocab_size`.
    """
    # Count with the trained pieces alone: the candidate also registered the `##` twins as special tokens,
    # which would cut a literal "##a" out of a text before the WordPiece model saw it.
    vocab = candidate.get_vocab(with_added_tokens=False)
    counter = _empty_tokenizer()
    counter.model = models.WordPiece(vocab=vocab, unk_token="[UNK]", continuing_subword_prefix="##")
    counts = Counter()
    for start in range(0, len(texts), 10_000):
        for encoding in counter.encode_batch(texts[start : start + 10_000], add_special_tokens=False):
            counts.update(encoding.ids)
    pieces = [t for t in vocab if t not in SPECIAL_TOKENS]
    alphabet = sorted(t for t in pieces if len(t.removeprefix("##")) == 1)
    alphabet_set = set(alphabet)
    others = sorted((t for t in pieces if t not in alphabet_set), key=lambda t: (-counts[vocab[t]], t))
    kept = list(SPECIAL_TOKENS) + alphabet + others[: max(0, vocab_size - NUM_SPECIAL_TOKENS - len(alphabet))]
    return {token: i for i, token in enumerate(kept)}


def _vocab_in_id_order(tokenizer: Tokenizer) -> list[str]:
    """All tokens, position = id; WordPiece ids are dense, so every id from 0 to size-1 has a token."""
    vocab = tokenizer.get_vocab(with_added_tokens=True)
    tokens = [""] * len(vocab)
    for token, token_id in vocab.items():
        tokens[token_id] = token
    return tokens


def _vocab_text(tokenizer: Tokenizer) -> str:
    """`vocab.txt`'s text: one token per line in id order (a token never holds a newline: the pre-tokenizer
    splits on whitespace)."""
    return "\n".join(_vocab_in_id_order(tokenizer)) + "\n"


def tokenizer_digest(tokenizer: Tokenizer) -> str:
    """The SHA-1 of the `vocab.txt` that `save_tokenizer` writes: two runs with the same digest tokenize
    alike (the rest of the pipeline is fixed here), so a run's log and summary name its vocabulary by it."""
    return hashlib.sha1(_vocab_text(tokenizer).encode("utf-8")).hexdigest()


def save_tokenizer(
    tokenizer: Tokenizer, directory: str | Path, tokenizer_class: str = "BertTokenizerFast"
) -> None:
    """Write the tokenizer into `directory` (created if needed) in a layout transformers also reads.

    Files: `tokenizer.json` (the full pipeline, what `load_tokenizer` reads), `vocab.txt` (one token per
    line in id order, the original BERT format), and `tokenizer_config.json` plus
    `special_tokens_map.json`, so that `transformers.BertTokenizerFast.from_pretrained(directory)` gives
    the same ids as `tokenizer`. `tokenizer_class="PreTrainedTokenizerFast"` makes transformers'
    AutoTokenizer keep tokenizer.json's own template (BertTokenizerFast rebuilds `[CLS] A [SEP]`).
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(directory / _TOKENIZER_FILE))
    (directory / _VOCAB_FILE).write_text(_vocab_text(tokenizer), encoding="utf-8")
    special_tokens_map = {
        "unk_token": "[UNK]",
        "sep_token": "[SEP]",
        "pad_token": "[PAD]",
        "cls_token": "[CLS]",
        "mask_token": "[MASK]",
    }
    config = {
        "tokenizer_class": tokenizer_class,
        "do_lower_case": True,
        # None = follow do_lower_case, as our BertNormalizer does; tokenize_chinese_chars mirrors it too.
        "strip_accents": None,
        "tokenize_chinese_chars": True,
        "clean_up_tokenization_spaces": False,
        "model_max_length": _MODEL_MAX_LENGTH,
        **special_tokens_map,
    }
    (directory / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    (directory / "special_tokens_map.json").write_text(
        json.dumps(special_tokens_map, indent=2) + "\n", encoding="utf-8"
    )


def load_tokenizer(directory: str | Path) -> Tokenizer:
    """Read the tokenizer that `save_tokenizer` wrote into `directory`.

    Raises NanobertError when the directory or its `tokenizer.json` is missing or unreadable, or when the
    special tokens are not at ids 0..4.
    """
    directory = Path(directory)
    path = directory / _TOKENIZER_FILE
    if not directory.is_dir():
        raise NanobertError(f"no tokenizer directory at {directory}; train one first or check the path")
    if not path.is_file():
        raise NanobertError(f"{directory} has no {_TOKENIZER_FILE}; point at a directory written by nanobert")
    try:
        with open(path, "rb"):  # unreadable is not malformed: a permission error names itself
            pass
        tokenizer = Tokenizer.from_file(str(path))
    except Exception as exc:  # the Rust side raises a bare Exception for any parse error
        raise_user_os_error(exc, path)
        raise NanobertError(f"cannot read {path} ({exc}); re-save the tokenizer or retrain it") from exc
    _check_special_ids(tokenizer)
    return tokenizer


def encode_sentences(tokenizer: Tokenizer, sentences: list[str]) -> list[list[int]]:
    """Token ids of each sentence, without [CLS]/[SEP], in the order given.

    Uses `encode_batch`, which runs in parallel in Rust; this is how a whole corpus gets tokenized once
    before pretraining instances are built from the ids.
    """
    encodings = tokenizer.encode_batch(sentences, add_special_tokens=False)
    return [encoding.ids for encoding in encodings]


def encode_documents(tokenizer: Tokenizer, documents: list[list[str]]) -> list[list[list[int]]]:
    """Token ids of every sentence of every document (no special tokens), in one batched encode."""
    ids = encode_sentences(tokenizer, [s for doc in documents for s in doc])
    out, i = [], 0
    for doc in documents:
        out.append(ids[i : i + len(doc)])
        i += len(doc)
    return out


def truncate_pair(len_a: int, len_b: int, budget: int) -> tuple[int, int]:
    """How many tokens of A and of B to keep so that together they fit `budget`: the longer side loses one
    token at a time from its end (google-research/bert `truncate_seq_pair`, without its random front cut)."""
    while len_a + len_b > budget:
        if len_a > len_b:
            len_a -= 1
        else:
            len_b -= 1
    return len_a, len_b


# A word piece covers at most 100 characters (WordPiece's longest word; a longer one is one [UNK]) and the
# space before it, so the first `positions * CHARS_PER_POSITION` characters of a text hold more word pieces
# than a window of `positions` keeps, unless the text is mostly blank.
CHARS_PER_POSITION = 128


def cut_to_window(text: str, positions: int) -> str:
    """`text` without what lies past any window of `positions` word pieces, cut before tokenizing: a 200 MB
    line then costs what a page of text does (the tokenizer once took 5 GB and aborted on one)."""
    return text[: positions * CHARS_PER_POSITION]


def count_cut(texts: list[str], positions: int) -> int:
    """How many of `texts` `cut_to_window` shortens, for a command to say once."""
    return sum(len(text) > positions * CHARS_PER_POSITION for text in texts)


def encode_pairs(
    tokenizer: Tokenizer, texts_a: list[str], texts_b: list[str] | None = None, max_length: int | None = None
) -> tuple[list[list[int]], list[list[int]]]:
    """`[CLS] A [SEP]` or `[CLS] A [SEP] B [SEP]` ids and segment ids for every example, in batched encodes.

    Segment ids are 0 up to and including the first [SEP] and 1 after it. With `max_length`, the longer of
    A and B loses tokens from its end until the whole, specials included, fits (`truncate_pair`). Returns
    (input_ids, token_type_ids), one unpadded list per example.
    """
    num_specials = 2 if texts_b is None else 3
    if max_length is not None and max_length < num_specials:
        raise NanobertError(f"max_length {max_length} cannot hold the specials; use at least {num_specials}")
    if max_length is not None:  # the window keeps only the start of each text: never tokenize the rest
        texts_a = [cut_to_window(text, max_length) for text in texts_a]
        texts_b = None if texts_b is None else [cut_to_window(text, max_length) for text in texts_b]
    ids_a = encode_sentences(tokenizer, texts_a)
    ids_b = encode_sentences(tokenizer, texts_b) if texts_b is not None else [[]] * len(ids_a)
    input_ids, token_type_ids = [], []
    for a, b in zip(ids_a, ids_b, strict=True):
        len_a, len_b = len(a), len(b)
        if max_length is not None:
            len_a, len_b = truncate_pair(len_a, len_b, max_length - num_specials)
        ids = [CLS_ID, *a[:len_a], SEP_ID]
        types = [0] * len(ids)
        if texts_b is not None:
            ids += [*b[:len_b], SEP_ID]
            types += [1] * (len_b + 1)
        input_ids.append(ids)
        token_type_ids.append(types)
    return input_ids, token_type_ids


def encode_pair(
    tokenizer: Tokenizer, text_a: str, text_b: str | None = None, max_length: int | None = None
) -> dict[str, list[int]]:
    """Encode one text or a pair as `[CLS] A [SEP]` or `[CLS] A [SEP] B [SEP]`, unpadded (`encode_pairs`).

    Returns {"input_ids", "token_type_ids", "attention_mask"}, each a list of the same length; the mask is
    all ones.
    """
    ids, types = encode_pairs(tokenizer, [text_a], None if text_b is None else [text_b], max_length)
    return {"input_ids": ids[0], "token_type_ids": types[0], "attention_mask": [1] * len(ids[0])}


def pad(
    rows: Sequence[Sequence[int]],
    pad_id: int = PAD_ID,
    width: int | None = None,
    multiple_of: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-pad rows of ids into a (B, T) long tensor; returns it and the (B, T) bool mask of real tokens.

    T is `width`, or the longest row rounded up to `multiple_of` (few distinct shapes: fewer recompiles,
    tensor-core sizes). NanobertError when a row is longer than `width`. This is the one padding rule of
    every batch nanobert builds (pretraining, fine-tuning, inference).
    """
    lengths = torch.tensor([len(r) for r in rows])
    longest = int(lengths.max())
    if width is None:
        width = -(-longest // multiple_of) * multiple_of if multiple_of else longest
    if longest > width:
        raise NanobertError(
            f"a row has {longest} tokens but the padded width is {width} (pad_to); "
            "raise pad_to or create instances with max_seq_len <= pad_to"
        )
    mask = torch.arange(width) < lengths[:, None]  # (B, T)
    out = torch.full((len(rows), width), pad_id, dtype=torch.long)
    # Boolean-mask assignment fills row-major, so one flat list fills every row at once.
    out[mask] = torch.tensor([t for r in rows for t in r], dtype=torch.long)
    return out, mask
