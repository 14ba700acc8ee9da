"""What a pretraining objective is: the record (`Objective`) holding everything that differs between two.

`mlm_nsp` (Devlin et al. 2019): masked words and next sentence, both sides of every word visible.
`causal` (Radford et al. 2018): the next word, each token seeing only the tokens before it (the model's
`is_decoder` flag makes the attention causal). `hybrid` (Charpentier & Samuel 2024): both, on one head, with
the masked prediction shifted by one. Everything else, the data sources, tokenizer, training loop,
checkpoints, resume and DDP, is shared. An `Objective` carries what is not: the model class and the checkpoint
kind it writes, how an in-memory corpus (`data.streams`) or a prepared one (`data.shards`) becomes batches of
instances, the collator, the fixed held-out batches and their metrics, the sample batch that times the
precisions, and the loss. Each objective is one file (mlm_nsp.py, causal.py, hybrid.py) ending in its
record; registry.py lists them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from tokenizers import Tokenizer

from nanobert.checkpoints.kinds import KINDS
from nanobert.config import ModelConfig, TrainConfig
from nanobert.data.shards import PreparedSplit, WindowedInstances
from nanobert.data.streams import BatchStream, CorpusInstances
from nanobert.tokenizer import CLS_ID, NUM_SPECIAL_TOKENS


@dataclass(frozen=True)
class Objective:
    """Everything that differs between two pretraining tasks; the rest (data sources, tokenizer, loop,
    checkpoints, resume, DDP) is shared. Each callable's contract is that of the MLM + NSP one
    (mlm_nsp.py)."""

    name: str
    kind: str  # the checkpoint kind it writes: its model class and commands (kinds.KINDS)
    is_decoder: bool  # the model config's flag: causal attention
    loss: Callable[[torch.nn.Module, dict], dict[str, torch.Tensor]]
    metric: str  # the held-out metric that picks best/
    higher_is_better: bool
    tiebreak: Callable[[dict[str, float]], float] | None  # the held-out loss that settles ties of `metric`
    metric_keys: tuple[str, ...]  # what `metrics` returns
    metrics: Callable[..., dict[str, float]]  # (model, held-out batches, device, autocast dtype)
    held_out: Callable[..., list[dict[str, torch.Tensor]]]  # (documents, seq_len, batch, vocab, eval_seed)
    collator: Callable[[TrainConfig, Tokenizer, int], Any]
    sample: Callable[[TrainConfig, int], dict[str, torch.Tensor]]
    corpus_batches: Callable[..., list]  # an in-memory corpus's epoch in batches of instances (streams.py)
    check_corpus: Callable[[list, TrainConfig], None]  # refuses a corpus that gives no batch, at once
    window_batches: Callable[..., list]  # a prepared corpus's window in batches of instances (shards.py)
    check_windows: Callable[[WindowedInstances], None] | None  # likewise for a prepared split
    layout: Callable[[dict], dict] | None  # added to each sharded batch (the last layer's pruning)
    check_model: Callable[[ModelConfig], None]  # what the objective needs of the model's shape

    @property
    def model(self) -> type:
        """The model class it trains (its checkpoint kind's)."""
        return KINDS[self.kind].model

    @property
    def commands(self) -> tuple[str, ...]:
        """The commands that take the checkpoints it writes."""
        return KINDS[self.kind].commands

    def source(self, data: list | PreparedSplit, cfg: TrainConfig) -> CorpusInstances | WindowedInstances:
        """What a batch stream walks for this objective: a tokenized corpus in memory, or a prepared split."""
        if isinstance(data, list):
            return CorpusInstances(data, cfg, self.corpus_batches, self.check_corpus)
        return WindowedInstances(data, cfg, window_batches=self.window_batches, check=self.check_windows)

    def stream(
        self, data: list | PreparedSplit | Any, cfg: TrainConfig, collator: Any, rank: int = 0, world: int = 1
    ) -> BatchStream:
        """Endless training batches of this objective (`data` as for `source`, or a source already built)."""
        source = self.source(data, cfg) if isinstance(data, list | PreparedSplit) else data
        return BatchStream(source, cfg, collator, rank, world, layout=self.layout)


def random_ids(cfg: TrainConfig, vocab_size: int) -> tuple[torch.Tensor, torch.Generator]:
    """A (batch_size, max_seq_len) batch of random tokens after [CLS], and the generator that drew them."""
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(NUM_SPECIAL_TOKENS, vocab_size, (cfg.batch_size, cfg.max_seq_len), generator=g)
    ids[:, 0] = CLS_ID
    return ids, g


__all__ = ["Objective", "random_ids"]
