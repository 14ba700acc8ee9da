"""The BERT encoder and its heads, written from standard torch layers.

Follows Devlin et al. 2019, "BERT: Pre-training of Deep Bidirectional Transformers for Language
Understanding", and matches transformers' `modeling_bert.py` numerically (tests/test_hf_parity.py), read top
down from the smallest module to the largest:

    Embeddings -> SelfAttention -> FeedForward -> EncoderLayer -> BertModel -> LMPredictionHead
    -> BertPreTrainedModel (BERT's initialisation) -> BertForPreTraining / BertForSequenceClassification
    / BertForQuestionAnswering

With `config.is_decoder` the same stack attends causally (each token sees only itself and the tokens before
it): one flag of the attention, not a second stack. The models that read it so, GPT's next word on this
stack (`BertLMHeadModel`) and GPT-BERT's hybrid (`BertForHybridLM`), are in `causal_model.py`, beside this
file.

Shapes in comments: B batch, T sequence length, H hidden size, nh heads, hd head size (H / nh), V vocabulary,
N masked positions in the batch. This file does no I/O; vocabulary size and special ids arrive in ModelConfig.

Two floors below keep this file to the paper. `fast.py` holds faster versions of two torch calls: `Dropout` /
`dropout` (nn.Dropout / F.dropout, with a faster CPU mask) and `linear_cross_entropy` (F.cross_entropy of
F.linear, in chunks, for training). `initialization.py` holds the starts a config may choose instead of
BERT's noise (sinusoidal positions, mimetic or roles attention) and the constraint a recipe keeps while
pretraining (`keep_roles`); `post_init` applies them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from nanobert.config import ModelConfig
from nanobert.fast import Dropout, attention_by_math, dropout, linear_cross_entropy
from nanobert.initialization import init_starts
from nanobert.tokenizer import IGNORE_INDEX


class Embeddings(nn.Module):
    """BERT's input representation (section 3): token + learned absolute position + segment embeddings,
    summed, then LayerNorm and dropout. Attention itself ignores order; the position rows are how it sees
    it, and the segment rows tell sentence A from sentence B."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.word_embeddings = nn.Embedding(
            config.vocab_size, config.hidden_size, padding_idx=config.pad_token_id
        )
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, config.hidden_size)
        self.layer_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = Dropout(config.hidden_dropout_prob)

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor) -> torch.Tensor:
        T = input_ids.size(1)
        positions = torch.arange(T, device=input_ids.device)  # (T,), broadcast over the batch
        x = (
            self.word_embeddings(input_ids)
            + self.position_embeddings(positions)
            + self.token_type_embeddings(token_type_ids)
        )  # (B, T, H)
        return self.dropout(self.layer_norm(x))


