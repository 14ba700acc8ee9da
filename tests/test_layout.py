"""The house rules of src/nanobert, checked: roles in one order, what each may reach, late imports, sizes.

The package is the learner's files at the top and one folder per role below them (docs/code-layout.md, whose
list of roles is checked against ROLES here). The roles stand in one order, lowest first: a module imports
only from its own role or one below it, never upward and never in a circle (imports inside functions count
too), so that a newcomer knows where a change belongs. Four rules say what the order alone does not:

- data never reaches the model: it speaks in token ids and IGNORE_INDEX, and is read, tested and reused
  without one;
- use/ and serve/ never reach the engine or a job: a trained model answers with no training code loaded;
- the engine knows no objective and no model class: a job hands it a model, a feeder, a loss, an evaluation
  and a way to save;
- nothing reaches upward or around a circle.

Imports inside functions are for optional third-party packages only, and for the CLI's start-up speed. No
module is over 450 lines (model.py, the paper in one file, excepted), no function over 60, no CLI command
over 30; the scripts in benchmarks/ are held to the same module and function sizes.
"""

import ast
import re
import shlex
from pathlib import Path

import nanobert
from nanobert.cli import build_parser

SRC = Path(nanobert.__file__).parent
ROOT = SRC.parents[1]
PAGE = ROOT / "docs" / "code-layout.md"  # the tree as users read it
# Held to the package's sizes too. examples/ is not: pretrain_minimal.py is the flat loop on purpose, the
# short path beside the engine that tests/test_pretrain_minimal.py pins to it.
BENCHMARKS = ROOT / "benchmarks"

# The roles, lowest first. A top-level module is a role of its own; a folder is one role.
ROLES = [
    "errors",  # the user's problems: one exception, one line each
    "files",  # paths checked before a job writes; files and folders written whole
    "config",  # ModelConfig, TrainConfig, the fine-tuning configs, --set
    "device",  # the device, autocast, the timed choice of precision
    "tokenizer",  # WordPiece, the special ids and IGNORE_INDEX
    "data",  # text, tables, NSP pairs, masking, batch streams, shards: never the model
    "fast",  # speed-only stand-ins the model imports by name
    "initialization",  # how the weights start beyond BERT's init, and keep_roles
    "model",  # the paper in one file
    "causal_model",  # GPT's next word and GPT-BERT's hybrid on the same stack
    "reference",  # the same forward pass in NumPy
    "checkpoints",  # checkpoint directories, their kinds, loading; a run's records read back
    "objectives",  # one record per pretraining objective, and evaluation by objective
    "engine",  # the one loop, run state and best/, optimizer, data parallelism, run logs
    "use",  # a loaded model's calls: inference, scoring, BLiMP, explain, metrics, plots
    "hf",  # to and from transformers
    "pretraining",  # the pretraining job, recipes, the first run's size rule
    "finetuning",  # classification, question answering, task-adaptive pretraining
    "serve",  # the page
    "cli",  # the command line on top
    "__main__",
]
TOP_FILES = {
    "model",
    "causal_model",
    "initialization",
    "tokenizer",
    "reference",
    "fast",
    "errors",
    "files",
    "device",
    "__main__",
}
# Optional packages, imported inside the function that needs them (starlette comes with fastapi).
OPTIONAL = {"datasets", "transformers", "matplotlib", "fastapi", "starlette", "uvicorn"}
MAX_MODULE_LINES, MAX_FUNCTION_LINES, MAX_COMMAND_LINES = 450, 60, 30


def module_name(path: Path) -> str:
    """`data.nsp` for src/nanobert/data/nsp.py, `data` for its __init__.py, `__init__` for the package's."""
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__" and len(parts) > 1:
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, ast.Module]:
    return {module_name(p): ast.parse(p.read_text()) for p in sorted(SRC.rglob("*.py"))}


def role(name: str) -> str:
    return name.split(".")[0]


