"""Device and precision choice."""

import platform

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


def test_a_cpu_job_keeps_freed_memory_for_reuse(monkeypatch):
    """resolve_device sets glibc's malloc to keep freed blocks (keep_freed_memory) for CPU jobs only."""
    calls = []
    monkeypatch.setattr(device, "keep_freed_memory", lambda: calls.append(1) or True)
    resolve_device("cpu")
    assert calls == [1]
    if platform.libc_ver()[0] == "glibc":  # the real call succeeds where mallopt exists
        monkeypatch.undo()
        assert device.keep_freed_memory() is True
        x = torch.full((1024, 1024), 256.0)  # allocating and freeing 4 MiB blocks still works
        for _ in range(3):
            x = (x * 1.0).sqrt()
        assert torch.equal(x, torch.full_like(x, 2.0))


def test_auto_precision_is_the_faster_one_measured_here_and_is_cached(tmp_path, monkeypatch):
    from nanobert.device import choose_precision, precision_cache

    monkeypatch.setenv("NANOBERT_CACHE", str(tmp_path))
    # A step advances a fake clock rather than sleeping: on a busy machine a 20 ms sleep is timed at 21 ms.
    now = [0.0]
    monkeypatch.setattr("nanobert.device.time.perf_counter", lambda: now[0])
    calls = []

    def step(dtype, slow=None):
        calls.append(dtype)
        now[0] += 0.02 if dtype is slow else 0.001

    cpu = torch.device("cpu")
    dtype, why = choose_precision("auto", cpu, lambda d: step(d, slow=None), "shape A")
    assert dtype is torch.bfloat16
    assert why == "bf16 (auto: a step took 20 ms in fp32 and 1 ms in bf16 on this machine)"
    assert calls == [None, torch.bfloat16] + [None, torch.bfloat16] * 3  # warm-ups, then in turns
    dtype, why = choose_precision("auto", cpu, lambda d: step(d, slow=torch.bfloat16), "shape B")
    assert dtype is None and why.startswith("fp32 (auto")  # machines differ: here fp32 is the faster
    calls.clear()
    assert choose_precision("auto", cpu, step, "shape A")[0] is torch.bfloat16 and calls == []  # cached
    assert "shape A" in precision_cache().read_text()
    assert choose_precision("fp32", cpu, step, "shape A") == (None, "fp32, as asked")  # explicit wins
    assert choose_precision("bf16", cpu, step, "shape B")[0] is torch.bfloat16 and calls == []


def test_the_cached_choice_is_the_kernels_own(tmp_path, monkeypatch):
    # The same CPU with its kernels held to a smaller instruction set measures again rather than reading the
    # choice made with all of them.
    from nanobert.device import choose_precision, cpu_kernels

    monkeypatch.setenv("NANOBERT_CACHE", str(tmp_path))
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA", raising=False)
    now = [0.0]
    monkeypatch.setattr("nanobert.device.time.perf_counter", lambda: now[0])
    calls = []

    def step(dtype, slow):
        calls.append(dtype)
        now[0] += 0.02 if dtype is slow else 0.001

    cpu = torch.device("cpu")
    assert choose_precision("auto", cpu, lambda d: step(d, slow=None), "shape K")[0] is torch.bfloat16
    native = cpu_kernels()
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    assert cpu_kernels() == f"{native}, oneDNN AVX2"
    calls.clear()
    assert choose_precision("auto", cpu, lambda d: step(d, slow=torch.bfloat16), "shape K")[0] is None
    assert len(calls) == 8  # measured, not read from the cache
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA")
    calls.clear()
    assert choose_precision("auto", cpu, lambda d: step(d, slow=None), "shape K")[0] is torch.bfloat16
    assert calls == []


def test_a_close_call_is_not_cached(tmp_path, monkeypatch):
    # Two precisions within 10% of each other (what a busy machine makes of any two) are measured again.
    from nanobert.device import choose_precision, precision_cache

    monkeypatch.setenv("NANOBERT_CACHE", str(tmp_path))
    ticks = iter(range(10_000))
    monkeypatch.setattr("nanobert.device.time.perf_counter", lambda: next(ticks))  # every step takes 1 "s"
    calls = []
    for _ in range(2):
        choose_precision("auto", torch.device("cpu"), calls.append, "shape C")
    assert len(calls) == 2 * 8 and not precision_cache().exists()


def test_time_steps_is_the_median_after_a_warm_up(monkeypatch):
    now = [0.0]
    monkeypatch.setattr("nanobert.device.time.perf_counter", lambda: now[0])
    calls = []
    durations = iter([0.05, 0.003, 0.001, 0.002])  # the warm-up is the slow one, as oneDNN's first call is

    def step(dtype):
        calls.append(dtype)
        now[0] += next(durations)

    seconds = device.time_steps(step, {"bf16": torch.bfloat16}, trials=3)
    assert calls == [torch.bfloat16] * 4 and seconds == {"bf16": pytest.approx(0.002)}
