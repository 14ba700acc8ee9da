"""`nanobert prepare`: a corpus of any size tokenized once into memory-mapped shards (shards.py reads them).

`prepare_corpus` turns a corpus into a directory that `nanobert pretrain --prepared DIR` reads with bounded
memory, the way google-research/bert `create_pretraining_data.py` writes TFRecords once and Megatron-LM's
`preprocess_data.py` writes an indexed binary dataset; the layout is in shards.py.

Writing streams: documents are read from the text file one at a time (`iter_documents`, the same rules as
`corpus.documents_from_lines`), tokenized in chunks and appended to the files, so memory does not grow with
the corpus. The tokenizer is trained on a sample, the documents holding the first `sample_words` words of the
training split (10M by default: WikiText-103 is ~100M words, and a WordPiece vocabulary of a few thousand
pieces is settled long before that), or it is given with `tokenizer_dir`. The directory appears only whole
(`files.write_atomically`), so a full disk or a kill keeps an older corpus.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from nanobert.data.corpus import (
    WIKITEXT_HF_NAMES,
    Document,
    _heading_level,  # the heading rule and the UTF-8 line reader of read_text_file, shared, not copied
    find_wikitext_file,
    load_documents,
    split_sentences,
    utf8_lines,
)
from nanobert.data.shards import FORMAT, META_NAME, VERSION, holds_prepared_corpus
from nanobert.errors import NanobertError
from nanobert.files import check_output_dir, remove_stale_temporaries, write_atomically
from nanobert.tokenizer import (
    check_tokenizer_options,
    encode_sentences,
    load_tokenizer,
    save_tokenizer,
    train_tokenizer,
)

__all__ = [
    "DEFAULT_SAMPLE_WORDS",
    "iter_documents",
    "prepare_corpus",
]

DEFAULT_SAMPLE_WORDS = 10_000_000
CHUNK_SENTENCES = 20_000  # sentences per encode_batch call: large enough for the Rust threads, small in RAM


# ----------------------------------------------------------------------------------------------------------
# Reading text as a stream of documents


def _check_text_file(path: Path) -> None:
    """The checks of `corpus.read_text_file`: present, a file, not binary."""
    if not path.exists():
        raise NanobertError(f"no such file: {path}; check the path")
    if path.is_dir():
        raise NanobertError(f"{path} is a directory; pass a text file or a directory of WikiText files")
    with path.open("rb") as file:
        if b"\0" in file.read(8192):
            raise NanobertError(f"{path} looks like a binary file (it has NUL bytes); pass a UTF-8 text file")


def _has_title(path: Path) -> bool:
    """Whether any line is a top-level heading (` = Title = `); stops at the first one."""
    with path.open("rb") as file:
        for raw in file:
            raw = raw.removeprefix(b"\xef\xbb\xbf")  # a byte-order mark, which utf8_lines drops too
            if raw.lstrip().startswith(b"= ") and _heading_level(raw.decode("utf-8", "replace")) == 1:
                return True
    return False


def iter_documents(path: str | Path) -> Iterator[Document]:
    """The documents of a UTF-8 text file, one at a time: `list(iter_documents(p)) == read_text_file(p)`.

    `documents_from_lines` only knows at the end of the file whether titles or blank lines separate its
    documents; a first pass that stops at the first title settles that, so the second can yield as it goes.
    """
    path = Path(path)
    _check_text_file(path)
    titled = _has_title(path)
    document: Document = []
    for line in utf8_lines(path):
        if not line.strip():
            if not titled and document:  # without titles, a blank line ends a document
                yield document
                document = []
            continue
        level = _heading_level(line)
        if level == 1:
            if document:
                yield document
            document = []
            continue
        if level > 1:  # section headings are dropped
            continue
        document.extend(split_sentences(line.replace("<unk>", "[UNK]")))
    if document:
        yield document


def _split_readers(data: str, valid: str | None) -> dict[str, Callable[[], Iterator[Document]]]:
    """How to stream the train (and held-out) documents of a corpus given as on the pretrain command line."""
    readers: dict[str, Callable[[], Iterator[Document]]] = {}
    path = Path(data)
    if data == "toy" or data in WIKITEXT_HF_NAMES:  # small, or held by `datasets`: loaded whole
        readers["train"] = lambda: iter(load_documents(data, "train"))
        if valid is None:
            readers["valid"] = lambda: iter(load_documents(data, "valid"))
    elif path.is_dir():
        train_file = find_wikitext_file(path, "train")
        readers["train"] = lambda: iter_documents(train_file)
        if valid is None:
            try:
                valid_file = find_wikitext_file(path, "valid")
                readers["valid"] = lambda: iter_documents(valid_file)
            except NanobertError:
                pass
    else:
        _check_text_file(path)
        readers["train"] = lambda: iter_documents(path)
    if valid is not None:
        _check_text_file(Path(valid))
        readers["valid"] = lambda: iter_documents(valid)
    return readers


# ----------------------------------------------------------------------------------------------------------
# Writing


def _token_dtype(vocab_size: int) -> np.dtype:
    return np.dtype(np.uint16) if vocab_size <= 1 << 16 else np.dtype(np.uint32)


def _sample_sentences(documents: Iterator[Document], words: int) -> list[str]:
    """The sentences of the first documents that together hold at least `words` words."""
    sample, seen = [], 0
    for document in documents:
        sample.extend(document)
        seen += sum(len(s.split()) for s in document)
        if seen >= words:
            break
    return sample


def _write_split(
    documents: Iterator[Document],
    tokenizer: Any,
    directory: Path,
    dtype: np.dtype,
    say: Callable[[str], None],
) -> dict[str, int]:
    """Tokenize `documents` chunk by chunk into the three files of one split; returns its counts."""
    directory.mkdir(parents=True)
    n_tokens = n_sentences = n_documents = 0
    start = time.perf_counter()
    with (
        open(directory / "tokens.bin", "wb") as tokens_f,
        open(directory / "sentence_offsets.bin", "wb") as sent_f,
        open(directory / "document_offsets.bin", "wb") as doc_f,
    ):
        np.zeros(1, np.int64).tofile(sent_f)
        np.zeros(1, np.int64).tofile(doc_f)

        def flush(chunk: list[Document]) -> None:
            nonlocal n_tokens, n_sentences, n_documents
            ids = encode_sentences(tokenizer, [s for doc in chunk for s in doc])
            lengths, doc_ends, flat, i = [], [], [], 0
            for doc in chunk:
                kept = 0
                for sentence in ids[i : i + len(doc)]:
                    if sentence:  # a sentence of characters the tokenizer drops entirely
                        flat.extend(sentence)
                        lengths.append(len(sentence))
                        kept += 1
                i += len(doc)
                if kept:
                    doc_ends.append(n_sentences + len(lengths))
            np.asarray(flat, dtype=dtype).tofile(tokens_f)
            (n_tokens + np.cumsum(lengths, dtype=np.int64)).tofile(sent_f)
            np.asarray(doc_ends, dtype=np.int64).tofile(doc_f)
            n_tokens += len(flat)
            n_sentences += len(lengths)
            n_documents += len(doc_ends)
            say(
                f"prepare: {directory.name}: {n_documents:,} documents, {n_sentences:,} sentences, "
                f"{n_tokens:,} tokens ({time.perf_counter() - start:.0f} s)"
            )

        chunk: list[Document] = []
        in_chunk = 0
        for document in documents:
            chunk.append(document)
            in_chunk += len(document)
            if in_chunk >= CHUNK_SENTENCES:
                flush(chunk)
                chunk, in_chunk = [], 0
        if chunk:
            flush(chunk)
    if n_documents < 2:
        raise NanobertError(
            f"the {directory.name} split has {n_documents} non-empty documents; NSP needs at least two "
            "(separate documents by a blank line or a ' = Title = ' heading)"
        )
    return {"documents": n_documents, "sentences": n_sentences, "tokens": n_tokens}


def _tokenizer(
    train: Callable[[], Iterator[Document]],
    tokenizer_dir: str | Path | None,
    vocab_size: int,
    min_frequency: int,
    sample_words: int,
    say: Callable[[str], None],
) -> tuple[Any, str]:
    """The corpus's tokenizer and how it was made: loaded from `tokenizer_dir`, or trained on the documents
    holding the first `sample_words` words of the training split."""
    if tokenizer_dir is not None:
        return load_tokenizer(tokenizer_dir), f"loaded from {tokenizer_dir}"
    sample = _sample_sentences(train(), sample_words)
    say(f"prepare: training a {vocab_size}-piece tokenizer on {len(sample):,} sentences")
    tokenizer = train_tokenizer(sample, vocab_size=vocab_size, min_frequency=min_frequency)
    return tokenizer, f"trained on the first {sample_words:,} words of the training split"


def _checked_out_dir(out_dir: Path, overwrite: bool, data: str, valid: str | None) -> Path:
    """`out_dir`, resolved, if a prepared corpus may be written there: new, or with `overwrite` an earlier
    prepared corpus, and never the text it reads."""
    if out_dir.exists() and not overwrite:
        raise NanobertError(
            f"{out_dir} already exists; pass --overwrite to replace it or choose another --out"
        )
    # The tokenizer may come from out_dir itself (it is read before out_dir is replaced); the text may not.
    inputs = [p for p in (data, valid) if p is not None and Path(p).exists()]
    return check_output_dir(
        out_dir, overwrite, inputs, META_NAME, "prepared corpus", holds_prepared_corpus
    ).resolve()


def prepare_corpus(
    data: str,
    out_dir: str | Path,
    *,
    valid: str | None = None,
    tokenizer_dir: str | Path | None = None,
    vocab_size: int = 8192,
    min_frequency: int = 2,
    sample_words: int = DEFAULT_SAMPLE_WORDS,
    overwrite: bool = False,
    quiet: bool = False,
) -> dict[str, Any]:
    """Tokenize `data` (a text file, a WikiText directory, 'toy' or a WikiText hub name) into `out_dir`.

    The tokenizer comes from `tokenizer_dir`, or is trained (`vocab_size`, `min_frequency`) on the documents
    holding the first `sample_words` words of the training split. `valid` adds a held-out split from a text
    file (a WikiText directory brings its own). The directory appears only when complete (it is written
    beside it and renamed). Returns the contents of meta.json.
    """
    out_dir = _checked_out_dir(Path(out_dir), overwrite, data, valid)
    if sample_words < 1:
        raise NanobertError(f"--tokenizer-sample-words must be at least 1, got {sample_words}")
    if tokenizer_dir is None:  # before reading a sample that may be millions of words
        check_tokenizer_options(vocab_size, min_frequency)
    remove_stale_temporaries(out_dir)  # left by a prepare that was killed
    readers = _split_readers(data, valid)

    def say(text: str) -> None:
        if not quiet:
            print(text, file=sys.stderr, flush=True)

    start = time.perf_counter()
    tokenizer, tokenizer_note = _tokenizer(
        readers["train"], tokenizer_dir, vocab_size, min_frequency, sample_words, say
    )
    dtype = _token_dtype(tokenizer.get_vocab_size())

    meta: dict[str, Any] = {}

    def write(tmp: Path) -> None:  # into a temporary directory that replaces out_dir once whole
        save_tokenizer(tokenizer, tmp)
        splits = {
            name: _write_split(read(), tokenizer, tmp / name, dtype, say) for name, read in readers.items()
        }
        meta.update(
            format=FORMAT,
            version=VERSION,
            dtype=dtype.name,
            vocab_size=tokenizer.get_vocab_size(),
            source={"data": data, "valid": valid},
            tokenizer=tokenizer_note,
            splits=splits,
            seconds=round(time.perf_counter() - start, 1),
        )
        (tmp / META_NAME).write_text(json.dumps(meta, indent=2) + "\n")

    write_atomically(out_dir, write)  # as checkpoints: a full disk or a kill keeps the old corpus whole
    return meta
