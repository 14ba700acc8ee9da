import errno
import subprocess
import sys
from pathlib import Path

import pytest

from nanobert.errors import NanobertError, run_script, user_os_error
from nanobert.files import atomic_file, check_output_file

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def test_run_script_turns_a_user_error_into_one_line_and_exit_2(capsys):
    def main():
        raise NanobertError("no such file: x.txt; check the path")

    assert run_script("tool.py", main) == 2
    assert capsys.readouterr().err == "tool.py: error: no such file: x.txt; check the path\n"


def test_run_script_passes_exit_codes_through_and_keeps_bugs_loud():
    assert run_script("tool.py", lambda: None) == 0
    assert run_script("tool.py", lambda: 3) == 3

    def buggy():
        raise ZeroDivisionError

    with pytest.raises(ZeroDivisionError):
        run_script("tool.py", buggy)


# Each benchmark script, pointed at something that is not there: the user's mistake, not a bug.
MISSING = "/nonexistent/wiki.valid.tokens"
SCRIPT_ARGS = {
    "quality.py": ["--preset", "toy", "--train", MISSING, "--test", MISSING, "--max-steps", "2", "--keep"],
    "bert_vs_gpt.py": ["--train", MISSING, "--test", MISSING, "--time-budget", "1", "--out"],
    "data_pipeline.py": ["--source", MISSING],
    "prepare_scale.py": ["--source", MISSING, "--out"],
    "finetune_trec.py": ["/nonexistent/best", "--trec-dir", "/nonexistent", "--out"],
    "squad.py": ["/nonexistent/best", "--train", MISSING, "--dev", MISSING, "--out"],
}


@pytest.mark.parametrize("case", sorted(SCRIPT_ARGS))
def test_benchmark_scripts_answer_a_missing_input_in_one_line_with_exit_2(case, tmp_path):
    script, args = case.split()[0], SCRIPT_ARGS[case]
    out = [str(tmp_path / "out")] if args[-1] in ("--out", "--keep") else []
    result = subprocess.run(
        [sys.executable, str(BENCHMARKS / script), *args, *out],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    (line,) = result.stderr.strip().splitlines()  # nothing before it either: the error comes before any work
    assert line.startswith(f"{script}: error: ") and "nonexistent" in line


def test_an_output_file_cannot_be_a_directory_or_sit_under_a_file(tmp_path):
    assert check_output_file(tmp_path / "new" / "out.tsv") == tmp_path / "new" / "out.tsv"
    with pytest.raises(NanobertError, match="is a directory"):
        check_output_file(tmp_path)
    (tmp_path / "plain").write_text("x")
    with pytest.raises(NanobertError, match="is a file, not a folder"):
        check_output_file(tmp_path / "plain" / "out.tsv")
    with pytest.raises(NanobertError, match="is the input"):
        check_output_file(tmp_path / "plain", inputs=[tmp_path / "x", tmp_path / "." / "plain"])
    with pytest.raises(NanobertError, match="lies inside the input"):
        check_output_file(tmp_path / "model" / "config.json", inputs=[tmp_path / "model"])


def test_a_closed_stdout_pipe_ends_quietly(tmp_path):
    """`nanobert ... | head -1`: the reader leaves early; no BrokenPipeError traceback."""
    script = tmp_path / "many.py"
    script.write_text(
        "from nanobert.errors import run_script\n"
        "def main():\n"
        "    for i in range(200_000):\n"
        "        print('row', i)\n"
        "raise SystemExit(run_script('many.py', main))\n"
    )
    result = subprocess.run(
        f"{sys.executable} {script} | head -1", shell=True, capture_output=True, text=True, timeout=60
    )
    assert result.stdout == "row 0\n" and "Traceback" not in result.stderr and result.stderr == ""


def test_atomic_file_keeps_the_old_file_when_a_write_fails(tmp_path):
    path = tmp_path / "out.csv"
    path.write_text("earlier output")
    with pytest.raises(ZeroDivisionError):  # a bug: no message of ours, but the old file stays
        with atomic_file(path) as f:
            f.write("half a new")
            raise ZeroDivisionError
    assert path.read_text() == "earlier output" and sorted(tmp_path.iterdir()) == [path]
    with pytest.raises(NanobertError, match=r"out.csv: no space left on the device.*out.csv is unchanged"):
        with atomic_file(path) as f:
            f.write("half a new")
            raise OSError(errno.ENOSPC, "No space left on device")
    assert path.read_text() == "earlier output" and sorted(tmp_path.iterdir()) == [path]
    with atomic_file(tmp_path / "new" / "out.csv") as f:  # its folder is made
        f.write("new")
    assert (tmp_path / "new" / "out.csv").read_text() == "new"


def test_an_os_error_a_user_can_fix_is_one_line_naming_path_and_cause(capsys):
    def denied():
        raise PermissionError(errno.EACCES, "Permission denied", "/data/corpus.txt")

    assert run_script("nanobert", denied) == 2
    assert capsys.readouterr().err == (
        "nanobert: error: /data/corpus.txt: permission denied; check its permissions or choose another "
        "place\n"
    )
    wrapped = RuntimeError("Error while serializing: I/O error: No space left on device (os error 28)")
    assert "no space left" in str(user_os_error(wrapped, "run/best"))  # safetensors' way of saying it
    assert user_os_error(OSError(errno.EBADF, "Bad file descriptor")) is None  # a bug's: keeps its traceback
