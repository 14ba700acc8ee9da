"""A step-by-step trace of one forward pass, for learners: what BERT does to a sentence pair.

`explain(model, a, b)` runs the checkpoint's own modules one at a time, in the order of Devlin et al. 2019
figure 2 and `model.py`, and records what happens: the word pieces with their ids and segments; the token,
position and segment embeddings and their LayerNorm'd sum; for each encoder layer the shapes of q, k, v and
the attention matrix, how [CLS] spreads its attention over the tokens in each head, and how large the
residual stream and the two sublayers' updates are; the [CLS] vector, the next-sentence probabilities, and
the top predictions at any [MASK]. Every tensor carries its shape; values are rounded and long vectors are
cut to their first few numbers. `format_trace` renders the trace as text; nothing here prints.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from nanobert.causal_model import BertLMHeadModel
from nanobert.errors import NanobertError
from nanobert.model import BertForPreTraining
from nanobert.tokenizer import MASK_ID, NUM_SPECIAL_TOKENS

DIGITS = 3  # values are rounded to this many decimals for reading


class Explainable(Protocol):
    """What `explain` needs of a model: `inference.InferenceModel` is one (its `explain` method calls us)."""

    model: BertForPreTraining | BertLMHeadModel
    tokenizer: Any

    def encode(self, text_a: str, text_b: str | None = None) -> dict[str, list[int]]: ...

    def pad_batch(self, encodings: list[dict[str, list[int]]]) -> dict[str, torch.Tensor]: ...

    def tokens(self, ids: list[int]) -> list[str]: ...


@dataclass
class TensorView:
    """A tensor as shown to a reader: its shape and a rounded preview (first `preview` numbers per row)."""

    name: str
    shape: list[int]
    preview: list  # nested lists of floats; the last dimension cut to its first few numbers
    note: str = ""


@dataclass
class LayerTrace:
    index: int
    input: TensorView  # (1, T, H)
    q_k_v_shape: list[int]  # (1, nh, T, hd) each
    attention_shape: list[int]  # (1, nh, T, T)
    cls_attention: list[list[float]]  # (nh, T): how much [CLS] attends to each token, per head
    last_attention: list[
        list[float]
    ]  # (nh, T): the same for the last token, which a causal model lets see all
    above_diagonal: float  # the largest weight any query gives a later key: 0 for a causal model
    attention_output: TensorView  # (1, T, H): the attention sublayer's update
    feed_forward_hidden_shape: list[int]  # (1, T, intermediate)
    feed_forward_output: TensorView  # (1, T, H): the feed-forward sublayer's update
    output: TensorView  # (1, T, H)
    # Mean L2 norm per token of the residual stream and of what each sublayer adds to it.
    residual_norms: dict[str, float] = field(default_factory=dict)


@dataclass
class MaskedTrace:
    position: int
    top: list[tuple[str, float]]  # (word piece, probability), most probable first


@dataclass
class NextTokenTrace:
    position: int
    actual: str | None  # the token that does come next in the text (None after the last one)
    top: list[tuple[str, float]]  # the model's guesses for it, most probable first


@dataclass
class Trace:
    model: dict  # the shape of the model: layers, hidden size, heads, head size, vocabulary, LN placement
    tokens: list[str]
    input_ids: list[int]
    token_type_ids: list[int]
    embeddings: list[TensorView]  # token, position, segment, sum, after LayerNorm
    layers: list[LayerTrace]
    final_layer_norm: TensorView | None  # pre-LN models only
    cls_vector: TensorView | None  # (H,): the last layer's [CLS] hidden state (MLM + NSP models)
    pooled: TensorView | None  # (H,): tanh(dense([CLS])), the input of the NSP head
    next_sentence: dict[str, float] | None  # {"IsNext": p, "NotNext": 1 - p}
    masked: list[MaskedTrace]
    next_tokens: list[NextTokenTrace] = field(
        default_factory=list
    )  # causal models: a guess at every position

    def __str__(self) -> str:
        """The readable trace `nanobert explain` prints (`format_trace`)."""
        return format_trace(self)

    def __repr__(self) -> str:  # the fields in full run to thousands of numbers; print() shows them laid out
        return f"<Trace: {len(self.tokens)} tokens, {len(self.layers)} layers; print() it to read the trace>"


def _view(name: str, t: torch.Tensor, preview: int, note: str = "") -> TensorView:
    """Round a (1, ...) tensor for reading: its one batch row, with only the first `preview` numbers of the
    last dimension (every token is kept). The shape shown is the full one, batch dimension included."""
    cut = t.detach().float().cpu()[0, ..., :preview]
    return TensorView(name, list(t.shape), _round(cut.tolist()), note)


def _round(x):
    return [_round(v) for v in x] if isinstance(x, list) else round(float(x), DIGITS)


def _mean_norm(t: torch.Tensor) -> float:
    """Mean over tokens of each token vector's L2 norm: how large the stream is at that point."""
    return round(t.float().norm(dim=-1).mean().item(), DIGITS)


