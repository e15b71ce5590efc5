"""chorus as a torch.distributed backend.

    import torch.distributed as dist
    import chorus.torch  # registers the backend "chorus"
    dist.init_process_group("chorus", init_method=..., rank=..., world_size=...)

Every rank joins a chorus communicator through the store torch has set up for the group
(`init_method`, or MASTER_ADDR and MASTER_PORT under torchrun), on shared memory when the ranks
share a host and over TCP otherwise (CHORUS_TRANSPORT chooses; TCP ranks need the job's secret in
CHORUS_SECRET or CHORUS_SECRET_FILE). Each `new_group(backend="chorus")` is a communicator of its
own. The calls run in order on one worker thread per group and return a Work at once; its future
completes when the call has (DDP's gradient hook uses it). See docs/python.md, "torch".
"""

import torch.distributed as _dist

try:
    from . import _torch
except ImportError as e:
    raise ImportError(
        "chorus.torch: this chorus was built without its torch extension (chorus._torch); "
        "install Debian's python3-torch and libtorch-dev and build again (`make torch`)") from e

NAME = "chorus"


def _create(store, rank, size, timeout):
    return _torch.create_process_group(store, rank, size, timeout.total_seconds())


def transport(group=None):
    """The chorus transport a chorus group runs on ("shm", "tcp", ...); the default group when
    `group` is None."""
    if group is None:
        group = _dist.distributed_c10d._get_default_group()
    return _torch.transport(group)


if NAME.upper() not in _dist.Backend._plugins:
    _dist.Backend.register_backend(NAME, _create)
