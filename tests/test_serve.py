"""`nanobert serve`: the JSON API over HTTP, and the page driven in a real browser (headless Chromium).

The server runs in a thread on a free port. The browser tests use Debian's chromium through Playwright
(`executable_path`), no browser download; `.ci/run` installs chromium where it is missing and sets
NANOBERT_REQUIRE_BROWSER=1, so that a missing browser (or serve extra) fails there instead of skipping.
"""

import json
import os
import shutil
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import pytest
from helpers import TINY_SET, train_tiny_checkpoint, write_corpus
from safetensors.torch import load_file, save_file

from nanobert.cli import main
from nanobert.errors import NanobertError
from nanobert.use.inference import load

REQUIRE_BROWSER = os.environ.get("NANOBERT_REQUIRE_BROWSER") == "1"
try:
    import fastapi  # noqa: F401 - the serve extra
    import uvicorn
except ImportError:
    if REQUIRE_BROWSER:
        raise
    pytest.skip("no fastapi/uvicorn; pip install -e '.[serve]'", allow_module_level=True)

from nanobert.serve.app import (  # noqa: E402 - after the extra's check
    HEADER_TIMEOUT_S,
    KEEP_ALIVE_S,
    create_app,
    listening_port,
    serve,
    server_config,
)
from nanobert.serve.guards import allowed_hosts, refusal  # noqa: E402
from nanobert.serve.limits import (  # noqa: E402
    MAX_ATTENTION_CELLS,
    MAX_BODY_BYTES,
    MAX_MASKS,
    MAX_TEXT_CHARS,
    MAX_WAITING,
    WHOLE_FIELDS,
)
from nanobert.serve.served import Served  # noqa: E402

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
    """The app for `path` (or a Served) on a free port in a background thread; yields its base URL."""
    served = path if isinstance(path, Served) else Served(path)
    server = uvicorn.Server(server_config(create_app(served), "127.0.0.1", 0, log_level="error"))
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
    assert status == 200 and info["kind"] == "pretraining" and info["checkpoint"] == "run/best"
    assert info["panels"] == ["fill-mask", "nsp", "score", "similarity", "attention", "explain", "run"]
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
    assert call(server, "score", pair)[1] == cli_json(capsys, "score", run / "best", *pair.values(), "--json")
    one = {"text_a": "alpha bravo .", "rule": "original"}
    assert call(server, "score", one)[1] == cli_json(
        capsys, "score", run / "best", "alpha bravo .", "--rule", "original", "--json"
    )


