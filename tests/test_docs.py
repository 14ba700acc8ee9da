"""The pages users read speak about the tool, and every `nanobert` command they show is one the CLI accepts.

Pages: README.md, docs/*.md and benchmarks/RESULTS.md. They name no step of the project's own process
("stop N", "Round N", "issue N"), no data folder outside the repository and no path of the machine that
measured. Every `nanobert ...` command in a code block of README.md or docs/*.md parses with the CLI's own
parser (nothing runs), with a known preset, objective and `--set` keys; every file it reads is in the
repository, written by an earlier command on the same page (`--out`, `> FILE`, `cp`), or a placeholder: a path
whose first part is in capitals (`RUN/best`, `CKPT`, `FT_DIR`, `FILE.txt`)."""

import argparse
import re
import shlex
from pathlib import Path, PurePosixPath

import pytest

from nanobert.cli import build_parser
from nanobert.cli.overrides import parse_overrides
from nanobert.data.corpus import WIKITEXT_HF_NAMES
from nanobert.errors import NanobertError
from nanobert.objectives.registry import OBJECTIVES
from nanobert.pretraining.recipes import PRESETS

ROOT = Path(__file__).resolve().parents[1]
GUIDES = sorted((ROOT / "docs").glob("*.md"))
COMMAND_PAGES = [ROOT / "README.md", *GUIDES]
USER_PAGES = [*COMMAND_PAGES, ROOT / "benchmarks" / "RESULTS.md"]
PROCESS_WORDS = re.compile(r"\b(?:stop|round|issue) [0-9]+|\.\./shared", re.IGNORECASE)
MACHINE_PATHS = re.compile(r"(?<![\w.~])/(?:work|root|home|Users|mnt|tmp)/")
PLACEHOLDER = re.compile(r"[A-Z][A-Z0-9_]*(?:-[A-Za-z0-9_]+)*(?:\.[A-Za-z0-9.]+)?")
# Arguments that name a file or folder the command reads, and those it writes.
READS = {
    "checkpoint",
    "model",
    "path",
    "hf_dir",
    "train",
    "valid",
    "dev",
    "test",
    "input",
    "resume",
    "tokenizer",
    "vocab_from",
    "prepared",
    "data",
}
WRITES = {"out", "plot"}
LINK = re.compile(r"(?:\]\(|src=\")([\w./-]+(?:\.png|\.md|\.py|\.ipynb|/))[)\"#]")  # a relative link's target
DATASETS = {"toy", "nyu-mll/blimp", *WIKITEXT_HF_NAMES}
OPERATORS = {"&&", "||", ";", "|", "&"}
QUICKSTART = [
    'pip install torch==2.13.0 && pip install -e ".[hf]" && nanobert pretrain',
    'pip install torch==2.13.0 && pip install -e ".[dev]" && python -m pytest',
]


def rel(page: Path) -> str:
    return str(page.relative_to(ROOT))


def code_blocks(text: str) -> list[tuple[str, list[str]]]:
    """(language, lines) of every fenced code block."""
    blocks, lang, lines = [], None, []
    for line in text.splitlines():
        fence = re.match(r"^```(\S*)\s*$", line)
        if fence and lang is None:
            lang, lines = fence.group(1), []
        elif line.startswith("```") and lang is not None:
            blocks.append((lang, lines))
            lang = None
        elif lang is not None:
            lines.append(line)
    return blocks


def shell_lines(lang: str, lines: list[str]) -> list[str]:
    """The shell commands of a block, continuation lines joined: in a console block only the `$ ` lines (the
    rest is output), in any other block every line but the bodies of here-documents."""
    commands, heredoc_end = [], None
    for line in lines:
        if heredoc_end is not None:
            heredoc_end = None if line.strip() == heredoc_end else heredoc_end
            continue
        if commands and commands[-1].endswith("\\"):
            commands[-1] = commands[-1][:-1] + " " + line.strip()
        elif lang == "console":
            if line.startswith("$ "):
                commands.append(line[2:])
        else:
            commands.append(line)
        heredoc = re.search(r"<<\s*['\"]?(\w+)['\"]?", commands[-1] if commands else "")
        if heredoc and not commands[-1].endswith("\\"):
            heredoc_end = heredoc.group(1)
    return [c for c in commands if c.strip()]


def segments(command: str) -> list[list[str]]:
    """A command line cut at `&&`, `;`, `|` ...; redirections stay in their segment (`>` then its target)."""
    lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    lexer.commenters = "#"
    parts = [[]]
    for token in lexer:
        if token in OPERATORS:
            parts.append([])
        else:
            parts[-1].append(token)
    return [p for p in parts if p]


def nanobert_args(segment: list[str]) -> list[str] | None:
    """The arguments after `nanobert` (or `python -m nanobert`, `torchrun ... -m nanobert`), or None."""
    words = [w for w in segment if w not in (">", ">>", "<", "<<")]
    if words[0] == "nanobert":
        return words[1:]
    for i, word in enumerate(words[:-1]):
        if word == "-m" and words[i + 1] == "nanobert":
            return words[i + 2 :]
    return None


def written_by(segment: list[str]) -> list[str]:
    """Files a shell segment writes: a redirection's target, `cp`/`mv`'s destination, `mkdir`'s folders."""
    out = [segment[i + 1] for i, w in enumerate(segment[:-1]) if w in (">", ">>")]
    if segment[0] in ("cp", "mv"):
        out.append(segment[-1])
    if segment[0] == "mkdir":
        out += [w for w in segment[1:] if not w.startswith("-")]
    return out


