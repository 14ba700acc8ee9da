"""How the weights start, beyond BERT's normal(0, 0.02), and the one constraint a recipe keeps on them.

BERT starts every weight as noise (`model.init_weights`). A small model on a laptop's budget spends its first
thousand steps finding what a better start can hand it, so the recipes start three things differently, each
a `ModelConfig` field that defaults to BERT's own choice:

- `position_embedding_init="sinusoidal"` (`sinusoidal_init`): the learned position table starts as
  Vaswani et al.'s sines and cosines, so "the next word" is one direction from step 0;
- `attention_init="mimetic"` (`mimetic_init`): each key projection starts as a copy of its query projection
  (Trockman & Kolter 2023), so attention starts on a token's neighbours instead of uniform;
- `attention_init="roles"` (`roles_init`): mimetic with a role per head, half reading where a token is and
  half what it is (`what_heads`), so a word attends to its copy in the other sentence from step 0.

`keep_roles` is the constraint: while pretraining, the "what" heads' query and key rows and the "what" half
of the position, segment, [CLS] and [MASK] rows stay as they started (no gradient, no weight decay), so
masked-word prediction cannot erode that match (`TrainConfig.keep_roles`, on in the recipes). Each
choice's evidence is a record under benchmarks/records/, named where the recipe sets it
(`pretraining/recipes.py`).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from nanobert.config import ModelConfig
from nanobert.errors import NanobertError
from nanobert.tokenizer import CLS_ID, MASK_ID


def what_heads(config: ModelConfig) -> range:
    """The heads that read what a token is under `attention_init="roles"`: the last ceil(nh / 2).

    The first nh // 2 heads read where it is; with an odd head count the extra head reads words. Each head h
    owns rows h * hd .. (h + 1) * hd of the query (and of the key) projection, so these heads' rows are
    `what_rows(config)`.
    """
    return range(config.num_attention_heads // 2, config.num_attention_heads)


def what_rows(config: ModelConfig) -> slice:
    """The query projection rows of the "what" heads (add hidden_size for the key projection's rows)."""
    head_dim = config.hidden_size // config.num_attention_heads
    heads = what_heads(config)
    return slice(heads.start * head_dim, heads.stop * head_dim)


@torch.no_grad()
def sinusoidal_init(table: torch.Tensor, std: float) -> None:
    """Fill a (positions, H) table with sines and cosines of geometrically spaced frequencies (Vaswani et
    al., 2017), scaled so its entries have spread `std`, like the normal init they replace.

    Position p + k is a fixed rotation of position p in each (sin, cos) pair, so one query/key matrix can
    score "k tokens away" at every position; random rows would each have to learn it.
    """
    positions, hidden = table.shape
    p = torch.arange(positions, dtype=torch.float32)[:, None]  # (P, 1)
    freq = torch.exp(-math.log(10000.0) * torch.arange(0, hidden, 2, dtype=torch.float32) / hidden)  # (H/2,)
    angles = p * freq  # (P, H/2 rounded up): one per sine column; an odd H leaves the last without a cosine
    table[:, 0::2] = torch.sin(angles)
    table[:, 1::2] = torch.cos(angles[:, : hidden // 2])
    table.mul_(std * math.sqrt(2.0))  # a sine over many periods has standard deviation 1/sqrt(2)


@torch.no_grad()
def mimetic_init(qkv: nn.Linear, num_heads: int, self_score: float) -> None:
    """Start the key projection as a copy of the query projection (Trockman & Kolter 2023), so that q_i . k_j
    = x_i W_q^T W_q x_j scores how alike tokens i and j are, and a token's score with itself (its inputs
    LayerNorm'ed to unit spread) averages `self_score` after the 1 / sqrt(head size) scaling.

    With sinusoidal position rows, the tokens most alike are a token and its neighbours: attention starts
    local, where random weights start it uniform and take the frequent-words plateau to find the neighbours.
    """
    H = qkv.in_features
    head_dim = H // num_heads
    # q_i . q_i over a head: head_dim * H * std^2 for unit-spread inputs, then / sqrt(head_dim)
    std = math.sqrt(self_score / (math.sqrt(head_dim) * H))
    w_q = torch.randn(H, H, device=qkv.weight.device) * std  # (H out, H in), the heads side by side
    qkv.weight[:H] = w_q
    qkv.weight[H : 2 * H] = w_q


@torch.no_grad()
def roles_init(embeddings: nn.Module, layers: nn.ModuleList, config: ModelConfig) -> None:
    """Mimetic attention with a role per head: the "where" heads read only where a token is, the "what"
    heads (`what_heads`) only what it is.

    The position and segment rows start in the first half of the dimensions (the token rows fill all), and
    each head's query (= key) projection reads one half: a "where" head scores positions, so it attends to
    the neighbours as `mimetic_init` does; a "what" head scores the token rows alone, so from step 0 a word
    attends to itself and to the same word anywhere in the pair, the lexical overlap that tells two
    sentences of one text from two of different texts, and what fine-tuning on sentence pairs reads. Each
    head's scale is set from its half's spread after the first LayerNorm, so that a token's score with
    itself averages `mimetic_score`.

    `[CLS]` and `[MASK]` name no word, so their token rows start blank in the second half: the "what" heads
    give them no word to match (else a `[MASK]` would attend to every other `[MASK]`, a third of the
    recipe's tokens).
    """
    H, nh, r = config.hidden_size, config.num_attention_heads, config.initializer_range
    half, head_dim, what = H // 2, H // nh, what_heads(config)
    for table in (embeddings.position_embeddings.weight, embeddings.token_type_embeddings.weight):
        table[:, half:] = 0.0
    embeddings.word_embeddings.weight[[CLS_ID, MASK_ID], half:] = 0.0  # no word: nothing for "what" to read
    # Variance per dimension before the LayerNorm: token r^2 everywhere; position (r x scale)^2 and segment
    # r^2 in the first half only. The LayerNorm divides by the mean of the two halves.
    where_var = r**2 * (2.0 + config.position_embedding_scale**2)
    what_var = r**2
    mean_var = (where_var + what_var) / 2
    for layer in layers:
        qkv = layer.attention.qkv
        w_q = torch.zeros(H, H, device=qkv.weight.device)
        for h in range(nh):
            cols = slice(half, H) if h in what else slice(0, half)
            var = (what_var if h in what else where_var) / mean_var  # the half's spread after the LayerNorm
            # q_i . q_i over a head: head_dim * half * std^2 * var, then / sqrt(head_dim)
            std = math.sqrt(config.mimetic_score / (math.sqrt(head_dim) * half * var))
            rows = slice(h * head_dim, (h + 1) * head_dim)
            w_q[rows, cols] = torch.randn(head_dim, half, device=qkv.weight.device) * std
        qkv.weight[:H] = w_q
        qkv.weight[H : 2 * H] = w_q


def init_starts(model: nn.Module) -> None:
    """Apply the config's starts to a model BERT's init has just filled (`BertPreTrainedModel.post_init`)."""
    config, bert = model.config, model.bert
    table = bert.embeddings.position_embeddings.weight
    if config.position_embedding_init == "sinusoidal":
        sinusoidal_init(table, config.initializer_range)
    with torch.no_grad():
        table.mul_(config.position_embedding_scale)  # either init; x 1.0 leaves BERT's exactly
    if config.attention_init == "mimetic":
        for layer in bert.layers:
            mimetic_init(layer.attention.qkv, config.num_attention_heads, config.mimetic_score)
    if config.attention_init == "roles":
        roles_init(bert.embeddings, bert.layers, config)


def check_keep_roles(config: ModelConfig) -> None:
    """A NanobertError unless `config` has the roles start keep_roles keeps (called before any work)."""
    if config.attention_init != "roles":
        raise NanobertError(
            f"keep_roles needs the roles start (attention_init 'roles'), not {config.attention_init!r}; "
            "set keep_roles=false or attention_init=roles"
        )


def kept_entries(model: nn.Module) -> list[tuple[nn.Parameter, tuple]]:
    """What keep_roles holds, as (parameter, index) pairs: the "what" heads' query and key rows (weights and
    biases) in every layer, the "what" half of the position and segment rows, and of the [CLS] and [MASK]
    token rows, which the roles start leaves blank (`roles_init`)."""
    config, bert = model.config, model.bert
    H, rows, half = config.hidden_size, what_rows(config), slice(config.hidden_size // 2, None)
    key_rows = slice(H + rows.start, H + rows.stop)
    emb = bert.embeddings
    entries = [(emb.position_embeddings.weight, (slice(None), half)),
               (emb.token_type_embeddings.weight, (slice(None), half)),
               (emb.word_embeddings.weight, ([CLS_ID, MASK_ID], half))]  # fmt: skip
    for layer in bert.layers:
        qkv = layer.attention.qkv
        entries += [
            (qkv.weight, (rows,)),
            (qkv.weight, (key_rows,)),
            (qkv.bias, (rows,)),
            (qkv.bias, (key_rows,)),
        ]
    return entries


def keep_roles(model: nn.Module, optimizer: torch.optim.Optimizer | None = None) -> list:
    """Pretrain with the roles start's word match kept (`kept_entries`): those entries get no gradient, and,
    given the `optimizer`, are put back as they were after each of its steps, so weight decay does not shrink
    them either. Returns the hooks' handles.

    Why: masked-word prediction pays a head for attending to the word itself, and the positions give a word
    and its copy different inputs, so without the constraint the "what" heads drift from "the same word in
    the other sentence" to "this word" within a few thousand steps, and fine-tuning on sentence pairs then
    does worse than from the untrained start (record 2026-12-04-pair-kept). AdamW's decay alone shrank the
    kept rows to 0.948 of their size over a 6,900-step continuation, softening the match the longer a run
    trained; the [CLS] and [MASK] rows' blank half kept [MASK] from matching [MASK] only at the start. Every
    other weight trains; fine-tuning trains these too.
    """
    check_keep_roles(model.config)
    entries = kept_entries(model)
    masks: dict[nn.Parameter, torch.Tensor] = {}
    for param, index in entries:  # one mask per parameter, built once, not on every backward
        mask = masks.setdefault(param, torch.zeros_like(param, dtype=torch.bool))
        mask[index] = True
    handles = [param.register_hook(lambda grad, mask=mask: grad.masked_fill(mask, 0.0))
               for param, mask in masks.items()]  # fmt: skip
    if optimizer is not None:
        kept = [(param, index, param.detach()[index].clone()) for param, index in entries]

        @torch.no_grad()
        def put_back(*_) -> None:
            for param, index, values in kept:
                param[index] = values

        handles.append(optimizer.register_step_post_hook(put_back))
    return handles


__all__ = [
    "check_keep_roles",
    "init_starts",
    "keep_roles",
    "kept_entries",
    "mimetic_init",
    "roles_init",
    "sinusoidal_init",
    "what_heads",
    "what_rows",
]