@torch.no_grad()
def explain(
    model: Explainable, text_a: str, text_b: str | None = None, top_k: int = 5, preview: int = 6
) -> Trace:
    """Trace one forward pass of `model` on `text_a` (and `text_b`), module by module. See the module doc.

    The trace is computed from the checkpoint's own modules, so its final hidden states are the model's.
    """
    if top_k < 1 or preview < 1:
        raise NanobertError(f"explain needs top_k and preview of at least 1, got {top_k} and {preview}")
    bert, cfg = model.model.bert, model.model.config
    enc = model.encode(text_a, text_b)
    batch = model.pad_batch([enc])
    # 1. embeddings: three lookups, added, then LayerNorm (dropout is off in eval mode)
    embeddings, x = _embeddings(bert.embeddings, batch["input_ids"], batch["token_type_ids"], preview)
    # 2. the encoder layers, each sublayer by hand so the updates can be measured
    layers = []
    for i, layer in enumerate(bert.layers):
        trace, x = _layer(i, layer, x, cfg.pre_layer_norm, preview)
        layers.append(trace)
    final_ln = None
    if bert.final_layer_norm is not None:
        x = bert.final_layer_norm(x)
        final_ln = _view("final LayerNorm", x, preview, "pre-LN models normalise the stream once at the end")
    # 3. the heads. BERT: [CLS] -> pooler -> NSP, and the MLM head at each [MASK]. Causal: the next word.
    return Trace(
        model={
            "layers": cfg.num_hidden_layers,
            "hidden_size": cfg.hidden_size,
            "heads": cfg.num_attention_heads,
            "head_size": cfg.hidden_size // cfg.num_attention_heads,
            "intermediate_size": cfg.intermediate_size,
            "vocab_size": cfg.vocab_size,
            "layer_norm": "pre-LN" if cfg.pre_layer_norm else "post-LN",
            "attention": "causal" if cfg.is_decoder else "bidirectional",
            "feed_forward": "GEGLU" if cfg.hidden_act == "geglu" else "GELU",
        },
        tokens=model.tokens(enc["input_ids"]),
        input_ids=enc["input_ids"],
        token_type_ids=enc["token_type_ids"],
        embeddings=embeddings,
        layers=layers,
        final_layer_norm=final_ln,
        **_heads(model, x, enc["input_ids"], top_k, preview),
    )


def _heads(
    model: Explainable, x: torch.Tensor, input_ids: list[int], top_k: int, preview: int
) -> dict[str, Any]:
    """The Trace's fields from the heads, given the last hidden states x (1, T, H): for BERT the [CLS] vector,
    the pooled [CLS], the next-sentence probabilities and the top predictions at each [MASK]; for a causal
    model the next-token guesses at every position (and None or [] for the rest)."""
    if model.model.config.is_decoder:
        next_tokens = _next_tokens(model, x, input_ids, top_k)
        return {
            "cls_vector": None,
            "pooled": None,
            "next_sentence": None,
            "masked": [],
            "next_tokens": next_tokens,
        }
    pooled = torch.tanh(model.model.bert.pooler(x[:, 0]))  # (1, H)
    nsp = model.model.nsp_head(pooled)[0].float().softmax(-1).tolist()
    return {
        "cls_vector": _view("[CLS] vector", x[:, 0], preview),
        "pooled": _view("pooled [CLS]", pooled, preview, "tanh(dense([CLS])): what the NSP head reads"),
        "next_sentence": {"IsNext": round(nsp[0], DIGITS + 2), "NotNext": round(nsp[1], DIGITS + 2)},
        "masked": _masked(model, x, input_ids, top_k),
        "next_tokens": [],
    }


