"""Every error path: what the binding refuses, what the library refuses, deadlines, aborts and
dead ranks; each raises a chorus.Error subclass with its code, message and usability, and the
peers of a refusing rank hear of it at once."""

import time

import numpy as np
import pytest

import chorus


def expect(error_class, needle, fn):
    with pytest.raises(error_class) as info:
        fn()
    assert needle in str(info.value), str(info.value)
    return info.value


@pytest.mark.parametrize("case", ["strided", "read-only", "list", "complex", "wrong-size",
                                  "null-op", "bad-dtype", "objects-as-int64", "big-endian",
                                  "misaligned", "zero-timeout", "timeout-text", "algorithm-int",
                                  "unknown-algorithm"])
def test_a_refused_call_fails_on_every_rank_and_the_next_works(run_group, case):
    """Rank 0 makes the mistake; ranks 1 and 2 call correctly and hear who refused and why.
    The communicator stays usable (INVALID_ARGUMENT) and the next call is right."""
    needles = {
        "strided": "send is not C-contiguous",
        "read-only": "recv is read-only",
        "list": "send must be a numpy.ndarray, not list",
        "complex": "send has dtype complex64, which chorus has no type for",
        "wrong-size": "recv.count (7) != send.count (8)",
        "null-op": "op (\"median\") is not one of",
        "bad-dtype": "dtype (\"float8\") is not a chorus data type",
        "objects-as-int64": "send has dtype object, which dtype=int64 cannot reinterpret",
        "big-endian": "send is big-endian",
        "misaligned": "send is not aligned to its element size",
        "zero-timeout": "timeout (0.000000 s) must be positive and finite",
        "timeout-text": "timeout must be seconds (a number or a datetime.timedelta), not str",
        "algorithm-int": "algorithm must be a str",
        "unknown-algorithm": "algorithm \"bogus\"",
    }

    def body(comm):
        x = np.ones(8, np.float32)
        if comm.rank == 0:
            bad = {
                "strided": lambda: comm.all_reduce(np.ones(16, np.float32)[::2], x),
                "read-only": lambda: comm.all_reduce(x, np.frombuffer(bytes(32), np.float32)),
                "list": lambda: comm.all_reduce([1.0] * 8, x),
                "complex": lambda: comm.all_reduce(np.ones(8, np.complex64), x),
                "wrong-size": lambda: comm.all_reduce(x, np.ones(7, np.float32)),
                "null-op": lambda: comm.all_reduce(x, op="median"),
                "bad-dtype": lambda: comm.all_reduce(x, dtype="float8"),
                "objects-as-int64": lambda: comm.all_reduce(
                    np.array([object()] * 8, dtype=object), np.zeros(8, np.int64),
                    dtype="int64"),
                "big-endian": lambda: comm.all_reduce(np.ones(8, ">f4"), x),
                "misaligned": lambda: comm.all_reduce(
                    np.ndarray(8, np.float32, buffer=bytearray(40), offset=1), x),
                "zero-timeout": lambda: comm.all_reduce(x, timeout=0),
                "timeout-text": lambda: comm.all_reduce(x, timeout="soon"),
                "algorithm-int": lambda: comm.all_reduce(x, algorithm=5),
                "unknown-algorithm": lambda: comm.all_reduce(x, algorithm="bogus"),
            }[case]
            error = expect(chorus.InvalidArgumentError, needles[case], bad)
        else:
            time.sleep(0.05)  # let the refusal come first for some of the peers
            error = expect(chorus.InvalidArgumentError,
                           "rank 0 rejected this call (allreduce: " + needles[case],
                           lambda: comm.all_reduce(x))
        assert error.usable and error.code == "INVALID_ARGUMENT" and error.code_value == 1
        assert isinstance(error, ValueError)
        assert comm.health() is None
        y = np.full(4, comm.rank, np.int64)
        comm.all_reduce(y)
        return y.tolist()

    assert run_group(3, body, timeout=20.0) == [[3, 3, 3, 3]] * 3