def imports(tree: ast.Module, known: set[str]) -> list[tuple[str, bool, int]]:
    """(what is imported, inside a function?, line) for every import: a nanobert module's dotted name under
    the package (`data.nsp`; the longest known one), or a third-party package's top-level name."""
    out = []

    def resolve(dotted: str) -> str:
        parts = dotted.split(".")
        while parts and ".".join(parts) not in known:
            parts.pop()
        return ".".join(parts)

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inner = in_function or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef)
            targets = []
            if isinstance(child, ast.ImportFrom) and child.module:
                if child.module.split(".")[0] == "nanobert":
                    under = child.module.partition(".")[2]
                    # `from nanobert.data import nsp` names a module; `from nanobert import load` names none
                    targets = [resolve(f"{under}.{a.name}" if under else a.name) for a in child.names]
                    targets = [f"nanobert.{t}" for t in targets if t]
                else:
                    targets = [child.module.split(".")[0]]
            elif isinstance(child, ast.Import):
                for alias in child.names:
                    top, _, under = alias.name.partition(".")
                    targets.append(f"nanobert.{resolve(under)}" if top == "nanobert" and under else top)
            out.extend((target, in_function, child.lineno) for target in targets)
            visit(child, inner)

    visit(tree, False)
    return out


def graph() -> dict[str, set[str]]:
    """{module: the nanobert modules it imports}, imports inside functions included; the package's own
    __init__ (lazy re-exports, imported by nobody inside the package) left out."""
    trees = modules()
    known = set(trees)
    edges = {}
    for name, tree in trees.items():
        deps = {t.removeprefix("nanobert.") for t, _, _ in imports(tree, known) if t.startswith("nanobert.")}
        edges[name] = deps - {name, "__init__"}
    edges.pop("__init__")
    return edges


def reaches(name: str, edges: dict[str, set[str]]) -> set[str]:
    """Every module that importing `name` imports, directly or through others."""
    seen, todo = set(), [name]
    while todo:
        for dep in edges[todo.pop()]:
            if dep not in seen:
                seen.add(dep)
                todo.append(dep)
    return seen


def in_roles(edges: dict[str, set[str]], *roles: str) -> list[str]:
    return sorted(name for name in edges if role(name) in roles)


def test_the_tree_is_the_learner_files_and_the_role_folders():
    top = {p.stem for p in SRC.glob("*.py")} - {"__init__"}
    folders = {p.name for p in SRC.iterdir() if p.is_dir() and (p / "__init__.py").is_file()}
    assert top == TOP_FILES
    assert folders | top == set(ROLES)
    assert not list(SRC.rglob("utils.py")), "no utils.py: a piece two roles need lives below both"


def test_each_folder_says_the_one_question_it_answers():
    for folder in sorted(p for p in SRC.iterdir() if (p / "__init__.py").is_file()):
        doc = ast.get_docstring(ast.parse((folder / "__init__.py").read_text())) or ""
        assert "?" in doc.split("\n\n")[0], f"{folder.name}/__init__.py opens with no question"


def test_imports_run_down_the_roles():
    upward = []
    for name, deps in graph().items():
        for dep in deps:
            if ROLES.index(role(dep)) > ROLES.index(role(name)):
                upward.append(f"{name} imports {dep} ({role(dep)} stands above {role(name)})")
    assert not upward, "\n".join(sorted(upward))


def test_no_import_circle():
    edges = graph()
    circles = sorted(name for name in edges if name in reaches(name, edges))
    assert not circles, f"modules on an import circle: {circles}"


def test_data_never_reaches_the_model():
    """Not even through another module: the data code is usable with no model."""
    edges = graph()
    data = in_roles(edges, "data")
    assert {"data.nsp", "data.masking", "data.streams", "data.labelled", "data.squad"} <= set(data)
    offenders = {name: reaches(name, edges) & {"model", "fast"} for name in data}
    assert not {k: v for k, v in offenders.items() if v}


def test_use_and_serve_never_reach_the_engine_or_a_job():
    """A trained model answers (the CLI's inference commands, `nanobert serve`) with no training code."""
    edges = graph()
    jobs = {"engine", "pretraining", "finetuning"}
    offenders = {}
    for name in in_roles(edges, "use", "serve"):
        reached = sorted(dep for dep in reaches(name, edges) if role(dep) in jobs)
        if reached:
            offenders[name] = reached
    assert not offenders, offenders
    assert {"use.inference", "use.classifier", "use.answers"} <= reaches("serve.app", edges)


def test_the_engine_knows_no_objective_and_no_model():
    """One loop serves every job because nothing in it names what it trains."""
    edges = graph()
    offenders = {}
    for name in in_roles(edges, "engine"):
        reached = sorted(d for d in reaches(name, edges) if role(d) in {"objectives", "model"})
        reached += sorted(d for d in reaches(name, edges) if role(d) == "data" and d != "data.feeder")
        if reached:
            offenders[name] = reached
    assert not offenders, offenders


