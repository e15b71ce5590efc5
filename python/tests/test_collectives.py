"""Every collective on thread ranks: every dtype, in place and out of place, exact values."""

import numpy as np
import pytest

import chorus

INT_TYPES = [np.int8, np.uint8, np.int32, np.uint32, np.int64, np.uint64]
FLOAT_TYPES = [np.float16, np.float32, np.float64]
ALL_TYPES = INT_TYPES + FLOAT_TYPES


def values(rank, n, dtype):
    """Small integers, exact in every type (int8 included: at most 4 ranks * 7 + 3 < 127)."""
    return ((np.arange(n) % 7) + rank).astype(dtype)


@pytest.mark.parametrize("p", [1, 2, 3, 4])
def test_all_reduce_every_dtype_and_op(run_group, p):
    n = 13

    def body(comm):
        for dtype in ALL_TYPES:
            want_sum = sum(values(r, n, np.float64) for r in range(p))
            send = values(comm.rank, n, dtype)
            out = comm.all_reduce(send, np.zeros(n, dtype))
            assert out.dtype == dtype and np.array_equal(out, want_sum.astype(dtype)), dtype
            inplace = values(comm.rank, n, dtype)
            assert comm.all_reduce(inplace) is not None
            assert np.array_equal(inplace, want_sum.astype(dtype)), dtype
            got_max = comm.all_reduce(values(comm.rank, n, dtype), op=chorus.ReduceOp.MAX)
            assert np.array_equal(got_max, values(p - 1, n, dtype)), dtype
            got_min = comm.all_reduce(values(comm.rank, n, dtype), op="min")
            assert np.array_equal(got_min, values(0, n, dtype)), dtype
        ones = np.full(5, 2.0, np.float64)
        assert np.array_equal(comm.all_reduce(ones, op="prod"), np.full(5, 2.0 ** p))
        avg = comm.all_reduce(np.full(4, comm.rank, np.int32), op="avg")
        assert np.array_equal(avg, np.full(4, (p - 1) // 2, np.int32))
        return comm.rank

    assert run_group(p, body) == list(range(p))


@pytest.mark.parametrize("p", [1, 2, 3, 4])
def test_reduce_scatter_and_all_gather(run_group, p):
    def body(comm):
        r = comm.rank
        for dtype in ALL_TYPES:
            send = values(r, 3 * p, dtype)
            total = sum(values(q, 3 * p, np.float64) for q in range(p)).astype(dtype)
            shard = comm.reduce_scatter(send)  # a new array of a p-th of axis 0
            assert shard.shape == (3,) and np.array_equal(shard, total[3 * r:3 * r + 3])
            out = np.zeros(3, dtype)
            assert comm.reduce_scatter(send, out) is out
            assert np.array_equal(out, shard)
            gathered = comm.all_gather(np.full(3, r, dtype))
            assert gathered.shape == (3 * p,)
            assert np.array_equal(gathered, np.repeat(np.arange(p), 3).astype(dtype))
            # In place: the rank's own block of recv is the send.
            big = np.zeros(3 * p, dtype)
            big[3 * r:3 * r + 3] = r + 1
            comm.all_gather(big[3 * r:3 * r + 3], big)
            assert np.array_equal(big, np.repeat(np.arange(1, p + 1), 3).astype(dtype))
        # 2-D: axis 0 grows and shrinks, the rest stays.
        rows = comm.all_gather(np.full((2, 3), r, np.float32))
        assert rows.shape == (2 * p, 3) and rows[2 * r, 0] == r
        part = comm.reduce_scatter(np.ones((p, 4), np.float32))
        assert part.shape == (1, 4) and np.all(part == p)

    run_group(p, body)


@pytest.mark.parametrize("p", [1, 2, 3, 4])
def test_rooted_and_all_to_all(run_group, p):
    def body(comm):
        r = comm.rank
        root = p - 1
        for dtype in (np.int32, np.float64, np.uint8):
            buf = np.full(6, r + 10, dtype)
            comm.broadcast(buf, root=root)
            assert np.all(buf == root + 10)
            out = np.zeros(6, dtype)
            comm.broadcast(np.full(6, 7, dtype), out, root=0)
            assert np.all(out == 7)
            red = np.zeros(6, dtype)
            comm.reduce(np.full(6, r + 1, dtype), red, op="sum", root=root)
            if r == root:
                assert np.all(red == p * (p + 1) // 2)
            else:
                assert np.all(red == 0)  # not written away from the root
            g = comm.gather(np.full(2, r, dtype), root=0)
            if r == 0:
                assert np.array_equal(g, np.repeat(np.arange(p), 2).astype(dtype))
            else:
                assert g is None
            recv = np.zeros(2, dtype)
            send = np.repeat(np.arange(p), 2).astype(dtype) if r == root else None
            comm.scatter(send, recv, root=root)
            assert np.all(recv == r)
            a2a = np.array([10 * r + q for q in range(p) for _ in range(2)], dtype)
            got = comm.all_to_all(a2a, np.zeros_like(a2a))
            assert np.array_equal(got, np.array([10 * q + r for q in range(p) for _ in range(2)],
                                                dtype))
            comm.all_to_all(a2a)  # in place
            assert np.array_equal(a2a, got)
        comm.barrier()

    run_group(p, body)


@pytest.mark.parametrize("p", [1, 2, 3, 4])
def test_v_variants_with_zero_counts(run_group, p):
    counts = [(q * 2) % 3 for q in range(p)]  # 0, 2, 1, 0: zeros included
    total = sum(counts)

    def body(comm):
        r = comm.rank
        mine = np.full(counts[r], r + 1, np.float32)
        want = np.concatenate([np.full(c, q + 1, np.float32) for q, c in enumerate(counts)])
        assert np.array_equal(comm.all_gather_v(mine, counts), want)
        rs = comm.reduce_scatter_v(np.ones(total, np.int64), counts)
        assert rs.shape == (counts[r],) and np.all(rs == p)
        gv = comm.gather_v(mine, counts if r == 0 else None, root=0)
        assert (gv is None) if r else np.array_equal(gv, want)
        sv = np.zeros(counts[r], np.float32)
        comm.scatter_v(want if r == 0 else None, counts if r == 0 else None, sv, root=0)
        assert np.all(sv == r + 1)
        # all-to-all-v: rank r sends q+1 elements of value 100r+q to rank q.
        send_counts = [q + 1 for q in range(p)]
        recv_counts = [r + 1] * p
        send = np.concatenate([np.full(q + 1, 100 * r + q, np.int32) for q in range(p)])
        got = comm.all_to_all_v(send, send_counts, recv_counts=recv_counts)
        assert np.array_equal(got, np.concatenate([np.full(r + 1, 100 * q + r, np.int32)
                                                   for q in range(p)]))

    run_group(p, body)


@pytest.mark.parametrize("p", [1, 3])
def test_all_to_all_v_with_displacements(run_group, p):
    def body(comm):
        r = comm.rank
        # Every peer reads the same prefix of send (overlapping blocks); recv holds block q at
        # recv_displs[q], in reverse rank order, one element apart.
        send = np.arange(10, dtype=np.int64) + 100 * r
        send_counts = [q + 1 for q in range(p)]
        recv_counts = [r + 1] * p
        recv_displs = [1 + (p - 1 - q) * (r + 2) for q in range(p)]
        got = comm.all_to_all_v(send, send_counts, recv_counts=recv_counts,
                                send_displs=[0] * p, recv_displs=recv_displs)
        want = np.zeros(1 + p * (r + 2) - 1, np.int64)
        for q in range(p):
            want[recv_displs[q]:recv_displs[q] + r + 1] = 100 * q + np.arange(r + 1)
        assert np.array_equal(got, want)
        # Into a recv of the caller's: what lies outside the blocks stays.
        recv = np.full(want.size + 3, -5, np.int64)
        comm.all_to_all_v(send, send_counts, recv, recv_counts, send_displs=[0] * p,
                          recv_displs=recv_displs)
        assert np.array_equal(recv[:want.size][want != 0], want[want != 0])
        assert np.all(recv[want.size:] == -5) and recv[0] == -5
        with pytest.raises(chorus.InvalidArgumentError, match="recv_displs has"):
            comm.all_to_all_v(send, send_counts, recv, recv_counts, send_displs=[0] * p,
                              recv_displs=recv_displs + [0])

    run_group(p, body)


def test_bfloat16_as_uint16_and_float16(run_group):
    one = np.uint16(0x3F80)  # bfloat16 1.0

    def body(comm):
        x = np.full(9, one, np.uint16)
        comm.all_reduce(x, dtype="bfloat16")
        assert np.all(x == {1: 0x3F80, 2: 0x4000, 3: 0x4040, 4: 0x4080}[comm.size])
        h = comm.all_reduce(np.full(9, 0.5, np.float16), np.zeros(9, np.float16))
        assert np.all(h == 0.5 * comm.size)

    run_group(3, body)


def test_ml_dtypes_bfloat16_when_present(run_group):
    ml_dtypes = pytest.importorskip("ml_dtypes")

    def body(comm):
        x = np.full(4, 1.5, ml_dtypes.bfloat16)
        comm.all_reduce(x)
        assert np.all(x.astype(np.float32) == 1.5 * comm.size)

    run_group(2, body)


def test_the_gil_is_released_while_a_call_waits(run_group):
    """Rank 1 starts its call only once rank 0 is on its way into its own. Were the GIL held
    inside a call, whichever rank entered first would keep the other from running at all, and
    the call would end at its deadline instead of completing."""
    import threading

    entering = threading.Event()

    def body(comm):
        if comm.rank == 0:
            entering.set()
        else:
            assert entering.wait(60)
        for _ in range(100):
            comm.barrier(timeout=60.0)
        return comm.rank

    assert run_group(2, body) == [0, 1]


def test_traffic_counters_match_the_ring_model(run_group):
    def body(comm):
        comm.reset_traffic()
        comm.all_reduce(np.ones(8, np.float32), algorithm="ring")
        t = comm.traffic()
        return t["allreduce"]["bytes_sent"], t["allreduce"]["calls"], t["total"]["calls"]

    assert run_group(4, body) == [(48, 1, 1)] * 4


@pytest.mark.parametrize("p", [1, 2, 3])
def test_send_and_recv(run_group, p):
    """Every rank sends to every rank, itself included, before it receives: exact data in every
    dtype, empty and multi-segment messages, tags; then the refusals, after which it goes on."""
    sizes = [0, 1, 5, 70000]

    def body(comm):
        r = comm.rank
        for dtype in (np.int32, np.float64, np.uint8):
            for q in range(p):
                for n in sizes:
                    comm.send((np.arange(n) % 101 + 7 * r + q).astype(dtype), q, tag=n)
            for q in range(p):
                for n in sizes:
                    got = np.full(n, 255, dtype)
                    assert comm.recv(got, q, tag=n) is got
                    assert np.array_equal(got, (np.arange(n) % 101 + 7 * q + r).astype(dtype))
        t = comm.traffic()["messages"]
        assert t["calls"] == 2 * 3 * p * len(sizes)
        for bad, text in ((lambda: comm.send(np.ones(2), p), f"peer ({p}) is not a rank in [0, {p})"),
                          (lambda: comm.send(np.ones(2), "x"), "peer must be an int rank"),
                          (lambda: comm.send(np.ones(2), 0, tag=-1), "tag must be an int"),
                          (lambda: comm.recv(np.ones(4)[::2], 0), "data is not C-contiguous"),
                          (lambda: comm.send([1.0], 0), "data must be a numpy.ndarray")):
            with pytest.raises(chorus.InvalidArgumentError) as e:
                bad()
            assert text in str(e.value) and e.value.usable, str(e.value)
        assert comm.health() is None
        comm.send(np.full(3, r, np.int64), (r + 1) % p)
        assert np.all(comm.recv(np.zeros(3, np.int64), (r - 1) % p) == (r - 1) % p)
        return r

    assert run_group(p, body) == list(range(p))


@pytest.mark.parametrize("p", [1, 3, 4])
def test_split_makes_groups_by_color_and_key(run_group, p):
    """split: groups by color, ordered by key (the rank by default), None for no color; a bad
    argument on one rank raises on every rank and the communicator goes on; the new
    communicators outlive the old."""
    def body(comm):
        r = comm.rank
        half = comm.split(r // 2, key=-r)
        members = sorted((q for q in range(p) if q // 2 == r // 2), reverse=True)
        assert (half.rank, half.size, half.transport) == (members.index(r), len(members), "thread")
        assert np.array_equal(half.all_gather(np.array([r], np.int32)), members)
        dup = comm.split(0)
        assert (dup.rank, dup.size) == (r, p)
        rest = comm.split(None if r == 0 else 1)
        assert rest is None if r == 0 else (rest.rank, rest.size) == (r - 1, p - 1)
        with pytest.raises(chorus.InvalidArgumentError) as e:
            comm.split("x" if r == p - 1 else 0)
        assert "color must be an int or None" in str(e.value) and e.value.usable, str(e.value)
        with pytest.raises(chorus.InvalidArgumentError) as e:
            comm.split(-2 if r == 0 else 0)
        assert "color (-2)" in str(e.value) or "rank 0" in str(e.value), str(e.value)
        assert comm.health() is None
        comm.close()
        x = dup.all_reduce(np.full(3, r, np.int64))
        assert np.all(x == p * (p - 1) // 2)
        return int(half.all_reduce(np.array([r]))[0])

    assert run_group(p, body) == [sum(q for q in range(p) if q // 2 == r // 2) for r in range(p)]


def test_shrink_goes_on_without_a_rank_that_left(run_group):
    """shrink: rank 1 closes its communicator; the others' call fails, and they go on without
    it in a communicator shrink makes from the failed one. Bad lists raise on the caller."""
    def body(comm):
        r = comm.rank
        for bad, text in ((lambda: comm.shrink([r]), "this rank"),
                          (lambda: comm.shrink([7]), "not a rank in [0, 4)"),
                          (lambda: comm.shrink("1"), "exclude must be a sequence"),
                          (lambda: comm.shrink([1.5]), "exclude must be a sequence of int")):
            with pytest.raises(chorus.InvalidArgumentError) as e:
                bad()
            assert text in str(e.value) and e.value.usable, str(e.value)
        if r == 1:
            comm.close()
            return None
        with pytest.raises(chorus.UnavailableError) as e:
            comm.all_reduce(np.ones(3))
        assert not e.value.usable and "rank 1" in str(e.value)
        rest = comm.shrink((1,))
        assert (rest.size, rest.rank) == (3, [0, 2, 3].index(r))
        return int(rest.all_reduce(np.array([r]))[0])

    assert run_group(4, body) == [5, None, 5, 5]


@pytest.mark.parametrize("p", [1, 2, 3])
def test_sendrecv_shifts_around_the_ring(run_group, p):
    """sendrecv to rank + 1 from rank - 1: a made recv, a given one, source defaulting to dest,
    a multi-segment message; then its refusals, after which it goes on."""
    def body(comm):
        r = comm.rank
        nxt, prev = (r + 1) % p, (r - 1) % p
        got = comm.sendrecv(np.arange(6, dtype=np.uint8) + 10 * r, nxt, source=prev, tag=4)
        assert got.dtype == np.uint8 and got.shape == (6,)
        assert np.array_equal(got, np.arange(6) + 10 * prev)
        big = np.zeros(300000, np.float32)
        assert comm.sendrecv(np.full(300000, r, np.float32), nxt, big, prev) is big
        assert np.all(big == prev)
        if p == 2:  # source defaults to dest: an exchange
            assert comm.sendrecv(np.array([r]), 1 - r)[0] == 1 - r
        for bad, text in ((lambda: comm.sendrecv(np.ones(2), p), f"to ({p}) is not a rank"),
                          (lambda: comm.sendrecv(np.ones(2), 0, source="x"),
                           "source must be an int rank"),
                          (lambda: comm.sendrecv(np.ones(2), 0, np.ones(4)[::2]),
                           "recv is not C-contiguous"),
                          (lambda: (lambda a: comm.sendrecv(a[:3], 0, a[2:], 0))(np.ones(5)),
                           "send and recv overlap")):
            with pytest.raises(chorus.InvalidArgumentError) as e:
                bad()
            assert text in str(e.value) and e.value.usable, str(e.value)
        assert comm.traffic()["messages"]["calls"] == (3 if p == 2 else 2)
        return int(comm.sendrecv(np.array([r]), nxt, source=prev)[0])

    assert run_group(p, body) == [(r - 1) % p for r in range(p)]


def test_recv_of_the_wrong_size_fails_the_group(run_group):
    def body(comm):
        if comm.rank == 0:
            comm.send(np.ones(4, np.float32), 1)
            return "sent"
        with pytest.raises(chorus.FailedPreconditionError) as e:
            comm.recv(np.ones(5, np.float32), 0)
        assert "ranks disagree on the message" in str(e.value) and not e.value.usable
        return "refused"

    assert run_group(2, body) == ["sent", "refused"]


def test_stores(tmp_path):
    store = chorus.hash_store()
    store.set("a", b"1")
    assert store.get("a") == b"1"
    assert store.add("n", 5) == 5 and store.add("n", -2) == 3
    assert store.delete("a") and not store.delete("a")
    with pytest.raises(chorus.DeadlineExceededError):
        store.get("missing", timeout=0.05)
    url = f"file://{tmp_path}/store"
    fs = chorus.open_store(url)
    fs.set("k", b"v")
    assert chorus.open_store(url).get("k") == b"v"
    assert fs.address.startswith("file://")
