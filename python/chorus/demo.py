"""The seed lesson (distributed-03) run on real chorus ranks from Python.

    /usr/bin/python3 -m chorus.demo                  # 4 processes forked from this one
    /usr/bin/python3 -m chorus.demo --plot out/      # and out/demo.json, panel1/2.png, table.png
    /usr/bin/python3 -m chorus.demo --threads        # 4 thread ranks in this process
    chorus launch -n 4 /usr/bin/python3 -m chorus.demo   # the launcher's 4 processes

Prints the seed's lines, each read from the run: the gradient reference (a data-parallel
least-squares gradient, all-reduced and checked against float64), the local result shapes of
all-reduce, reduce-scatter and all-gather, the idealized ring bytes per rank next to the bytes
the traffic counters measured on ring calls, and the median microseconds of each collective,
with the seed's JAX figures beside them; then the two-participant ownership table. stdout holds
the lesson's lines only. Exit status 1 when a check fails (the gradient, the shapes, the bytes).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import time
from typing import Dict, List, Optional

import numpy as np

import chorus

KINDS = ("all_reduce", "reduce_scatter", "all_gather_only")
SEED_MEDIAN_US = {"all_reduce": 90.7, "reduce_scatter": 83.2, "all_gather_only": 73.2}
MIN_BATCH_ROWS = 64
WARMUP_REPS = 100
GRADIENT_TOLERANCE = 1e-6
LAUNCHER_VARIABLES = ("CHORUS_RANK", "RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK")


# ---------------------------------------------------------------- 1. data-parallel gradient
# Least squares y ~ X w at w = w_true + offset, y = X w_true + noise; every input is a small
# dyadic rational, exact in float32, so the check measures the arithmetic and the all-reduce.
# The same model as `chorus demo`, which prints the same reference.
def feature(row: int, col: int) -> float:
    return ((3 * row + 5 * col + row * col) % 9 - 4) / 4.0


def true_weight(col: int) -> float:
    return ((7 * col) % 11 - 5) / 16.0


def weight(col: int) -> float:
    return true_weight(col) + ((col % 8) * 2 - 7) / 512.0


def target(row: int, cols: int) -> float:
    y = ((row * 37) % 11 - 5) / 1024.0
    for c in range(cols):
        y += feature(row, c) * true_weight(c)
    return y


def mse_gradient(begin: int, end: int, cols: int, dtype) -> np.ndarray:
    """The mean squared error's gradient over rows [begin, end), accumulated in `dtype`."""
    t = dtype
    grad = np.zeros(cols, dtype=t)
    for row in range(begin, end):
        residual = -t(target(row, cols))
        for c in range(cols):
            residual += t(feature(row, c) * weight(c))
        for c in range(cols):
            grad[c] += t(feature(row, c)) * residual
    grad *= t(2) / t(end - begin)
    return grad


