"""chorus: collective communication for CPU ranks, on numpy arrays without copies.

    import numpy as np, chorus

    comm = chorus.init()                       # under chorus launch, torchrun, mpirun, Slurm
    grad = np.ones(1024, np.float32)
    comm.all_reduce(grad, op="avg")            # in place
    shard = comm.reduce_scatter(grad)          # a new array, a size-th of grad's first axis

    # thread ranks in this process
    results = chorus.local_group(4, lambda comm: comm.all_reduce(np.ones(8)).sum())

Every collective of the C++ library is a method of :class:`Communicator`: ``all_reduce``,
``reduce_scatter``, ``all_gather``, ``broadcast``, ``reduce``, ``barrier``, ``gather``,
``scatter``, ``all_to_all`` and the v-variants ``all_gather_v``, ``reduce_scatter_v``,
``all_to_all_v``, ``gather_v``, ``scatter_v``. Arrays must be C-contiguous numpy arrays of
int8, uint8, int32, uint32, int64, uint64, float16, float32, float64, or bfloat16 (an
``ml_dtypes.bfloat16`` array, or a uint16 array with ``dtype="bfloat16"``). The GIL is released
during every call. Errors raise :class:`Error` subclasses (chorus/errors.py). docs/python.md in
the chorus source is the guide.
"""

from __future__ import annotations

import enum
import threading
from typing import Any, Callable, List, Tuple, TypeVar

from . import errors
from .errors import (AbortedError, DeadlineExceededError, Error, FailedPreconditionError,
                     InternalError, InvalidArgumentError, UnavailableError, UnimplementedError)
from ._chorus import Communicator, Store, hash_store, open_store
from . import _chorus

__version__ = "0.1.0"

__all__ = [
    "Communicator", "Store", "ReduceOp", "init", "create_local_group", "local_group",
    "hash_store", "open_store", "Error", "InvalidArgumentError", "DeadlineExceededError",
    "UnavailableError", "AbortedError", "FailedPreconditionError", "UnimplementedError",
    "InternalError", "DTYPES",
]

#: The element types chorus reduces and moves, by numpy name.
DTYPES = ("int8", "uint8", "int32", "uint32", "int64", "uint64", "float16", "bfloat16",
          "float32", "float64")


class ReduceOp(str, enum.Enum):
    """Reduction ops; plain strings ("sum", ...) work wherever these do."""

    SUM = "sum"
    PROD = "prod"
    MIN = "min"
    MAX = "max"
    AVG = "avg"


def init(**options: Any) -> Communicator:
    """This process's rank of the job its launcher started.

    Rank, size, store, secret and job id come from the environment, as
    chorus::CommOptionsFromEnvironment reads it: ``chorus launch`` (CHORUS_RANK, ...),
    torchrun (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT), mpirun (Open MPI and MPICH) and
    Slurm. Keyword options override it: timeout (seconds), transport ("auto", "thread", "shm",
    "tcp"), algorithm, segment_bytes, pipeline_depth, wait, slot_stores, wire, rank, size, store (a
    :class:`Store`), store_url, host_store, name, job_id, secret, listen, host_id, shm_dir,
    tuning_file. Blocks until every rank has joined (or the timeout passes)."""
    return _chorus.init(**options)


def create_local_group(n: int, **options: Any) -> List[Communicator]:
    """``n`` ranks as threads of this process: element r is rank r. Drive each from its own
    thread (see :func:`local_group`). Options as for :func:`init`; the environment's
    CHORUS_TIMEOUT_MS, CHORUS_ALGO, CHORUS_WAIT, CHORUS_SLOT_STORES and tuning file apply."""
    return _chorus.create_local_group(n, **options)


T = TypeVar("T")


def local_group(n: int, fn: Callable[[Communicator], T], **options: Any) -> List[T]:
    """Runs ``fn(comm)`` on ``n`` thread ranks at once and returns their results in rank order.

    If a rank raises, the others' communicators are aborted (so nobody waits out a deadline)
    and the first rank's exception is raised once every thread has finished; the others'
    exceptions are attached to it as notes. The communicators are closed afterwards."""
    comms = create_local_group(n, **options)
    results: List[Any] = [None] * n
    raised: List[Tuple[int, BaseException]] = []  # in the order they happened
    lock = threading.Lock()

    def run(r: int) -> None:
        try:
            results[r] = fn(comms[r])
        except BaseException as e:  # noqa: BLE001 - handed to the caller below
            with lock:
                raised.append((r, e))
                if len(raised) == 1:
                    abort_all()

    def abort_all() -> None:
        for c in comms:
            try:
                c.abort()
            except ValueError:  # fn closed it itself
                pass

    threads = [threading.Thread(target=run, args=(r,), name=f"chorus-rank-{r}") for r in range(n)]
    for t in threads:
        t.start()
    try:
        for t in threads:
            t.join()
    except BaseException:  # Ctrl-C: stop the ranks instead of leaving them to their deadlines
        abort_all()
        for t in threads:
            t.join()
        raise
    for c in comms:
        c.close()
    if raised:
        first_rank, first = raised[0]
        # The first failure is the cause; the aborts it set off are noise unless they came first.
        for r, e in raised[1:]:
            if hasattr(first, "add_note"):
                first.add_note(f"rank {r} also raised {type(e).__name__}: {e}")
        if hasattr(first, "add_note"):
            first.add_note(f"(raised on rank {first_rank} of a local group of {n})")
        raise first
    return results