def commands_of(page: Path) -> list[tuple[str, list[str] | None, list[str]]]:
    """(the command line, its nanobert arguments or None, the files it writes) in page order."""
    found = []
    for lang, lines in code_blocks(page.read_text()):
        if lang in ("python", "json", "text"):
            continue
        for line in shell_lines(lang, lines):
            for segment in segments(line):
                found.append((line, nanobert_args(segment), written_by(segment)))
    return found


def parse(args: list[str]) -> argparse.Namespace:
    parser = build_parser()
    try:
        namespace, unknown = parser.parse_known_args(args)
    except SystemExit as e:  # --help or --version would print and exit
        raise AssertionError(f"exits instead of running: {e}") from None
    assert not unknown, f"unrecognized arguments: {unknown}"
    return namespace


def is_placeholder(path: str) -> bool:
    return bool(PLACEHOLDER.fullmatch(PurePosixPath(path).parts[0]))


def made_before(path: str, made: set[PurePosixPath]) -> bool:
    p = PurePosixPath(path)
    return any(p == m or m in p.parents for m in made)


def problems_of(namespace: argparse.Namespace, made: set[PurePosixPath]) -> list[str]:
    """What is wrong with a parsed command beyond argparse: an unknown preset, objective or --set key, or a
    file it reads that is neither in the repository, nor made before on the page, nor a placeholder."""
    problems = []
    if getattr(namespace, "preset", None) and namespace.preset not in PRESETS:
        problems.append(f"unknown preset {namespace.preset!r}")
    if getattr(namespace, "objective", None) and namespace.objective not in OBJECTIVES:
        problems.append(f"unknown objective {namespace.objective!r}")
    try:
        parse_overrides(getattr(namespace, "set", None) or [])
    except NanobertError as e:
        problems.append(str(e))
    for dest in sorted(READS):
        value = getattr(namespace, dest, None)
        if not isinstance(value, str) or (dest == "data" and value in DATASETS):
            continue
        if not (is_placeholder(value) or (ROOT / value).exists() or made_before(value, made)):
            problems.append(
                f"--{dest.replace('_', '-')} {value}: not in the repository, not made earlier on "
                "the page, and not a placeholder in capitals"
            )
    return problems


@pytest.mark.parametrize("page", USER_PAGES, ids=rel)
def test_pages_for_users_name_no_process_step_and_no_machine_path(page):
    for number, line in enumerate(page.read_text().splitlines(), 1):
        for pattern in (PROCESS_WORDS, MACHINE_PATHS):
            match = pattern.search(line)
            assert match is None, f"{rel(page)}:{number}: {match.group(0)!r} in {line.strip()!r}"


@pytest.mark.parametrize("page", COMMAND_PAGES, ids=rel)
def test_every_nanobert_command_on_the_page_parses_and_names_real_files(page):
    made: set[PurePosixPath] = set()
    for line, args, writes in commands_of(page):
        if args is not None:
            try:
                namespace = parse(args)
            except NanobertError as e:
                raise AssertionError(f"{rel(page)}: `{line}`: {e}") from None
            problems = problems_of(namespace, made)
            assert not problems, f"{rel(page)}: `{line}`: {'; '.join(problems)}"
            writes = writes + [v for d in WRITES if isinstance(v := getattr(namespace, d, None), str)]
        made |= {PurePosixPath(w) for w in writes}


def test_the_checks_catch_a_wrong_command():
    namespace = parse(["pretrain", "--data", "toy", "--preset", "tiny", "--set", "learning_rate=1e-3"])
    assert problems_of(namespace, set()) == []
    with pytest.raises(AssertionError, match="unrecognized arguments"):
        parse(["fill-mask", "RUN/best", "a [MASK] .", "--no-such-option"])
    with pytest.raises(NanobertError, match="invalid choice"):
        parse(["pretrain", "--device", "tpu"])
    wrong = parse(["pretrain", "--train", "corpus.txt", "--preset", "huge", "--set", "no_such_key=1"])
    assert len(problems_of(wrong, set())) == 3  # the preset, the --set key, the file nobody made
    assert problems_of(parse(["evaluate", "runs/x/best"]), {PurePosixPath("runs/x")}) == []
    assert is_placeholder("RUN-qa/best") and is_placeholder("FILE.txt") and not is_placeholder("train.tsv")


def test_every_subcommand_is_shown_somewhere():
    parser = build_parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    shown = {parse(args).command for page in COMMAND_PAGES for _, args, _ in commands_of(page) if args}
    assert set(sub.choices) - shown == set()


def test_the_readme_is_short_keeps_its_quickstart_and_links_every_guide():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 250
    quickstart = readme.split("## Quickstart", 1)[1].split("\n## ", 1)[0]
    assert [lines for lang, lines in code_blocks(quickstart) if lang == "bash"] == [[c] for c in QUICKSTART]
    linked = set(re.findall(r"\]\((docs/[\w-]+\.md)\)", readme))
    assert {rel(g) for g in GUIDES} - linked == set()


@pytest.mark.parametrize("page", COMMAND_PAGES, ids=rel)
def test_every_file_and_folder_a_page_links_to_exists(page):
    for target in LINK.findall(page.read_text()):
        if not target.startswith("http"):
            assert (page.parent / target).resolve().exists(), (
                f"{rel(page)} links to {target}, which is missing"
            )