# ---------------------------------------------------------------- the lesson on one rank
class Lesson:
    """One rank's part; rank 0 prints and keeps the record."""

    def __init__(self, comm: chorus.Communicator, count: int, reps: int, timeout: float):
        self.comm = comm
        self.rank, self.size = comm.rank, comm.size
        self.count, self.reps, self.timeout = count, reps, timeout
        self.lines: List[str] = []
        self.failed: List[str] = []
        self.record: Dict = {}
        # The buffers, made once: the lesson's input, and each collective's output.
        self.input = np.zeros(count, np.float32)
        self.reduced = np.zeros(count, np.float32)
        self.shard = np.zeros(count // self.size, np.float32)
        self.gathered = np.zeros(count, np.float32)

    def __getstate__(self):  # rank 0's lesson travels back from its process, its comm does not
        state = dict(self.__dict__)
        state["comm"] = None
        return state

    def say(self, line: str) -> None:
        if self.rank == 0:
            print(line, flush=True)
            self.lines.append(line)

    def check(self, ok: bool, what: str) -> None:
        if self.rank == 0 and not ok:
            self.failed.append(what)

    def max_over_ranks(self, values) -> np.ndarray:
        return self.comm.all_reduce(np.asarray(values, np.float64).copy(), op="max",
                                    timeout=self.timeout)

    def run_kind(self, kind: str, algorithm: Optional[str] = None) -> None:
        # No per-call options when timed (the communicator has the timeout): as a training
        # loop calls.
        kw = {"algorithm": algorithm} if algorithm else {}
        if kind == "all_reduce":
            self.comm.all_reduce(self.input, self.reduced, "sum", **kw)
        elif kind == "reduce_scatter":
            self.comm.reduce_scatter(self.input, self.shard, "sum", **kw)
        else:  # the all-gather sends the reduce-scatter's output, as in the lesson
            self.comm.all_gather(self.shard, self.gathered, **kw)

    def gradient(self) -> None:
        rows = (MIN_BATCH_ROWS + self.size - 1) // self.size
        local = mse_gradient(self.rank * rows, (self.rank + 1) * rows, self.count, np.float32)
        self.comm.all_reduce(local, op="avg", timeout=self.timeout)
        reference = mse_gradient(0, self.size * rows, self.count, float)
        worst = float(np.max(np.abs(local.astype(np.float64) - reference)))
        if np.isnan(worst):
            worst = float("inf")
        worst = float(self.max_over_ranks([worst])[0])
        self.say(f"Gradient reference: {[float(g) for g in reference]}")
        self.say(f"Gradient max abs difference vs all-reduce: {worst}")
        self.check(worst <= GRADIENT_TOLERANCE,
                   f"gradient differs from the float64 reference by {worst}")

    def shapes(self) -> None:
        self.input[:] = np.arange(self.count, dtype=np.float32) + self.rank
        for kind in KINDS:
            self.run_kind(kind)
        shapes = [self.reduced.shape, self.shard.shape, self.gathered.shape]
        self.record["shapes"] = [s[0] for s in shapes]
        self.say(f"Local result shapes: replicated {shapes[0]}, reduce-scatter {shapes[1]}, "
                 f"gathered {shapes[2]}")
        # The values too: the shapes are of real results.
        p = self.size
        want = p * np.arange(self.count, dtype=np.float64) + p * (p - 1) / 2
        self.check(np.array_equal(self.reduced, want), "all-reduce returned wrong values")
        self.check(np.array_equal(self.gathered, want), "all-gather returned wrong values")

    def bytes(self) -> None:
        self.comm.reset_traffic()
        for kind in KINDS:
            self.run_kind(kind, algorithm="ring")
        t = self.comm.traffic()
        sent = [t["allreduce"]["bytes_sent"], t["reducescatter"]["bytes_sent"],
                t["reducescatter"]["bytes_sent"] + t["allgather"]["bytes_sent"]]
        calls = [t["allreduce"]["calls"], t["reducescatter"]["calls"], t["allgather"]["calls"]]
        measured = self.max_over_ranks(sent)
        calls_max = self.max_over_ranks(calls)
        p, block = self.size, (self.count // self.size) * 4
        modeled = [2.0 * (p - 1) * block, 1.0 * (p - 1) * block, 2.0 * (p - 1) * block]
        self.record["modeled_bytes"] = modeled
        self.record["measured_bytes"] = [float(b) for b in measured]
        self.say(f"Idealized ring bytes per rank: {modeled[0]} {modeled[1]}")
        self.say(f"Measured ring bytes per rank: {float(measured[0])} {float(measured[1])}")
        self.check(list(measured) == modeled,
                   f"traffic counters disagree with the ring model: measured "
                   f"{[float(b) for b in measured]}, modeled {modeled}")
        self.check(list(calls_max) == [1, 1, 1], f"calls counted {list(calls_max)}, expected 1 each")

    def latencies(self) -> None:
        medians = {}
        token = np.zeros(1, np.uint32)
        for name in KINDS:
            times = np.zeros(self.reps, np.float64)
            for i in range(-WARMUP_REPS, self.reps):
                # Start together, as chorus demo and chorus bench do: two tiny all-reduces.
                self.comm.all_reduce(token)
                self.comm.all_reduce(token)
                start = time.perf_counter()
                self.run_kind(name)
                took = time.perf_counter() - start
                if i >= 0:
                    times[i] = took * 1e6
            times = self.max_over_ranks(times)  # a call takes as long as its slowest rank
            medians[name] = float(np.median(times))
        self.record["latency_us"] = medians
        self.say(f"Completed CPU median microseconds: {medians}")
        self.say(f"Seed (JAX, 4 CPU devices) median microseconds: {SEED_MEDIAN_US}")

    def run(self) -> None:
        self.gradient()
        self.shapes()
        self.bytes()
        self.latencies()


# ---------------------------------------------------------------- who owns what
def ownership_table() -> List[List[str]]:
    """Two thread ranks: each contributes two values, reduce-scatter, then all-gather."""
    contribution = [np.array([1, 2], np.int32), np.array([3, 4], np.int32)]

    def stage(comm: chorus.Communicator):
        shard = comm.reduce_scatter(contribution[comm.rank])
        return shard, comm.all_gather(shard)

    (s0, g0), (s1, g1) = chorus.local_group(2, stage)
    show = lambda a: str([int(x) for x in a])  # noqa: E731
    return [["Stage", "Participant 0", "Participant 1"],
            ["Contribution", show(contribution[0]), show(contribution[1])],
            ["Reduce-scatter", show(s0), show(s1)],
            ["All-gather", show(g0), show(g1)]]


def print_table(table: List[List[str]], lines: List[str]) -> None:
    width = [max(len(row[c]) for row in table) for c in range(3)]
    out = ["Reduce-scatter followed by all-gather"]
    for i, row in enumerate(table):
        out.append(f"{row[0]:<{width[0]}} | {row[1]:<{width[1]}} | {row[2]}")
        if i == 0:
            out.append("-" * (width[0] + 1) + "+" + "-" * (width[1] + 2) + "+" +
                       "-" * (width[2] + 1))
    for line in out:
        print(line, flush=True)
        lines.append(line)


def make_record(lesson: Lesson, table: List[List[str]], transport: str, reps: int) -> Dict:
    rec = lesson.record
    reading = (f"Participant 0 contributed {table[1][1]} and participant 1 contributed "
               f"{table[1][2]}. Reduce-scatter summed them and left participant 0 with "
               f"{table[2][1]} and participant 1 with {table[2][2]}, so at that point neither "
               f"held the whole result. All-gather then gave each {table[3][1]}. The values "
               "were read back from the numpy arrays of a real two-rank chorus group; the table "
               "shows who owns what, not the order in which bytes moved.")
    return {
        "schemaVersion": 1,
        "lessonId": "distributed-03",
        "kind": "executed",
        "generatedAt": datetime.datetime.now(datetime.timezone.utc).isoformat(),
        "provenance": "python3 -m chorus.demo",
        "environment": {"backend": "cpu", "deviceCount": lesson.size, "transport": transport,
                        "chorus": chorus.__version__, "numpy": np.__version__,
                        "python": sys.version.split()[0]},
        "stdout": "".join(line + "\n" for line in lesson.lines),
        "data": {
            "config": {"ranks": lesson.size, "count": lesson.count, "dtype": "float32",
                       "reps": reps, "warmupReps": WARMUP_REPS,
                       "ownershipTableTransport": "thread"},
            "panels": [
                {"kind": "bar", "labels": ["all-reduce", "reduce-scatter", "after gather"],
                 "ylabel": "values stored per device",
                 "series": [{"label": "observed local shape", "y": rec["shapes"]}]},
                {"kind": "bar", "labels": ["all-reduce", "reduce-scatter", "scatter + gather"],
                 "ylabel": "modeled bytes per rank",
                 "series": [{"label": "idealized ring payload", "y": rec["modeled_bytes"]},
                            {"label": "measured bytes (traffic counters)",
                             "y": rec["measured_bytes"]}]},
            ],
            "latency_us": rec["latency_us"],
            "seed_latency_us": SEED_MEDIAN_US,
        },
        "diagram": {
            "title": "Reduce-scatter followed by all-gather",
            "prediction": "Right after reduce-scatter, does any participant hold the whole "
                          "reduced array?",
            "reading": reading,
            "alt": "Table with one column per participant and one row per stage. " + reading,
            "scope": "Ownership of reduced data across two ranks, from an executed run.",
            "height": 3.8,
            "panel": {"kind": "table", "headers": table[0], "rows": table[1:]},
        },
    }


def launched() -> bool:
    return any(os.environ.get(v) for v in LAUNCHER_VARIABLES)


def lesson_in_processes(ranks: int, run, timeout: float):
    """run(comm) on `ranks` processes forked from this one, shm ranks meeting through a file
    store in a fresh directory; returns rank 0's result (sent back through a pipe). Python's
    thread ranks take turns on the GIL between calls, process ranks do not."""
    import multiprocessing
    import pickle
    import tempfile
    import uuid

    ctx = multiprocessing.get_context("fork")
    with tempfile.TemporaryDirectory(prefix="chorus-demo-") as tmp:
        url, job = f"file://{tmp}/store", uuid.uuid4().hex
        reader, writer = ctx.Pipe(duplex=False)

        def rank_main(rank: int) -> None:
            code = 0
            try:
                comm = chorus.init(rank=rank, size=ranks, store_url=url, job_id=job,
                                   transport="shm", timeout=timeout)
                result = run(comm)
                comm.close()
                if rank == 0:
                    writer.send_bytes(pickle.dumps(result))
            except BaseException as e:  # noqa: BLE001 - reported, then this rank fails
                print(f"chorus.demo: rank {rank}: {type(e).__name__}: {e}", file=sys.stderr)
                code = 1
            sys.stdout.flush()
            os._exit(code)

        children = [ctx.Process(target=rank_main, args=(r,)) for r in range(ranks)]
        for child in children:
            child.start()
        writer.close()
        try:
            result = pickle.loads(reader.recv_bytes())
        except EOFError:
            result = None
        for child in children:
            child.join()
        failed = [r for r, child in enumerate(children) if child.exitcode != 0]
        if failed or result is None:
            raise chorus.Error(f"ranks {failed} of the demo's {ranks} processes failed")
        return result


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m chorus.demo",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("-n", "--ranks", type=int, default=4,
                        help="ranks (default 4): processes forked from this one, or threads "
                             "with --threads; under a launcher the job's ranks instead")
    parser.add_argument("--count", type=int, default=8,
                        help="elements per buffer, a multiple of the ranks (default 8)")
    parser.add_argument("--reps", type=int, default=2000, help="timed calls per collective")
    parser.add_argument("--json", help="write the JSON record here")
    parser.add_argument("--plot", metavar="DIR",
                        help="write DIR/demo.json and DIR/panel1.png, panel2.png, table.png")
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds per call")
    parser.add_argument("--threads", action="store_true",
                        help="thread ranks in this process (also under a launcher)")
    args = parser.parse_args(argv)
    if args.reps < 1 or args.count < 1:
        parser.error("--reps and --count must be positive")

    def lesson_on(comm: chorus.Communicator) -> Lesson:
        if args.count % comm.size != 0:
            raise chorus.InvalidArgumentError(
                f"--count ({args.count}) must be a multiple of the ranks ({comm.size})", True)
        lesson = Lesson(comm, args.count, args.reps, args.timeout)
        lesson.run()
        return lesson

    if launched() and not args.threads:
        comm = chorus.init(timeout=args.timeout)
        lesson, transport = lesson_on(comm), comm.transport
        comm.close()
        if lesson.rank != 0:
            return 0
    else:
        if args.count % args.ranks != 0:
            parser.error(f"--count ({args.count}) must be a multiple of --ranks ({args.ranks})")
        if args.threads:
            lesson = chorus.local_group(args.ranks, lesson_on, timeout=args.timeout)[0]
            transport = "thread"
        else:
            lesson, transport = lesson_in_processes(args.ranks, lesson_on, args.timeout), "shm"
    table = ownership_table()
    print_table(table, lesson.lines)
    record = make_record(lesson, table, transport, args.reps)
    paths = [args.json] if args.json else []
    if args.plot:
        os.makedirs(args.plot, exist_ok=True)
        paths.append(os.path.join(args.plot, "demo.json"))
    for path in paths:
        with open(path, "w", encoding="utf-8") as f:
            json.dump(record, f, indent=2)
            f.write("\n")
    if args.plot:
        from . import plot  # matplotlib is needed for the figures only
        for path in plot.render(record, args.plot):
            print(path, file=sys.stderr)
    for what in lesson.failed:
        print(f"chorus.demo: check failed: {what}", file=sys.stderr)
    return 1 if lesson.failed else 0


if __name__ == "__main__":
    sys.exit(main())