def gather_positions(x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """x (B, T, H), positions (B, M) -> (B, M, H): row b, slot j holds x[b, positions[b, j]]."""
    return x.gather(1, positions.unsqueeze(-1).expand(-1, -1, x.size(-1)))


class SelfAttention(nn.Module):
    """Multi-head scaled dot-product self-attention (Vaswani et al. 2017): each head mixes the values of the
    positions its query scores highest, softmax(q k^T / sqrt(hd)) v, and the heads' outputs are concatenated
    and projected back to H. Several small heads can each attend to something different.

    The fused projection is one (H -> 3H) matrix multiply instead of three; it holds the same numbers as
    BERT's separate query, key and value layers (the export key map splits it back).
    """

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.num_heads = config.num_attention_heads
        self.head_dim = config.hidden_size // config.num_attention_heads
        self.qkv = nn.Linear(config.hidden_size, 3 * config.hidden_size)
        self.output = nn.Linear(config.hidden_size, config.hidden_size)
        self.attn_dropout = config.attention_probs_dropout_prob
        self.is_causal = config.is_decoder  # query i sees keys 0..i only

    def forward(
        self,
        x: torch.Tensor,
        attn_mask: torch.Tensor | None,
        output_attentions: bool = False,
        query_positions: torch.Tensor | None = None,
        causal: bool | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """x (B, T, H); attn_mask (B, 1, 1, T) bool, True where a key may be attended to, or None (a causal
        model adds its lower-triangular mask to it);
        query_positions (B, M): compute only these M queries per row (keys and values still cover all T);
        causal: this call's direction, overriding the config's (a hybrid model reads both ways).

        Returns the attended values (B, Q, H) and, with output_attentions, the probabilities (B, nh, Q, T),
        where Q is T, or M with query_positions.
        """
        B, T, H = x.shape
        is_causal = self.is_causal if causal is None else causal
        if is_causal and query_positions is not None:
            raise ValueError("a causal model computes every position; query_positions is for MLM pretraining")
        if query_positions is None:
            q, k, v = self.qkv(x).split(H, dim=-1)  # 3 x (B, T, H)
        else:
            # The same fused weights, split: keys and values at every position, queries at M of them.
            w_q, w_kv = self.qkv.weight.split([H, 2 * H])
            b_q, b_kv = self.qkv.bias.split([H, 2 * H])
            k, v = F.linear(x, w_kv, b_kv).split(H, dim=-1)  # 2 x (B, T, H)
            q = F.linear(gather_positions(x, query_positions), w_q, b_q)  # (B, M, H)
        Q = q.size(1)
        # split heads: (B, T, H) -> (B, nh, T, hd); the queries have Q rows, keys and values T
        q, k, v = (t.view(B, t.size(1), self.num_heads, self.head_dim).transpose(1, 2) for t in (q, k, v))
        dropout_p = self.attn_dropout if self.training else 0.0
        causal_kernel = is_causal and attn_mask is None  # SDPA's own causal mask, the fastest path
        if is_causal and attn_mask is not None:  # padding too: combine the two masks
            attn_mask = attn_mask & torch.ones(T, T, dtype=torch.bool, device=x.device).tril()  # (B, 1, T, T)
        # Where the explicit math is the faster way to train (`attention_by_math`: a CPU with dropout, whose
        # SDPA falls back to this same math with torch's slow mask, or on short sequences).
        if output_attentions or attention_by_math(x, dropout_p):
            # The explicit math, kept for attention maps and for readers: softmax(q k^T / sqrt(hd)) v.
            # (q scaled, not the scores: half as many numbers at T = 2 x hd; exact where sqrt(hd) is 2^k)
            scores = (q / math.sqrt(self.head_dim)) @ k.transpose(-2, -1)  # (B, nh, Q, T)
            if causal_kernel:
                attn_mask = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()  # (T, T)
            if attn_mask is not None:
                scores = scores.masked_fill(~attn_mask, float("-inf"))
            probs = scores.softmax(dim=-1)
            y = dropout(probs, dropout_p, self.training) @ v  # (B, nh, T, hd)
        else:
            # The same function through the fused kernel (flash / memory-efficient attention).
            y = F.scaled_dot_product_attention(
                q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=causal_kernel
            )
            probs = None
        y = y.transpose(1, 2).reshape(B, Q, H)  # merge heads: (B, nh, Q, hd) -> (B, Q, H)
        return self.output(y), probs if output_attentions else None


class FeedForward(nn.Module):
    """Position-wise feed-forward: H -> intermediate -> H with GELU, or with GEGLU (`hidden_act="geglu"`)."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.gated = config.hidden_act == "geglu"
        # Gated: one fused projection holds the gate's W and the value's V, as qkv holds three.
        width = 2 * config.intermediate_size if self.gated else config.intermediate_size
        self.intermediate = nn.Linear(config.hidden_size, width)
        self.output = nn.Linear(config.intermediate_size, config.hidden_size)

    def hidden(self, x: torch.Tensor) -> torch.Tensor:
        """(..., H) -> (..., intermediate): the activation the output projection reads."""
        h = self.intermediate(x)
        if self.gated:
            gate, value = h.chunk(2, dim=-1)
            return F.gelu(gate) * value
        return F.gelu(h)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.output(self.hidden(x))


class EncoderLayer(nn.Module):
    """Attention and feed-forward sublayers, each with dropout, a residual connection and LayerNorm.

    Post-LN (BERT): x = LN(x + sublayer(x)). Pre-LN: x = x + sublayer(LN(x)), which trains more stably at high
    learning rates; the Encoder then adds one final LayerNorm.
    """

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.pre_layer_norm = config.pre_layer_norm
        self.attention = SelfAttention(config)
        self.attention_layer_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.feed_forward = FeedForward(config)
        self.output_layer_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = Dropout(config.hidden_dropout_prob)

    def forward(
        self,
        x: torch.Tensor,
        attn_mask: torch.Tensor | None,
        output_attentions: bool = False,
        query_positions: torch.Tensor | None = None,
        causal: bool | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """x (B, T, H) -> (B, T, H), or (B, M, H) at query_positions (B, M) only; `causal` as for
        SelfAttention."""
        # The residual stream continues only at the positions whose queries are computed.
        residual = x if query_positions is None else gather_positions(x, query_positions)
        if self.pre_layer_norm:
            a, probs = self.attention(
                self.attention_layer_norm(x), attn_mask, output_attentions, query_positions, causal
            )
            x = residual + self.dropout(a)
            x = x + self.dropout(self.feed_forward(self.output_layer_norm(x)))
        else:
            a, probs = self.attention(x, attn_mask, output_attentions, query_positions, causal)
            x = self.attention_layer_norm(residual + self.dropout(a))
            x = self.output_layer_norm(x + self.dropout(self.feed_forward(x)))
        return x, probs


@dataclass
class EncoderOutput:
    last_hidden_state: torch.Tensor  # (B, T, H), or (B, M, H) with query_positions
    pooler_output: torch.Tensor | None  # (B, H): tanh(dense([CLS])); None without a pooler
    hidden_states: tuple[torch.Tensor, ...] | None = None  # embeddings, then each layer: L+1 x (B, T, H)
    attentions: tuple[torch.Tensor, ...] | None = None  # each layer: L x (B, nh, T, T)


class BertModel(nn.Module):
    """Embeddings, a stack of encoder layers, and (unless `add_pooling_layer=False`) the pooler."""

    def __init__(self, config: ModelConfig, add_pooling_layer: bool = True):
        super().__init__()
        self.config = config
        self.embeddings = Embeddings(config)
        self.layers = nn.ModuleList(EncoderLayer(config) for _ in range(config.num_hidden_layers))
        # Pre-LN leaves the residual stream un-normalised, so it needs one LayerNorm at the end.
        self.final_layer_norm = (
            nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps) if config.pre_layer_norm else None
        )
        self.pooler = nn.Linear(config.hidden_size, config.hidden_size) if add_pooling_layer else None

    def forward(
        self,
        input_ids: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        output_attentions: bool = False,
        output_hidden_states: bool = False,
        query_positions: torch.Tensor | None = None,
        causal: bool | None = None,
    ) -> EncoderOutput:
        """input_ids, token_type_ids, attention_mask: (B, T) integers; attention_mask 1 = token, 0 = pad.

        query_positions (B, M), optional: the positions whose final output is needed; the pooler reads
        column 0, so a caller that uses pooler_output puts [CLS] (all zeros) there. The last layer then
        computes only those M queries (keys and values still cover every position), and last_hidden_state
        is (B, M, H) in that order. Pretraining needs only the masked positions and [CLS], so this skips
        ~85% of the last layer's work (`query_layout`).

        causal: attend causally (True) or both ways (False) in this call; None follows `config.is_decoder`.
        """
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        # (B, T) -> (B, 1, 1, T): every query (and head) sees the same keys; pad keys are hidden. A batch
        # without padding passes no mask at all, which lets SDPA pick its fastest (flash) kernel.
        attn_mask = None
        if attention_mask is not None:
            attn_mask = attention_mask.bool()[:, None, None, :]
        x = self.embeddings(input_ids, token_type_ids)
        hidden_states = [x] if output_hidden_states else None
        attentions = [] if output_attentions else None
        for i, layer in enumerate(self.layers):
            last = i == len(self.layers) - 1
            x, probs = layer(x, attn_mask, output_attentions, query_positions if last else None, causal)
            if output_hidden_states:
                hidden_states.append(x)
            if output_attentions:
                attentions.append(probs)
        if self.final_layer_norm is not None:
            x = self.final_layer_norm(x)
        pooled = torch.tanh(self.pooler(x[:, 0])) if self.pooler is not None else None  # [CLS] is position 0
        return EncoderOutput(
            last_hidden_state=x,
            pooler_output=pooled,
            hidden_states=tuple(hidden_states) if output_hidden_states else None,
            attentions=tuple(attentions) if output_attentions else None,
        )


class LMPredictionHead(nn.Module):
    """dense + GELU + LayerNorm, then a decoder whose weight is the token embedding matrix (tied).

    The vocabulary head of both language models: BERT reads it at masked positions, the causal model at every
    position (transformers' `BertLMPredictionHead`, exported as `cls.predictions`).
    """

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.layer_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.bias = nn.Parameter(torch.zeros(config.vocab_size))

    def forward(self, h: torch.Tensor, decoder_weight: torch.Tensor) -> torch.Tensor:
        """h (..., H), decoder_weight (V, H) = the word embeddings -> logits (..., V).

        The decoder weight is passed in rather than stored, so the tie is structural: there is one tensor,
        one state-dict key, and nothing to re-tie after loading.
        """
        return F.linear(self.transform(h), decoder_weight, self.bias)

    def transform(self, h: torch.Tensor) -> torch.Tensor:
        """dense + GELU + LayerNorm: (..., H) -> (..., H), what the decoder reads."""
        return self.layer_norm(F.gelu(self.dense(h)))

    def loss(self, h: torch.Tensor, decoder_weight: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """Mean cross-entropy of forward(h) (h (N, H)) against target (N,), -100 rows ignored, computed in
        chunks without the (N, V) logits (`linear_cross_entropy`)."""
        return linear_cross_entropy(self.transform(h), decoder_weight, self.bias, target)


@dataclass
class PreTrainingOutput:
    """What BertForPreTraining.forward returns (the fields of transformers' BertForPreTrainingOutput).

    With `labels`, prediction_logits holds only the masked positions, (N, V), in the row-major order of
    `labels != -100` (followed by any padding rows `mlm_positions` carried); without labels it covers every
    position, (B, T, V).
    """

    loss: torch.Tensor | None
    mlm_loss: torch.Tensor | None
    nsp_loss: torch.Tensor | None
    prediction_logits: torch.Tensor | None  # None when forward(..., return_logits=False)
    seq_relationship_logits: torch.Tensor  # (B, 2): index 0 = IsNext (B follows A), 1 = NotNext
    hidden_states: tuple[torch.Tensor, ...] | None = None
    attentions: tuple[torch.Tensor, ...] | None = None


def init_weights(module: nn.Module, initializer_range: float) -> None:
    """BERT initialisation: normal(0, initializer_range) weights, zero biases, LayerNorm weight 1 bias 0."""
    if isinstance(module, (nn.Linear, nn.Embedding)):
        nn.init.normal_(module.weight, mean=0.0, std=initializer_range)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)
        if isinstance(module, nn.Embedding) and module.padding_idx is not None:
            with torch.no_grad():
                module.weight[module.padding_idx].zero_()
    elif isinstance(module, nn.LayerNorm):
        nn.init.ones_(module.weight)
        nn.init.zeros_(module.bias)


class BertPreTrainedModel(nn.Module):
    """What every model with heads shares (transformers' `BertPreTrainedModel`): its config, the encoder
    `bert`, and BERT's initialisation of every weight once the heads exist (`post_init`)."""

    def __init__(self, config: ModelConfig, add_pooling_layer: bool = True):
        super().__init__()
        self.config = config
        self.bert = BertModel(config, add_pooling_layer)

    def post_init(self) -> None:
        """Initialise every weight, heads included (`init_weights`), then apply the config's starts
        (`initialization.init_starts`: sinusoidal positions, mimetic or roles attention); the last call of a
        model's __init__."""
        self.apply(lambda m: init_weights(m, self.config.initializer_range))
        init_starts(self)


class BertForPreTraining(BertPreTrainedModel):
    """BertModel plus the masked-LM head and the next-sentence head; the loss is MLM + NSP."""

    def __init__(self, config: ModelConfig):
        super().__init__(config)
        self.mlm_head = LMPredictionHead(config)
        self.nsp_head = nn.Linear(config.hidden_size, 2)
        self.post_init()

    def forward(
        self,
        input_ids: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        next_sentence_label: torch.Tensor | None = None,
        output_attentions: bool = False,
        output_hidden_states: bool = False,
        mlm_positions: torch.Tensor | None = None,
        query_positions: torch.Tensor | None = None,
        return_logits: bool = True,
    ) -> PreTrainingOutput:
        """labels (B, T): the original token id at masked positions, -100 elsewhere.
        next_sentence_label (B,): 0 = B follows A, 1 = B is a random sentence.
        mlm_positions (N,): optional flat indices into B*T of the positions to decode (see
        `data.masking.masked_positions`); without it they are found on the device, which costs a sync.
        query_positions (B, M): optional, with labels: [CLS] and the masked positions of each row (see
        `data.masking.query_layout`), so the last layer computes only those; mlm_positions then index
        into B*M. Same losses and logits, less work.
        return_logits=False (training, with labels): the MLM loss is computed in chunks without the (N, V)
        logits (`linear_cross_entropy`), and prediction_logits is None.
        """
        if query_positions is not None and labels is None:
            raise ValueError("query_positions needs labels: without them every position is decoded")
        enc = self.bert(
            input_ids,
            token_type_ids,
            attention_mask,
            output_attentions,
            output_hidden_states,
            query_positions,
        )
        h = enc.last_hidden_state  # (B, T, H), or (B, M, H) with query_positions
        mlm_loss = nsp_loss = None
        if labels is not None:
            if query_positions is not None:
                labels = labels.gather(1, query_positions)  # (B, M): -100 at [CLS] and padding slots
            prediction_logits, mlm_loss = self.masked_lm(h, labels, mlm_positions, return_logits)
        else:
            prediction_logits = self.mlm_head(h, self.bert.embeddings.word_embeddings.weight)  # (B, T, V)
        seq_relationship_logits = self.nsp_head(enc.pooler_output)  # (B, 2)
        if next_sentence_label is not None:
            nsp_loss = F.cross_entropy(seq_relationship_logits.float(), next_sentence_label.reshape(-1))
        if mlm_loss is not None and nsp_loss is not None:
            loss = mlm_loss + nsp_loss
        else:
            loss = mlm_loss if mlm_loss is not None else nsp_loss
        return PreTrainingOutput(
            loss,
            mlm_loss,
            nsp_loss,
            prediction_logits,
            seq_relationship_logits,
            enc.hidden_states,
            enc.attentions,
        )

    def masked_lm(
        self,
        h: torch.Tensor,
        labels: torch.Tensor,
        mlm_positions: torch.Tensor | None,
        return_logits: bool,
    ) -> tuple[torch.Tensor | None, torch.Tensor]:
        """The MLM head at the labelled positions only: (prediction_logits (N, V) or None, mlm_loss).

        h (B, T, H) and labels (B, T), or both by query slot; mlm_positions as in `forward`."""
        decoder_weight = self.bert.embeddings.word_embeddings.weight  # tied: (V, H)
        # Decode only the masked positions: the (H x V) projection is the largest matrix multiply in a
        # small BERT, and ~85% of positions carry no label.
        flat_labels = labels.reshape(-1)
        if mlm_positions is None:
            mlm_positions = (flat_labels != IGNORE_INDEX).nonzero().squeeze(1)
        target = flat_labels.index_select(0, mlm_positions)  # (N,); -100 at padding slots
        masked = h.reshape(-1, h.size(-1)).index_select(0, mlm_positions)  # (N, H)
        if not return_logits:
            return None, self.mlm_head.loss(masked, decoder_weight, target)
        prediction_logits = self.mlm_head(masked, decoder_weight)  # (N, V)
        # Sum over real targets, then divide, so a batch with no masked position gives 0, not NaN.
        n_targets = (target != IGNORE_INDEX).sum().clamp(min=1)
        mlm_loss = F.cross_entropy(prediction_logits.float(), target, reduction="sum") / n_targets
        return prediction_logits, mlm_loss


@dataclass
class SequenceClassifierOutput:
    loss: torch.Tensor | None
    logits: torch.Tensor  # (B, num_labels); for regression num_labels == 1


class BertForSequenceClassification(BertPreTrainedModel):
    """Pooled [CLS] -> dropout -> linear; cross-entropy (classification) or squared error (regression).

    `pooling` is what the pooler reads (the name of ModernBERT's `classifier_pooling`): "cls", BERT's
    [CLS] final state, or "mean", the mean of every token's final state (padding left out).
    """

    def __init__(
        self, config: ModelConfig, num_labels: int, problem_type: str = "classification", pooling: str = "cls"
    ):
        if problem_type not in ("classification", "regression"):
            raise ValueError(f"problem_type must be classification or regression, got {problem_type!r}")
        if pooling not in ("cls", "mean"):
            raise ValueError(f"pooling must be cls or mean, got {pooling!r}")
        super().__init__(config)
        self.num_labels, self.problem_type, self.pooling = num_labels, problem_type, pooling
        self.dropout = Dropout(config.hidden_dropout_prob)
        self.classifier = nn.Linear(config.hidden_size, num_labels)
        self.post_init()

    def forward(
        self,
        input_ids: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
    ) -> SequenceClassifierOutput:
        out = self.bert(input_ids, token_type_ids, attention_mask)
        pooled = out.pooler_output  # (B, H): tanh(dense([CLS]))
        if self.pooling == "mean":
            h = out.last_hidden_state  # (B, T, H)
            m = torch.ones_like(input_ids) if attention_mask is None else attention_mask
            m = m.unsqueeze(-1).to(h.dtype)  # (B, T, 1)
            pooled = torch.tanh(self.bert.pooler((h * m).sum(1) / m.sum(1)))  # (B, H)
        logits = self.classifier(self.dropout(pooled))  # (B, num_labels)
        loss = None
        if labels is not None:
            if self.problem_type == "regression":
                loss = F.mse_loss(logits.squeeze(-1).float(), labels.float())
            else:
                loss = F.cross_entropy(logits.float(), labels)
        return SequenceClassifierOutput(loss, logits)


@dataclass
class QuestionAnsweringOutput:
    loss: torch.Tensor | None  # mean of the start and end cross-entropies
    start_logits: torch.Tensor  # (B, T): how likely each position starts the answer
    end_logits: torch.Tensor  # (B, T): how likely each position ends it


class BertForQuestionAnswering(BertPreTrainedModel):
    """Extractive QA (Devlin et al. 2019, section 4.2): every token's final state scores as the answer's start
    and as its end (`qa_outputs`, H -> 2). transformers' BertForQuestionAnswering, names included (no pooler).
    """

    def __init__(self, config: ModelConfig):
        super().__init__(config, add_pooling_layer=False)
        self.qa_outputs = nn.Linear(config.hidden_size, 2)  # a start score and an end score per token
        self.post_init()

    def forward(
        self,
        input_ids: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        start_positions: torch.Tensor | None = None,
        end_positions: torch.Tensor | None = None,
    ) -> QuestionAnsweringOutput:
        """start_positions, end_positions (B,): the answer's first and last token; 0 ([CLS]) when the window
        holds no answer (or the question has none)."""
        h = self.bert(input_ids, token_type_ids, attention_mask).last_hidden_state  # (B, T, H)
        start_logits, end_logits = self.qa_outputs(h).float().unbind(-1)  # 2 x (B, T)
        if attention_mask is not None:  # padding is never an answer
            start_logits = start_logits.masked_fill(attention_mask == 0, -1e4)
            end_logits = end_logits.masked_fill(attention_mask == 0, -1e4)
        loss = None
        if start_positions is not None and end_positions is not None:
            loss = (
                F.cross_entropy(start_logits, start_positions) + F.cross_entropy(end_logits, end_positions)
            ) / 2
        return QuestionAnsweringOutput(loss, start_logits, end_logits)


__all__ = [
    "BertForPreTraining",
    "BertForQuestionAnswering",
    "LMPredictionHead",
    "BertForSequenceClassification",
    "BertModel",
    "BertPreTrainedModel",
    "EncoderOutput",
    "PreTrainingOutput",
    "QuestionAnsweringOutput",
    "SequenceClassifierOutput",
    "init_weights",
]
