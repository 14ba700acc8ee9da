"""What `nanobert glue` reports: the GLUE table (OUT/glue.md), every run's figures (glue.json, glue.csv), the
picture (glue.png) and, while the GLUE server's files are not all there, a notice in OUT/submission/ that says
so; each written whole through a temporary file, so that Ctrl-C never leaves half a table.

A task's figure for one init (pretrained, or the from-scratch control) is the mean over the seeds of each of
its metrics, with the sample standard deviation over the seeds; its score is the mean of its metrics (MRPC's
F1 and accuracy, STS-B's Pearson and Spearman, MNLI's matched and mismatched accuracy); the GLUE score is the
mean of the nine task scores, as the benchmark computes it (Wang et al. 2019). It is taken over the tasks
whose runs all finished, every init's and seed's, so that the pretrained model and its control are compared
on the same tasks; over fewer than nine it is named "GLUE score over N tasks", never the GLUE score.
"""

from __future__ import annotations

import csv
import io
import json
import statistics
import textwrap
from pathlib import Path
from typing import Any

from nanobert.files import atomic_file
from nanobert.finetuning.glue_tasks import GLUE_TASKS, GlueTask
from nanobert.use.plots import save_figure

METRIC_NAMES = {
    "mcc": "MCC",
    "accuracy": "accuracy",
    "f1": "F1",
    "pearson": "Pearson",
    "spearman": "Spearman",
}
CSV_FIELDS = ("task", "init", "seed", "metric", "value", "seconds")
NOTICE = "INCOMPLETE.txt"  # in OUT/submission/ while a file the GLUE server needs is missing


def spread(values: list[float]) -> dict[str, Any] | None:
    """Mean, sample standard deviation (None for one value) and count; None for no values."""
    if not values:
        return None
    std = statistics.stdev(values) if len(values) > 1 else None
    return {"mean": statistics.fmean(values), "std": std, "n": len(values)}


def build_report(
    tasks: list[GlueTask], inits: tuple[str, ...], seeds: tuple[int, ...], runs: list[dict], about: dict
) -> dict[str, Any]:
    """The report of `runs` (the results of `glue.train_run`): `about` (checkpoint, data, skipped tasks,
    caps, the submission's files ...), then per task and metric each init's spread over the seeds, the task
    scores, the GLUE score over the finished tasks (`glue_tasks`, named `glue_name`), the differences from
    the control on those tasks, the markdown table and the runs themselves."""
    runs = [{k: v for k, v in r.items() if k != "options"} for r in runs]  # glue-options.json has them
    by = {(r["task"], r["init"], r["seed"]): r for r in runs}
    done = [t for t in tasks if any((t.name, i, s) in by for i in inits for s in seeds)]
    metrics, task_scores, per_seed = {}, {}, {}
    for task in done:
        got = {
            (i, s): by[(task.name, i, s)]["metrics"] for i in inits for s in seeds if (task.name, i, s) in by
        }
        metrics[task.title] = {
            key: {i: spread([m[key] for (j, _), m in got.items() if j == i]) for i in inits}
            for key in task.keys()
        }
        per_seed[task.title] = {
            (i, s): statistics.fmean(m[k] for k in task.keys()) for (i, s), m in got.items()
        }
        task_scores[task.title] = {
            i: spread([v for (j, _), v in per_seed[task.title].items() if j == i]) for i in inits
        }
    finished = [t.title for t in done if all((t.name, i, s) in by for i in inits for s in seeds)]
    report = {
        **about,
        "tasks": [t.title for t in done],
        "inits": list(inits),
        "seeds": list(seeds),
        "metrics": metrics,
        "task_scores": task_scores,
        "glue_tasks": finished,
        "glue_name": glue_name(len(finished)),
        "glue_score": {i: glue_score(per_seed, i, seeds, finished) for i in inits},
        "runs": runs,
    }
    report["difference"] = differences(report, inits)
    report["table"] = markdown(report)
    return report


def glue_name(count: int) -> str:
    """The name of a mean of `count` task scores: "GLUE score" for all nine tasks, "GLUE score over N
    tasks" for fewer, which is not the benchmark's figure."""
    if count == len(GLUE_TASKS):
        return "GLUE score"
    return f"GLUE score over {count} task{'s' * (count != 1)}"


def glue_score(per_seed: dict, init: str, seeds: tuple[int, ...], titles: list[str]) -> dict[str, Any] | None:
    """The mean over the seeds of each seed's mean task score of `init` on `titles` (tasks every seed of
    every init finished, so the mean is also that of the task scores), the spread over the seeds, and the
    number of tasks `n`; None without tasks."""
    if not titles:
        return None
    by_seed = [statistics.fmean(per_seed[t][(init, s)] for t in titles) for s in seeds]
    return {**spread(by_seed), "n": len(titles)}


