"""Pretraining documents from WikiText (Hugging Face `datasets` or local files), any text file, or a toy.

A document is a list of sentence strings in reading order. Next-sentence prediction needs both levels: it
pairs consecutive sentences from one document against a sentence from another, so the input is "one
sentence per line, blank line between documents", as in google-research/bert `create_pretraining_data.py`.

WikiText (Merity et al., 2016) stores one paragraph per line, articles under ` = Title = ` lines and
sections under ` = = Section = = ` lines, with the `.tokens` variants tokenized so that punctuation is
surrounded by spaces and numbers use the joiners `@-@`, `@,@` and `@.@` (` 1 @.@ 5 ` is 1.5). Everything
here is pure and reads a file only when asked to.
"""

from __future__ import annotations

import os
import re
import socket
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from nanobert.errors import NanobertError

__all__ = [
    "WIKITEXT_HF_NAMES",
    "Document",
    "documents_from_hf",
    "documents_from_lines",
    "find_wikitext_file",
    "hub_reachable",
    "load_documents",
    "load_hf_wikitext",
    "read_text_file",
    "split_sentences",
    "toy_documents",
    "utf8_lines",
]

Document = list[str]  # one article / document: its sentences, in order

# The configurations of the `wikitext` dataset on the Hugging Face hub.
WIKITEXT_HF_NAMES = ("wikitext-2-raw-v1", "wikitext-2-v1", "wikitext-103-raw-v1", "wikitext-103-v1")

# Our split names are WikiText's file names (wiki.valid.tokens); the hub calls the middle one "validation".
_SPLITS = {"train": "train", "valid": "valid", "validation": "valid", "test": "test"}
_HF_SPLITS = {"train": "train", "valid": "validation", "test": "test"}

# ` = Title = ` is level 1, ` = = Section = = ` level 2, and so on; both sides must have the same count.
_HEADING = re.compile(r"(=(?: =)*) (.+?) (=(?: =)*)")

# Abbreviations after which a period never ends a sentence, because a name or a noun always follows.
# ("etc." or "Inc." can end one; they are handled by the "next word is lowercase" rule instead.)
_ABBREVIATIONS = frozenset(
    "mr mrs ms dr prof sr jr st mt ft gen col lt sgt capt cmdr adm gov sen rep rev hon pres "
    "fig figs no nos vol vols pp ch sec art vs cf e.g i.e approx ca al var sp spp subsp".split()
)
_TERMINAL = ".?!"
# Characters that close a quotation or a bracket and so belong to the sentence they end.
_CLOSERS = "\"')]}\u2019\u201d\u00bb"
_OPENERS = "\"'([{\u2018\u201c\u00ab"
_INITIALS = re.compile(r"(?:[A-Za-z]\.)*[A-Za-z]")  # "J", "J.R.R", "U.S", "e.g" once the last "." is off


def _ends_sentence(previous: str, token: str, next_token: str) -> bool:
    """Whether a sentence ends after `token`, given its neighbours (see `split_sentences`)."""
    next_is_lower = next_token.lstrip(_OPENERS)[:1].islower()
    if all(ch in _TERMINAL for ch in token):
        # An ellipsis that opens a quotation (`" ... evokes`) or runs on (`waited ... and`) continues the
        # sentence; a spaced `.` always ends one.
        return len(token) == 1 or not (next_is_lower or (previous and previous in _OPENERS))
    core = token.rstrip(_CLOSERS)
    if not core or core[-1] not in _TERMINAL:
        return False
    if core[-1] in "?!":
        return True
    stem = core.rstrip(".").lstrip(_OPENERS)
    if stem.lower() in _ABBREVIATIONS or _INITIALS.fullmatch(stem):
        return False
    # A period and then a lowercase word is an abbreviation we do not know, not a sentence end.
    return not next_is_lower