def _embeddings(
    emb: torch.nn.Module, ids: torch.Tensor, tt: torch.Tensor, preview: int
) -> tuple[list[TensorView], torch.Tensor]:
    """The token, position and segment embeddings of ids (1, T), their sum and its LayerNorm (layer 0's
    input, also returned)."""
    tok = emb.word_embeddings(ids)  # (1, T, H)
    pos = emb.position_embeddings(torch.arange(ids.size(1), device=ids.device))[None]  # (1, T, H)
    seg = emb.token_type_embeddings(tt)  # (1, T, H)
    total = tok + pos + seg
    x = emb.layer_norm(total)
    views = [
        _view("token embeddings", tok, preview, "one learned vector per word piece"),
        _view("position embeddings", pos, preview, "one learned vector per position 0..T-1"),
        _view("segment embeddings", seg, preview, "sentence A or sentence B"),
        _view("sum", total, preview, "token + position + segment"),
        _view(
            "after LayerNorm", x, preview, "each vector to mean 0, variance 1, then scaled: layer 0's input"
        ),
    ]
    return views, x


def _layer(
    index: int, layer: torch.nn.Module, x: torch.Tensor, pre_layer_norm: bool, preview: int
) -> tuple[LayerTrace, torch.Tensor]:
    """One encoder layer, sublayer by sublayer, as `model.EncoderLayer` computes it: its trace and output."""
    x_in = x
    attention = layer.attention
    attn_in = layer.attention_layer_norm(x) if pre_layer_norm else x
    B, T, H = attn_in.shape
    q = attention.qkv(attn_in)[..., :H].view(B, T, attention.num_heads, -1).transpose(1, 2)  # (1, nh, T, hd)
    a, probs = attention(attn_in, None, output_attentions=True)  # (1, T, H), (1, nh, T, T)
    if pre_layer_norm:
        x = x + a
        ff_in = layer.output_layer_norm(x)
    else:
        x = ff_in = layer.attention_layer_norm(x + a)
    after_attention = x
    ff_hidden = layer.feed_forward.hidden(ff_in)  # (1, T, intermediate)
    f = layer.feed_forward.output(ff_hidden)  # what feed_forward(ff_in) computes, without the hidden twice
    x = x + f if pre_layer_norm else layer.output_layer_norm(x + f)
    trace = LayerTrace(
        index=index,
        input=_view("input", x_in, preview),
        q_k_v_shape=list(q.shape),
        attention_shape=list(probs.shape),
        cls_attention=_round(probs[0, :, 0, :].tolist()),
        last_attention=_round(probs[0, :, -1, :].tolist()),
        above_diagonal=round(probs[0].triu(diagonal=1).max().item(), DIGITS),
        attention_output=_view("attention output", a, preview),
        feed_forward_hidden_shape=list(ff_hidden.shape),
        feed_forward_output=_view("feed-forward output", f, preview),
        output=_view("output", x, preview),
        residual_norms={
            "input": _mean_norm(x_in),
            "attention update": _mean_norm(a),
            "after attention": _mean_norm(after_attention),
            "feed-forward update": _mean_norm(f),
            "output": _mean_norm(x),
        },
    )
    return trace, x


def _masked(model: Explainable, x: torch.Tensor, input_ids: list[int], top_k: int) -> list[MaskedTrace]:
    """The masked-LM head's top guesses at each [MASK] of the final hidden states x (1, T, H)."""
    positions = [p for p, t in enumerate(input_ids) if t == MASK_ID]
    if not positions:
        return []
    weight = model.model.bert.embeddings.word_embeddings.weight
    probs = model.model.mlm_head(x[0, positions], weight).float().softmax(-1)  # (M, V)
    return [MaskedTrace(p, top) for p, top in zip(positions, _top(model, probs, top_k), strict=True)]


