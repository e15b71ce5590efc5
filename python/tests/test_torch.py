"""chorus.torch, the torch.distributed backend: every collective on 4 shm ranks and 2 TCP ranks
under `chorus launch` and on 2 ranks under torchrun, DDP training against Gloo's, sharded
training (all_gather_into_tensor, reduce_scatter_tensor) against DDP and in bfloat16, and a rank
that dies. Each job runs torch_ranks.py. Skipped where torch or the extension chorus._torch is
not there (the build makes it where Debian's libtorch-dev is installed)."""

import os
import re

import pytest

pytest.importorskip("torch")
pytest.importorskip("chorus._torch")

from conftest import PYTHON, chorus_cli, run_process  # noqa: E402

RANKS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "torch_ranks.py")


def launch(tmp_path, n, mode, backend="chorus", env=None, grace_ms=None, store="file"):
    """torch_ranks.py on n ranks, meeting through a torch FileStore or (store="tcp") a
    TCPStore."""
    store = tmp_path / f"store-{mode}-{backend}.{store}"
    args = [chorus_cli(), "launch", "-n", str(n), "--timeout-ms", "100000"]
    if grace_ms is not None:
        args += ["--grace-ms", str(grace_ms)]
    return run_process(args + [PYTHON, RANKS, str(store), mode, backend], env=env)


def losses(out, tag=""):
    """{(rank, step): loss} from the ranks' lines "rank R [TAG ]step S loss L"."""
    got = {}
    for m in re.finditer(rf"rank (\d+) {tag}step (\d+) loss ([0-9.]+)", out):
        got[(int(m.group(1)), int(m.group(2)))] = float(m.group(3))
    return got


@pytest.mark.parametrize("n,transport,store", [(4, "auto", "tcp"), (2, "tcp", "file")])
def test_every_collective(tmp_path, n, transport, store):
    env = {"CHORUS_TRANSPORT": transport}
    out = launch(tmp_path, n, "collectives", env=env, store=store)
    assert out.returncode == 0, out.stdout + out.stderr
    want = "shm" if transport == "auto" else "tcp"
    for r in range(n):
        assert f"rank {r} collectives ok on {want}" in out.stdout, out.stdout + out.stderr
        # Refused on this rank, and the group went on.
        assert f"rank {r} refused: chorus: torch allreduce: chorus has no bitwise reductions: " \
               "BXOR on Int" in out.stdout, out.stdout
        assert f"rank {r} refused: chorus: torch allreduce: tensors must be contiguous" \
               in out.stdout, out.stdout


def test_under_torchrun():
    # Debian's Python 3.11 needs --redirects 1 --tee 1 (torchrun's default output handling
    # crashes there).
    out = run_process([PYTHON, "-m", "torch.distributed.run", "--nproc_per_node", "2",
                       "--redirects", "1", "--tee", "1", RANKS, "env", "collectives"])
    assert out.returncode == 0, out.stdout + out.stderr
    for r in range(2):
        assert f"rank {r} collectives ok on shm" in out.stdout, out.stdout + out.stderr


def test_ddp_trains_as_with_gloo(tmp_path):
    ours = launch(tmp_path, 2, "ddp", store="tcp")
    assert ours.returncode == 0, ours.stdout + ours.stderr
    gloo = launch(tmp_path, 2, "ddp", backend="gloo", store="tcp")
    assert gloo.returncode == 0, gloo.stdout + gloo.stderr
    a, b = losses(ours.stdout), losses(gloo.stdout)
    assert len(a) == 12 and a.keys() == b.keys(), (ours.stdout, gloo.stdout)
    for k in a:
        assert a[k] == pytest.approx(b[k], abs=1e-5), (k, a[k], b[k])
    assert a[(0, 5)] < a[(0, 0)]  # it trained


def test_sharded_training_matches_ddp_and_gloo_cannot_run_it(tmp_path):
    sharded = launch(tmp_path, 2, "sharded")  # DDP first, as the reference
    assert sharded.returncode == 0, sharded.stdout + sharded.stderr
    want = losses(sharded.stdout)
    f32, bf16 = losses(sharded.stdout, "float32 "), losses(sharded.stdout, "bfloat16 ")
    assert len(f32) == len(bf16) == 12, sharded.stdout
    for k in want:
        assert f32[k] == pytest.approx(want[k], abs=1e-5), (k, f32[k], want[k])
        assert bf16[k] == pytest.approx(want[k], abs=2e-2), (k, bf16[k], want[k])
    gloo = launch(tmp_path, 2, "sharded", backend="gloo")
    assert gloo.returncode != 0
    assert "no support for _allgather_base in Gloo" in gloo.stderr, gloo.stderr


def test_a_rank_that_dies_fails_the_others_calls(tmp_path):
    out = launch(tmp_path, 3, "dies", grace_ms=60000)
    assert out.returncode == 3, out.stdout + out.stderr  # rank 1's exit status
    for r in (0, 2):
        line = next((l for l in out.stdout.splitlines() if f"rank {r} raised" in l), None)
        assert line is not None, out.stdout + out.stderr
        assert "rank 1" in line and "exited" in line, line
    line = next((l for l in out.stdout.splitlines() if "rank 0 irecv raised" in l), None)
    assert line is not None, out.stdout + out.stderr
    assert "rank 1" in line, line