def test_a_rank_that_never_calls_is_named_at_the_deadline(run_group):
    def body(comm):
        if comm.rank == 2:
            return None  # never enters the call
        error = expect(chorus.DeadlineExceededError, "rank 2",
                       lambda: comm.all_reduce(np.ones(4), timeout=0.5))
        assert not error.usable and isinstance(error, TimeoutError)
        # Sticky: the next call raises the same failure, and health() returns it.
        assert isinstance(comm.health(), chorus.DeadlineExceededError)
        expect(chorus.DeadlineExceededError, "", lambda: comm.barrier())
        return error.code

    assert run_group(3, body)[:2] == ["DEADLINE_EXCEEDED"] * 2


def test_abort_wakes_a_waiting_rank(run_group):
    def body(comm):
        if comm.rank == 1:
            time.sleep(0.2)
            comm.abort()
        error = expect(chorus.AbortedError, "Abort() was called",
                       lambda: comm.all_reduce(np.ones(4), timeout=30.0))
        assert not error.usable
        return error.code

    start = time.monotonic()
    assert run_group(2, body) == ["ABORTED"] * 2
    assert time.monotonic() - start < 20  # a hang guard, not a timing check


def test_local_group_raises_the_first_failure_and_aborts_the_rest():
    def body(comm):
        if comm.rank == 1:
            raise KeyError("rank 1 gave up")
        comm.barrier(timeout=60.0)  # would wait a minute without the abort

    with pytest.raises(KeyError, match="rank 1 gave up"):
        chorus.local_group(3, body)


def test_a_root_that_is_not_an_int_is_refused_on_every_rank(run_group):
    def body(comm):
        buf = np.ones(4, np.float32)
        if comm.rank == 0:
            error = expect(chorus.InvalidArgumentError, "root must be an int rank, not 1.0",
                           lambda: comm.broadcast(buf, root=1.0))
        else:
            error = expect(chorus.InvalidArgumentError, "rank 0 rejected this call",
                           lambda: comm.broadcast(buf, root=np.int64(0)))  # it waits
        assert error.usable
        comm.broadcast(buf, root=np.int32(1))
        with pytest.raises(ValueError, match="no collective is called 'median'"):
            comm.reject_call("median", "x")
        return True

    assert run_group(2, body) == [True, True]


def test_bad_options_and_closed_communicators():
    expect(chorus.InvalidArgumentError, "options.algorithm (\"bogus\")",
           lambda: chorus.create_local_group(2, algorithm="bogus"))
    expect(chorus.InvalidArgumentError, "transport (\"carrier-pigeon\") is not one of",
           lambda: chorus.create_local_group(2, transport="carrier-pigeon"))
    expect(chorus.InvalidArgumentError, "slot_stores (\"fast\") is not one of: auto, cached, stream",
           lambda: chorus.create_local_group(2, slot_stores="fast"))
    assert len(chorus.create_local_group(2, slot_stores="stream")) == 2
    with pytest.raises(TypeError, match="unexpected option 'colour'"):
        chorus.create_local_group(2, colour="red")
    (comm,) = chorus.create_local_group(1)
    comm.close()
    with pytest.raises(ValueError, match="closed"):
        comm.all_reduce(np.ones(2))
    error = chorus.InvalidArgumentError("x", True)
    import pickle
    again = pickle.loads(pickle.dumps(error))
    assert type(again) is chorus.InvalidArgumentError and again.usable


def test_one_communicator_used_from_two_threads_at_once_is_refused():
    import threading

    comms = chorus.create_local_group(2)
    errors = []

    def waiter():
        try:
            comms[0].barrier(timeout=5.0)
        except chorus.Error as e:  # the abort below ends it
            errors.append(e)

    t = threading.Thread(target=waiter)
    t.start()
    deadline = time.monotonic() + 60
    while not comms[0].in_call:  # the waiter is inside its barrier
        assert time.monotonic() < deadline, "the waiter never entered its call"
        time.sleep(0.001)
    expect(chorus.InvalidArgumentError, "already in a call on another thread",
           lambda: comms[0].barrier())
    comms[1].barrier(timeout=5.0)
    t.join()
    assert not errors
    for c in comms:
        c.close()
