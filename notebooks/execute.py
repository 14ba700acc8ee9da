"""Run bert_from_scratch.ipynb top to bottom and store its outputs in it: the notebook is committed executed,
so that it reads on GitHub without running it. Run this after editing a cell, then commit the notebook.

    python notebooks/execute.py

It runs in a temporary folder (the runs it trains are thrown away), merges each cell's stream outputs with
carriage returns applied (a progress bar is stored as its last state) and records no timings, so that a
re-run changes only what the cells print.
"""

import sys
import tempfile
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

NOTEBOOK = Path(__file__).with_name("bert_from_scratch.ipynb")


def main() -> int:
    nb = nbformat.read(NOTEBOOK, as_version=4)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as folder:
        client = NotebookClient(
            nb,
            timeout=600,
            kernel_name="python3",
            resources={"metadata": {"path": folder}},
            coalesce_streams=True,
            record_timing=False,
        )
        client.execute()
    nbformat.write(nb, NOTEBOOK)
    size = NOTEBOOK.stat().st_size
    print(f"executed {NOTEBOOK.name} in {time.perf_counter() - start:.0f} s; stored {size / 1024:.0f} KiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
