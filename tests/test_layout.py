"""The house rules of src/nanobert, checked: floors, late imports, sizes.

Every module sits on a floor and imports only from floors below it (imports inside functions count too), so
there is no import circle and a newcomer knows where a change belongs (docs/code-layout.md, whose floor table
is checked against FLOORS here).
Imports inside functions are for optional third-party packages only, and for the CLI's start-up speed.
No function is longer than ~80 lines, no CLI command longer than ~30, and the two jobs stay well under 500.
"""

import ast
import re
import shlex
from pathlib import Path

import nanobert
from nanobert.cli import build_parser

SRC = Path(nanobert.__file__).parent
PAGE = Path(__file__).parents[1] / "docs" / "code-layout.md"  # the floors as users read them

FLOORS = {
    "errors": 0,  # the one user-facing exception
    # 1: leaves that know nothing of the model
    "config": 1,
    "device": 1,
    "run_files": 1,  # reading a run's metrics.jsonl and summary.json back (the page, a resumed run)
    "plots": 1,
    "distributed": 1,
    "tabular": 1,
    "metrics": 1,
    "optim": 1,
    "reference": 1,
    "tokenizer": 1,  # the special ids and IGNORE_INDEX, the labels' "nothing to predict"
    "corpus": 1,
    # 2: data built on the tokenizer's ids (never on the model), and the model's speed-only pieces
    "pretraining_data": 2,
    "qa_data": 2,
    "finetune_data": 2,
    "recipes": 2,  # the presets and the first run's choices
    "fast": 2,  # faster stand-ins for F.dropout and the vocabulary loss, imported by name by model.py
    "run_log": 2,  # metrics.jsonl, progress and summary.json as a run writes them (over run_files)
    "model": 3,  # the one model file
    # 4: checkpoints and the trace of a forward pass, built on the model
    "checkpoint": 4,
    "explain": 4,
    # 5: streams of batches, prepared corpora, the training loop
    "prepare": 5,
    "streams": 5,
    "engine": 5,
    "scoring": 5,  # sentence (pseudo-)log-likelihoods of either language model
    "held_out": 5,  # the held-out protocol: each objective's fixed batches and metrics
    "hybrid": 6,  # the hybrid objective's batches, loss and held-out metrics (GPT-BERT)
    # 6-7: where the data comes from; using, evaluating and exporting checkpoints
    "sources": 6,
    "inference": 6,
    "task_inference": 6,  # a fine-tuned classifier's outputs and labels (predict, the page's label panel)
    "qa_inference": 7,  # a fine-tuned QA model's answers (answer, predict, the page's answer panel)
    "hf_export": 6,
    "blimp": 7,  # the BLiMP yardstick: minimal pairs scored with `scoring`
    "objectives": 8,  # one record per pretraining objective: everything that differs between them
    "depth": 9,  # the first run's depth, by the passes its plan gives (timed on this machine)
    "evaluate": 9,  # a model's or a checkpoint's held-out metrics, by its objective
    "tuning": 8,  # what every fine-tuning job shares: the encoder, epochs with a dev evaluation, best/
    "adapt": 9,  # task-adaptive masked-LM before fine-tuning, on the shared loop and tuning's encoder copy
    # 10: the jobs
    "train": 10,
    "finetune": 10,
    "qa": 10,
    "serve": 11,  # the browser page, over the inference side's library calls (never a job's)
    "cli": 12,  # the command line on top
    "__main__": 13,
    "__init__": 13,  # lazy re-exports (importlib), imported by nobody inside the package
}
# Optional packages, imported inside the function that needs them (starlette comes with fastapi).
OPTIONAL = {"datasets", "transformers", "matplotlib", "fastapi", "starlette", "uvicorn"}
LATE_NANOBERT_OK = {"cli"}  # the CLI imports its commands' modules when they run, for start-up speed


def modules() -> dict[str, ast.Module]:
    return {p.stem: ast.parse(p.read_text()) for p in sorted(SRC.glob("*.py"))}


def imports(tree: ast.Module) -> list[tuple[str, bool, int]]:
    """(imported top-level name or nanobert module, inside a function?, line) for every import."""
    out = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inner = in_function or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef)
            if isinstance(child, ast.ImportFrom) and child.module:
                parts = child.module.split(".")
                name = parts[1] if parts[0] == "nanobert" and len(parts) > 1 else parts[0]
                out.append(
                    (f"nanobert.{name}" if parts[0] == "nanobert" else name, in_function, child.lineno)
                )
            elif isinstance(child, ast.Import):
                for alias in child.names:
                    parts = alias.name.split(".")
                    name = f"nanobert.{parts[1]}" if parts[0] == "nanobert" and len(parts) > 1 else parts[0]
                    out.append((name, in_function, child.lineno))
            visit(child, inner)

    visit(tree, False)
    return out


def test_every_module_has_a_floor():
    assert set(modules()) == set(FLOORS), "add the new module to FLOORS (and to docs/code-layout.md)"


def test_modules_import_only_from_lower_floors():
    upward = []
    for name, tree in modules().items():
        for target, _, line in imports(tree):
            if target.startswith("nanobert."):
                dep = target.split(".")[1]
                if FLOORS[dep] >= FLOORS[name]:
                    upward.append(f"{name}.py:{line} imports {dep} (floor {FLOORS[dep]} >= {FLOORS[name]})")
    assert not upward, "\n".join(upward)


