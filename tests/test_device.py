"""Device and precision choice."""

import pytest
import torch

from nanobert import device
from nanobert.device import autocast, autocast_dtype, hardware_description, resolve_device
from nanobert.errors import NanobertError


def test_precision_auto_uses_bf16_only_where_it_is_native(monkeypatch, capsys):
    cpu = torch.device("cpu")
    assert autocast_dtype("fp32", cpu) is None
    monkeypatch.setattr(device, "cpu_has_native_bf16", lambda: True)
    assert autocast_dtype("auto", cpu) is torch.bfloat16
    monkeypatch.setattr(device, "cpu_has_native_bf16", lambda: False)
    assert autocast_dtype("auto", cpu) is None
    assert capsys.readouterr().err == ""
    # Asked for explicitly, bf16 is honoured, with a one-line note that fp32 would be faster here.
    assert autocast_dtype("bf16", cpu) is torch.bfloat16
    note = capsys.readouterr().err.strip().splitlines()
    assert len(note) == 1 and "precision=fp32" in note[0]


def test_resolve_device_and_autocast_context():
    assert resolve_device("cpu") == torch.device("cpu")
    if not torch.cuda.is_available():
        assert resolve_device("auto") == torch.device("cpu")
        with pytest.raises(NanobertError, match="no CUDA"):
            resolve_device("cuda:0")
    x = torch.ones(2, 3)
    with autocast(torch.device("cpu"), torch.bfloat16):
        assert (x @ x.T).dtype == torch.bfloat16
    with autocast(torch.device("cpu"), None):
        assert (x @ x.T).dtype == torch.float32
    info = hardware_description(torch.device("cpu"), world_size=2)
    assert info["device"] == "cpu" and info["world_size"] == 2 and info["torch_threads"] >= 1
