"""One rank of the torch tests (test_torch.py), started by `chorus launch`:
    torch_ranks.py STORE_FILE MODE [BACKEND]
The ranks meet through a torch FileStore in STORE_FILE, a TCPStore if it ends in ".tcp", or
torchrun's store if it is "env" (then torchrun starts the ranks).
MODE collectives: every torch.distributed collective on the backend, checked exactly.
MODE ddp: a DDP training run (prints the losses); MODE sharded: that run, then the same model
trained with its parameters sharded across the ranks (all_gather_into_tensor,
reduce_scatter_tensor), as FSDP and ZeRO-3 do, in float32 and bfloat16 (prints the losses).
MODE dies: rank 1 exits in the middle; the others print what their call raised."""

import datetime
import os
import signal
import sys
import time

import torch
import torch.distributed as dist

import chorus.torch

store, mode = sys.argv[1], sys.argv[2]
backend = sys.argv[3] if len(sys.argv) > 3 else "chorus"
r = int(os.environ.get("CHORUS_RANK", os.environ.get("RANK", "-1")))
p = int(os.environ.get("CHORUS_WORLD_SIZE", os.environ.get("WORLD_SIZE", "0")))
timeout = datetime.timedelta(seconds=60)
if store == "env":
    dist.init_process_group(backend, timeout=timeout)  # torchrun's MASTER_ADDR and MASTER_PORT
elif store.endswith(".tcp"):
    # A TCPStore (what torchrun and MASTER_ADDR give) on a port the kernel chose: rank 0 serves
    # it and names the port in the file STORE (written whole, by a rename).
    if r == 0:
        tcp = dist.TCPStore("127.0.0.1", 0, p, True, timeout, wait_for_workers=False)
        with open(store + ".part", "w") as f:
            f.write(str(tcp.port))
        os.rename(store + ".part", store)
    else:
        deadline = time.monotonic() + 60
        while not os.path.exists(store):
            assert time.monotonic() < deadline, "rank 0 never named its store's port"
            time.sleep(0.01)
        with open(store) as f:
            tcp = dist.TCPStore("127.0.0.1", int(f.read()), p, False, timeout)
    dist.init_process_group(backend, store=tcp, rank=r, world_size=p, timeout=timeout)
else:
    dist.init_process_group(backend, init_method="file://" + store, rank=r, world_size=p,
                            timeout=timeout)


