"""`nanobert serve`: the JSON API over HTTP, and the page driven in a real browser (headless Chromium).

The server runs in a thread on a free port. The browser tests use Debian's chromium through Playwright
(`executable_path`), no browser download; `.ci/run` installs chromium where it is missing.
"""

import json
import shutil
import threading
import time
import urllib.error
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import pytest
from helpers import TINY_SET, train_tiny_checkpoint, write_corpus

from nanobert.cli import main

uvicorn = pytest.importorskip("uvicorn")
pytest.importorskip("fastapi")

from nanobert.serve import Served, create_app  # noqa: E402 - after the optional-dependency checks

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_FLAGS = [
    "--no-sandbox",  # CI runs as root
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",  # the machine has no internet; do not try
    "--disable-component-update",
    "--disable-sync",
]


@contextmanager
def serving(path):
    """The app for `path` on a free port in a background thread; yields its base URL."""
    server = uvicorn.Server(
        uvicorn.Config(create_app(Served(path)), host="127.0.0.1", port=0, log_level="error")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline, "the server did not start"
        time.sleep(0.02)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def call(base, route, body=None):
    """(status, JSON) of GET /api/route, or of POST with `body`."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        f"{base}/api/{route}", data=data, headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A tiny MLM + NSP run directory: metrics.jsonl, summary.json, best/ and last/."""
    return train_tiny_checkpoint(tmp_path_factory.mktemp("serve"), steps=6).parent


@pytest.fixture(scope="module")
def server(run):
    with serving(run) as base:
        yield base


def cli_json(capsys, *argv):
    assert main([str(a) for a in argv]) == 0
    return json.loads(capsys.readouterr().out)


# ----------------------------------------------------------------------------------------------------------
# The HTTP API, without a browser


def test_the_api_gives_the_cli_numbers(server, run, capsys):
    status, info = call(server, "info")
    assert status == 200 and info["kind"] == "pretraining" and info["checkpoint"] == str(run / "best")
    assert info["panels"] == ["fill-mask", "nsp", "similarity", "attention", "explain", "run"]
    text = "alpha bravo [MASK] delta ."
    assert call(server, "fill-mask", {"text": text, "top_k": 3})[1] == cli_json(
        capsys, "fill-mask", run / "best", text, "--top-k", "3", "--json"
    )
    pair = {"text_a": "alpha bravo .", "text_b": "charlie delta ."}
    assert call(server, "nsp", pair)[1] == cli_json(capsys, "nsp", run / "best", *pair.values(), "--json")
    assert call(server, "similarity", pair)[1] == cli_json(
        capsys, "similarity", run / "best", *pair.values(), "--json"
    )
    status, attention = call(server, "attention", {"text_a": "alpha bravo"})
    cli = cli_json(capsys, "attention", run / "best", "alpha bravo", "--out", run.parent / "a.png", "--json")
    assert status == 200 and attention["tokens"] == cli["tokens"]
    assert len(attention["attentions"]) == 2 and len(attention["attentions"][0]) == 4  # layers x heads
    status, trace = call(server, "explain", pair)
    assert status == 200 and len(trace["layers"]) == 2 and "1. Tokens" in trace["text"]


def test_bad_requests_are_messages_and_the_server_goes_on(server):
    cases = [
        ("fill-mask", {"text": "no mask here"}, "no [MASK]"),
        ("fill-mask", {"text": "   "}, "empty"),
        ("nsp", {"text_a": "alpha " * 600, "text_b": "bravo"}, "more than the model's 512 positions"),
        ("generate", {"prompt": "alpha"}, "use `nanobert fill-mask`"),  # a causal request of a BERT model
        ("classify", {"text": "alpha"}, "not a fine-tuned classifier"),
        ("frobnicate", {"text": "alpha"}, "unknown request"),
    ]
    for route, body, needle in cases:
        status, answer = call(server, route, body)
        assert status == 400 and needle in answer["error"], (route, answer)
    request = urllib.request.Request(
        f"{server}/api/nsp", data=b"{oops", headers={"Content-Type": "application/json"}
    )
    with pytest.raises(urllib.error.HTTPError) as error:
        urllib.request.urlopen(request, timeout=10)
    assert error.value.code == 400
    assert call(server, "info")[0] == 200  # still serving


def test_the_run_view_data_and_other_checkpoint_kinds(run, tmp_path, capsys):
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    with serving(run) as base:
        status, data = call(base, "run")
        assert status == 200 and data["records"] == records and data["summary"]["steps"] == 6
    causal = train_tiny_checkpoint(tmp_path / "causal", objective="causal")
    with serving(causal) as base:  # a checkpoint alone: no run view
        info = call(base, "info")[1]
        assert info["panels"] == ["generate", "similarity", "attention", "explain"]
        body = {"prompt": "alpha bravo", "max_new_tokens": 4, "temperature": 0}
        assert call(base, "generate", body)[1] == cli_json(
            capsys, "generate", causal, "alpha bravo", "--max-new-tokens", "4", "--temperature", "0", "--json"
        )
        assert "use `nanobert generate`" in call(base, "fill-mask", {"text": "a [MASK]"})[1]["error"]
        assert call(base, "run")[0] == 400


def test_a_fine_tuned_classifier_gets_the_label_panel(run, tmp_path):
    train = tmp_path / "train.csv"
    train.write_text("text,label\n" + "".join(f"alpha red {i},pos\nbravo blue {i},neg\n" for i in range(8)))
    argv = [
        "finetune",
        run / "best",
        "--train",
        train,
        "--dev",
        train,
        "--text-col",
        "text",
        "--label-col",
        "label",
    ]
    assert main([str(a) for a in argv + ["--out", tmp_path / "ft", "--epochs", "1", "--quiet"]]) == 0
    with serving(tmp_path / "ft") as base:
        info = call(base, "info")[1]
        assert info["kind"] == "sequence_classification" and info["panels"] == ["classify", "run"]
        status, answer = call(base, "classify", {"text": "alpha red"})
        assert status == 200 and set(answer["probabilities"]) == {"neg", "pos"}
        assert answer["label"] == max(answer["probabilities"], key=answer["probabilities"].get)
        assert sum(answer["probabilities"].values()) == pytest.approx(1.0)
        error = call(base, "nsp", {"text_a": "a", "text_b": "b"})[1]["error"]
        assert "use it with: nanobert predict" in error


def test_start_up_errors_are_one_line(tmp_path, capsys, run):
    (tmp_path / "empty").mkdir()
    assert main(["serve", str(tmp_path / "empty")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "neither a checkpoint" in err
    assert main(["serve", str(tmp_path / "missing")]) == 2
    with serving(run) as base:
        port = base.rsplit(":", 1)[1]
        assert main(["serve", str(run), "--port", port]) == 2
        assert "pass another --port" in capsys.readouterr().err


# ----------------------------------------------------------------------------------------------------------
# The page, in a real browser


@pytest.fixture(scope="module")
def browser():
    if not Path(CHROMIUM).exists():
        pytest.skip("no chromium; install Debian's chromium (apt-get install chromium), as .ci/run does")
    playwright = pytest.importorskip("playwright.sync_api")
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS, headless=True)
        yield browser
        browser.close()


@pytest.fixture
def page(browser, server):
    page = browser.new_page(viewport={"width": 1100, "height": 900})
    page.goto(server + "/")
    page.wait_for_selector("body[data-ready=true]")
    yield page
    page.close()


def test_fill_mask_in_the_page_matches_the_cli(page, run, capsys):
    text = "alpha [MASK] charlie delta ."
    page.fill("#fill-text", text)
    page.click("#fill-go")
    page.wait_for_selector("#fill-filled")
    shown = page.locator(".mask .bar .token").first.inner_text()
    cli = cli_json(capsys, "fill-mask", run / "best", text, "--json")
    assert shown == cli["masks"][0]["candidates"][0]["token"]
    assert page.inner_text("#fill-filled") == cli["filled"]


def test_text_without_a_mask_shows_a_message_in_the_page(page):
    page.fill("#fill-text", "there is nothing to fill here")
    page.click("#fill-go")
    page.wait_for_function("document.getElementById('fill-mask-error').textContent.length > 0")
    assert "no [MASK]" in page.inner_text("#fill-mask-error")
    page.fill("#fill-text", "alpha [MASK] .")  # and the page still works afterwards
    page.click("#fill-go")
    page.wait_for_selector("#fill-filled")
    assert page.inner_text("#fill-mask-error") == ""


def test_switching_layer_and_head_changes_the_heatmap(page):
    page.click("nav button[data-panel=attention]")
    page.click("#attention-go")
    page.wait_for_selector("canvas.heatmap")
    picture = lambda: page.eval_on_selector("canvas.heatmap", "c => c.toDataURL()")  # noqa: E731
    first = picture()
    page.select_option("#attention-head", "1")
    assert picture() != first
    head_one = picture()
    page.select_option("#attention-layer", "1")
    assert picture() != head_one
    page.select_option("#attention-head", "all")  # every head of the layer at once
    assert page.locator("canvas.heatmap").count() == 4
    page.hover("canvas.heatmap >> nth=0", position={"x": 60, "y": 90})
    assert "attends to" in page.inner_text("#attention-hover")


def test_the_run_view_shows_the_curves(page, run):
    train_steps = [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()]
    page.click("nav button[data-panel=run]")
    page.wait_for_selector("svg.chart path[data-series='train loss']")
    points = page.get_attribute("svg.chart path[data-series='train loss']", "data-points")
    train = [s for s, line in zip(train_steps, (run / "metrics.jsonl").read_text().splitlines(), strict=True)
             if json.loads(line)["split"] == "train"]  # fmt: skip
    assert int(points) == len(train) and "finished" in page.inner_text("#run-state")


def test_a_run_in_progress_refreshes(browser, tmp_path):
    """While summary.json is missing the view says it is training and picks up new records."""
    corpus = write_corpus(tmp_path / "corpus.txt")
    run = tmp_path / "run"
    argv = ["pretrain", "--train", str(corpus), "--out", str(run), "--max-steps", "3", "--quiet"]
    assert main([*argv, "--device", "cpu", "--set", *TINY_SET]) == 0
    (run / "summary.json").unlink()  # as if it were still training
    lines = (run / "metrics.jsonl").read_text().splitlines()
    (run / "metrics.jsonl").write_text(lines[0] + "\n")
    with serving(run) as base:
        page = browser.new_page()
        page.goto(base + "/")
        page.click("nav button[data-panel=run]")
        page.wait_for_function(
            "document.getElementById('run-state').textContent.includes('training: step 1')"
        )
        (run / "metrics.jsonl").write_text("\n".join(lines) + "\n")
        page.wait_for_function(
            "document.getElementById('run-state').textContent.includes('step 3')", timeout=15000
        )
        page.close()


def test_a_qa_checkpoint_gets_the_answer_panel(browser, tmp_path, capsys):
    from helpers import qa_checkpoint, write_squad_task

    from nanobert.config import QAConfig
    from nanobert.qa import finetune_qa

    train = write_squad_task(tmp_path / "train.json", 200, 0)
    cfg = QAConfig(
        epochs=2, learning_rate=3e-3, batch_size=16, max_seq_len=48, device="cpu", precision="fp32"
    )
    finetune_qa(qa_checkpoint(tmp_path), train, train, tmp_path / "ft", cfg, quiet=True)
    context = "Hotel went to the desert with a green hat."
    with serving(tmp_path / "ft") as base:
        assert call(base, "info")[1]["panels"] == ["answer", "run"]
        body = {"question": "Where did hotel go?", "context": context}
        status, answer = call(base, "answer", body)
        cli = cli_json(
            capsys, "answer", tmp_path / "ft", "--question", body["question"], "--context", context, "--json"
        )
        assert status == 200 and answer == {k: v for k, v in cli.items() if k != "question"}
        assert call(base, "answer", {"question": "Where?", "context": " "})[0] == 400
        page = browser.new_page()
        page.goto(base + "/")
        page.wait_for_selector("body[data-ready=true]")
        page.fill("#answer-question", body["question"])
        page.fill("#answer-context", context)
        page.click("#panel-answer button")
        page.wait_for_selector("#answer-text")
        assert page.inner_text("#answer-text") == answer["text"] and page.inner_text("mark") == answer["text"]
        page.close()
