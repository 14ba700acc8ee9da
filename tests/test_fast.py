"""fast.py: each speed-only piece does what the torch call it replaces does."""

import pytest
import torch
import torch.nn.functional as F

from nanobert.fast import LOSS_CHUNK_ROWS, dropout, linear_cross_entropy


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


@pytest.mark.parametrize("dtype", [None, torch.bfloat16])
def test_linear_cross_entropy_matches_linear_then_cross_entropy(dtype):
    """The chunked loss (several chunks, ignored rows, autocast or not): same loss and gradients."""
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