def differences(report: dict, inits: tuple[str, ...]) -> dict[str, Any] | None:
    """Pretrained minus control on the tasks both finished (`glue_tasks`): every metric's mean, every task
    score and the GLUE score (None without a control, and for a task either side has not finished)."""
    if len(inits) < 2:
        return None
    first, control, both = inits[0], inits[1], set(report["glue_tasks"])

    def minus(pair: dict | None, title: str | None = None) -> float | None:
        a, b = (pair.get(first), pair.get(control)) if pair else (None, None)
        if a is None or b is None or (title is not None and title not in both):
            return None
        return a["mean"] - b["mean"]

    return {
        "metrics": {t: {k: minus(v, t) for k, v in m.items()} for t, m in report["metrics"].items()},
        "task_scores": {t: minus(v, t) for t, v in report["task_scores"].items()},
        "glue_score": minus(report["glue_score"]),
    }


# ----------------------------------------------------------------------------------------------------------
# The table


def cell(stats: dict | None) -> str:
    if stats is None:
        return "–"
    return f"{stats['mean']:.4f}" + (f" ± {stats['std']:.4f}" if stats["std"] is not None else "")


def signed(value: float | None) -> str:
    return "–" if value is None else f"{value:+.4f}"


def metric_name(key: str) -> str:
    """`m_accuracy` as "accuracy (m)", `mcc` as "MCC"."""
    tag, _, metric = key.rpartition("_") if key not in METRIC_NAMES else ("", "", key)
    return METRIC_NAMES.get(metric, metric) + (f" ({tag})" if tag else "")


def markdown(report: dict) -> str:
    """glue.md: the table (a row per task and metric, the GLUE score last) and the notes under it."""
    inits, diff = report["inits"], report["difference"]
    head = ["task", "metric", *inits] + (["difference"] if diff else [])
    lines = [f"# GLUE: {report['checkpoint']}", "", textwrap.fill(intro(report), 110), ""]
    lines += ["| " + " | ".join(head) + " |", "|---|---|" + "---:|" * (len(head) - 2)]
    for title, by_key in report["metrics"].items():
        for key, by_init in by_key.items():
            row = [title, metric_name(key), *(cell(by_init[i]) for i in inits)]
            lines.append(
                "| " + " | ".join(row + ([signed(diff["metrics"][title][key])] if diff else [])) + " |"
            )
    scores, titles = report["glue_score"], report["glue_tasks"]
    if len(titles) == len(GLUE_TASKS):
        what = f"mean of the {len(titles)} task scores"
    else:
        what = f"mean of {', '.join(titles)}" if titles else "no task finished"
    row = [f"**{report['glue_name']}**", what, *(cell(scores[i]) for i in inits)]
    lines.append("| " + " | ".join(row + ([signed(diff["glue_score"])] if diff else [])) + " |")
    return "\n".join(lines + [""] + notes(report)) + "\n"


def intro(report: dict) -> str:
    seeds = report["seeds"]
    over = (
        f"the mean ± standard deviation over seeds {', '.join(map(str, seeds))}"
        if len(seeds) > 1
        else (f"seed {seeds[0]}")
    )
    text = (
        f"Dev-set figures after fine-tuning with `finetune`'s defaults, {over}; a task's score is the mean "
        "of its metrics, the GLUE score the mean of the nine task scores (over fewer, the tasks whose runs "
        'all finished, it is a "GLUE score over N tasks", not the benchmark\'s).'
    )
    if len(report["inits"]) > 1:
        text += f" *{report['inits'][1]}* is the same fine-tuning from the checkpoint's untrained start."
    return text


def notes(report: dict) -> list[str]:
    """The lines under the table: what did not run, what was capped, the predictions, the time."""
    lines = []
    unfinished = [t for t in report["tasks"] if t not in report["glue_tasks"]]
    if unfinished:
        lines.append(f"- Not in the GLUE score, some of their runs not finished: {', '.join(unfinished)}.")
    if report["skipped"]:
        missing = ", ".join(f"{t} ({why})" for t, why in report["skipped"].items())
        lines.append(f"- Not run, their files missing from {report['data']}: {missing}.")
    if report["capped"]:
        parts = [f"{t} {used:,} of {full:,}" for t, (used, full) in report["capped"].items()]
        cap = report["max_train_examples"]
        lines.append(
            f"- Training sets capped at a random {cap:,} examples (--max-train-examples): {', '.join(parts)}."
        )
    if report["submission"]:
        files = ", ".join(report["submission"])
        seed = report["seeds"][0]
        lines.append(
            f"- Test-set predictions for the GLUE server (seed {seed}, pretrained): submission/ ({files})."
        )
        if report["submission_missing"]:
            lines.append(f"- {incomplete(report)} (submission/{NOTICE} says the same).")
    if report.get("control"):
        lines.append(f"- scratch, the control: {report['control']}; the seeds draw its weights.")
    minutes = sum(r["seconds"] for r in report["runs"]) / 60
    count = len(report["runs"])
    runs = f"{count} fine-tuning run{'s' if count != 1 else ''}"
    lines.append(f"- {runs}, {minutes:.1f} minutes; each in TASK/INIT-seedN/.")
    if report["stopped_by_signal"]:
        lines.append("- Stopped by a signal before every run finished: run the same command again to finish.")
    return lines