def split_sentences(paragraph: str) -> list[str]:
    """Split one paragraph into sentences, stripped, with empty ones dropped.

    The rule, applied to whitespace-separated tokens: a sentence ends after a token made only of `.`, `?`
    or `!` (WikiText's spaced punctuation: ` . `; an ellipsis `...` only if no lowercase word follows and
    no quote or bracket precedes), or
    after a word ending in `?` or `!`, or after a word ending in `.` that is not a known abbreviation
    (`Mr.`, `Dr.`, `e.g.`), not an initial or dotted abbreviation (`J.`, `R.`, `U.S.`) and not followed
    by a lowercase word. Decimals (`3.5`) and WikiText's joiners (`@.@`, `@,@`, `@-@`) never end a
    sentence because their `.` is not at the end of a token. Closing brackets, and a `"` that closes an
    open quotation, stay with the sentence they follow; a piece with no letter or digit (a stray `"` or
    `.`) joins the sentence before it. Runs of whitespace become single spaces.
    """
    tokens = paragraph.split()
    sentences: list[str] = []
    current: list[str] = []
    quotes = 0  # WikiText's `"` is its own token; an odd count so far means a quotation is open
    i = 0
    while i < len(tokens):
        token = tokens[i]
        current.append(token)
        quotes += token.count('"')
        i += 1
        if i < len(tokens) and _ends_sentence(tokens[i - 2] if i > 1 else "", token, tokens[i]):
            # Pull in what closes the sentence: `)` or, when a quotation is open, its closing `"`.
            while i < len(tokens) and all(ch in _CLOSERS for ch in tokens[i]):
                if tokens[i] == '"' and quotes % 2 == 0:
                    break  # an opening quote: it starts the next sentence
                current.append(tokens[i])
                quotes += tokens[i].count('"')
                i += 1
            sentences.append(" ".join(current))
            current = []
    if current:
        sentences.append(" ".join(current))
    # A sentence of punctuation only (`" .` left by unbalanced quotes) is a tail of the one before it.
    merged: list[str] = []
    for sentence in sentences:
        if merged and not any(ch.isalnum() for ch in sentence):
            merged[-1] += " " + sentence
        else:
            merged.append(sentence)
    return merged


def _heading_level(line: str) -> int:
    """1 for ` = Title = `, 2 for ` = = Section = = `, ...; 0 for a line that is not a heading."""
    match = _HEADING.fullmatch(line.strip())
    if match is None or match.group(1) != match.group(3):
        return 0
    return match.group(1).count("=")


def documents_from_lines(lines: Iterable[str]) -> list[Document]:
    """Group paragraph lines into documents of sentences; empty documents are dropped.

    One rule serves WikiText and plain text: a top-level heading line (` = Title = `) starts a new document;
    if there is no top-level heading anywhere, a run of blank lines starts a new document instead.
    Section headings (` = = X = = ` and deeper) are dropped, as are the titles themselves. Each other line
    is a paragraph, split with `split_sentences`; WikiText's `<unk>` becomes `[UNK]`, the tokenizer's
    special token. Streams `lines` once, so a large file is never held twice.
    """
    # Blocks are the pieces between blank-line runs or headings; `starts_article` marks those opened by a
    # title. Which boundaries count is only known at the end, when we know whether any title appeared.
    blocks: list[Document] = []
    starts_article: list[bool] = []
    new_block, new_article, saw_title = True, False, False
    for line in lines:
        if not line.strip():
            new_block = True
            continue
        level = _heading_level(line)
        if level == 1:
            new_block, new_article, saw_title = True, True, True
            continue
        if level > 1:
            continue
        if new_block:
            blocks.append([])
            starts_article.append(new_article)
            new_block, new_article = False, False
        blocks[-1].extend(split_sentences(line.replace("<unk>", "[UNK]")))

    if not saw_title:
        return [block for block in blocks if block]
    documents: list[Document] = []
    for block, is_start in zip(blocks, starts_article, strict=True):
        if is_start or not documents:
            documents.append([])
        documents[-1].extend(block)
    return [document for document in documents if document]


def utf8_lines(path: Path) -> Iterator[str]:
    """The lines of `path` decoded as UTF-8, one at a time, without a leading byte-order mark.

    Raises NanobertError at the first line that is not valid UTF-8, naming the byte offset.
    """
    offset = 0
    with path.open("rb") as file:
        for raw in file:  # binary iteration splits on b"\n" only, never on U+2028 inside a paragraph
            line = raw[3:] if offset == 0 and raw.startswith(b"\xef\xbb\xbf") else raw
            try:
                yield line.decode("utf-8")
            except UnicodeDecodeError as exc:
                bad = offset + (len(raw) - len(line)) + exc.start
                raise NanobertError(
                    f"{path} is not valid UTF-8 (byte offset {bad}); convert it first, "
                    f"e.g. `iconv -f latin1 -t utf-8 {path.name} > {path.stem}.utf8{path.suffix}`"
                ) from exc
            offset += len(raw)


