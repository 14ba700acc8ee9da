"""Where a pretraining run's text comes from, and the one rule that decides its held-out split.

`DataSources` is recorded in every checkpoint's config.json. Pretraining asks it for the training documents
and the held-out ones; `nanobert evaluate` asks it again for the held-out ones alone, so a checkpoint is
always scored on the split its run held out:

- `--valid FILE`: that file;
- `--data toy`: the toy corpus itself (a memorisation demo);
- a WikiText name on the hub, or a directory of WikiText files: its validation split;
- `--prepared DIR`: its valid split (tokenized by `nanobert prepare`), unless `--valid FILE` is given;
- one text file (`--data FILE` or `--train FILE`) and nothing else: its last 10% of documents (at least 2),
  or, for fewer than six documents, the training data itself, said so in the note.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nanobert.data.corpus import WIKITEXT_HF_NAMES, Document, load_documents
from nanobert.data.shards import PreparedCorpus
from nanobert.errors import NanobertError
from nanobert.tokenizer import encode_documents

DEFAULT_DATA = "wikitext-2-raw-v1"
MIN_DOCUMENTS_TO_SPLIT = 6  # below this a single file is too small to hold any of it out


@dataclass
class DataSources:
    """Where the train and held-out documents come from (recorded in every checkpoint's config.json)."""

    data: str | None = DEFAULT_DATA
    train_file: str | None = None
    valid_file: str | None = None
    prepared: str | None = None  # a directory written by `nanobert prepare` (then data/train_file are unused)

    @classmethod
    def for_new_run(
        cls,
        data: str | None = None,
        train_file: str | None = None,
        valid_file: str | None = None,
        prepared: str | None = None,
    ) -> DataSources:
        """The sources a new run names (on the command line); naming none at all means `DEFAULT_DATA`."""
        if prepared and (data or train_file):
            raise NanobertError("--prepared replaces --data and --train; pass only one of them")
        if data is None and train_file is None and prepared is None:
            data = DEFAULT_DATA
        return cls(data, train_file, valid_file, prepared)

    def documents(self, with_train: bool = True) -> tuple[list[Document], list[Document], str]:
        """(train documents, held-out documents, a note on where the held-out split came from).

        `with_train=False` skips loading training documents the held-out split does not depend on (the
        train list is then empty).
        """
        train_src = self.train_file or self.data
        if train_src is None and (with_train or not self.valid_file):
            raise NanobertError("no data given: pass --data NAME|DIR|FILE, --train FILE or --valid FILE")
        if self.valid_file:
            train = load_documents(train_src, split="train") if with_train else []
            return train, load_documents(self.valid_file, split="valid"), f"held out: {self.valid_file}"
        source = self.data if not self.train_file else None
        if source == "toy":
            train = load_documents("toy")
            return train, train, "held out: the toy corpus itself (a memorisation demo)"
        if source is not None and (source in WIKITEXT_HF_NAMES or Path(source).is_dir()):
            train = load_documents(source, split="train") if with_train else []
            return train, load_documents(source, split="valid"), f"held out: the validation split of {source}"
        # A single file and no --valid: hold out its last documents, so the numbers are not training loss.
        train = load_documents(train_src, split="train")
        if len(train) >= MIN_DOCUMENTS_TO_SPLIT:
            n = max(2, len(train) // 10)
            return train[:-n], train[-n:], f"held out: the last {n} documents of {train_src} (pass --valid)"
        return (
            train,
            train,
            f"held out: none given and {train_src} is too small to split, so the TRAINING data",
        )

    def prepared_corpus(self) -> PreparedCorpus | None:
        return PreparedCorpus(self.prepared) if self.prepared else None

    def held_out(self, tokenizer: Any) -> tuple[list[list[list[int]]], str]:
        """The held-out documents as token ids (sentence by sentence), and a note on where they came from."""
        prepared = self.prepared_corpus()
        if prepared is None or self.valid_file:
            _, held, note = self.documents(with_train=False)
            return encode_documents(tokenizer, held), note
        if not prepared.has_split("valid"):
            raise NanobertError(
                f"{self.prepared} has no valid split; pass --valid FILE (to pretrain, evaluate or prepare)"
            )
        if tokenizer.get_vocab() != prepared.tokenizer().get_vocab():  # its ids would mean other words
            raise NanobertError(
                f"{self.prepared} was prepared with another tokenizer than the model's (prepared again?); "
                "pass --valid FILE, or prepare it with --tokenizer CHECKPOINT"
            )
        return list(prepared.split("valid")), f"held out: the valid split of {self.prepared}"


__all__ = ["DEFAULT_DATA", "DataSources"]
