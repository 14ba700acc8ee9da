"""Property tests of the whole data path on arbitrary Unicode text.

text file -> documents (read whole, and streamed) -> a trained WordPiece tokenizer -> token ids -> NSP
instances (in memory, and windowed from a prepared corpus) -> the masking collator. Whatever the text, the
path either raises NanobertError (too little text for a tokenizer or for two documents) or yields batches
where no sequence exceeds max_seq_len, no special token is ever chosen for prediction, and labels appear
exactly where the model must predict (the input differs from the original only there).
"""

import tempfile
from pathlib import Path

import torch
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from nanobert.config import TrainConfig
from nanobert.data.corpus import read_text_file
from nanobert.data.masking import MaskingCollator
from nanobert.data.nsp import create_instances
from nanobert.data.prepare import iter_documents, prepare_corpus
from nanobert.data.shards import PreparedCorpus, WindowedInstances
from nanobert.errors import NanobertError
from nanobert.tokenizer import (
    IGNORE_INDEX,
    NUM_SPECIAL_TOKENS,
    encode_documents,
    save_tokenizer,
    train_tokenizer,
)

SLOW = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Everything UTF-8 can encode but NUL, which makes a file look binary (tested in test_cli.py).
CHARS = st.characters(codec="utf-8", exclude_categories=("Cs",), exclude_characters="\x00")
WORDS = st.text(alphabet=CHARS, min_size=1, max_size=12)
SENTENCE = st.lists(WORDS, min_size=1, max_size=12).map(lambda w: " ".join(w) + " .")
PARAGRAPH = st.one_of(
    st.text(alphabet=CHARS, max_size=120),  # anything at all, control characters and odd scripts included
    st.lists(SENTENCE, min_size=1, max_size=5).map(" ".join),
    st.sampled_from(["", "   ", " = = Section = = ", "[MASK] [CLS] <unk> [SEP] ."]),
)
DOCUMENT = st.lists(PARAGRAPH, min_size=1, max_size=5).map("\n".join)


@st.composite
def corpora(draw) -> str:
    """Documents separated by blank lines or by ` = Title = ` headings."""
    documents = draw(st.lists(DOCUMENT, min_size=2, max_size=8))
    titled = draw(st.booleans())
    text = "".join((f" = Title {i} = \n" if titled else "\n\n") + d for i, d in enumerate(documents))
    return text


def original_ids(instances, width: int) -> torch.Tensor:
    ids = torch.zeros(len(instances), width, dtype=torch.long)
    for row, inst in enumerate(instances):
        ids[row, : len(inst.input_ids)] = torch.tensor(inst.input_ids)
    return ids


def check_batch(collator: MaskingCollator, instances, max_seq_len: int) -> None:
    for inst in instances:
        assert len(inst.input_ids) <= max_seq_len
    batch = collator(instances)
    assert batch["input_ids"].shape[1] <= max_seq_len
    original = original_ids(instances, batch["input_ids"].shape[1])
    labelled = batch["labels"] != IGNORE_INDEX
    assert not (labelled & (original < NUM_SPECIAL_TOKENS)).any()  # never a special token (nor padding)
    assert torch.equal(batch["labels"][labelled], original[labelled])  # labels are the original ids
    assert not ((batch["input_ids"] != original) & ~labelled).any()  # changed only where labelled


@SLOW
@given(text=corpora(), max_seq_len=st.integers(8, 40), seed=st.integers(0, 2**16))
def test_the_data_path_never_crashes_and_keeps_its_invariants(text, max_seq_len, seed):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "corpus.txt"
        path.write_text(text, encoding="utf-8")
        documents = read_text_file(path)
        assert list(iter_documents(path)) == documents  # the streaming reader agrees
        try:
            tokenizer = train_tokenizer((s for d in documents for s in d), vocab_size=40, min_frequency=1)
            vocab_size = tokenizer.get_vocab_size()
            collator = MaskingCollator(vocab_size, seed=seed, pad_to_multiple_of=None)
            tokenized = encode_documents(tokenizer, documents)
            instances = create_instances(tokenized, max_seq_len, seed=seed)
        except NanobertError as e:
            event(f"stopped: {str(e)[:30]}")
            return  # too little text for a tokenizer, an alphabet, or two documents
        event("reached the collator")
        for start in range(0, len(instances), 16):
            check_batch(collator, instances[start : start + 16], max_seq_len)

        # The same corpus through `nanobert prepare` and the windowed instance stream.
        save_tokenizer(tokenizer, Path(tmp) / "tok")
        prepare_corpus(str(path), Path(tmp) / "prep", tokenizer_dir=Path(tmp) / "tok", quiet=True)
        split = PreparedCorpus(Path(tmp) / "prep").split("train")
        assert list(split) == [d for d in ([s for s in doc if s] for doc in tokenized) if d]
        cfg = TrainConfig(max_seq_len=max_seq_len, batch_size=16, seed=seed)
        source = WindowedInstances(split, cfg, window_tokens=50)
        for window in range(source.num_windows(0)):
            for batch in source.batches(0, window):
                check_batch(collator, batch, max_seq_len)
