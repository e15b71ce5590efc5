"""`python3 -m chorus.demo` against the seed (../shared/seed: distributed-03): the same lines,
shapes and modeled bytes, the measured bytes equal to them, a record of the seed's shape, and
the plots; and `python3 -m chorus.bench` in the nccl-tests style."""

import json
import os

import chorus.bench

from conftest import PYTHON, run_process

SEED_LINES = [
    "Local result shapes: replicated (8,), reduce-scatter (2,), gathered (8,)",
    "Idealized ring bytes per rank: 48.0 24.0",
]


def test_demo_prints_the_seed_lines_from_real_buffers(tmp_path):
    out = run_process([PYTHON, "-m", "chorus.demo", "--reps", "30", "--plot", str(tmp_path)],
                      timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("Gradient reference: [") and lines[0].count(",") == 7
    assert lines[1] == "Gradient max abs difference vs all-reduce: 0.0"
    assert lines[2:4] == SEED_LINES
    assert lines[4] == "Measured ring bytes per rank: 48.0 24.0"
    assert lines[5].startswith("Completed CPU median microseconds: {'all_reduce': ")
    assert "'reduce_scatter': " in lines[5] and "'all_gather_only': " in lines[5]
    assert lines[6] == ("Seed (JAX, 4 CPU devices) median microseconds: "
                        "{'all_reduce': 90.7, 'reduce_scatter': 83.2, 'all_gather_only': 73.2}")
    assert lines[7:] == [
        "Reduce-scatter followed by all-gather",
        "Stage          | Participant 0 | Participant 1",
        "---------------+---------------+--------------",
        "Contribution   | [1, 2]        | [3, 4]",
        "Reduce-scatter | [4]           | [6]",
        "All-gather     | [4, 6]        | [4, 6]",
    ]
    with open(tmp_path / "demo.json", encoding="utf-8") as f:
        record = json.load(f)
    assert record["lessonId"] == "distributed-03" and record["environment"]["deviceCount"] == 4
    assert record["stdout"] == out.stdout
    panels = record["data"]["panels"]
    assert panels[0]["labels"] == ["all-reduce", "reduce-scatter", "after gather"]
    assert panels[0]["series"][0]["y"] == [8, 2, 8]
    assert panels[1]["series"][0] == {"label": "idealized ring payload", "y": [48.0, 24.0, 48.0]}
    assert panels[1]["series"][1]["y"] == [48.0, 24.0, 48.0]
    table = record["diagram"]["panel"]
    assert table["headers"] == ["Stage", "Participant 0", "Participant 1"]
    assert table["rows"] == [["Contribution", "[1, 2]", "[3, 4]"], ["Reduce-scatter", "[4]", "[6]"],
                             ["All-gather", "[4, 6]", "[4, 6]"]]
    for name in ("panel1.png", "panel2.png", "table.png"):
        assert os.path.getsize(tmp_path / name) > 1000, name


def test_bench_prints_nccl_tests_rows(capsys):
    assert chorus.bench.main(["-n", "2", "--ops",
                              "allreduce,reducescatter,allgather,alltoall,sendrecv", "--sizes", "32,4K", "--iters", "20", "--csv", "--header"]) == 0
    rows = capsys.readouterr().out.splitlines()
    assert rows[0] == "lib,op,ranks,count,bytes,median_us,min_us,algbw_GBs,busbw_GBs"
    ops = [r.split(",")[1] for r in rows[1:]]
    assert ops == ["allreduce", "allreduce", "reduce_scatter", "reduce_scatter", "allgather",
                   "allgather", "alltoall", "alltoall", "sendrecv", "sendrecv"]
    for row in rows[1:]:
        lib, _, ranks, count, nbytes, median, low, algbw, busbw = row.split(",")
        assert lib == "chorus-python" and ranks == "2"
        assert int(nbytes) == 4 * int(count) and float(median) >= float(low) > 0
