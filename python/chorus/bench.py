"""Times chorus collectives called from Python on numpy arrays, in the nccl-tests style.

    /usr/bin/python3 -m chorus.bench -n 2 --ops allreduce --sizes 32,1M,64M     # thread ranks
    chorus launch -n 2 /usr/bin/python3 -m chorus.bench --ops allreduce --csv   # process ranks

Each timed call starts together on every rank (two one-element all-reduces first, as
`chorus bench` starts its calls) and takes as long as its slowest rank; a size's time is the
median of its calls. The calls pass no per-call options (the communicator has the timeout), as
a training loop calls. --csv prints the columns of
`chorus bench --csv` (lib,op,ranks,count,bytes,median_us,min_us,algbw_GBs,busbw_GBs, out of
place, count and bytes of the total buffer), so the cost of the Python layer is the ratio of
two rows measured in one run.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Callable, Dict, List, Optional, Tuple

import numpy as np

import chorus

from .demo import launched

# op: (CSV name, send and recv elements of a total of n on p ranks, bus-bandwidth factor)
OPS: Dict[str, Tuple[str, Callable[[int, int], Tuple[int, int]], Callable[[int], float]]] = {
    "allreduce": ("allreduce", lambda n, p: (n, n), lambda p: 2 * (p - 1) / p),
    "reducescatter": ("reduce_scatter", lambda n, p: (n, n // p), lambda p: (p - 1) / p),
    "allgather": ("allgather", lambda n, p: (n // p, n), lambda p: (p - 1) / p),
    "broadcast": ("broadcast", lambda n, p: (n, n), lambda p: 1.0),
    "reduce": ("reduce", lambda n, p: (n, n), lambda p: 1.0),
    "alltoall": ("alltoall", lambda n, p: (n, n), lambda p: (p - 1) / p),
    "gather": ("gather", lambda n, p: (n // p, n), lambda p: (p - 1) / p),
    "scatter": ("scatter", lambda n, p: (n, n // p), lambda p: (p - 1) / p),
    # The ring shift of messages (send to rank + 1, receive from rank - 1), as the peers time it.
    "sendrecv": ("sendrecv", lambda n, p: (n, n), lambda p: 1.0),
}


def parse_size(text: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    text = text.strip().upper().rstrip("B")
    if text and text[-1] in units:
        return int(float(text[:-1]) * units[text[-1]])
    return int(text)


def aligned(n: int, dtype: np.dtype, fill: int) -> np.ndarray:
    """n elements starting on a 4 KiB boundary, as chorus bench's buffers do (numpy's large
    arrays start 16 bytes into a page, across cache lines from the library's blocks)."""
    if os.environ.get("CHORUS_BENCH_NUMPY_ALIGNMENT") == "1":  # numpy's own placement
        return np.full(n, fill, dtype)
    raw = np.empty(n * dtype.itemsize + 4096, np.uint8)
    start = (-raw.ctypes.data) % 4096
    array = raw[start:start + n * dtype.itemsize].view(dtype)
    array[:] = fill
    return array


def call_of(comm: chorus.Communicator, op: str, send: np.ndarray,
            recv: np.ndarray) -> Callable[[], object]:
    """The timed call, with every argument bound."""
    if op == "allreduce":
        return lambda: comm.all_reduce(send, recv, "sum")
    if op == "reducescatter":
        return lambda: comm.reduce_scatter(send, recv, "sum")
    if op == "allgather":
        return lambda: comm.all_gather(send, recv)
    if op == "broadcast":
        return lambda: comm.broadcast(send, recv, 0)
    if op == "reduce":
        return lambda: comm.reduce(send, recv, "sum", 0)
    if op == "alltoall":
        return lambda: comm.all_to_all(send, recv)
    if op == "gather":
        return lambda: comm.gather(send, recv, 0)
    if op == "sendrecv":
        p, r = comm.size, comm.rank
        return lambda: comm.sendrecv(send, (r + 1) % p, recv, (r - 1) % p)
    return lambda: comm.scatter(send, recv, 0)


