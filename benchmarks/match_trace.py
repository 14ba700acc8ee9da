"""When does a run lose (or keep) the pair? `match_probe.py` every N steps of one pretraining run.

The run is trained in segments: `nanobert pretrain ... --stop-after N`, then `--resume RUN/last --stop-after
2N`, and so on (a resumed run is the uninterrupted one step for step, so the segments are one run); after
each segment its `last/` is probed (`match_probe.probe`: per layer and head, the share of a B word's
attention on its copy in A and the rest, and with `--terms` what the MLM and NSP terms do to it) and written
as one JSON line beside the held-out figures of that step from the run's metrics.jsonl. The step-0 line
probes the run's untrained start.

    python benchmarks/match_trace.py --every 500 --out trace.jsonl --pairs $G/stsb/dev.tsv \\
        --terms $S/dev.raw -- --train $S/train.raw --valid $S/dev.raw --preset wikitext2-cpu \\
        --set num_hidden_layers=2 --max-steps 5600 --seed 1 --tokenizer TOK --out RUN

Everything after `--` is `nanobert pretrain`'s (`--out` and `--max-steps` required); `pair_screens.py`'s
screens apply with `--screen NAME`.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from match_probe import probe

from nanobert.errors import ArgumentParser, NanobertError, run_script

HERE = Path(__file__).resolve().parent


def parse_args() -> tuple[argparse.Namespace, list[str]]:
    argv = sys.argv[1:]
    split = argv.index("--") if "--" in argv else len(argv)
    p = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--every", type=int, default=500)
    p.add_argument("--out", type=Path, required=True, help="the JSON lines")
    p.add_argument("--pairs", type=Path, required=True, help="as match_probe.py's")
    p.add_argument("--text-col", default="sentence1")
    p.add_argument("--text-pair-col", default="sentence2")
    p.add_argument("--limit", type=int, default=400)
    p.add_argument("--terms", type=Path)
    p.add_argument("--term-pairs", type=int, default=128)
    p.add_argument("--screen", nargs="*", default=[], help="pair_screens.py screens for the run")
    args = p.parse_args(argv[:split])
    pretrain = argv[split + 1 :]
    for needed in ("--out", "--max-steps"):
        if needed not in pretrain:
            raise NanobertError(f"give nanobert pretrain's {needed} after --")
    return args, pretrain


def segment(args: argparse.Namespace, command: list[str]) -> None:
    """One fresh process of `nanobert pretrain` (through pair_screens.py when screens are asked for)."""
    runner = [sys.executable, str(HERE / "pair_screens.py"), "--screen", *args.screen, "--", "nanobert"]
    head = runner if args.screen else [sys.executable, "-m", "nanobert"]
    subprocess.run([*head, "pretrain", *command, "--quiet"], check=True, stdout=subprocess.DEVNULL)


def held_out_at(run: Path, step: int) -> dict:
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    found = [r for r in rows if r.get("split") == "valid" and r["step"] == step]
    return {k: v for k, v in found[-1].items() if k != "split"} if found else {}


def main() -> None:
    args, pretrain = parse_args()
    run = Path(pretrain[pretrain.index("--out") + 1])
    total = int(pretrain[pretrain.index("--max-steps") + 1])
    stops = [*range(args.every, total, args.every), total]
    for i, stop in enumerate(stops):
        until = ["--stop-after", str(stop)] if stop < total else []  # the last segment finishes the run
        if i == 0:
            segment(args, [*pretrain, *until])
            untrained = probe(run / "last", argparse.Namespace(**{**vars(args), "untrained": True}))
            write(args.out, untrained, {})
        else:
            segment(args, ["--resume", str(run / "last"), *until])
        line = probe(run / "last", argparse.Namespace(**{**vars(args), "untrained": False}))
        write(args.out, line, held_out_at(run, stop))
        print(f"match_trace.py: step {stop}: {json.dumps(line['heads'])}", flush=True)


def write(out: Path, line: dict, held_out: dict) -> None:
    with open(out, "a") as f:
        f.write(json.dumps({**line, "held_out": held_out}) + "\n")


if __name__ == "__main__":
    raise SystemExit(run_script("match_trace.py", main))