def incomplete(report: dict) -> str:
    """The sentence that says the submission lacks files the GLUE server needs, naming them."""
    needs = ", ".join(name.removesuffix(".tsv") for name in report["submission_needs"])
    missing = ", ".join(report["submission_missing"])
    return f"The submission is incomplete: the GLUE server needs all of {needs}; submission/ lacks {missing}"


def notice(report: dict) -> str:
    """submission/INCOMPLETE.txt: what is missing, and how to add it."""
    missing = set(report["submission_missing"])
    tasks = [t.name for t in GLUE_TASKS.values() if any(t.server_name(f) in missing for f in t.tests)]
    how = (
        "A task's file is written once the first seed's pretrained run finishes with the task's test file at "
        "hand; AX.tsv is the MNLI model's labels for GLUE's diagnostic set (diagnostic/diagnostic.tsv in "
        "glue_data/, the hub's nyu-mll/glue ax). To add them, run the same command into the same --out "
        f"with --tasks {' '.join(tasks)}: the finished runs are kept. Zip this folder's .tsv files once this "
        "notice is gone."
    )
    fill = textwrap.TextWrapper(110, break_on_hyphens=False).fill  # never SST- at a line's end
    return fill(incomplete(report) + ".") + "\n\n" + fill(how) + "\n"


# ----------------------------------------------------------------------------------------------------------
# The files


def csv_text(runs: list[dict]) -> str:
    """glue.csv: a row per run and metric: task, init, seed, metric, value, seconds (the run's)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_FIELDS)
    for r in runs:
        for key, value in r["metrics"].items():
            writer.writerow([r["task"], r["init"], r["seed"], key, repr(float(value)), r["seconds"]])
    return out.getvalue()


def figure(report: dict) -> Any:
    """Per task (and the GLUE score) a bar per init: the task's score, the seeds' spread as an error bar."""
    from matplotlib.figure import Figure  # no pyplot: no global backend touched

    n = len(report["glue_tasks"])
    names = [*report["task_scores"], "GLUE" if n == len(GLUE_TASKS) else f"GLUE\n({n} task{'s' * (n != 1)})"]
    rows = [*report["task_scores"].values(), report["glue_score"]]
    fig = Figure(figsize=(max(5.0, 1.1 * len(names) + 1.5), 3.8), dpi=100, layout="constrained")
    ax = fig.subplots()
    width = 0.8 / len(report["inits"])
    for n, init in enumerate(report["inits"]):
        stats = [row[init] if row else None for row in rows]
        heights = [s["mean"] if s else 0.0 for s in stats]
        errors = [s["std"] or 0.0 if s else 0.0 for s in stats]
        ax.bar([x + (n - (len(report["inits"]) - 1) / 2) * width for x in range(len(names))], heights, width,
               yerr=errors, capsize=3, label=init)  # fmt: skip
    ax.axhline(0, color="black", linewidth=0.8)
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels(names)
    ax.set_ylabel("dev score (task metrics averaged)")
    ax.set_title(f"GLUE: {report['checkpoint']}", fontsize=9)
    ax.legend(fontsize=8)
    return fig


def write_report(out: Path, report: dict) -> None:
    """glue.md, glue.json, glue.csv, glue.png and the submission's notice in `out`, each whole or not at
    all."""
    for name, text in (
        ("glue.md", report["table"]),
        ("glue.json", json.dumps({k: v for k, v in report.items() if k != "table"}, indent=2) + "\n"),
        ("glue.csv", csv_text(report["runs"])),
    ):
        with atomic_file(out / name, "w", encoding="utf-8", newline="") as f:
            f.write(text)
    if report["tasks"]:
        save_figure(figure(report), out / "glue.png")
    write_notice(out / "submission", report)


def write_notice(folder: Path, report: dict) -> None:
    """submission/INCOMPLETE.txt while the folder holds some of the server's files but not all; removed once
    it holds them all (no notice, and no folder, before any prediction is written)."""
    if report["submission"] and report["submission_missing"]:
        with atomic_file(folder / NOTICE, "w", encoding="utf-8") as f:
            f.write(notice(report))
    else:
        (folder / NOTICE).unlink(missing_ok=True)


__all__ = ["NOTICE", "build_report", "csv_text", "figure", "glue_name", "markdown", "spread", "write_report"]
