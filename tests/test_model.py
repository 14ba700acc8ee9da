import dataclasses

import pytest
import torch
import torch.nn.functional as F

from nanobert.config import ModelConfig
from nanobert.data.masking import masked_positions, query_layout
from nanobert.errors import NanobertError
from nanobert.initialization import keep_roles, what_heads, what_rows
from nanobert.model import BertForPreTraining, BertForSequenceClassification
from nanobert.pretraining.recipes import MODEL_PRESETS
from nanobert.tokenizer import CLS_ID, MASK_ID, SEP_ID


def random_batch(config, B=3, T=11, pad_last=0):
    input_ids = torch.randint(5, config.vocab_size, (B, T))
    token_type_ids = (torch.arange(T) >= T // 2).long().expand(B, T).clone()
    attention_mask = torch.ones(B, T, dtype=torch.long)
    if pad_last:
        input_ids[-1, -pad_last:] = 0
        attention_mask[-1, -pad_last:] = 0
    return input_ids, token_type_ids, attention_mask


def test_output_shapes(tiny_config):
    model = BertForPreTraining(tiny_config).eval()
    ids, tt, am = random_batch(tiny_config, pad_last=4)
    out = model(ids, tt, am, output_attentions=True, output_hidden_states=True)
    assert out.prediction_logits.shape == (3, 11, 99)
    assert out.seq_relationship_logits.shape == (3, 2)
    assert out.loss is None and out.mlm_loss is None and out.nsp_loss is None
    assert len(out.attentions) == 2 and out.attentions[0].shape == (3, 4, 11, 11)
    assert len(out.hidden_states) == 3 and out.hidden_states[-1].shape == (3, 11, 32)


def test_padding_invariance(tiny_config):
    """Appending [PAD]s must not change outputs at real positions (the attention mask is applied)."""
    model = BertForPreTraining(tiny_config).eval()
    ids, tt, am = random_batch(tiny_config, B=2, T=9)
    ref = model(ids, tt, am)
    pad = 5
    ids2 = torch.cat([ids, torch.zeros(2, pad, dtype=torch.long)], 1)
    tt2 = torch.cat([tt, torch.zeros(2, pad, dtype=torch.long)], 1)
    am2 = torch.cat([am, torch.zeros(2, pad, dtype=torch.long)], 1)
    for explicit in (False, True):
        out = model(ids2, tt2, am2, output_attentions=explicit)
        torch.testing.assert_close(out.prediction_logits[:, :9], ref.prediction_logits, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(
            out.seq_relationship_logits, ref.seq_relationship_logits, atol=1e-5, rtol=1e-5
        )
        if explicit:  # padding keys get exactly zero attention
            assert out.attentions[0][..., 9:].abs().max() == 0


def test_explicit_attention_matches_sdpa(tiny_config):
    model = BertForPreTraining(tiny_config).eval()
    ids, tt, am = random_batch(tiny_config, pad_last=3)
    fast = model(ids, tt, am)
    slow = model(ids, tt, am, output_attentions=True)
    assert (fast.prediction_logits - slow.prediction_logits).abs().max() < 1e-5
    probs = slow.attentions[0]
    torch.testing.assert_close(probs.sum(-1), torch.ones_like(probs.sum(-1)))


def test_attention_dropout_on_cpu_is_the_explicit_math_with_a_mask(tiny_config):
    """Training with attention dropout takes the explicit softmax path on the CPU; with a probability too
    small to drop anything it is the fused kernel's function, and with a real one it drops."""
    ids, tt, am = random_batch(tiny_config, pad_last=3)
    no_dropout = dataclasses.replace(tiny_config, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    plain = BertForPreTraining(no_dropout).train()
    tiny_p = dataclasses.replace(no_dropout, attention_probs_dropout_prob=1e-9)
    model = BertForPreTraining(tiny_p).train()
    model.load_state_dict(plain.state_dict())
    torch.testing.assert_close(model(ids, tt, am).prediction_logits, plain(ids, tt, am).prediction_logits)
    model.bert.layers[0].attention.attn_dropout = 0.5
    assert (model(ids, tt, am).prediction_logits - plain(ids, tt, am).prediction_logits).abs().max() > 1e-3


def test_mlm_loss_ignores_minus_100(tiny_config):
    model = BertForPreTraining(tiny_config).eval()
    ids, tt, am = random_batch(tiny_config)
    labels = torch.full_like(ids, -100)
    labels[0, 2], labels[1, 5], labels[2, 7] = 10, 20, 30
    nsp = torch.tensor([0, 1, 0])
    out = model(ids, tt, am, labels=labels, next_sentence_label=nsp)
    full = model(ids, tt, am).prediction_logits  # (B, T, V)
    picked = torch.stack([full[0, 2], full[1, 5], full[2, 7]])
    expected = F.cross_entropy(picked, torch.tensor([10, 20, 30]))
    torch.testing.assert_close(out.mlm_loss, expected, atol=1e-5, rtol=1e-5)
    assert out.prediction_logits.shape == (3, 99)  # only the masked positions are decoded
    # Changing the label of an ignored position changes nothing; NSP label 0 is a real label (not ignored).
    torch.testing.assert_close(out.loss, out.mlm_loss + out.nsp_loss)
    nsp_expected = F.cross_entropy(out.seq_relationship_logits, nsp)
    torch.testing.assert_close(out.nsp_loss, nsp_expected)


def test_no_masked_position_gives_zero_not_nan(tiny_config):
    model = BertForPreTraining(tiny_config)
    ids, tt, am = random_batch(tiny_config)
    out = model(ids, tt, am, labels=torch.full_like(ids, -100))
    assert out.mlm_loss.item() == 0.0


def test_decoder_tied_to_embeddings(tiny_config):
    model = BertForPreTraining(tiny_config)
    # One tensor serves as embedding and decoder: perturbing the embedding row moves that token's logit.
    ids, tt, am = random_batch(tiny_config)
    before = model(ids, tt, am).prediction_logits[..., 7].clone()
    with torch.no_grad():
        model.bert.embeddings.word_embeddings.weight[7] += 1.0
    assert not torch.allclose(
        model(ids[:, :1] * 0 + 9, tt[:, :1], am[:, :1]).prediction_logits[..., 7], before[:, :1]
    )
    assert not any("decoder" in k for k in model.state_dict())  # one key, nothing to re-tie
    # A gradient through the decoder reaches the embedding matrix.
    labels = torch.full_like(ids, -100)
    labels[0, 0] = 7
    model(ids, tt, am, labels=labels).loss.backward()
    assert model.bert.embeddings.word_embeddings.weight.grad[7].abs().sum() > 0


def test_initialisation(tiny_config):
    cfg = dataclasses.replace(tiny_config, initializer_range=0.05)
    model = BertForPreTraining(cfg)
    w = model.bert.layers[0].feed_forward.intermediate.weight
    assert abs(w.std().item() - 0.05) < 0.01 and abs(w.mean().item()) < 0.01
    assert model.bert.layers[0].attention.qkv.bias.abs().max() == 0
    assert torch.all(model.bert.embeddings.layer_norm.weight == 1)
    assert model.bert.embeddings.word_embeddings.weight[0].abs().max() == 0  # padding row


@pytest.mark.parametrize("hidden", [36, 37])  # odd too: the last sine column has no cosine partner
def test_sinusoidal_position_init_scores_offsets_the_same_at_every_position(tiny_config, hidden):
    cfg = dataclasses.replace(
        tiny_config, hidden_size=hidden, num_attention_heads=1, position_embedding_init="sinusoidal"
    )
    table = BertForPreTraining(cfg).bert.embeddings.position_embeddings.weight.detach()
    assert abs(table.std().item() - cfg.initializer_range) < 0.2 * cfg.initializer_range
    # p . (p + k) depends on k alone (sum of cos(k w) over the frequencies): "k tokens away" is one pattern.
    near = (table[:-3] * table[3:]).sum(-1)
    assert (near - near[0]).abs().max() < 1e-6
    assert torch.equal(table[0, 0::2][: hidden // 2], torch.zeros(hidden // 2))  # sin(0) = 0
    normal = BertForPreTraining(tiny_config).bert.embeddings.position_embeddings.weight.detach()
    assert (normal[:-3] * normal[3:]).sum(-1).std() > 10 * (near.std() + 1e-9)


@pytest.mark.parametrize("init", ["normal", "sinusoidal"])
def test_position_embedding_scale_multiplies_the_tables_spread_only(tiny_config, init):
    base = dataclasses.replace(tiny_config, position_embedding_init=init)
    torch.manual_seed(0)
    one = BertForPreTraining(base).bert.embeddings
    torch.manual_seed(0)
    three = BertForPreTraining(dataclasses.replace(base, position_embedding_scale=3.0)).bert.embeddings
    ratio = three.position_embeddings.weight.std() / one.position_embeddings.weight.std()
    assert abs(ratio.item() - 3.0) < (1e-5 if init == "sinusoidal" else 0.3)
    assert abs(three.word_embeddings.weight.std().item() - base.initializer_range) < 0.002  # tokens unscaled


def test_mimetic_attention_starts_with_keys_equal_to_queries_and_local_attention(tiny_config):
    """attention_init="mimetic": every layer's key projection is a copy of its query projection, the value
    projection and everything else stay BERT's, and at step 0 a token scores itself at about mimetic_score,
    so with sinusoidal positions each query's attention peaks on itself and falls off with distance."""
    cfg = dataclasses.replace(
        tiny_config,
        position_embedding_init="sinusoidal",
        position_embedding_scale=3.0,
        max_position_embeddings=64,
    )
    torch.manual_seed(0)
    normal = BertForPreTraining(cfg)
    torch.manual_seed(0)
    mimetic = BertForPreTraining(dataclasses.replace(cfg, attention_init="mimetic", mimetic_score=6.0)).eval()
    H = cfg.hidden_size
    for layer, bert_layer in zip(mimetic.bert.layers, normal.bert.layers, strict=True):
        w = layer.attention.qkv.weight
        assert torch.equal(w[:H], w[H : 2 * H])
        assert torch.equal(w[2 * H :], bert_layer.attention.qkv.weight[2 * H :])  # values as BERT's
    assert torch.equal(mimetic.mlm_head.dense.weight, normal.mlm_head.dense.weight)
    ids = torch.randint(5, cfg.vocab_size, (4, 40))
    x = mimetic.bert.embeddings(ids, torch.zeros_like(ids))
    first = mimetic.bert.layers[0].attention
    q = first.qkv(x)[..., :H].view(4, 40, cfg.num_attention_heads, -1).transpose(1, 2)
    self_scores = (q * q).sum(-1) / q.size(-1) ** 0.5  # (B, nh, T): each token with itself
    assert 3.0 < self_scores.mean().item() < 12.0
    probs = mimetic.bert(ids, output_attentions=True).attentions[0].mean((0, 1))  # (T, T)
    near = [probs.diagonal(k).mean().item() for k in (0, 1)]
    far = probs.diagonal(20).mean().item()
    assert near[0] > near[1] > 2 * far and near[0] > 5 * probs.mean().item(), (near, far)
    uniform = normal.eval().bert(ids, output_attentions=True).attentions[0].mean((0, 1))
    assert uniform.diagonal().mean().item() < 2 * uniform.mean().item()  # BERT's init: near uniform


@pytest.mark.parametrize("heads,hidden", [(4, 32), (3, 30)])
def test_keep_roles_keeps_the_match_rows_and_trains_the_rest(tiny_config, heads, hidden):
    """keep_roles: after AdamW steps with weight decay on, the "what" heads' query and key rows are still
    their start to the bit (no gradient, and put back after each step, so the decay does not shrink them),
    the positions', segments', [CLS]'s and [MASK]'s "what" half is still zero, while the "where" heads' rows
    and everything else have moved. With an odd head count the "what" heads
    are the last ceil(nh / 2), the rows roles_init gives the token rows' half (not rows H/2 .. H)."""
    cfg = dataclasses.replace(
        tiny_config, attention_init="roles", num_attention_heads=heads, hidden_size=hidden
    )
    torch.manual_seed(0)
    model = BertForPreTraining(cfg)
    start = {name: p.detach().clone() for name, p in model.named_parameters()}
    H, half, rows = cfg.hidden_size, cfg.hidden_size // 2, what_rows(cfg)
    hd = H // heads
    assert list(what_heads(cfg)) == list(range(heads // 2, heads)) and rows == slice(heads // 2 * hd, H)
    w0 = start["bert.layers.0.attention.qkv.weight"]
    assert w0[rows, :half].abs().max() == 0 and w0[rows, half:].abs().min() > 0  # "what": words only
    assert w0[: rows.start, half:].abs().max() == 0  # "where": positions only
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)
    keep_roles(model, optimizer)
    ids = torch.randint(5, cfg.vocab_size, (3, 11))
    ids[:, 0], ids[:, 3] = CLS_ID, MASK_ID  # the blank rows are read, so they would get a gradient
    for _ in range(3):
        out = model(input_ids=ids, token_type_ids=(torch.arange(11) > 5).long().expand(3, -1))
        (out.prediction_logits.logsumexp(-1).mean() + out.seq_relationship_logits.pow(2).mean()).backward()
        optimizer.step()
        optimizer.zero_grad()
    emb = model.bert.embeddings
    assert emb.position_embeddings.weight[:, half:].abs().max() == 0
    assert emb.token_type_embeddings.weight[:, half:].abs().max() == 0
    assert emb.word_embeddings.weight[[CLS_ID, MASK_ID], half:].abs().max() == 0
    assert (
        emb.word_embeddings.weight[[CLS_ID, MASK_ID], :half]
        .ne(start["bert.embeddings.word_embeddings.weight"][[CLS_ID, MASK_ID], :half])
        .any()
    )  # their other half trains
    assert not torch.equal(
        emb.position_embeddings.weight[:, :half],
        start["bert.embeddings.position_embeddings.weight"][:, :half],
    )
    key = slice(H + rows.start, H + rows.stop)
    for i, layer in enumerate(model.bert.layers):
        w, b = layer.attention.qkv.weight, layer.attention.qkv.bias
        kept = start[f"bert.layers.{i}.attention.qkv.weight"]
        assert torch.equal(w[rows], w[key])  # the "what" query and key rows: no gradient
        assert torch.equal(w[rows], kept[rows]) and torch.equal(w[key], kept[key])  # not even the decay
        assert torch.equal(b[rows], b[key])
        assert not torch.equal(
            w[: rows.start], w[H : key.start]
        )  # the "where" rows trained, each its own way
    with pytest.raises(NanobertError, match="roles"):
        keep_roles(BertForPreTraining(dataclasses.replace(tiny_config, attention_init="mimetic")))


def test_roles_attention_gives_half_the_heads_positions_and_half_the_words(tiny_config):
    """attention_init="roles": the position and segment rows start in the first half of the dimensions, the
    first half of the heads score only that half (where a token is) and the others only the second (what it
    is), keys equal to queries; so at step 0 a "what" head attends to the same word in the other segment far
    above chance, and a "where" head to the neighbours, as mimetic heads do."""
    cfg = dataclasses.replace(
        tiny_config,
        attention_init="roles",
        position_embedding_init="sinusoidal",
        position_embedding_scale=3.0,
        max_position_embeddings=64,
    )
    torch.manual_seed(0)
    model = BertForPreTraining(cfg).eval()
    H, nh, half = cfg.hidden_size, cfg.num_attention_heads, cfg.hidden_size // 2
    emb = model.bert.embeddings
    assert emb.position_embeddings.weight[:, half:].abs().max() == 0
    assert emb.token_type_embeddings.weight[:, half:].abs().max() == 0
    assert emb.word_embeddings.weight[[CLS_ID, MASK_ID], half:].abs().max() == 0
    assert emb.token_type_embeddings.weight[:, :half].abs().min() > 0
    head_dim = H // nh
    for layer in model.bert.layers:
        w = layer.attention.qkv.weight
        assert torch.equal(w[:H], w[H : 2 * H])
        for h in range(nh):
            rows = w[h * head_dim : (h + 1) * head_dim]
            unread = rows[:, half:] if h < nh // 2 else rows[:, :half]
            assert unread.abs().max() == 0 and rows.abs().max() > 0, h
    # A sentence and its shuffle as segments A and B: where does each word of B look in A?
    torch.manual_seed(1)
    a = torch.randperm(cfg.vocab_size - 5)[:20] + 5
    b = a[torch.randperm(20)]
    ids = torch.cat([a, b]).unsqueeze(0)
    segments = torch.cat([torch.zeros(20), torch.ones(20)]).long().unsqueeze(0)
    probs = model.bert(ids, segments, output_attentions=True).attentions[0][0]  # (nh, T, T)
    same_word = (b.unsqueeze(1) == a.unsqueeze(0)).float()  # (20 in B, 20 in A)
    on_same = (probs[:, 20:, :20] * same_word).sum((-2, -1)) / 20  # per head: B's attention on its word in A
    chance = 1 / 40
    assert on_same[nh // 2 :].min() > 3 * chance, on_same
    assert on_same[: nh // 2].max() < 2 * chance, on_same
    where = probs[: nh // 2].mean(0)
    assert where.diagonal(0).mean() > where.diagonal(1).mean() > 2 * where.diagonal(15).mean()
    # [CLS] and [MASK] name no word: their rows start blank where the "what" heads read, so there a [MASK]
    # does not attend to the other [MASK]s as a word attends to its copies.
    assert emb.word_embeddings.weight[[CLS_ID, MASK_ID], half:].abs().max() == 0
    pair = torch.cat(
        [torch.tensor([CLS_ID]), a[:10], torch.tensor([MASK_ID, SEP_ID]), b, torch.tensor([MASK_ID])]
    )
    types = (torch.arange(len(pair)) > 11).long()
    what = model.bert(pair[None], types[None], output_attentions=True).attentions[0][0, nh // 2 :]
    masks = [11, len(pair) - 1]
    assert what[:, masks[0], masks[1]].max() < 0.1 and what[:, masks[1], masks[0]].max() < 0.1


def test_pre_layer_norm_runs_and_differs(tiny_config):
    cfg = dataclasses.replace(tiny_config, pre_layer_norm=True)
    model = BertForPreTraining(cfg).eval()
    assert model.bert.final_layer_norm is not None
    ids, tt, am = random_batch(cfg, pad_last=2)
    out = model(ids, tt, am)
    assert torch.isfinite(out.prediction_logits).all()
    slow = model(ids, tt, am, output_attentions=True)
    assert (out.prediction_logits - slow.prediction_logits).abs().max() < 1e-5


def test_geglu_feed_forward_is_gelu_of_the_gate_times_the_value(tiny_config):
    cfg = dataclasses.replace(tiny_config, hidden_act="geglu")
    ff = BertForPreTraining(cfg).bert.layers[0].feed_forward
    I = cfg.intermediate_size
    assert ff.intermediate.out_features == 2 * I and ff.output.in_features == I
    x = torch.randn(3, 5, cfg.hidden_size)
    w_gate, w_value = ff.intermediate.weight[:I], ff.intermediate.weight[I:]
    b_gate, b_value = ff.intermediate.bias[:I], ff.intermediate.bias[I:]
    by_hand = F.gelu(x @ w_gate.T + b_gate) * (x @ w_value.T + b_value)
    torch.testing.assert_close(ff.hidden(x), by_hand)
    torch.testing.assert_close(ff(x), ff.output(by_hand))


def test_presets_have_4x_intermediate():
    assert MODEL_PRESETS["mini"] == dict(
        num_hidden_layers=4, hidden_size=256, num_attention_heads=4, intermediate_size=1024
    )
    for shape in MODEL_PRESETS.values():
        ModelConfig(**shape)


@pytest.mark.parametrize(
    "bad",
    [
        dict(hidden_size=30),
        dict(vocab_size=0),
        dict(hidden_dropout_prob=1.5),
        dict(hidden_act="relu"),
        dict(pad_token_id=200),
        dict(position_embedding_init="rotary"),
        dict(position_embedding_scale=0.0),
        dict(attention_init="identity"),
        dict(mimetic_score=0.0),
        dict(attention_init="roles", num_attention_heads=1),
        dict(attention_init="roles", hidden_size=33, num_attention_heads=3),
    ],
)
def test_config_validation(tiny_config, bad):
    with pytest.raises(NanobertError):
        dataclasses.replace(tiny_config, **bad)


def test_layers_train(tiny_config):
    """Every parameter gets a gradient (no layer created inside forward, nothing detached)."""
    model = BertForPreTraining(tiny_config)
    ids, tt, am = random_batch(tiny_config, pad_last=2)
    labels = torch.where(torch.rand(ids.shape) < 0.3, ids, torch.full_like(ids, -100))
    labels[0, 1] = ids[0, 1]
    model(ids, tt, am, labels=labels, next_sentence_label=torch.tensor([0, 1, 1])).loss.backward()
    for name, p in model.named_parameters():
        if name == "bert.embeddings.position_embeddings.weight":
            continue
        assert p.grad is not None and p.grad.abs().sum() > 0, name


def test_sequence_classification(tiny_config):
    model = BertForSequenceClassification(tiny_config, num_labels=3)
    ids, tt, am = random_batch(tiny_config)
    out = model(ids, tt, am, labels=torch.tensor([0, 2, 1]))
    assert out.logits.shape == (3, 3) and out.loss.ndim == 0
    reg = BertForSequenceClassification(tiny_config, num_labels=1, problem_type="regression")
    out = reg(ids, tt, am, labels=torch.tensor([0.5, 1.0, 2.0]))
    assert out.logits.shape == (3, 1) and out.loss > 0


@pytest.mark.parametrize(
    "change",
    [dict(pre_layer_norm=False), dict(pre_layer_norm=True), dict(hidden_act="geglu")],
    ids=["post-LN", "pre-LN", "GEGLU"],
)
def test_query_pruning_gives_the_same_losses_logits_and_gradients(tiny_config, change):
    """With query_positions the last layer computes only [CLS] and the masked positions; nothing the losses
    read may change, padding and a row with no masked position included."""
    config = dataclasses.replace(tiny_config, **change)
    model = BertForPreTraining(config).eval()
    ids, tt, am = random_batch(config, B=4, T=13, pad_last=5)
    labels = torch.full_like(ids, -100)
    chosen = (torch.rand(ids.shape) < 0.3) & am.bool()
    chosen[:, 0] = False
    chosen[1] = False  # no masked position in this row
    labels[chosen] = ids[chosen]
    nsp = torch.tensor([0, 1, 1, 0])
    query_positions, mlm_positions = query_layout(labels, multiple=8, width_multiple=4)
    full = model(
        ids, tt, am, labels=labels, next_sentence_label=nsp, mlm_positions=masked_positions(labels, 8)
    )
    pruned = model(
        ids,
        tt,
        am,
        labels=labels,
        next_sentence_label=nsp,
        mlm_positions=mlm_positions,
        query_positions=query_positions,
    )
    torch.testing.assert_close(pruned.prediction_logits, full.prediction_logits, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(pruned.seq_relationship_logits, full.seq_relationship_logits)
    torch.testing.assert_close(pruned.loss, full.loss)
    # Found on the device when mlm_positions is not given.
    torch.testing.assert_close(
        model(ids, tt, am, labels=labels, next_sentence_label=nsp, query_positions=query_positions).loss,
        full.loss,
    )
    params = list(model.parameters())
    grads = torch.autograd.grad(full.loss, params), torch.autograd.grad(pruned.loss, params)
    for a, b in zip(*grads, strict=True):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)
    with pytest.raises(ValueError, match="needs labels"):
        model(ids, tt, am, query_positions=query_positions)


# ----------------------------------------------------------------------------------------------------------
# The causal flag: GPT's next-word task on the same stack


def causal_config(tiny_config, **kw):
    return dataclasses.replace(tiny_config, is_decoder=True, **kw)


@pytest.mark.parametrize("model_class", ["BertLMHeadModel", "BertForHybridLM"])
@pytest.mark.parametrize("pre_layer_norm", [False, True])
def test_a_causal_position_never_sees_a_later_token(tiny_config, pre_layer_norm, model_class):
    """Changing tokens after position t changes no output at t; the same probe catches a bidirectional one.
    The hybrid model reads causally unless a call asks otherwise (its next-word batches: test_hybrid.py)."""
    import nanobert.causal_model

    torch.manual_seed(0)
    config = causal_config(tiny_config, pre_layer_norm=pre_layer_norm)
    causal = getattr(nanobert.causal_model, model_class)(config).eval()
    ids = torch.randint(5, 99, (2, 13))
    later = ids.clone()
    later[:, 8:] = torch.randint(5, 99, (2, 5))
    with torch.no_grad():
        a, b = causal(ids).logits, causal(later).logits
        assert torch.allclose(a[:, :8], b[:, :8], atol=1e-6)
        assert not torch.allclose(a[:, 8:], b[:, 8:], atol=1e-3)
        # the explicit attention path (attention maps) applies the same mask: zero above the diagonal
        out = causal(ids, output_attentions=True)
        assert torch.allclose(out.logits, a, atol=1e-5)
        assert all(p.triu(diagonal=1).abs().max() == 0 for p in out.attentions)
        # padding and the causal mask together still see no later token
        mask = torch.ones_like(ids)
        mask[1, 10:] = 0
        padded = causal(ids, None, mask).logits
        assert torch.allclose(padded[:, :8], causal(later, None, mask).logits[:, :8], atol=1e-6)
    bidirectional = BertForPreTraining(dataclasses.replace(tiny_config, pre_layer_norm=pre_layer_norm)).eval()
    with torch.no_grad():
        x, y = bidirectional(ids).prediction_logits, bidirectional(later).prediction_logits
    assert not torch.allclose(x[:, :8], y[:, :8], atol=1e-3)  # the probe does detect looking ahead


def test_the_target_at_position_t_is_the_token_at_t_plus_1(tiny_config):
    from nanobert.causal_model import BertLMHeadModel

    torch.manual_seed(0)
    model = BertLMHeadModel(causal_config(tiny_config)).eval()
    ids = torch.randint(5, 99, (2, 9))
    labels = ids.clone()
    labels[:, 0] = -100  # as the causal collator writes them
    labels[1, 6:] = -100  # padding
    out = model(ids, labels=labels)
    logits = out.logits
    by_hand = [
        F.cross_entropy(logits[b, t], ids[b, t + 1], reduction="sum") for b in range(2) for t in range(8)
    ]
    keep = [not (b == 1 and t + 1 >= 6) for b in range(2) for t in range(8)]
    expected = torch.stack([x for x, k in zip(by_hand, keep, strict=True) if k]).mean()
    assert out.loss.item() == pytest.approx(expected.item(), rel=1e-5)
    assert model.bert.pooler is None and not hasattr(model, "nsp_head")
    with pytest.raises(ValueError, match="is_decoder"):
        BertLMHeadModel(tiny_config)


@pytest.mark.parametrize("causal", [False, True])
def test_return_logits_false_trains_the_same(tiny_config, causal):
    """Training asks for the loss only; the model then skips the logits but computes the same loss and
    gradients (fp32)."""
    from nanobert.causal_model import BertLMHeadModel

    config = dataclasses.replace(tiny_config, is_decoder=causal)
    torch.manual_seed(0)
    model = (BertLMHeadModel if causal else BertForPreTraining)(config).eval()
    ids, tt, am = random_batch(config, pad_last=3)
    labels = ids.clone() if causal else torch.full_like(ids, -100)
    if not causal:
        labels[:, 2::3] = ids[:, 2::3]
    kwargs = {} if causal else {"next_sentence_label": torch.tensor([0, 1, 0])}
    runs = []
    for return_logits in (True, False):
        model.zero_grad()
        out = model(ids, tt, am, labels=labels, return_logits=return_logits, **kwargs)
        out.loss.backward()
        runs.append((out.loss.detach(), [p.grad.clone() for p in model.parameters()]))
        logits = out.logits if causal else out.prediction_logits
        assert (logits is None) == (not return_logits)
    torch.testing.assert_close(runs[1][0], runs[0][0], atol=1e-5, rtol=1e-5)
    for a, b in zip(runs[0][1], runs[1][1], strict=True):
        torch.testing.assert_close(b, a, atol=1e-5, rtol=1e-4)
