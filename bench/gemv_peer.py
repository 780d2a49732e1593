#!/usr/bin/env python3
# bench/gemv_peer.py — the peer for bench/gemv: torch.nn.functional.linear at batch 1 in bf16 on the same
# shapes, timed the same way (a CUDA graph of 100 calls cycling through copies of the weight that together
# exceed 4x the L2 cache, median of 7 replays; CUDA events), against the same kind of read-only bandwidth
# kernel (a sum over a 4 GiB buffer, best of 10). Prints one table; run on the GPU machine.
import sys
import torch
import torch.nn.functional as F

SHAPES = [(4096, 4096), (14336, 4096), (4096, 14336), (2048, 2048), (6144, 2048), (154880, 6144)]
ITERS = 100


def timed(fn, reps):
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    out = []
    for _ in range(reps):
        a.record()
        fn()
        b.record()
        b.synchronize()
        out.append(a.elapsed_time(b))
    return out


def bandwidth():
    # float32: torch 2.11's int32 sum (int64 accumulation) read at ~770 GB/s on an H200 (2026-12-01), far
    # under the float reduction's rate, which made the %bw column meaningless
    buf = torch.ones((4 << 30) // 4, dtype=torch.float32, device="cuda")
    ms = timed(lambda: buf.sum(), 11)[1:]
    return buf.numel() * 4 / (min(ms) * 1e-3) / 1e9


def main():
    dev = torch.cuda.get_device_properties(0)
    l2 = getattr(dev, "L2_cache_size", 50 << 20)
    bw = bandwidth()
    print(f"# peer: torch {torch.__version__} F.linear bf16, batch 1, on {dev.name}")
    print(f"# read bandwidth (torch sum over 4 GiB): {bw:.1f} GB/s")
    print(f"{'type':5} {'N x K':13} {'us':>10} {'GB/s':>9} {'%bw':>7}")
    for n, k in SHAPES:
        nbytes = n * k * 2
        free, _ = torch.cuda.mem_get_info()
        copies = max(1, -(-4 * l2 // nbytes))
        if copies * nbytes + (1 << 30) > free:
            copies = 1
            if nbytes + (1 << 30) > free:
                print(f"bf16  {n:6d}x{k:<6d}  skipped: does not fit")
                continue
        ws = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * k ** -0.5 for _ in range(copies)]
        x = torch.randn(1, k, device="cuda", dtype=torch.bfloat16)
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for w in ws:
                F.linear(x, w)
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for i in range(ITERS):
                F.linear(x, ws[i % copies])
        g.replay()
        torch.cuda.synchronize()
        ms = sorted(timed(g.replay, 7))[3]
        us = ms * 1000 / ITERS
        gbs = nbytes / (us * 1e-6) / 1e9
        print(f"bf16  {n:6d}x{k:<6d} {us:10.2f} {gbs:9.1f} {100 * gbs / bw:6.1f}%")
        del ws, g
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