# The data side: text, tokens and batches. It speaks in token ids and IGNORE_INDEX (tokenizer.py), never in
# the model's terms, so the data code can be read, tested and reused without a model.
DATA_MODULES = {
    "corpus",
    "tokenizer",
    "tabular",
    "pretraining_data",
    "finetune_data",
    "qa_data",
    "streams",
    "prepare",
    "sources",
}


def test_data_modules_do_not_import_the_model():
    trees = modules()
    assert DATA_MODULES <= set(trees)
    offenders = [
        f"{name}.py:{line} imports model"
        for name in sorted(DATA_MODULES)
        for target, _, line in imports(trees[name])
        if target == "nanobert.model"
    ]
    assert not offenders, "\n".join(offenders)


def test_nothing_below_the_model_floor_reaches_the_model():
    """Not even through another module: everything under the model is usable without it."""
    trees = modules()
    below = [name for name in trees if FLOORS[name] < FLOORS["model"]]
    assert {"pretraining_data", "finetune_data", "qa_data", "tokenizer", "fast"} <= set(below)
    assert [name for name in below if "model" in transitive_imports(name, trees)] == []


def page_floors() -> dict[str, int]:
    """{module: floor} from the page's floor table, whose rows read `| floor | `a.py`, `b.py` | what |`."""
    floors: dict[str, int] = {}
    for line in PAGE.read_text().splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) >= 3 and cells[0].isdigit():
            for name in re.findall(r"`(\w+)\.py`", cells[1]):
                assert name not in floors, f"docs/code-layout.md lists {name}.py twice"
                floors[name] = int(cells[0])
    return floors


def test_the_layout_page_lists_every_module_on_its_floor():
    assert page_floors() == FLOORS


def test_the_layout_page_speaks_to_users_in_commands_that_run():
    text = PAGE.read_text()
    assert not re.search(r"\b(issue|stop|round) \d+|\.\./shared", text, re.IGNORECASE)
    blocks = re.findall(r"```\w*\n(.*?)```", text, re.DOTALL)  # the commands are in code blocks
    lines = [line.strip() for block in blocks for line in block.splitlines()]
    commands = [line for line in lines if line.startswith("nanobert ")]
    scripts = [line.split()[1] for line in lines if line.startswith("python ")]
    assert commands and scripts
    for command in commands:
        build_parser().parse_args(shlex.split(command)[1:])  # an unknown option or command raises
    for script in scripts:
        assert (PAGE.parents[1] / script).is_file(), script


# The training side: what a job runs. The page only answers with a trained model, so it loads none of it.
JOB_MODULES = {"engine", "train", "finetune", "qa", "prepare", "optim", "tuning", "distributed", "run_log"}


def transitive_imports(name: str, trees: dict[str, ast.Module]) -> set[str]:
    """Every nanobert module that importing `name` imports, directly or through others."""
    seen, todo = set(), [name]
    while todo:
        for target, _, _ in imports(trees[todo.pop()]):
            dep = target.split(".")[1] if target.startswith("nanobert.") else None
            if dep in trees and dep not in seen:
                seen.add(dep)
                todo.append(dep)
    return seen


def test_the_page_imports_no_job_module():
    """`nanobert serve` loads the inference side only: the fine-tuned tasks' inference lives beside
    inference.py (task_inference, qa_inference), a run's files are read by run_files, not run_log."""
    trees = modules()
    assert transitive_imports("serve", trees) & JOB_MODULES == set()
    assert {"inference", "task_inference", "qa_inference"} <= transitive_imports("serve", trees)


def test_imports_inside_functions_are_optional_packages_or_the_cli():
    late = []
    for name, tree in modules().items():
        for target, in_function, line in imports(tree):
            if not in_function:
                continue
            if target.startswith("nanobert.") and name in LATE_NANOBERT_OK:
                continue
            if target in OPTIONAL or (name in LATE_NANOBERT_OK and target in {"dataclasses"}):
                continue
            late.append(f"{name}.py:{line} imports {target} inside a function")
    assert not late, "\n".join(late)


def test_sizes_a_newcomer_can_hold():
    too_long = []
    for name, tree in modules().items():
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = node.end_lineno - node.lineno + 1
                limit = 30 if name == "cli" and node.name.startswith("_cmd_") else 80
                if length > limit:
                    too_long.append(f"{name}.py:{node.name} has {length} lines (limit {limit})")
    assert not too_long, "\n".join(too_long)
    for job in ("train", "finetune"):
        assert len((SRC / f"{job}.py").read_text().splitlines()) < 500, job


def test_every_public_name_resolves_with_a_docstring():
    """`nanobert.__all__` is the API a learner reads: each name imports and says what it is (help())."""
    modules = {path.stem for path in SRC.glob("*.py")}
    for name in nanobert.__all__:
        # importing nanobert.X sets the package's attribute X to the module, whatever __getattr__ says
        assert name not in modules, f"nanobert.{name} is also a module's name"
        obj = getattr(nanobert, name)
        assert isinstance(obj, dict) or (obj.__doc__ or "").strip(), f"nanobert.{name} has no docstring"
