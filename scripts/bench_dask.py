"""Dask side of scripts/bench-dask.sh: N no-op tasks through a LocalCluster
of 2 worker processes (one thread each); prints tasks per second."""
import logging
import sys
import time

from distributed import Client, LocalCluster


def noop(i):
    return i


def main():
    n = int(sys.argv[1])
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                      dashboard_address=None, silence_logs=logging.ERROR) as cluster, Client(cluster) as client:
        client.gather(client.map(noop, range(100), pure=False))  # warm up
        start = time.perf_counter()
        out = client.gather(client.map(noop, range(n), pure=False))
        elapsed = time.perf_counter() - start
        assert len(out) == n
        print(f"{n / elapsed:.1f}")


if __name__ == "__main__":
    main()