def test_bad_requests_are_messages_and_the_server_goes_on(server):
    cases = [
        ("fill-mask", {"text": "no mask here"}, "no [MASK]"),
        ("fill-mask", {"text": "   "}, "empty"),
        ("nsp", {"text_a": "alpha " * 600, "text_b": "bravo"}, "more than the model's 512 positions"),
        ("generate", {"prompt": "alpha"}, "use `nanobert fill-mask`"),  # a causal request of a BERT model
        ("classify", {"text": "alpha"}, "not a fine-tuned classifier"),
        ("frobnicate", {"text": "alpha"}, "unknown request"),
        # an empty sentence B, where the question needs one: the library's own message
        ("nsp", {"text_a": "alpha bravo .", "text_b": ""}, "the text is empty"),
        ("nsp", {"text_a": "alpha bravo ."}, "the text is empty"),
        ("similarity", {"text_a": "alpha bravo .", "text_b": "  "}, "the text is empty"),
        # values of the wrong type: a message naming the field, not a 500
        ("fill-mask", {"text": 5}, "text must be a text"),
        ("fill-mask", {"text": ["a [MASK]"]}, "text must be a text"),
        ("fill-mask", {"text": "a [MASK]", "top_k": "many"}, "top_k must be a whole number"),
        ("fill-mask", {"text": "a [MASK]", "top_k": 0}, "top_k must be a whole number from 1 to 20"),
        ("fill-mask", {"text": "a [MASK]", "top_k": True}, "top_k must be a whole number"),
        ("explain", {"text_a": "alpha", "top_k": 2.5}, "top_k must be a whole number"),
        ("nsp", {"text_a": "alpha", "text_b": {"b": 1}}, "text_b must be a text"),
        ("generate", {"prompt": "alpha", "temperature": "hot"}, "temperature must be a number"),
        ("generate", {"prompt": "alpha", "seed": -1}, "seed must be a whole number from 0"),
        ("fill-mask", ["a [MASK]"], "must be a JSON object"),
        # JSON's escape for a lone surrogate: text the tokenizer cannot take
        ("fill-mask", {"text": "\ud800 [MASK]"}, "not valid Unicode"),
        ("nsp", {"text_a": "x", "text_b": "\udfff y"}, "not valid Unicode"),
        # far too long: refused from its length, before the tokenizer works through it
        ("fill-mask", {"text": "the cat sat . " * 50_000 + "[MASK]"}, "the page takes 20000 at most"),
    ]
    for route, body, needle in cases:
        status, answer = call(server, route, body)
        assert status == 400 and needle in answer["error"], (route, answer)
    status, answer = call(server, "attention", {"text_a": "alpha bravo", "text_b": " "})  # B is optional
    assert status == 200 and "[SEP]" not in answer["tokens"][:-1]
    request = urllib.request.Request(
        f"{server}/api/nsp", data=b"{oops", headers={"Content-Type": "application/json"}
    )
    with pytest.raises(urllib.error.HTTPError) as error:
        urllib.request.urlopen(request, timeout=10)
    assert error.value.code == 400
    deep = b"[" * 100_000 + b"]" * 100_000  # valid JSON, nested past the parser's recursion limit
    request = urllib.request.Request(
        f"{server}/api/nsp", data=deep, headers={"Content-Type": "application/json"}
    )
    with pytest.raises(urllib.error.HTTPError) as error:
        urllib.request.urlopen(request, timeout=10)
    assert error.value.code == 400 and "not JSON" in json.loads(error.value.read())["error"]
    for method, path, body, code, needle in [
        ("POST", "/api/nsp", b" " * (2 << 20), 413, "over 1048576 bytes"),  # read no further
        ("GET", "/api/nope", None, 404, "no such path: /api/nope"),
        ("GET", "/nope", None, 404, "no such path: /nope"),
        ("PUT", "/api/fill-mask", b"{}", 405, "/api/fill-mask takes POST, not PUT"),
        ("GET", "/api/fill-mask", None, 405, "takes POST, not GET"),
        ("POST", "/api/info", b"{}", 405, "/api/info takes GET, not POST"),
    ]:
        json_body = {"Content-Type": "application/json"}
        request = urllib.request.Request(f"{server}{path}", data=body, method=method, headers=json_body)
        with pytest.raises(urllib.error.HTTPError) as error:
            urllib.request.urlopen(request, timeout=10)
        assert error.value.code == code and needle in json.loads(error.value.read())["error"], path
    assert call(server, "info")[0] == 200  # still serving


def raw(base, method, path, body=b"", headers=(), timeout=10):
    """(status, JSON or None) of any request, with exactly the headers given besides Host."""
    import http.client

    host, port = base.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=timeout)
    connection.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
    headers = dict(headers)
    headers.setdefault("Host", f"{host}:{port}")
    for name, value in {**headers, "Content-Length": str(len(body))}.items():
        connection.putheader(name, value)
    connection.endheaders(body)
    response = connection.getresponse()
    data = response.read()
    connection.close()
    is_json = response.getheader("content-type", "").startswith("application/json")
    return response.status, response.getheaders(), json.loads(data) if data and is_json else data


def test_one_request_cannot_exhaust_the_server(server):
    """80 [MASK]s with top_k 1e9 once took 2.3 GB and 49 s; every limit is refused at once, in one line."""
    import resource

    import nanobert.serve.limits as limits_module

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB, the process's high-water mark
    text = " ".join(["alpha [MASK]"] * 80)
    for body, needle in [
        ({"text": text, "top_k": 1_000_000_000}, f"more than {MAX_MASKS} [MASK]s"),  # the request
        ({"text": "alpha [MASK]", "top_k": 1_000_000_000}, "top_k must be a whole number from 1 to 20"),
        ({"text": text, "top_k": 1}, f"more than {MAX_MASKS} [MASK]s"),
        ({"text": "alpha " * 5000}, "the page takes 20000 at most"),
    ]:
        start = time.monotonic()
        status, answer = call(server, "fill-mask", body)
        assert time.monotonic() - start < 1.0
        assert status == 400 and needle in answer["error"] and "\n" not in answer["error"], answer
    assert call(server, "generate", {"prompt": "a", "max_new_tokens": 10**6})[1]["error"].startswith(
        "max_new_tokens must be a whole number from 1 to 200"
    )
    limits_module.MAX_ATTENTION_CELLS, limit = 2 * 4 * 20**2, MAX_ATTENTION_CELLS  # 20 tokens, tiny model
    try:
        status, answer = call(server, "attention", {"text_a": "alpha bravo " * 20})
        assert status == 400 and "more than the page sends" in answer["error"], answer
        assert call(server, "attention", {"text_a": "alpha bravo"})[0] == 200
    finally:
        limits_module.MAX_ATTENTION_CELLS = limit
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak < 50_000  # no new high-water mark