def collectives():
    for dtype in (torch.float32, torch.float64, torch.bfloat16, torch.float16, torch.int32,
                  torch.int64, torch.uint8, torch.int8):
        x = torch.full((8,), r + 1, dtype=dtype)
        dist.all_reduce(x)
        assert torch.all(x == p * (p + 1) // 2), (dtype, x)
    x = torch.arange(6.) + r
    dist.all_reduce(x, op=dist.ReduceOp.MAX)
    assert torch.equal(x, torch.arange(6.) + p - 1), x
    x = torch.full((3,), float(r + 1))
    dist.all_reduce(x, op=dist.ReduceOp.PRODUCT)
    assert torch.all(x == torch.arange(1, p + 1).prod()), x
    x = torch.full((4,), float(r))
    dist.all_reduce(x, op=dist.ReduceOp.AVG)
    assert torch.all(x == (p - 1) / 2), x
    x = torch.tensor([r % 2 == 0, True])
    dist.all_reduce(x, op=dist.ReduceOp.BAND)
    assert x.tolist() == [p == 1, True], x
    x = torch.tensor([r == 1, False])
    dist.all_reduce(x)  # SUM on bool: any rank's True
    assert x.tolist() == [True, False], x
    x = torch.full((3,), float(r + 1), dtype=torch.float64)
    dist.all_reduce(x, op=dist._make_nccl_premul_sum(0.5))
    assert torch.all(x == 0.5 * p * (p + 1) / 2), x
    xs = [torch.full((2,), float(r)), torch.full((3,), float(10 * r))]
    dist.all_reduce_coalesced(xs)
    assert torch.all(xs[0] == p * (p - 1) / 2) and torch.all(xs[1] == 10 * p * (p - 1) / 2), xs
    outs = [[torch.empty(2, dtype=torch.int64), torch.empty(3, dtype=torch.int64)]
            for _ in range(p)]
    dist.all_gather_coalesced(outs, [torch.full((2,), r), torch.full((3,), 10 * r)])
    for q in range(p):
        assert torch.all(outs[q][0] == q) and torch.all(outs[q][1] == 10 * q), outs
    x = torch.full((2,), complex(r, 1), dtype=torch.complex64)
    dist.all_reduce(x)
    assert torch.all(x == complex(p * (p - 1) / 2, p)), x
    out = torch.empty(4 * p, dtype=torch.bfloat16)
    dist.all_gather_into_tensor(out, (torch.arange(4) + 10 * r).to(torch.bfloat16))
    assert torch.equal(out.float(), torch.cat([torch.arange(4.) + 10 * q for q in range(p)]))
    shard = torch.empty(2)
    dist.reduce_scatter_tensor(shard, torch.arange(2. * p) + r)
    want = p * torch.arange(2. * r, 2. * r + 2) + p * (p - 1) / 2
    assert torch.equal(shard, want), shard
    shard = torch.empty(3, dtype=torch.int64)
    dist.reduce_scatter(shard, [torch.full((3,), q * r) for q in range(p)])
    assert torch.all(shard == r * p * (p - 1) // 2), shard
    blocks = [torch.empty(3, dtype=torch.int16) for _ in range(p)]
    dist.all_gather(blocks, torch.full((3,), r, dtype=torch.int16))
    assert all(torch.all(blocks[q] == q) for q in range(p)), blocks
    b = torch.full((5,), r, dtype=torch.float16)
    dist.broadcast(b, src=p - 1)
    assert torch.all(b == p - 1), b
    x = torch.full((4,), r + 1)
    dist.reduce(x, dst=0)
    assert torch.all(x == (p * (p + 1) // 2 if r == 0 else r + 1)), x
    g = [torch.empty(2) for _ in range(p)] if r == 1 else None
    dist.gather(torch.full((2,), float(r)), g, dst=1)
    if r == 1:
        assert all(torch.all(g[q] == q) for q in range(p)), g
    s = torch.empty(2)
    dist.scatter(s, [torch.full((2,), 7. * q) for q in range(p)] if r == 0 else None, src=0)
    assert torch.all(s == 7. * r), s
    a = torch.empty(p, dtype=torch.int32)
    dist.all_to_all_single(a, torch.arange(p, dtype=torch.int32) + 10 * r)
    assert torch.equal(a, 10 * torch.arange(p, dtype=torch.int32) + r), a
    # Uneven splits: rank r sends q + 1 rows of 2 to rank q.
    send = torch.cat([torch.full((q + 1, 2), float(10 * r + q)) for q in range(p)])
    recv = torch.empty((p * (r + 1), 2))
    dist.all_to_all_single(recv, send, [r + 1] * p, [q + 1 for q in range(p)])
    want = torch.cat([torch.full((r + 1, 2), float(10 * q + r)) for q in range(p)])
    assert torch.equal(recv, want), recv
    outs = [torch.empty(q + 1) for q in range(p)]
    dist.all_to_all(outs, [torch.full((r + 1,), float(q + 10 * r)) for q in range(p)])
    assert all(torch.all(outs[q] == r + 10 * q) for q in range(p)), outs
    objs = [None] * p
    dist.all_gather_object(objs, {"rank": r})
    assert objs == [{"rank": q} for q in range(p)], objs
    works = [dist.all_reduce(torch.full((3,), float(i)), async_op=True) for i in range(4)]
    for i, w in enumerate(works):
        w.wait()
        assert w.is_completed()
        assert torch.all(w.result()[0] == i * p), w.result()
    fut = dist.all_reduce(torch.ones(2), async_op=True).get_future()
    assert torch.all(fut.wait()[0] == p)
    w = dist.all_reduce(torch.ones(2), async_op=True)
    w.wait()
    assert torch.all(w.get_future().value()[0] == p)  # complete once wait() has returned
    # A callback of a call's future that issues another call and waits for it (as PowerSGD's
    # hook does), after a small call and after a large one. The large one is issued while an
    # earlier call is not yet waited for, so it is queued and the worker runs it.
    for n in (4, 1 << 17):
        def nested(f):
            y = torch.ones(3)
            dist.all_reduce(y, async_op=True).get_future().wait()
            return f.value()[0].sum().item() + y.sum().item()
        earlier = dist.all_reduce(torch.ones(n), async_op=True)
        got = dist.all_reduce(torch.ones(n), async_op=True).get_future().then(nested).wait()
        assert got == n * p + 3 * p, (n, got)
        earlier.wait()
    # Large calls waited for at once, which then run on the caller's thread; then large calls
    # issued together and waited for last first: queued, each run by the worker or by its
    # waiter once it is next.
    big = 1 << 17
    for i in range(3):
        x = torch.full((big,), float(r + i))
        dist.all_reduce(x)
        assert torch.all(x == sum(q + i for q in range(p))), (i, x)
    xs = [torch.full((big,), float(i)) for i in range(4)]
    works = [dist.all_reduce(x, async_op=True) for x in xs]
    for i in reversed(range(4)):
        works[i].wait()
        assert torch.all(xs[i] == i * p), (i, xs[i])
    gathered = torch.empty(p * big)
    for i in range(2):
        dist.all_gather_into_tensor(gathered, torch.full((big,), float(r + i)))
        want = torch.cat([torch.full((big,), float(q + i)) for q in range(p)])
        assert torch.equal(gathered, want), i
    # Point-to-point: a ring shift of a large tensor (every rank sends before it receives),
    # batch_isend_irecv, blocking send and recv of complex numbers (moved as bytes), and a
    # message sent before a collective and received after it.
    nxt, prv = (r + 1) % p, (r - 1) % p
    ring = torch.empty(1 << 18)
    reqs = [dist.isend(torch.full((1 << 18,), float(r)), nxt), dist.irecv(ring, prv)]
    for q in reqs:
        q.wait()
    assert torch.all(ring == prv), ring
    small = torch.empty(5, dtype=torch.float64)
    ops = [dist.P2POp(dist.isend, torch.full((5,), r + 0.5, dtype=torch.float64), nxt, tag=3),
           dist.P2POp(dist.irecv, small, prv, tag=3)]
    for q in dist.batch_isend_irecv(ops):
        q.wait()
    assert torch.all(small == prv + 0.5), small
    dist.send(torch.full((3,), complex(r, -r)), nxt)
    got = torch.empty(3, dtype=torch.complex64)
    dist.recv(got, prv)
    assert torch.all(got == complex(prv, -prv)), got
    # Every rank receives before it sends, as Gloo allows: the irecvs wait while the calls
    # issued after them run (an all-reduce, then the sends their peers wait for); two from one
    # peer complete in order, waited for in the other order.
    first, second = torch.empty(1 << 16), torch.empty(4)
    reqs = [dist.irecv(first, prv), dist.irecv(second, prv, tag=1)]
    y = torch.ones(3)
    dist.all_reduce(y)
    assert torch.all(y == p), y
    dist.send(torch.full((1 << 16,), float(r)), nxt)
    dist.isend(torch.full((4,), r + 2.0), nxt, tag=1).wait()
    for q in reversed(reqs):
        q.wait()
    assert torch.all(first == prv) and torch.all(second == prv + 2.0), (first, second)
    # A synchronous recv issued while an irecv from the same peer still waits: both complete,
    # in order.
    a, c = torch.empty(2), torch.empty(2)
    early_req = dist.irecv(a, prv)
    dist.send(torch.full((2,), r + 5.0), nxt)
    dist.send(torch.full((2,), r + 6.0), nxt)
    dist.recv(c, prv)
    early_req.wait()
    assert torch.all(a == prv + 5.0) and torch.all(c == prv + 6.0), (a, c)
    dist.send(torch.arange(6, dtype=torch.int32) + r, nxt)
    y = torch.ones(2)
    dist.all_reduce(y)
    assert torch.all(y == p), y
    early = torch.empty(6, dtype=torch.int32)
    dist.recv(early, prv)
    assert torch.equal(early, torch.arange(6, dtype=torch.int32) + prv), early
    dist.barrier()
    pair = dist.new_group([0, 1], backend="chorus")
    if r < 2:
        z = torch.full((2,), float(r + 1))
        dist.all_reduce(z, group=pair)
        assert torch.all(z == 3), z
    for bad in (lambda: dist.all_reduce(torch.ones(2, dtype=torch.int32), op=dist.ReduceOp.BXOR),
                lambda: dist.all_reduce(torch.ones(4)[::2]),
                lambda: dist.send(torch.ones(4)[::2], (r + 1) % p)):
        try:
            bad()
            raise AssertionError("no error")
        except RuntimeError as e:
            print(f"rank {r} refused: {e}", flush=True)
    x = torch.ones(2)
    dist.all_reduce(x)  # the group is usable after the refusals
    assert torch.all(x == p), x
    print(f"rank {r} collectives ok on {chorus.torch.transport()}", flush=True)


def model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))


def batch(step):
    g = torch.Generator().manual_seed(1000 * step + r)
    x = torch.randn(8, 16, generator=g)
    return x, x.sum(dim=1, keepdim=True).sin()


def ddp():
    net = torch.nn.parallel.DistributedDataParallel(model())
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    for step in range(6):
        x, y = batch(step)
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(net(x), y)
        loss.backward()
        opt.step()
        total = loss.detach().clone()
        dist.all_reduce(total)  # Gloo has no AVG
        print(f"rank {r} step {step} loss {total.item() / p:.6f}", flush=True)


def sharded(dtype):
    net = model().to(dtype)
    params = list(net.parameters())
    flat = torch.cat([q.detach().reshape(-1) for q in params])
    per = (flat.numel() + p - 1) // p
    flat = torch.cat([flat, flat.new_zeros(per * p - flat.numel())])
    mine = flat[r * per:(r + 1) * per].clone()  # the only copy this rank keeps between steps
    for step in range(6):
        full = torch.empty(per * p, dtype=dtype)
        dist.all_gather_into_tensor(full, mine)
        at = 0
        for q in params:
            q.data = full[at:at + q.numel()].view_as(q).clone()
            at += q.numel()
        x, y = batch(step)
        net.zero_grad()
        loss = torch.nn.functional.mse_loss(net(x.to(dtype)).float(), y)
        loss.backward()
        grads = torch.cat([q.grad.reshape(-1) for q in params])
        grads = torch.cat([grads, grads.new_zeros(per * p - grads.numel())])
        g = torch.empty(per, dtype=dtype)
        dist.reduce_scatter_tensor(g, grads, op=dist.ReduceOp.AVG)
        mine -= 0.1 * g
        total = loss.detach().clone()
        dist.all_reduce(total, op=dist.ReduceOp.AVG)
        print(f"rank {r} {str(dtype)[6:]} step {step} loss {total.item():.6f}", flush=True)


if mode == "collectives":
    collectives()
elif mode == "ddp":
    ddp()
elif mode == "sharded":
    ddp()  # the reference
    sharded(torch.float32)
    sharded(torch.bfloat16)
elif mode == "dies":
    # The launcher stops the others 100 ms after a rank fails: the survivors ignore that, so that
    # it does not race their noticing the death (the launcher kills them after --grace-ms).
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    # Rank 0 also waits for a message from rank 1 that never comes: its irecv, waiting aside
    # while the barrier runs, fails once rank 1 is gone (not at its timeout).
    pending = dist.irecv(torch.empty(2), 1) if r == 0 else None
    dist.barrier()
    if r == 1:
        os._exit(3)
    if pending is not None:
        try:
            pending.wait()
            print(f"rank {r}: irecv: no error", flush=True)
        except RuntimeError as e:
            print(f"rank {r} irecv raised: {e}", flush=True)
    try:
        dist.all_reduce(torch.ones(4))
        print(f"rank {r}: no error", flush=True)
    except RuntimeError as e:
        print(f"rank {r} raised: {e}", flush=True)
    os._exit(0)
dist.destroy_process_group()