def read_text_file(path: str | Path) -> list[Document]:
    """Documents from one UTF-8 text file, one paragraph per line (see `documents_from_lines`).

    A UTF-8 byte-order mark is ignored. Raises NanobertError when the path is missing or a directory, when
    the file looks binary (a NUL byte in its first 8 KiB), or when it is not valid UTF-8 (naming the byte
    offset of the first bad byte). The file is streamed, so WikiText-103 is never in memory twice.
    """
    return documents_from_lines(utf8_lines(check_text_file(path, "or the directory to load_documents")))


def check_text_file(path: str | Path, alternative: str = "") -> Path:
    """`path` as a Path if it is an existing file that does not look binary, else NanobertError.
    `alternative` is added to the advice for a directory."""
    path = Path(path)
    if not path.exists():
        raise NanobertError(f"no such file: {path}; check the path")
    if path.is_dir():
        raise NanobertError(
            f"{path} is a directory; pass a text file{f' ({alternative})' if alternative else ''}"
        )
    with path.open("rb") as file:
        head = file.read(8192)
    # Text never contains NUL; images, archives and checkpoints nearly always do, early on.
    if b"\0" in head:
        raise NanobertError(f"{path} looks like a binary file (it has NUL bytes); pass a UTF-8 text file")
    return path


def documents_from_hf(dataset: Iterable[dict[str, str]]) -> list[Document]:
    """Documents from a Hugging Face `wikitext` split, or any iterable of {"text": line} rows.

    The hub's WikiText keeps the file's line structure, one row per line, so the rules of
    `documents_from_lines` apply unchanged.
    """
    column_names = getattr(dataset, "column_names", None)
    if column_names is None:
        return documents_from_lines(row["text"] for row in dataset)
    if "text" not in column_names:
        raise NanobertError(f"dataset has no 'text' column (it has {column_names}); pass a WikiText dataset")
    # A datasets.Dataset reads a whole batch from Arrow at once, far faster than row by row.
    batches = dataset.iter(batch_size=4096)  # type: ignore[attr-defined]
    return documents_from_lines(line for batch in batches for line in batch["text"])


HUB_PROBE_SECONDS = 3.0  # how long to wait for the hub to answer before treating it as unreachable


def hub_reachable(timeout: float = HUB_PROBE_SECONDS) -> bool:
    """Whether the Hugging Face hub (HF_ENDPOINT, default huggingface.co) accepts a connection now."""
    endpoint = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co"))
    port = endpoint.port or (80 if endpoint.scheme == "http" else 443)
    try:
        socket.create_connection((endpoint.hostname, port), timeout=timeout).close()
    except OSError:
        return False
    return True


@contextmanager
def _offline_mode() -> Iterator[None]:
    """Hugging Face's offline mode for the duration: `datasets` reads only its local cache instead of
    retrying the network for half a minute. Set in the environment (read at import) and in the two config
    modules (read at call time, when they are imported already)."""
    saved_env = os.environ.get("HF_HUB_OFFLINE")
    os.environ["HF_HUB_OFFLINE"] = "1"
    modules = [sys.modules.get(m) for m in ("datasets.config", "huggingface_hub.constants")]
    saved = [getattr(m, "HF_HUB_OFFLINE", None) for m in modules]
    for m in modules:
        if m is not None and hasattr(m, "HF_HUB_OFFLINE"):
            m.HF_HUB_OFFLINE = True
    try:
        yield
    finally:
        if saved_env is None:
            os.environ.pop("HF_HUB_OFFLINE", None)
        else:
            os.environ["HF_HUB_OFFLINE"] = saved_env
        for m, value in zip(modules, saved, strict=True):
            if m is not None and hasattr(m, "HF_HUB_OFFLINE"):
                m.HF_HUB_OFFLINE = value


def load_hf_dataset(path: str, name: str, split: str, advice: str, online: bool | None = None) -> Any:
    """`datasets.load_dataset(path, name, split=split)`, from the hub or, when the hub does not answer within
    `HUB_PROBE_SECONDS`, from the local cache only, so an offline first run fails in seconds, not after the
    network retries. `online`: the answer of a `hub_reachable()` the caller already made (loading many
    configurations probes once). NanobertError when `datasets` is missing or the split cannot be had;
    `advice` names the offline ways forward."""
    online = hub_reachable() if online is None else online
    try:
        with _offline_mode() if not online else nullcontext():
            import datasets

            return datasets.load_dataset(path, name, split=split)
    except ImportError as exc:
        raise NanobertError(
            f"loading {path} from the hub needs the `datasets` package (`pip install nanobert[hf]`); {advice}"
        ) from exc
    except Exception as exc:  # network, hub and cache errors come in many types; all mean "no data"
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        why = f"from the Hugging Face hub ({reason})"
        if not online:
            why = "offline: the Hugging Face hub is unreachable and the local cache does not hold it"
        what = name if path == "wikitext" else f"{path} {name}"  # WikiText's names say what they are
        raise NanobertError(f"could not load {what} split {split} {why}; {advice}") from exc