def test_imports_inside_functions_are_optional_packages_or_the_cli():
    trees = modules()
    late = []
    for name, tree in trees.items():
        for target, in_function, line in imports(tree, set(trees)):
            if not in_function or target in OPTIONAL:
                continue
            if role(name) == "cli" and (target.startswith("nanobert.") or target == "dataclasses"):
                continue  # the CLI imports its commands' modules when they run, for start-up speed
            late.append(f"{name}:{line} imports {target} inside a function")
    assert not late, "\n".join(late)


def test_sizes_a_newcomer_can_hold():
    too_long = []
    scripts = sorted(BENCHMARKS.glob("*.py"))
    for path in sorted(SRC.rglob("*.py")) + scripts:
        lines = len(path.read_text().splitlines())
        if lines > MAX_MODULE_LINES and path != SRC / "model.py":
            too_long.append(f"{path.relative_to(ROOT)} has {lines} lines (limit {MAX_MODULE_LINES})")
    trees = modules() | {f"benchmarks/{p.name}": ast.parse(p.read_text()) for p in scripts}
    for name, tree in trees.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = node.end_lineno - node.lineno + 1
                command = role(name) == "cli" and node.name.startswith("_cmd_")
                limit = MAX_COMMAND_LINES if command else MAX_FUNCTION_LINES
                if length > limit:
                    too_long.append(f"{name}:{node.name} has {length} lines (limit {limit})")
    assert not too_long, "\n".join(too_long)


def test_every_public_name_resolves_with_a_docstring():
    """`nanobert.__all__` is the API a learner reads: each name imports and says what it is (help())."""
    own = {p.stem for p in SRC.glob("*.py")} | {p.name for p in SRC.iterdir() if p.is_dir()}
    for name in nanobert.__all__:
        # importing nanobert.X sets the package's attribute X to the module, whatever __getattr__ says
        assert name not in own, f"nanobert.{name} is also a module's or a folder's name"
        obj = getattr(nanobert, name)
        assert isinstance(obj, dict) or (obj.__doc__ or "").strip(), f"nanobert.{name} has no docstring"


# ----------------------------------------------------------------------------------------------------------
# The page, docs/code-layout.md


def page_roles() -> list[str]:
    """The roles in the order the page lists them: its line `Roles, lowest first: a, b, c.`"""
    found = re.search(r"^Roles, lowest first: (.+?)\.?$", PAGE.read_text(), re.MULTILINE)
    assert found, "docs/code-layout.md has no line `Roles, lowest first: ...`"
    return [word.strip(" `/").removesuffix(".py") for word in found.group(1).split(",")]


def test_the_layout_page_lists_the_roles_in_order():
    assert page_roles() == ROLES


def test_the_layout_page_names_files_that_exist():
    """Every `folder/file.py` or `file.py` the page names is in src/nanobert, and the tree block shows every
    top file and folder."""
    text = PAGE.read_text()
    named = set(re.findall(r"`((?:[a-z_]+/)?[a-z_]+\.py)`", text))
    missing = [n for n in named if not (SRC / n).is_file() and not (ROOT / n).is_file()]
    assert not missing, missing
    tree = re.search(r"```\w*\nsrc/nanobert/\n(.*?)```", text, re.DOTALL)
    assert tree, "docs/code-layout.md has no tree block opening `src/nanobert/`"
    shown = set(re.findall(r"([a-z_]+)(?:\.py|/)", tree.group(1)))
    assert set(ROLES) - {"__main__"} <= shown


def test_the_layout_page_says_where_the_landmarks_live():
    """A newcomer finds these from the page in one line each."""
    lines = PAGE.read_text().splitlines()
    for landmark in ("the masking", "the `best/` rule", "BLiMP", "the page's size limits"):
        line = next((x for x in lines if x.startswith(f"- {landmark}: ")), None)
        assert line, f"docs/code-layout.md has no line `- {landmark}: `folder/file.py` ...`"
        path = re.search(r"`([a-z_]+/[a-z_]+\.py)`", line)
        assert path and (SRC / path.group(1)).is_file(), line


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
        assert (ROOT / script).is_file(), script
