"""Take the README's screenshots of `nanobert serve` in headless Chromium (Debian's chromium, Playwright).

    python docs/screenshot.py RUN/best --out docs [--panels fill-mask attention score]

The server runs on a free port; the pictures (serve-fill-mask.png, serve-attention.png, serve-score.png) go to
--out.
"""

import argparse
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from playwright.sync_api import sync_playwright

FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def fill_mask(page, out: Path) -> None:
    page.fill("#fill-text", "the [MASK] of the united states is the head of state .")
    page.click("#fill-go")
    page.wait_for_selector("#fill-filled")
    page.screenshot(path=str(out / "serve-fill-mask.png"))


def attention(page, out: Path) -> None:
    page.click("nav button[data-panel=attention]")
    page.click("#attention-go")
    page.wait_for_selector("canvas.heatmap")
    page.select_option("#attention-layer", "1")
    page.hover("canvas.heatmap", position={"x": 200, "y": 160})
    # the whole page, not the 760 px viewport: the heatmap's caption sits below it
    page.screenshot(path=str(out / "serve-attention.png"), full_page=True)


def score(page, out: Path) -> None:
    page.click("nav button[data-panel=score]")
    page.fill("#score-a", "the cats sleep on the sofa .")
    page.fill("#score-b", "the cats sleeps on the sofa .")
    page.click("#score-go")
    page.wait_for_selector("#score-verdict")
    page.screenshot(path=str(out / "serve-score.png"), full_page=True)


SHOTS = {"fill-mask": fill_mask, "attention": attention, "score": score}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("checkpoint")
    p.add_argument("--out", default="docs")
    p.add_argument("--chromium", default="/usr/bin/chromium")
    p.add_argument("--panels", nargs="+", choices=list(SHOTS), default=list(SHOTS))
    args = p.parse_args()
    port = free_port()
    command = [sys.executable, "-m", "nanobert", "serve", args.checkpoint, "--port", str(port)]
    server = subprocess.Popen(command)
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(300):
            try:
                urllib.request.urlopen(base + "/api/info", timeout=1)
                break
            except OSError:
                time.sleep(0.1)
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=args.chromium, args=FLAGS, headless=True)
            page = browser.new_page(viewport={"width": 1100, "height": 760})
            page.goto(base + "/")
            page.wait_for_selector("body[data-ready=true]")
            for panel in args.panels:
                SHOTS[panel](page, Path(args.out))
            browser.close()
    finally:
        server.terminate()


if __name__ == "__main__":
    main()
