"""Process ranks: a numpy script using chorus.init() under chorus launch (shm ranks, and TCP
ranks), under mpirun, and with a rank that dies; nothing is left running afterwards (the
launchers wait for every rank)."""

import os
import shutil
import textwrap

import pytest

from conftest import PYTHON, chorus_cli, run_process

SCRIPT = textwrap.dedent("""
    import os, signal, sys
    import numpy as np
    import chorus

    if os.environ.get("DIE_RANK") is not None:
        # The launcher stops the others 100 ms after a rank fails: the survivors ignore that, so
        # that it does not race their noticing the death (the launcher kills them after
        # --grace-ms if they hang).
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    comm = chorus.init(timeout=60.0)
    r, p = comm.rank, comm.size
    x = np.full(8, r + 1, np.float32)
    comm.all_reduce(x)
    assert np.all(x == p * (p + 1) / 2), x
    shard = comm.reduce_scatter(np.arange(4 * p, dtype=np.int64))
    assert np.array_equal(shard, p * np.arange(4 * r, 4 * r + 4)), shard
    g = comm.all_gather(np.full(2, r, np.int32))
    assert np.array_equal(g, np.repeat(np.arange(p), 2)), g
    b = np.full(3, r, np.float64)
    comm.broadcast(b, root=p - 1)
    assert np.all(b == p - 1), b
    a = comm.all_to_all(np.arange(p, dtype=np.int64) + 10 * r)
    assert np.array_equal(a, 10 * np.arange(p) + r), a
    v = comm.all_gather_v(np.full(r, r, np.uint8), list(range(p)))
    assert np.array_equal(v, np.repeat(np.arange(p), np.arange(p)).astype(np.uint8)), v
    comm.barrier()
    sub = comm.split(r % 2, key=-r)  # even and odd ranks, in reverse order
    members = sorted((q for q in range(p) if q % 2 == r % 2), reverse=True)
    assert (sub.rank, sub.size) == (members.index(r), len(members)), (sub.rank, sub.size)
    s = sub.all_reduce(np.full(5, r, np.int64))
    assert np.all(s == sum(members)), s
    assert comm.split(None) is None
    sub.close()
    if os.environ.get("DIE_RANK") is not None:
        if r == int(os.environ["DIE_RANK"]):
            os._exit(7)
        try:
            comm.all_reduce(np.ones(4), timeout=20.0)
        except chorus.Error as e:
            print(f"rank {r} raised {type(e).__name__} usable={e.usable}: {e}", flush=True)
            # The survivors go on without the dead rank.
            rest = comm.shrink([int(os.environ["DIE_RANK"])])
            total = rest.all_reduce(np.array([r], np.int64))[0]
            print(f"rank {r} shrank to {rest.size} ranks, sum {total}", flush=True)
            sys.exit(0)
        print(f"rank {r}: no error", flush=True)
        sys.exit(1)
    print(f"rank {r} of {p} ok on {comm.transport}", flush=True)
""")


@pytest.fixture
def script(tmp_path):
    path = tmp_path / "ranks.py"
    path.write_text(SCRIPT)
    return str(path)


@pytest.mark.parametrize("transport", ["auto", "tcp"])
def test_chorus_launch_four_processes(script, transport):
    out = run_process([chorus_cli(), "launch", "-n", "4", "--timeout-ms", "100000", PYTHON,
                       script], env={"CHORUS_TRANSPORT": transport})
    assert out.returncode == 0, out.stdout + out.stderr
    want = "shm" if transport == "auto" else "tcp"
    for r in range(4):
        assert f"rank {r} of 4 ok on {want}" in out.stdout, out.stdout + out.stderr


def test_a_rank_that_dies_is_reported_to_the_others(script):
    out = run_process([chorus_cli(), "launch", "-n", "3", "--timeout-ms", "100000",
                       "--grace-ms", "60000", PYTHON, script], env={"DIE_RANK": "2"})
    assert out.returncode == 7, out.stdout + out.stderr  # the dead rank's exit code
    for r in (0, 1):
        line = next((l for l in out.stdout.splitlines() if f"rank {r} raised" in l), None)
        assert line is not None, out.stdout + out.stderr
        assert "usable=False" in line and "rank 2" in line, line
        assert f"rank {r} shrank to 2 ranks, sum 1" in out.stdout, out.stdout + out.stderr


def test_mpirun_four_processes(script):
    mpirun = shutil.which("mpirun.openmpi") or shutil.which("mpirun")
    if not mpirun:
        pytest.skip("no mpirun")
    out = run_process([mpirun, "--allow-run-as-root", "--oversubscribe", "-np", "4",
                       "-x", "PYTHONPATH", PYTHON, script],
                      env={"OMPI_MCA_plm_rsh_agent": "false"})
    assert out.returncode == 0, out.stdout + out.stderr
    for r in range(4):
        assert f"rank {r} of 4 ok" in out.stdout, out.stdout + out.stderr


def test_torchrun_two_processes(script):
    pytest.importorskip("torch")
    out = run_process([PYTHON, "-m", "torch.distributed.run", "--nproc_per_node", "2",
                       "--redirects", "1", "--tee", "1", script])
    assert out.returncode == 0, out.stdout + out.stderr
    for r in range(2):
        assert f"rank {r} of 2 ok" in out.stdout, out.stdout + out.stderr
