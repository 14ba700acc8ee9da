"""metrics.jsonl, progress lines and the out-dir guard."""

import json

import pytest

from nanobert.engine.run_log import RunLog, prepare_out_dir, read_records, write_summary
from nanobert.errors import NanobertError


def test_the_guard_refuses_a_directory_that_holds_a_run(tmp_path):
    out = tmp_path / "run"
    prepare_out_dir(out, overwrite=False, create=False)
    assert not out.exists()  # only checked
    prepare_out_dir(out, overwrite=False)
    assert out.is_dir()
    (out / "metrics.jsonl").write_text("{}\n")
    (out / "notes.txt").write_text("mine")
    with pytest.raises(NanobertError, match="already holds a run.*--resume"):
        prepare_out_dir(out, overwrite=False)
    with pytest.raises(NanobertError) as error:
        prepare_out_dir(out, overwrite=False, resumable=False)
    assert "--resume" not in str(error.value)
    prepare_out_dir(out, overwrite=True, create=False)
    assert (out / "metrics.jsonl").exists()  # a check never deletes
    prepare_out_dir(out, overwrite=True)
    assert not (out / "metrics.jsonl").exists() and (out / "notes.txt").read_text() == "mine"
    with pytest.raises(NanobertError, match="is a file; give a directory"):  # pretrain, finetune, qa alike
        prepare_out_dir(out / "notes.txt", overwrite=True)
    with pytest.raises(NanobertError, match="is a file, not a folder"):
        prepare_out_dir(out / "notes.txt" / "sub", overwrite=True, create=False)


def test_records_and_continuing_a_run(tmp_path, capsys):
    log = RunLog(tmp_path, total_steps=4, start_step=0)
    for step in (1, 2, 3, 4):
        log.record({"split": "train", "step": step, "loss": 1.0 / step})
    log.progress(4, 4, 0.25, 1000.0, 0.0)
    log.say("hello")
    err = capsys.readouterr().err
    assert "step 4/4  loss 0.2500" in err and "hello" in err
    log.continue_from(2)  # a resume at step 2 rewrites what came after it
    assert [r["step"] for r in read_records(tmp_path / "metrics.jsonl")] == [1, 2]
    other = tmp_path / "other"
    other.mkdir()
    moved = RunLog(other, None, 0, quiet=True)
    moved.continue_from(1, earlier=tmp_path / "metrics.jsonl")  # resumed into a new directory
    assert read_records(other / "metrics.jsonl") == [{"split": "train", "step": 1, "loss": 1.0}]
    silent = RunLog(tmp_path / "rank1", None, 0, write=False)  # another rank of a DDP run
    silent.record({"step": 1})
    silent.say("nothing")
    assert not (tmp_path / "rank1").exists() and capsys.readouterr().err == ""
    assert json.loads(write_summary(tmp_path, {"a": 1}).read_text()) == {"a": 1}


def test_a_folder_of_other_files_is_no_run_to_write_into(tmp_path):
    """pretrain/finetune --out into a folder of the user's own files would mix the run's files in: refused,
    as export-hf and prepare refuse (hidden files such as .DS_Store do not count)."""
    out = tmp_path / "papers"
    out.mkdir()
    (out / ".DS_Store").write_text("")
    prepare_out_dir(out, overwrite=False)  # only hidden files: as good as empty
    (out / "thesis.tex").write_text("mine")
    for overwrite in (False, True):
        with pytest.raises(NanobertError, match="holds other files, not a run; choose another --out"):
            prepare_out_dir(out, overwrite=overwrite)
    assert sorted(p.name for p in out.iterdir()) == [".DS_Store", "thesis.tex"]


def test_no_room_for_the_first_checkpoint_is_refused_before_anything_goes(tmp_path):
    out = tmp_path / "run"
    prepare_out_dir(out, overwrite=False)
    (out / "summary.json").write_text('{"steps": 3}')
    with pytest.raises(
        NanobertError, match=r"MB free, and the run's checkpoint needs about .*nothing was changed"
    ):
        prepare_out_dir(out, overwrite=True, need=1 << 60)
    assert (out / "summary.json").read_text() == '{"steps": 3}'
