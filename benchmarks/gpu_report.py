"""The GPU check's report: gpu_check.json (every figure, each step's command and status) and gpu_check.md
(the table), rewritten whole after every item and step, so that a call stopped at its limit still brings back
what finished.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

JSON_NAME, TABLE_NAME = "gpu_check.json", "gpu_check.md"


@dataclass
class Report:
    """gpu_check.json and gpu_check.md, both rewritten whole at every `write`."""

    out: Path
    header: dict
    items: list[dict] = field(default_factory=list)

    def write(self) -> None:
        data = {**self.header, "items": self.items}
        for name, text in ((JSON_NAME, json.dumps(data, indent=1) + "\n"), (TABLE_NAME, self.markdown())):
            part = self.out / (name + ".part")
            part.write_text(text)
            part.replace(self.out / name)

    def markdown(self) -> str:
        h = self.header
        peak = f"{h['peak_tflops']:g} TFLOP/s dense bf16" if h["peak_tflops"] else h["peak_note"]
        lines = [
            f"Device: {h['device_name']} ({h['device']}); torch {h['torch']}, "
            f"transformers {h['transformers']}; MFU against {peak}. Started {h['started']}.",
            "",
            "| # | item | status | s (cap) | nanobert tokens/s | transformers tokens/s | ratio "
            "| nanobert MFU | transformers MFU | compile s (ours / theirs) | peak GiB (ours / theirs) "
            "| notes |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        lines += [table_row(item) for item in self.items]
        profiles = [line for item in self.items for line in profile_lines(item)]
        if profiles:
            lines += [
                "",
                "Where a step's time goes (torch.profiler, self time per step, after the timed rounds):",
                "",
            ]
            lines += profiles
        for item in self.items:
            if said := (item.get("figures") or {}).get("said"):
                lines += ["", f"What item {item['number']}'s run chose and said (its `nanobert:` lines):", ""]
                lines += [f"- `{line}`" for line in said]
        return "\n".join(lines) + "\n"


def profile_lines(item: dict) -> list[str]:
    """One line per side of a profiled throughput item: busy time against the step, the top operations."""
    lines = []
    for side, p in ((item.get("figures") or {}).get("profile") or {}).items():
        top = ", ".join(f"`{op['name']}` {op['ms_per_step']:.2f}" for op in p["top"][:6])
        lines.append(
            f"- item {item['number']}, {side}: {p['clock']} busy {p['busy_ms_per_step']:.1f} ms of a "
            f"{p['wall_ms_per_step']:.1f} ms step; top ms: {top}"
        )
    return lines


def table_row(item: dict) -> str:
    f = item.get("figures") or {}
    cells = [
        str(item["number"]),
        item["title"],
        item["status"],
        f"{item.get('seconds', 0):.0f} ({item['cap_s']:.0f})",
    ]
    if "sides" in f:  # a throughput item
        ours, theirs = f["sides"].get("nanobert", {}), f["sides"].get("transformers", {})
        syncs = f.get("host_syncs")
        notes = [f"{f.get('precision', '?')}", "CUDA graphs" if f.get("cuda_graphs") else ""]
        if ours.get("round_ms"):
            notes.append(f"nanobert's rounds {min(ours['round_ms']):.1f}-{max(ours['round_ms']):.1f} ms")
        if syncs is not None:
            notes.append("host syncs: " + (", ".join(f"{k} {v}" for k, v in syncs.items() if v) or "none"))
        cells += [
            _num(ours.get("tokens_per_s")),
            _num(theirs.get("tokens_per_s")),
            f"**{f['ratio']:.2f}x**" if f.get("ratio") else "-",
            _pct(ours.get("mfu")),
            _pct(theirs.get("mfu")),
            f"{_sec(ours.get('compile_s'))} / {_sec(theirs.get('compile_s'))}",
            f"{_gib(ours.get('peak_mem_gib'))} / {_gib(theirs.get('peak_mem_gib'))}",
            "; ".join(n for n in notes if n),
        ]
    elif RUN_FIGURES & f.keys():  # a pretraining run, and what was measured on its checkpoint
        mem = _gib(f.get("peak_gpu_memory_gib"))
        cells += [_num(f.get("tokens_per_s")), "-", "-", _pct(f.get("mfu")), "-", "-", mem, run_notes(f)]
    else:  # the tests, or an item that left no figures
        counts = ", ".join(f"{n} {word}" for word, n in f.items()) or item.get("note", "")
        cells += ["-"] * 7 + [counts]
    if len(item.get("steps") or []) > 1:
        steps = ", ".join(f"{s['name']} {s['status']} {s['seconds']:.0f} s" for s in item["steps"])
        cells[-1] += f"; steps: {steps}"
    return "| " + " | ".join(cells) + " |"


RUN_FIGURES = {"tokens_per_s", "held_out", "blimp", "chose"}


def run_notes(f: dict) -> str:
    """The notes cell of a pretraining run: its length, the held-out figures, BLiMP and what it chose."""
    notes = []
    if "tokens_per_s" in f:
        notes.append(f"{f.get('steps')} steps in {f.get('train_time_s')} s, {f.get('stop_reason')}")
        final = f.get("final") or {}
        if "mlm_accuracy" in final:
            notes.append(f"final MLM accuracy {final['mlm_accuracy']:.3f}")
        if f.get("steady_tokens_per_s"):
            notes.append(
                f"second half's log windows {_num(f['steady_tokens_per_s'])} tokens/s "
                f"({_pct(f.get('steady_mfu'))} MFU)"
            )
    if held := f.get("held_out"):
        notes.append(
            f"wiki.test.raw: MLM accuracy {_frac(held.get('mlm_accuracy'))}, perplexity "
            f"{_sec(held.get('mlm_perplexity'))}, NSP accuracy {_frac(held.get('nsp_accuracy'))}"
        )
    if blimp := f.get("blimp"):
        notes.append(f"BLiMP {_pct(blimp.get('overall'))} of {_num(blimp.get('pairs'))} pairs")
    if c := f.get("chose"):
        notes.append(
            f"chose: preset {c['preset']}, {c['layers']} layers x {c['hidden_size']}, batch {c['batch_size']}"
            f" x {c['max_seq_len']}, learning rate {c['learning_rate']}"
        )
    return "; ".join(notes)


def _num(x) -> str:
    return f"{x:,.0f}" if isinstance(x, int | float) else "-"


def _pct(x) -> str:
    return f"{x:.1%}" if isinstance(x, int | float) else "n/a"


def _sec(x) -> str:
    return f"{x:.1f}" if isinstance(x, int | float) else "-"


def _frac(x) -> str:
    return f"{x:.3f}" if isinstance(x, int | float) else "-"


def _gib(x) -> str:
    return f"{x:.2f}" if isinstance(x, int | float) else "n/a"


__all__ = ["JSON_NAME", "TABLE_NAME", "Report", "table_row"]