def load_hf_wikitext(name: str, split: str) -> list[Document]:
    """Download (or take from the local cache) a WikiText split with `datasets` and return its documents.

    `name` is one of `WIKITEXT_HF_NAMES`; `split` is train, valid (or validation) or test. Raises
    NanobertError when `datasets` is not installed or the split cannot be had (`load_hf_dataset`).
    """
    if split not in _SPLITS:
        raise NanobertError(f"unknown split {split!r}; use train, valid or test")
    advice = "pass local files with --train/--valid, or try the built-in corpus with --data toy"
    return documents_from_hf(load_hf_dataset("wikitext", name, _HF_SPLITS[_SPLITS[split]], advice))


def find_wikitext_file(directory: str | Path, split: str) -> Path:
    """The file for `split` (train, valid or test) in a WikiText directory.

    Prefers `wiki.{split}.raw` (untokenized text, closer to what a user will type) over
    `wiki.{split}.tokens`. Raises NanobertError listing the directory's files when neither exists.
    """
    directory = Path(directory)
    if split not in _SPLITS:
        raise NanobertError(f"unknown split {split!r}; use train, valid or test")
    if not directory.is_dir():
        raise NanobertError(f"no such directory: {directory}")
    for suffix in ("raw", "tokens"):
        candidate = directory / f"wiki.{_SPLITS[split]}.{suffix}"
        if candidate.is_file():
            return candidate
    present = sorted(child.name for child in directory.iterdir()) or ["nothing"]
    raise NanobertError(
        f"{directory} has no wiki.{_SPLITS[split]}.raw or wiki.{_SPLITS[split]}.tokens "
        f"(it has: {', '.join(present)}); pass the file itself or a WikiText directory"
    )


# Four short documents, each with its own vocabulary, so that a tiny model can memorise them in seconds
# and still learn next-sentence prediction: a sentence from the wrong document is easy to spot.
_TOY_CORPUS = (
    # Twelve short sentences in four documents with little shared vocabulary, small enough that the `toy`
    # preset memorises them (MLM and NSP) in well under a minute on a laptop CPU.
    (
        "The cat sleeps on the warm mat.",
        "She wakes when the sun comes in.",
        "Then the cat drinks her milk.",
    ),
    (
        "Dark clouds move over the hills.",
        "Cold rain falls all afternoon.",
        "A strong wind bends the trees.",
    ),
    (
        "We cut onions for the soup.",
        "We add tomatoes and fresh basil.",
        "The pot simmers on the stove.",
    ),
    (
        "Our train leaves the city at dawn.",
        "We ride past farms and villages.",
        "At noon we reach the harbour.",
    ),
)


def toy_documents() -> list[Document]:
    """A built-in corpus of four documents of four or five short sentences (a cat, weather, cooking, a trip).

    Returns fresh lists on every call, so callers may modify them. Used by the quick demo and tests.
    """
    return [list(document) for document in _TOY_CORPUS]


def load_documents(source: str | Path, split: str = "train") -> list[Document]:
    """Documents of `split` from `source`, whichever kind of source it is.

    `source` is "toy" (the built-in corpus, the same for every split), one of `WIKITEXT_HF_NAMES`
    (downloaded with `datasets`), a directory holding WikiText files (see `find_wikitext_file`), or a text
    file (see `read_text_file`; `split` is then ignored). Raises NanobertError for anything else, and when
    the result has no documents.
    """
    if split not in _SPLITS:
        raise NanobertError(f"unknown split {split!r}; use train, valid or test")
    name = str(source)
    path = Path(source)
    if name == "toy":
        documents = toy_documents()
    elif name in WIKITEXT_HF_NAMES:
        documents = load_hf_wikitext(name, split)
    elif path.is_dir():
        path = find_wikitext_file(path, split)
        documents = read_text_file(path)
    elif path.is_file():
        documents = read_text_file(path)
    else:
        raise NanobertError(
            f"no such corpus: {name} (expected a file, a directory of WikiText files, 'toy', "
            f"or one of {', '.join(WIKITEXT_HF_NAMES)})"
        )
    if not documents:
        raise NanobertError(f"corpus {name} is empty: it has no sentences; pass a file with text in it")
    return documents
