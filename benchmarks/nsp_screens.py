"""The interventions `nsp_diagnosis.py` screens: starts the model has no option for, a fixed [CLS] attention,
an NSP head on the mean of the tokens, a faster rate for the pooler and the head, and a class-balanced NSP
loss.

Each takes the model (and what it needs) and changes it in place, before the loop's first step.
"""

from __future__ import annotations

import dataclasses

import torch

from nanobert.initialization import what_heads
from nanobert.model import BertForPreTraining
from nanobert.tokenizer import CLS_ID


@torch.no_grad()
def cls_at_the_centre(model: BertForPreTraining, positions: int = 128) -> None:
    """[CLS] (always position 0) starts at the centre of the tokens: its position row the mean of the rows
    of a window's positions, its token row zero, so it looks alike to every token rather than to its
    neighbours, and its attention reads the whole pair."""
    table = model.bert.embeddings.position_embeddings.weight
    table[0] = table[:positions].mean(0)
    model.bert.embeddings.word_embeddings.weight[CLS_ID].zero_()


@torch.no_grad()
def segment_values(model: BertForPreTraining, scale: float = 1.0) -> None:
    """The "what" heads' values start carrying the segment: the first value unit of each "what" head reads
    the difference of the two segment rows (unit length, times `scale`), and the attention output writes
    that unit back along the same direction. A "what" head attends to the token itself and to the same word
    elsewhere in the pair; the value of a copy is the copy's word, indistinguishable from the token's own,
    so what the head found is not written anywhere. With the segment in the value, a token of B that finds
    its words in A gets A's segment in its output, in proportion to the match: the lexical overlap written
    into every B token's state from step 0, for [CLS] (whose blank "what" query averages every token) or a
    mean to read."""
    config, bert = model.config, model.bert
    H, head_dim = config.hidden_size, config.hidden_size // config.num_attention_heads
    diff = bert.embeddings.token_type_embeddings.weight[0] - bert.embeddings.token_type_embeddings.weight[1]
    diff = diff / diff.norm()
    for layer in bert.layers:
        qkv, out = layer.attention.qkv, layer.attention.output
        for h in what_heads(config):
            unit = 2 * H + h * head_dim  # the head's first value row
            qkv.weight[unit] = diff * scale
            qkv.bias[unit] = 0.0
            out.weight[:, h * head_dim] = diff * scale


# Starts the model has no option for; the roles start is `--set attention_init=roles`.
STARTS = {"cls-centre": cls_at_the_centre, "segment-values": segment_values}


def force_cls_attention(model: BertForPreTraining, mode: str) -> None:
    """An intervention, not a start: in the last layer, [CLS]'s attention is replaced by a fixed pattern
    (`uniform`: every real token alike; `segments`: head 0 over segment A, the other heads over B), to
    tell whether gathering the pair is what [CLS] lacks or what it would gather is not there yet."""
    attention = model.bert.layers[-1].attention
    num_heads, head_dim = attention.num_heads, attention.head_dim

    def forward(x, attn_mask, output_attentions=False, query_positions=None, causal=None):
        B, T, H = x.shape
        q, k, v = attention.qkv(x).split(H, dim=-1)
        q, k, v = (t.view(B, T, num_heads, head_dim).transpose(1, 2) for t in (q, k, v))
        scores = q @ k.transpose(-2, -1) / head_dim**0.5  # (B, nh, T, T)
        keys = (
            attn_mask.expand(B, num_heads, 1, T) if attn_mask is not None else x.new_ones(B, 1, 1, T).bool()
        )
        scores = scores.masked_fill(~keys, float("-inf"))
        probs = scores.softmax(-1)
        fixed = keys[:, :, 0, :].float().expand(B, num_heads, T).clone()  # (B, nh, T)
        if mode == "segments":
            segment = model._types[:, None, :].expand(B, num_heads, T)
            fixed[:, 0] *= segment[:, 0] == 0
            fixed[:, 1:] *= segment[:, 1:] == 1
        probs = torch.cat([(fixed / fixed.sum(-1, keepdim=True))[:, :, None, :], probs[:, :, 1:]], dim=2)
        y = (probs @ v).transpose(1, 2).reshape(B, T, H)
        if query_positions is not None:
            y = y.gather(1, query_positions.unsqueeze(-1).expand(-1, -1, H))
        return attention.output(y), probs if output_attentions else None

    attention.forward = forward
    original = model.bert.forward

    def bert_forward(input_ids, token_type_ids=None, *args, **kwargs):
        model._types = token_type_ids if token_type_ids is not None else torch.zeros_like(input_ids)
        return original(input_ids, token_type_ids, *args, **kwargs)

    model.bert.forward = bert_forward


def nsp_on_the_mean(model: BertForPreTraining) -> None:
    """A head change, screened: the pooler (and so the NSP head) reads the mean of every real token's final
    state instead of [CLS]'s, as fine-tuning's default head does (`BertForSequenceClassification`'s
    `pooling="mean"`: tanh(pooler(mean))). The NSP gradient then reaches every token directly, not through
    [CLS]'s attention, which the record found reading itself."""
    original = model.bert.forward

    def bert_forward(input_ids, token_type_ids=None, attention_mask=None, *args, **kwargs):
        out = original(input_ids, token_type_ids, attention_mask, *args, **kwargs)
        h = out.last_hidden_state  # (B, T, H): the loop runs every position
        real = attention_mask if attention_mask is not None else torch.ones_like(input_ids)
        m = real[..., None].to(h.dtype)
        pooled = torch.tanh(model.bert.pooler((h * m).sum(1) / m.sum(1)))
        return dataclasses.replace(out, pooler_output=pooled)

    model.bert.forward = bert_forward


def with_head_lr(model: BertForPreTraining, optimizer, head_lr: float, cfg) -> torch.optim.AdamW:
    """The same optimizer with the pooler's and the NSP head's learning rate scaled by `head_lr`."""
    head = {id(p) for n, p in model.named_parameters() if n.startswith(("bert.pooler.", "nsp_head."))}
    groups = []
    for group in optimizer.param_groups:
        for in_head in (False, True):
            params = [p for p in group["params"] if (id(p) in head) == in_head]
            if params:
                scale = group.get("lr_scale", 1.0) * (head_lr if in_head else 1.0)
                groups.append({**group, "params": params, "lr_scale": scale})
    return torch.optim.AdamW(groups, lr=cfg.learning_rate, betas=(0.9, 0.999), eps=cfg.adam_eps)


def balanced_nsp_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """The NSP cross-entropy with each class weighted to half of the batch, whatever its share.

    Batches bucketed by length hold 22% to 94% true pairs (random B's are the shorter), so the plain loss's
    gradient on the head is mostly "answer the batch's majority": the held-out answers swing between all
    "follows" and all "random" while the features that tell a pair get little of it. Balanced, a constant
    answer earns nothing, so what moves the head is what separates the pairs. A class missing from the batch
    leaves the other's mean alone."""
    ce = torch.nn.functional.cross_entropy(logits.float(), labels, reduction="none")
    per_class = [ce[labels == c].mean() for c in (0, 1) if bool((labels == c).any())]
    return torch.stack(per_class).mean()