def test_too_many_model_requests_at_once_are_told_the_page_is_busy(run):
    served = Served(run)
    answer, release = served._answer, threading.Event()

    def held(route, body):
        release.wait(10)
        return answer(route, body)

    served._answer = held
    with serving(served) as base:
        ask = {"text": "alpha [MASK] ."}
        threads = [threading.Thread(target=call, args=(base, "fill-mask", ask)) for _ in range(5)]
        for thread in threads:
            thread.start()
        time.sleep(0.5)  # one being answered, four waiting: the limit
        status, answer_ = call(base, "fill-mask", ask)
        release.set()
        for thread in threads:
            thread.join()
        assert status == 503 and answer_["error"].startswith("busy:")
        assert call(base, "fill-mask", ask)[0] == 200


def test_other_sites_cannot_drive_the_page(server):
    """DNS rebinding (a foreign Host), a cross-origin POST, a text/plain body, the Host-built redirect."""
    body = json.dumps({"text": "alpha [MASK] ."}).encode()
    port = server.rsplit(":", 1)[1]
    as_json = {"Content-Type": "application/json"}
    for headers, status, needle in [
        ({**as_json, "Host": f"evil.example:{port}"}, 403, "not a name of this machine"),
        ({**as_json, "Origin": "http://evil.example"}, 403, "from another site"),
        ({**as_json, "Origin": "null"}, 403, "from another site"),
        ({"Content-Type": "text/plain"}, 415, "application/json"),
        ({}, 415, "application/json"),
    ]:
        got, _, answer = raw(server, "POST", "/api/fill-mask", body, headers)
        assert got == status and needle in answer["error"], (headers, answer)
    assert raw(server, "GET", "/api/info", headers={"Host": "evil.example"})[0] == 403
    for host in (f"localhost:{port}", f"127.0.0.1:{port}", "localhost"):  # this machine's own names
        assert raw(server, "GET", "/api/info", headers={"Host": host})[0] == 200
    own = {**as_json, "Origin": server}  # the page itself
    assert raw(server, "POST", "/api/fill-mask", body, own)[0] == 200
    status, headers, answer = raw(server, "GET", "/api/info/", headers={"Host": f"localhost:{port}"})
    assert status == 404 and "location" not in {k.lower() for k, _ in headers}  # was a 307 to Host
    info = call(server, "info")[1]
    assert not info["path"].startswith("/") and not info["checkpoint"].startswith("/")
    assert "/" + info["path"] not in json.dumps(info) or info["checkpoint"] == "run/best"
    assert refusal("GET", {"host": "[::1]:8000"}, allowed_hosts("127.0.0.1")) is None
    assert "lan.example" in allowed_hosts("0.0.0.0", ("lan.example:8000",))
    assert "0.0.0.0" not in allowed_hosts("0.0.0.0")


def test_errors_name_no_absolute_path(run, tmp_path):
    causal = train_tiny_checkpoint(tmp_path / "causal", objective="causal")
    with serving(causal) as base:
        error = call(base, "classify", {"text": "alpha"})[1]["error"]
        assert str(tmp_path) not in error and error.startswith("best is not a fine-tuned classifier"), error


def test_the_page_and_its_assets_answer_as_the_readme_says(server):
    assert raw(server, "GET", "/static/missing")[0] == 404
    assert raw(server, "GET", "/static/app.js")[0] == 200
    status, _, answer = raw(server, "HEAD", "/")
    assert status == 405
    assert raw(server, "POST", "/", b"{}", {"Content-Type": "application/json"})[2]["error"] == (
        "/ takes GET, not POST"
    )


