#!/usr/bin/env python3
"""What idle or slow connections cost the store: the launcher's RSS before and after N of them.

    python3 scripts/conn-memory.py [N] [FIRST_BYTES]     # default 2000 connections, "C"

Starts `chorus launch -n 1` (its store), opens N connections to the store and sends FIRST_BYTES
on each ("C" is the first byte of a valid hello, so the store must keep waiting; "" sends
nothing; "x" is garbage), waits 2 s and prints the launcher's RSS growth and descriptor count.
Run from the repository root after `make build`.
"""
import os
import resource
import socket
import subprocess
import sys
import time


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS"):
                return int(line.split()[1])
    return 0


def main():
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
    first = (sys.argv[2] if len(sys.argv) > 2 else "C").encode()
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    launcher = subprocess.Popen(
        ["./build/chorus", "launch", "-n", "1", "--", "sh", "-c", "echo $CHORUS_STORE; sleep 60"],
        stdout=subprocess.PIPE, text=True)
    try:
        url = launcher.stdout.readline().split()[-1]
        host, port = url.replace("tcp://", "").rsplit(":", 1)
        time.sleep(0.5)
        before = rss_kib(launcher.pid)
        held = []
        for _ in range(count):
            s = socket.create_connection((host, int(port)))
            if first:
                s.send(first)
            held.append(s)
        time.sleep(2)
        after = rss_kib(launcher.pid)
        fds = len(os.listdir(f"/proc/{launcher.pid}/fd"))
        print(f"{count} connections, sent {first!r} each: launcher RSS {before} KiB -> {after} KiB "
              f"(+{after - before} KiB); the launcher holds {fds} descriptors")
    finally:
        launcher.kill()
        launcher.wait()


if __name__ == "__main__":
    main()