def _top(model: Explainable, probs: torch.Tensor, top_k: int) -> list[list[tuple[str, float]]]:
    """For each row of probs (M, V): the top_k ordinary word pieces with their probabilities."""
    ranked = probs.clone()
    ranked[:, :NUM_SPECIAL_TOKENS] = -1.0  # special tokens are never offered as answers
    top = ranked.topk(min(top_k, probs.size(-1) - NUM_SPECIAL_TOKENS), dim=-1).indices
    return [
        [(model.tokenizer.id_to_token(j), round(probs[m, j].item(), DIGITS)) for j in top[m].tolist()]
        for m in range(probs.size(0))
    ]


def _next_tokens(
    model: Explainable, x: torch.Tensor, input_ids: list[int], top_k: int
) -> list[NextTokenTrace]:
    """A causal model's guesses for the token after each position, next to the token that does come."""
    probs = model.model.lm_head(x[0], model.model.bert.embeddings.word_embeddings.weight).float().softmax(-1)
    actual = [model.tokenizer.id_to_token(i) for i in input_ids[1:]] + [None]
    return [NextTokenTrace(p, actual[p], top) for p, top in enumerate(_top(model, probs, top_k))]


# --- text rendering --------------------------------------------------------------------------------------


def _shape(shape: list[int]) -> str:
    return str(tuple(shape))  # (32,) for one dimension, as Python writes it


def _numbers(values: list[float], full: int) -> str:
    cells = " ".join(f"{v:+.{DIGITS}f}" for v in values)
    return f"[{cells}{' ...' if len(values) < full else ''}]"


def _tensor_lines(view: TensorView, tokens: list[str], indent: str = "   ") -> list[str]:
    note = f"  {view.note}" if view.note else ""
    lines = [f"{indent}{view.name:<22s}{_shape(view.shape):<12s}{note}".rstrip()]
    width = max(len(t) for t in tokens)
    rows = view.preview if len(view.shape) == 3 else [view.preview]  # (1, T, H) or (1, H)
    names = tokens if len(view.shape) == 3 else [""]
    for token, row in zip(names, rows, strict=True):
        lines.append(f"{indent}  {token:<{width}s} {_numbers(row, view.shape[-1])}")
    return lines


def _attention_row_lines(
    rows: list[list[float]], tokens: list[str], who: str, max_columns: int = 16
) -> list[str]:
    """Each head's row for one token: a table over the tokens when they fit, else the five most attended."""
    if len(tokens) <= max_columns:
        lines = [
            f"     {who} attends to (one row of each head's attention matrix):",
            "       " + " " * 8 + " ".join(f"{t[:7]:>7s}" for t in tokens),
        ]
        return lines + [
            f"       head {h:<3d}" + " ".join(f"{v:7.3f}" for v in row) for h, row in enumerate(rows)
        ]
    lines = [f"     {who} attends most to (per head, the five largest weights of its row):"]
    for h, row in enumerate(rows):
        top = sorted(range(len(row)), key=lambda j: -row[j])[:5]
        lines.append(f"       head {h:<3d}" + ", ".join(f"{tokens[j]}@{j} {row[j]:.3f}" for j in top))
    return lines


def format_trace(trace: Trace) -> str:
    """The trace as numbered sections of plain text, for a terminal or a notebook."""
    m = trace.model
    tokens = trace.tokens
    layout = "[CLS] A [SEP] B [SEP]" if 1 in trace.token_type_ids else "[CLS] A [SEP]"
    out = [
        f"model: {m['layers']} layers, hidden size {m['hidden_size']}, {m['heads']} heads of size "
        f"{m['head_size']}, feed-forward {m['intermediate_size']}, vocabulary {m['vocab_size']}, "
        f"{m['layer_norm']}, {m.get('attention', 'bidirectional')} attention, "
        f"{m.get('feed_forward', 'GELU')} feed-forward",
        "",
        f"1. Tokens: {len(tokens)} word pieces, " + ("[CLS] and the text" if trace.next_tokens else layout),
        "   pos  token            id  segment",
    ]
    for p, (tok, i, s) in enumerate(zip(tokens, trace.input_ids, trace.token_type_ids, strict=True)):
        out.append(f"   {p:>3d}  {tok:<15s} {i:>3d}  {'AB'[s] if s < 2 else s}")
    out += ["", f"2. Embeddings: one vector of {m['hidden_size']} numbers per token (first few shown)"]
    for view in trace.embeddings:
        out += _tensor_lines(view, tokens)
    out += [
        "",
        f"3. Encoder layers 0..{m['layers'] - 1}: attention, then feed-forward, each added to the stream",
    ]
    # GEGLU: GELU(x W) times (x V), as model.FeedForward computes; older traces say nothing, so GELU
    activation = "GEGLU: GELU(x W) * (x V)" if m.get("feed_forward") == "GEGLU" else "GELU"
    for layer in trace.layers:
        out += _layer_lines(layer, tokens, causal=bool(trace.next_tokens), activation=activation)
    if trace.final_layer_norm is not None:
        out += _tensor_lines(trace.final_layer_norm, tokens)
    return "\n".join(out + (_next_token_lines(trace) if trace.next_tokens else _bert_head_lines(trace)))


