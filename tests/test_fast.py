"""fast.py: each speed-only piece does what the torch call it replaces does."""

import pytest
import torch
import torch.nn.functional as F

from nanobert import fast
from nanobert.config import ModelConfig
from nanobert.fast import LOSS_CHUNK_ROWS, attention_by_math, dropout, linear_cross_entropy
from nanobert.model import SelfAttention


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_dropout_zeroes_p_of_the_elements_and_scales_the_rest(dtype):
    """The fast CPU mask (fp32, bf16) and the F.dropout fallback (other dtypes) behave as F.dropout does."""
    x = torch.ones(301, 997, dtype=dtype, requires_grad=True)  # odd: four 16-bit draws per 64-bit one
    y = dropout(x, 0.3, training=True)
    zero = (y == 0).double().mean().item()
    assert abs(zero - 0.3) < 0.005  # 300k draws: the standard error is 0.0008
    kept = y[y != 0].detach()
    assert torch.equal(kept, torch.full_like(kept, 1 / 0.7))  # the scale, rounded to the dtype
    y.sum().backward()
    assert torch.equal(x.grad, y.detach())  # the gradient passes through the same mask
    assert dropout(x, 0.3, training=False) is x and dropout(x, 0.0, training=True) is x
    assert not dropout(x, 1.0, training=True).any()  # p = 1 drops everything, as F.dropout does


def test_dropout_masks_follow_torch_seed_and_differ_between_calls():
    x = torch.ones(5, 7)  # odd count: the last 64-bit draw is only partly used
    torch.manual_seed(3)
    a, b = dropout(x, 0.5, True), dropout(x, 0.5, True)
    torch.manual_seed(3)
    assert torch.equal(dropout(x, 0.5, True), a)  # torch.manual_seed and a resumed RNG state fix the masks
    assert not torch.equal(a, b)


@pytest.mark.parametrize("group", [fast.LOSS_GROUP_ROWS, 700])
@pytest.mark.parametrize("dtype", [None, torch.bfloat16])
def test_linear_cross_entropy_matches_linear_then_cross_entropy(dtype, group, monkeypatch):
    """The chunked loss (several chunks, ignored rows, autocast or not; one weight-gradient group, or
    two that end inside a chunk): the same loss and gradients as the plain computation."""
    monkeypatch.setattr(fast, "LOSS_GROUP_ROWS", group)
    torch.manual_seed(0)
    N, H, V = 2 * LOSS_CHUNK_ROWS + 37, 24, 101
    h = torch.randn(N, H, requires_grad=True)
    weight = (torch.randn(V, H) * 0.3).requires_grad_()
    bias = (torch.randn(V) * 0.1).requires_grad_()
    target = torch.randint(0, V, (N,))
    target[::5] = -100
    results = []
    for chunked in (False, True):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype is not None):
            if chunked:
                loss = linear_cross_entropy(h, weight, bias, target)
            else:
                loss = F.cross_entropy(F.linear(h, weight, bias).float(), target)
        grads = torch.autograd.grad(3.0 * loss, (h, weight, bias))
        results.append((loss.detach(), *grads))
    tolerance = 1e-5 if dtype is None else 2e-2  # bf16 rounds the gradient before its matmuls
    for plain, chunked in zip(*results, strict=True):
        torch.testing.assert_close(chunked, plain, atol=tolerance, rtol=tolerance)
    no_targets = torch.full((N,), -100)
    assert linear_cross_entropy(h, weight, bias, no_targets).item() == 0.0


def test_a_target_far_below_the_rest_gives_a_finite_loss_and_the_exact_gradient():
    """A target probability below fp32's smallest normal (a loss past 87 nats) counts as 87.3 nats instead
    of infinity; its gradient (softmax - one_hot) is the exact one."""
    h = torch.eye(3, 4, requires_grad=True)
    weight = torch.zeros(5, 4)
    weight[0, 0], weight[1, 1], weight[2, 2] = -200.0, 3.0, 1.0  # row 0's target, class 0, scores -200
    weight.requires_grad_()
    bias = torch.zeros(5, requires_grad=True)
    target = torch.tensor([0, 1, 2])
    loss = linear_cross_entropy(h, weight, bias, target)
    plain = F.cross_entropy(F.linear(h, weight, bias), target, reduction="none")
    assert plain[0] > 190 and torch.isfinite(loss)
    expected = (-torch.log(torch.tensor(torch.finfo(torch.float32).tiny)) + plain[1:].sum()) / 3
    torch.testing.assert_close(loss, expected)
    grads = torch.autograd.grad(loss, (h, weight, bias))
    plain_grads = torch.autograd.grad(plain.mean(), (h, weight, bias))
    for ours, theirs in zip(grads, plain_grads, strict=True):
        torch.testing.assert_close(ours, theirs)


def test_a_cpu_trains_short_sequences_by_the_attention_math():
    """The rule: a CPU with dropout, or training (gradients on) up to MATH_ATTENTION_MAX_LEN positions."""
    short, long = (
        torch.zeros(2, fast.MATH_ATTENTION_MAX_LEN, 8),
        torch.zeros(2, fast.MATH_ATTENTION_MAX_LEN + 1, 8),
    )
    assert attention_by_math(short, 0.0) and not attention_by_math(long, 0.0)
    assert attention_by_math(long, 0.1)  # SDPA has no CPU dropout kernel
    with torch.no_grad():
        assert not attention_by_math(short, 0.0)  # inference: the fused kernel
    assert not attention_by_math(torch.zeros(2, 16, 8, device="meta"), 0.1)  # not a CPU


@pytest.mark.parametrize("causal", [False, True])
def test_the_attention_math_and_the_fused_kernel_agree(monkeypatch, causal):
    """Outputs and gradients of both ways of computing attention, with padding, all queries or some."""
    torch.manual_seed(0)
    attention = SelfAttention(ModelConfig(hidden_size=24, num_attention_heads=3, is_decoder=causal))
    attention.attn_dropout = 0.0
    x = torch.randn(3, 11, 24, requires_grad=True)
    mask = torch.ones(3, 11, dtype=torch.bool)
    mask[1, 7:] = False
    queries = None if causal else torch.tensor([[0, 3], [0, 6], [0, 10]])
    results = []
    for most in (fast.MATH_ATTENTION_MAX_LEN, 0):  # the math, then the fused kernel
        monkeypatch.setattr(fast, "MATH_ATTENTION_MAX_LEN", most)
        y, _ = attention(x, mask[:, None, None, :], query_positions=queries)
        results.append((y, *torch.autograd.grad(y.square().sum(), (x, attention.qkv.weight))))
    for math, fused in zip(*results, strict=True):
        torch.testing.assert_close(math, fused, atol=1e-5, rtol=1e-5)
