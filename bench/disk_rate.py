#!/usr/bin/env python3
"""Random-read rate of a file with O_DIRECT (no page cache): BLOCK-sized reads at random aligned
offsets from THREADS threads for SECONDS, printed as MB/s. The sweep uses it as the disk bound of
the machine it runs on, measured in the same run as the engine numbers.

usage: disk_rate.py FILE [BLOCK_BYTES=884736] [THREADS=4] [SECONDS=5]
"""
import mmap
import os
import random
import sys
import threading
import time


def main():
    if len(sys.argv) < 2:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    path = sys.argv[1]
    block = int(sys.argv[2]) if len(sys.argv) > 2 else 884736
    threads = int(sys.argv[3]) if len(sys.argv) > 3 else 4
    seconds = float(sys.argv[4]) if len(sys.argv) > 4 else 5.0
    size = os.path.getsize(path)
    block = (block + 4095) // 4096 * 4096
    total = [0]
    lock = threading.Lock()
    deadline = time.monotonic() + seconds

    def worker(seed):
        fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
        buf = mmap.mmap(-1, block)  # page-aligned, as O_DIRECT requires
        rng = random.Random(seed)
        n = 0
        while time.monotonic() < deadline:
            off = rng.randrange(0, (size - block) // 4096) * 4096
            n += os.preadv(fd, [buf], off)
        os.close(fd)
        with lock:
            total[0] += n

    t0 = time.monotonic()
    ts = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    print(f"{total[0] / 1e6 / (time.monotonic() - t0):.1f}")


if __name__ == "__main__":
    main()