def _layer_lines(layer: LayerTrace, tokens: list[str], causal: bool, activation: str) -> list[str]:
    hd = layer.q_k_v_shape[-1]
    out = [
        f"   layer {layer.index}",
        f"     input                  {_shape(layer.input.shape)}",
        f"     q, k, v (per head)     {_shape(layer.q_k_v_shape)}  (batch, heads, tokens, head size)",
        f"     attention weights      {_shape(layer.attention_shape)}  softmax(q k^T / sqrt({hd})), "
        "rows sum to 1",
        f"     attention output       {_shape(layer.attention_output.shape)}",
        f"     feed-forward hidden    {_shape(layer.feed_forward_hidden_shape)}  {activation}",
        f"     feed-forward output    {_shape(layer.feed_forward_output.shape)}",
        f"     output                 {_shape(layer.output.shape)}",
    ]
    if causal:
        out.append(
            "     causal mask: every weight above the diagonal is zero (largest here "
            f"{layer.above_diagonal:.3f}): each token attends only to itself and the tokens before it"
        )
        out += _attention_row_lines(layer.last_attention, tokens, "the last token")
    else:
        out += _attention_row_lines(layer.cls_attention, tokens, "[CLS]")
    norms = layer.residual_norms
    out.append(
        "     residual stream, mean |x| per token: "
        f"in {norms['input']:.2f}, attention adds {norms['attention update']:.2f} -> "
        f"{norms['after attention']:.2f}, feed-forward adds {norms['feed-forward update']:.2f} -> "
        f"out {norms['output']:.2f}"
    )
    return out


def _bert_head_lines(trace: Trace) -> list[str]:
    """Sections 4-6 of a BERT trace: [CLS] and the pooler, the next-sentence head, the [MASK] guesses."""
    out = ["", "4. The [CLS] vector, which sums up the pair for the next-sentence head"]
    out += _tensor_lines(trace.cls_vector, trace.tokens)
    out += _tensor_lines(trace.pooled, trace.tokens)
    ns = trace.next_sentence
    out += ["", f"5. Next sentence: IsNext {ns['IsNext']:.1%}  NotNext {ns['NotNext']:.1%}"]
    out += ["", "6. Masked positions"]
    if not trace.masked:
        out.append("   none (write [MASK] in a text to see the masked-LM head's guesses)")
    for mk in trace.masked:
        guesses = ", ".join(f"{tok} {p:.1%}" for tok, p in mk.top)
        out.append(f"   position {mk.position}: {guesses}")
    return out


def _next_token_lines(trace: Trace) -> list[str]:
    """Section 4 of a causal trace: the guesses for the token after each position, and the one that came."""
    out = ["", "4. Next-token guesses: at each position, from the tokens up to it only"]
    width = max(len(t) for t in trace.tokens)
    for nt in trace.next_tokens:
        came = f"next is {nt.actual!r}" if nt.actual is not None else "(end of the text)"
        guesses = ", ".join(f"{tok} {p:.1%}" for tok, p in nt.top)
        out.append(
            f"   {nt.position:>3d} {trace.tokens[nt.position]:<{width}s}  {came:<22s} guesses: {guesses}"
        )
    return out


__all__ = [
    "Explainable",
    "LayerTrace",
    "MaskedTrace",
    "NextTokenTrace",
    "TensorView",
    "Trace",
    "explain",
    "format_trace",
]