def test_the_page_guide_states_the_limits_the_page_enforces():
    guide = (Path(__file__).resolve().parents[1] / "docs" / "page.md").read_text()
    for fact in [
        f"| request body | {MAX_BODY_BYTES >> 20} MiB |",
        f"| text length | {MAX_TEXT_CHARS:,} characters per text field |",
        f"| `[MASK]`s in one text | {MAX_MASKS} |",
        f"| `top_k` (fill-mask, explain, generate) | 1 to {WHOLE_FIELDS['top_k'][1]} |",
        f"| `max_new_tokens` (generate) | 1 to {WHOLE_FIELDS['max_new_tokens'][1]} |",
        f"| attention maps | {MAX_ATTENTION_CELLS:,} numbers",
        f"one model request at a time, {MAX_WAITING} more waiting",
        f"within {HEADER_TIMEOUT_S:g} s of connecting or of the last answer; "
        f"idle keep-alive {KEEP_ALIVE_S} s",
        "404 for an unknown path (`/static/missing` too), 405 for a wrong method (`HEAD /` too",
    ]:
        assert fact in guide, fact


def test_idle_and_slow_connections_are_closed(run, monkeypatch):
    import socket

    import nanobert.serve.app as serve_module

    monkeypatch.setattr(serve_module, "HEADER_TIMEOUT_S", 0.5)
    with serving(run) as base:
        host, port = base.removeprefix("http://").split(":")
        for sent in (b"", b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n"):  # nothing; headers never finished
            with socket.create_connection((host, int(port)), timeout=5) as connection:
                connection.sendall(sent)
                start = time.monotonic()
                assert connection.recv(100) == b""  # closed by the server, not by our 5 s timeout
                assert time.monotonic() - start < 3
        assert call(base, "info")[0] == 200


def test_the_run_view_data_and_other_checkpoint_kinds(run, tmp_path, capsys):
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    with serving(run) as base:
        status, data = call(base, "run")
        assert status == 200 and data["records"] == records and data["summary"]["steps"] == 6
    causal = train_tiny_checkpoint(tmp_path / "causal", objective="causal")
    with serving(causal) as base:  # a checkpoint alone: no run view
        info = call(base, "info")[1]
        assert info["panels"] == ["generate", "score", "similarity", "attention", "explain"]
        body = {"prompt": "alpha bravo", "max_new_tokens": 4, "temperature": 0}
        assert call(base, "generate", body)[1] == cli_json(
            capsys, "generate", causal, "alpha bravo", "--max-new-tokens", "4", "--temperature", "0", "--json"
        )
        assert "use `nanobert generate`" in call(base, "fill-mask", {"text": "a [MASK]"})[1]["error"]
        assert call(base, "run")[0] == 400


def swap_in(source, checkpoint):
    """Copy a checkpoint into place as checkpoint.py writes one: a temporary directory, then renames."""
    tmp = checkpoint.with_name(f".{checkpoint.name}.tmp-test")
    shutil.copytree(source, tmp)
    if checkpoint.exists():
        old = checkpoint.with_name(f".{checkpoint.name}.old-{os.getpid()}")
        checkpoint.rename(old)
        tmp.rename(checkpoint)
        shutil.rmtree(old)
    else:
        tmp.rename(checkpoint)


def test_a_run_gets_its_model_when_a_checkpoint_appears(run, tmp_path):
    live = tmp_path / "live"
    live.mkdir()
    shutil.copy(run / "metrics.jsonl", live)  # a run that has not saved a checkpoint yet
    ask = {"text": "alpha [MASK] charlie ."}
    with serving(live) as base:
        info = call(base, "info")[1]
        assert info["kind"] is None and info["checkpoint"] is None and info["panels"] == ["run"]
        assert "no checkpoint yet" in call(base, "fill-mask", ask)[1]["error"]
        swap_in(run / "last", live / "last")
        info = call(base, "info")[1]  # the page asks again while it shows only the run
        assert info["checkpoint"] == "live/last" and info["panels"][:2] == ["fill-mask", "nsp"]
        assert call(base, "fill-mask", ask)[0] == 200
        swap_in(run / "best", live / "best")  # best/ is preferred once it exists
        status, from_best = call(base, "fill-mask", ask)
        assert status == 200 and call(base, "info")[1]["checkpoint"] == "live/best"
        newer = tmp_path / "newer"  # a newer best/: other weights, so other answers
        shutil.copytree(run / "best", newer)
        weights = load_file(newer / "model.safetensors")
        save_file({k: v * 0.5 for k, v in weights.items()}, newer / "model.safetensors", {"format": "pt"})
        swap_in(newer, live / "best")
        status, from_newer = call(base, "fill-mask", ask)  # the next request loads it
        assert status == 200 and from_newer != from_best
        # A newer version that fails to load: the loaded model goes on answering, and info says why.
        broken = tmp_path / "broken"
        shutil.copytree(newer, broken)
        (broken / "config.json").write_text("garbage{")
        swap_in(broken, live / "best")
        assert call(base, "fill-mask", ask) == (200, from_newer)
        info = call(base, "info")[1]
        assert "not a nanobert checkpoint config" in info["error"] and "still showing" in info["error"]


def test_a_broken_best_falls_back_to_last(run, tmp_path):
    live = tmp_path / "live"
    shutil.copytree(run, live)
    (live / "best" / "config.json").write_text("garbage{")
    with serving(live) as base:
        info = call(base, "info")[1]
        assert info["checkpoint"] == "live/last" and "showing" in info["error"]
        assert call(base, "fill-mask", {"text": "alpha [MASK] charlie ."})[0] == 200


def test_a_long_model_request_does_not_hold_up_the_others(run):
    """Model requests run in the thread pool, so info answers while one is being worked on."""
    served = Served(run)
    answer = served.answer

    def slow(route, body):
        time.sleep(1.5)
        return answer(route, body)

    served.answer = slow
    with serving(served) as base:
        asking = threading.Thread(target=call, args=(base, "fill-mask", {"text": "alpha [MASK] ."}))
        asking.start()
        time.sleep(0.3)
        start = time.monotonic()
        assert call(base, "info")[0] == 200
        assert time.monotonic() - start < 1.0  # not behind the 1.5 s request
        asking.join()


def test_the_run_view_reads_files_being_written(run, tmp_path):
    lines = (run / "metrics.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    summary = (run / "summary.json").read_text()
    live = tmp_path / "live"
    live.mkdir()
    (live / "metrics.jsonl").write_text("\n".join(lines) + "\n" + lines[0][:25])  # a record half appended
    (live / "summary.json").write_text(summary[: len(summary) // 2])  # half written
    with serving(live) as base:
        status, data = call(base, "run")
        assert status == 200 and data["records"] == records and data["damaged_lines"] == 0
        assert data["summary"] is None  # not whole yet: the page looks again
        diverged = '{"split": "train", "step": 7, "loss": NaN, "lr": Infinity}'  # as json.dumps writes them
        (live / "metrics.jsonl").write_text(lines[0][:25] + "\n" + "\n".join([*lines, diverged]) + "\n")
        (live / "summary.json").write_text(summary)  # above: a run killed mid-line, then resumed
        status, data = call(base, "run")
        assert status == 200 and data["records"][:-1] == records and data["damaged_lines"] == 1
        assert data["records"][-1] == {"split": "train", "step": 7, "loss": None, "lr": None}
        assert data["summary"]["steps"] == 6


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
        for body, needle in [
            ({"text": "  "}, "the text is empty"),
            ({"text": "alpha " * 600}, "more than the 128 the classifier reads"),
            ({"text": 5}, "text must be a text"),
            ({"text": "alpha", "text_pair": "bravo"}, "single texts, not pairs"),
        ]:
            status, answer = call(base, "classify", body)
            assert status == 400 and needle in answer["error"], (body, answer)
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
    assert main(["serve", str(run), "--port", "99999"]) == 2  # was an OverflowError traceback
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--port 99999 is not a port number" in err
    for port in (-1, 65536, 2**70, True):
        with pytest.raises(NanobertError, match="not a port number"):
            serve(run, port=port)
    with pytest.raises(NanobertError, match="--host 192.0.2.1") as error:  # TEST-NET: not this machine's
        serve(run, host="192.0.2.1", port=8000)
    assert "--port" not in str(error.value)
    assert 0 < listening_port("127.0.0.1", 0) <= 65535  # 0: any free port


# ----------------------------------------------------------------------------------------------------------
# The page, in a real browser


@pytest.fixture(scope="module")
def browser():
    """Headless chromium; skipped where it or playwright is missing, failed instead under
    NANOBERT_REQUIRE_BROWSER=1 (CI), so that the page's tests cannot silently not run."""
    missing = pytest.fail if REQUIRE_BROWSER else pytest.skip
    if not Path(CHROMIUM).exists():
        missing(f"no chromium at {CHROMIUM}; install Debian's chromium (apt-get install chromium)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        missing("no playwright; pip install -e '.[dev]'")
    with sync_playwright() as p:
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


# Pixels of the label text drawn in [CLS]'s red (#b3261e) left of a row and above a column of a heatmap.
RED_LABELS = """c => {
  const ctx = c.getContext("2d"), cell = Number(c.dataset.cell), margin = Number(c.dataset.margin);
  const red = (x, y, w, h) => {
    const d = ctx.getImageData(x, y, w, h).data;
    let n = 0;
    for (let i = 0; i < d.length; i += 4) if (d[i] > 120 && d[i + 1] < 80 && d[i + 2] < 80) n++;
    return n;
  };
  const at = (i) =>
    [red(0, margin + i * cell, margin - 2, cell), red(margin + i * cell, 0, cell, margin - 2)];
  return [at(0), at(1)];
}"""


def test_switching_layer_and_head_changes_the_heatmap(page):
    page.click("nav button[data-panel=attention]")
    page.click("#attention-go")
    page.wait_for_selector("canvas.heatmap")
    picture = lambda: page.eval_on_selector("canvas.heatmap", "c => c.toDataURL()")  # noqa: E731
    first = picture()
    (cls_row, cls_column), (row_1, column_1) = page.eval_on_selector("canvas.heatmap", RED_LABELS)
    assert cls_row > 5 and cls_column > 5 and row_1 == column_1 == 0  # [CLS] (position 0) is marked
    page.select_option("#attention-head", "1")
    assert picture() != first
    head_one = picture()
    page.select_option("#attention-layer", "1")
    assert picture() != head_one
    page.select_option("#attention-head", "all")  # every head of the layer at once
    assert page.locator("canvas.heatmap").count() == 4
    page.hover("canvas.heatmap >> nth=0", position={"x": 60, "y": 90})
    assert "attends to" in page.inner_text("#attention-hover")


def test_the_nsp_panel_shows_the_library_numbers(page, run):
    a, b = "alpha bravo charlie .", "delta echo foxtrot ."
    page.click("nav button[data-panel=nsp]")
    page.fill("#panel-nsp input[name=text_a]", a)
    page.fill("#panel-nsp input[name=text_b]", b)
    page.click("#panel-nsp button")
    page.wait_for_selector("#nsp-isnext")
    result = load(run / "best").next_sentence(a, b)
    shown = [float(page.inner_text(f"#nsp-{name}").rstrip("%")) for name in ("isnext", "notnext")]
    assert shown == pytest.approx([100 * result.is_next, 100 * result.not_next], abs=0.051)  # one decimal
    page.fill("#panel-nsp input[name=text_b]", "")  # no sentence B: the library's message, no numbers
    page.click("#panel-nsp button")
    page.wait_for_function("document.getElementById('nsp-error').textContent.length > 0")
    assert "the text is empty" in page.inner_text("#nsp-error") and page.locator("#nsp-isnext").count() == 0


def test_the_score_panel_shows_each_piece_and_the_verdict(page, run):
    a, b = "alpha bravo charlie .", "charlie alpha bravo ."
    page.click("nav button[data-panel=score]")
    page.fill("#score-a", a)
    page.fill("#score-b", b)
    page.click("#score-go")
    page.wait_for_selector("#score-verdict")
    comparison = load(run / "best").compare(a, b)
    assert page.inner_text("#score-verdict").startswith(f"the model prefers {comparison.preferred} by")
    for i, score in enumerate((comparison.a, comparison.b)):
        rows = page.locator(f"#score-sentence-{i} .bar")
        assert rows.count() == len(score.tokens)
        shown = [float(rows.nth(j).locator(".p").inner_text()) for j in range(rows.count())]
        assert shown == pytest.approx(score.logprobs, abs=0.0051)  # two decimals
    page.fill("#score-b", "")  # one sentence: its pieces, no verdict
    page.click("#score-go")
    page.wait_for_function("document.getElementById('score-verdict') === null")
    assert page.locator("#score-sentence-0 .bar").count() == len(comparison.a.tokens)


def test_the_run_view_shows_the_curves(page, run):
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    summary = json.loads((run / "summary.json").read_text())
    page.click("nav button[data-panel=run]")
    page.wait_for_selector("#run-summary table.summary")
    points = lambda name: int(page.get_attribute(f"svg.chart path[data-series='{name}']", "data-points"))  # noqa: E731
    train = [r for r in records if r["split"] == "train"]
    held = [r for r in records if r["split"] == "valid"]
    assert held and points("train loss") == len(train) and "finished" in page.inner_text("#run-state")
    assert points("valid mlm_loss") == points("valid nsp_accuracy") == len(held)  # the held-out curves
    cell = lambda key: page.inner_text(f"#run-summary tr[data-key='{key}'] td:nth-child(2)")  # noqa: E731
    for key, value in summary["final"].items():  # the summary table: the final evaluation, time, speed
        assert float(cell(key)) == pytest.approx(value, abs=6e-5), key
    # the page prints the JSON number as JavaScript does: a time that rounds to 6.00 s shows as "6 s"
    seconds, unit = cell("train time").split()
    assert unit == "s" and float(seconds) == pytest.approx(summary["train_time_s"])


def test_a_run_in_progress_refreshes(browser, tmp_path):
    """While summary.json is missing the view says it is training and picks up new records; it looks again
    after a failed look and past a half-written record, and shows the model's tabs once a checkpoint is saved.
    """
    corpus = write_corpus(tmp_path / "corpus.txt")
    run = tmp_path / "run"
    argv = ["pretrain", "--train", str(corpus), "--out", str(run), "--max-steps", "3", "--quiet"]
    assert main([*argv, "--device", "cpu", "--set", *TINY_SET]) == 0
    (run / "summary.json").unlink()  # as if it were still training
    lines = (run / "metrics.jsonl").read_text().splitlines()
    (run / "metrics.jsonl").write_text(lines[0] + "\n")
    (tmp_path / "saved").mkdir()
    for name in ("best", "last"):  # and had not saved a checkpoint yet
        (run / name).rename(tmp_path / "saved" / name)
    state = "document.getElementById('run-state').textContent"
    with serving(run) as base:
        page = browser.new_page()
        page.add_init_script("window.NANOBERT_POLL_MS = 200")  # look again every 0.2 s, not 3 s
        page.route("**/api/run", lambda route: route.fulfill(status=502, body="Bad Gateway"))
        page.goto(base + "/")
        page.wait_for_selector("body[data-ready=true]")
        assert page.locator("nav button").all_inner_texts() == ["Run"]
        assert "no checkpoint yet" in page.inner_text("#what")
        page.wait_for_function(f"{state}.includes('HTTP 502') && {state}.includes('trying again')")
        page.unroute("**/api/run")  # the server answers again
        page.wait_for_function(f"{state}.includes('training: step 1')")
        (run / "metrics.jsonl").write_text("\n".join(lines) + "\n" + lines[0][:20])  # the next half written
        swap_in(tmp_path / "saved" / "last", run / "last")
        page.wait_for_function(f"{state}.includes('step 3')")
        page.wait_for_selector("nav button[data-panel=fill-mask]")
        assert page.get_attribute("nav button.active", "data-panel") == "run"  # still the view looked at
        assert "checkpoint run/last" in page.inner_text("#what")  # named from the run on, no absolute path
        page.click("nav button[data-panel=fill-mask]")
        page.click("#fill-go")
        page.wait_for_selector("#fill-filled")
        page.close()


def test_a_qa_checkpoint_gets_the_answer_panel(browser, tmp_path, capsys):
    from helpers import qa_checkpoint, write_squad_task

    from nanobert.config import QAConfig
    from nanobert.finetuning.qa import finetune_qa

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


def test_a_dead_writers_leftover_does_not_keep_best_from_being_served(run, tmp_path):
    """A save killed after its second rename leaves .best.old-PID behind; the page must still show best/."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    live = tmp_path / "live"
    shutil.copytree(run, live)
    shutil.copytree(run / "best", live / f".best.old-{child.pid}")
    with serving(live) as base:
        assert call(base, "info")[1]["checkpoint"] == "live/best"
        assert call(base, "fill-mask", {"text": "alpha [MASK] charlie ."})[0] == 200