def bench_rank(comm: chorus.Communicator, args) -> List[str]:
    """Every size of every op on this rank; rank 0 returns the report lines."""
    p = comm.size
    dtype = np.dtype(args.dtype)
    lines: List[str] = []
    if comm.rank == 0 and args.csv and args.header:
        lines.append("lib,op,ranks,count,bytes,median_us,min_us,algbw_GBs,busbw_GBs")
    elif comm.rank == 0 and not args.csv:
        lines.append(f"# chorus.bench (Python, numpy {np.__version__}): {p} ranks, "
                     f"transport {comm.transport}, {dtype.name}")
        lines.append(f"#{'op':>15} {'size':>12} {'count':>12} {'time':>10} {'mean':>10} "
                     f"{'algbw':>8} {'busbw':>8}")
        lines.append(f"#{'':>15} {'(B)':>12} {'(elements)':>12} {'(us)':>10} {'(us)':>10} "
                     f"{'(GB/s)':>8} {'(GB/s)':>8}")
    for op in args.ops:
        name, counts, factor = OPS[op]
        for size in args.sizes:
            n = max(p, size // dtype.itemsize // p * p)  # whole blocks of every rank
            send_n, recv_n = counts(n, p)
            send = aligned(send_n, dtype, 1)
            recv = aligned(recv_n, dtype, 0)
            call = call_of(comm, op, send, recv)
            token = np.zeros(1, np.uint32)
            for _ in range(args.warmup):
                call()
            times: List[float] = []

            def timed(k: int) -> float:
                begin = time.perf_counter()
                for _ in range(k):
                    comm.all_reduce(token)  # start together
                    comm.all_reduce(token)
                    start = time.perf_counter()
                    call()
                    times.append(time.perf_counter() - start)
                return time.perf_counter() - begin

            iters = args.iters
            if iters <= 0:  # enough calls for --min-seconds, as every rank agrees
                probe = timed(5)
                per_call = float(comm.all_reduce(np.array([probe / 5]), op="max")[0])
                iters = int(min(10000, max(20, args.min_seconds / max(per_call, 1e-9))))
                iters -= 5
            timed(iters)
            slowest = comm.all_reduce(np.array(times) * 1e6, op="max")
            if comm.rank != 0:
                continue
            median, low, mean = (float(np.median(slowest)), float(np.min(slowest)),
                                 float(np.mean(slowest)))
            nbytes = n * dtype.itemsize
            algbw = nbytes / median / 1e3  # bytes per microsecond / 1e3 = GB/s
            busbw = algbw * factor(p)
            if args.csv:
                lines.append(f"{args.lib},{name},{p},{n},{nbytes},{median:.3f},{low:.3f},"
                             f"{algbw:.4f},{busbw:.4f}")
            else:
                lines.append(f" {name:>15} {nbytes:>12} {n:>12} {median:>10.2f} {mean:>10.2f} "
                             f"{algbw:>8.3f} {busbw:>8.3f}")
    return lines


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m chorus.bench",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("-n", "--ranks", type=int, default=2,
                        help="thread ranks (default 2); under a launcher the job's ranks")
    parser.add_argument("--ops", default="allreduce",
                        help="comma-separated: " + ", ".join(OPS) + " (or 'all')")
    parser.add_argument("--sizes", default="32,1M,64M",
                        help="total buffer sizes in bytes, K, M, G allowed (default 32,1M,64M)")
    parser.add_argument("-d", "--dtype", default="float32",
                        help="int8 uint8 int32 uint32 int64 uint64 float16 float32 float64")
    parser.add_argument("--iters", type=int, default=0,
                        help="timed calls per size; 0: enough for --min-seconds")
    parser.add_argument("--min-seconds", type=float, default=0.2)
    parser.add_argument("-w", "--warmup", type=int, default=5)
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds per call")
    parser.add_argument("--csv", action="store_true", help="CSV rows as chorus bench --csv")
    parser.add_argument("--header", action="store_true", help="with --csv, the header line")
    parser.add_argument("--lib", default="chorus-python", help="the CSV lib column")
    parser.add_argument("--threads", action="store_true",
                        help="thread ranks even when a launcher's variables are set")
    args = parser.parse_args(argv)
    args.ops = list(OPS) if args.ops == "all" else [o.strip() for o in args.ops.split(",")]
    unknown = [o for o in args.ops if o not in OPS]
    if unknown:
        parser.error(f"unknown op {unknown[0]!r}; known: {', '.join(OPS)}")
    try:
        args.sizes = [parse_size(s) for s in args.sizes.split(",")]
    except ValueError:
        parser.error(f"--sizes: cannot read {args.sizes!r}")
    if args.dtype not in chorus.DTYPES or args.dtype == "bfloat16":
        parser.error(f"--dtype {args.dtype!r}: one of int8 uint8 int32 uint32 int64 uint64 "
                     "float16 float32 float64")

    if launched() and not args.threads:
        comm = chorus.init(timeout=args.timeout)
        lines = bench_rank(comm, args)
        comm.close()
    else:
        lines = chorus.local_group(args.ranks, lambda comm: bench_rank(comm, args),
                                   timeout=args.timeout)[0]
    for line in lines:
        print(line)
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
