#!/usr/bin/env python3
"""bench/trace.py — read bench/trace.c's kernel timeline of a glmrun --bench run and split the decode
step into kernel time and the gaps between kernels (issue 8).

  python3 bench/trace.py TRACE.tsv [--top N]

A decode step is one replay of the decode graph: the graph with the most replays. Each replay's kernels
are sorted by start; the step's span runs from its first kernel's start to its last kernel's end, the
gap before a kernel is its start minus the latest end before it (0 when they overlap). Per graph node:
the median duration and the median gap before it, over the replays after the first two. The node order
is the graph's, so the rows read as the step runs."""
import sys
import statistics
from collections import defaultdict


def load(path):
    rows = []
    with open(path) as f:
        for ln, line in enumerate(f, 1):
            p = line.split()
            if len(p) != 7:
                sys.exit(f"trace.py: {path}:{ln}: expected 7 fields, got {len(p)}")
            rows.append((p[0], int(p[1]), int(p[2]), int(p[3]), int(p[4]), int(p[5]), int(p[6])))
    return rows


def replays(rows):
    """The decode graph's replays: its kernels split wherever the first node's id comes round again."""
    by_graph = defaultdict(list)
    for r in rows:
        if r[3]:
            by_graph[r[3]].append(r)
    if not by_graph:
        sys.exit("trace.py: no kernel ran inside a graph")
    best = None
    for gid, ks in by_graph.items():
        ks.sort(key=lambda r: r[1])
        first = ks[0][4]
        reps, cur = [], []
        for r in ks:
            if r[4] == first and cur:
                reps.append(cur)
                cur = []
            cur.append(r)
        reps.append(cur)
        if best is None or len(reps) > len(best):
            best = reps
    return best


def main():
    args = sys.argv[1:]
    top = 40
    if "--top" in args:
        i = args.index("--top")
        top = int(args[i + 1])
        del args[i:i + 2]
    if len(args) != 1:
        sys.exit(__doc__)
    reps = replays(load(args[0]))
    n0 = len(reps[0])
    reps = [r for r in reps[2:] if len(r) == n0]
    if not reps:
        sys.exit("trace.py: fewer than three whole replays of the decode graph")
    spans, busy, gaps = [], [], []
    node_dur, node_gap, node_name, order = defaultdict(list), defaultdict(list), {}, []
    for rep in reps:
        rep.sort(key=lambda r: r[1])
        t0, last_end, b, g = rep[0][1], rep[0][1], 0, 0
        for r in rep:
            gap = max(0, r[1] - last_end)
            g += gap
            b += r[2] - max(r[1], last_end) if r[2] > last_end else 0
            last_end = max(last_end, r[2])
            node_dur[r[4]].append((r[2] - r[1]) / 1e3)
            node_gap[r[4]].append(gap / 1e3)
            if r[4] not in node_name:
                node_name[r[4]] = (r[0], r[5], r[6])
                order.append(r[4])
        spans.append((last_end - t0) / 1e3)
        busy.append(b / 1e3)
        gaps.append(g / 1e3)
    med = statistics.median
    print(f"trace: {len(reps)} decode replays of {n0} kernels")
    print(f"trace_step_us: {med(spans):.2f}")
    print(f"trace_kernel_busy_us: {med(busy):.2f}")
    print(f"trace_gap_us: {med(gaps):.2f} ({100 * med(gaps) / med(spans):.1f}% of the step; "
          f"{med(gaps) / n0:.2f} µs a kernel)")
    # by kernel name (the same emitted kernel serves every layer)
    by_name = defaultdict(lambda: [0, 0.0, 0.0])
    for nid in order:
        nm = node_name[nid][0]
        by_name[nm][0] += 1
        by_name[nm][1] += med(node_dur[nid])
        by_name[nm][2] += med(node_gap[nid])
    print("by kernel (launches a step, median µs summed over them, gap µs before them):")
    for nm, (c, d, g) in sorted(by_name.items(), key=lambda x: -x[1][1])[:top]:
        print(f"  {nm:24s} {c:4d}  {d:9.2f}  gap {g:8.2f}  ({d / c:.2f} + {g / c:.2f} µs each)")
    print("first 24 nodes in step order (µs, gap before):")
    for nid in order[:24]:
        nm, gx, bx = node_name[nid]
        print(f"  {nm:24s} grid {gx:6d} block {bx:4d}  {med(node_dur[nid]):8.2f}  gap {med(node_gap[nid]):6.2f}")


if __name__ == "__main__":
    try:
        main()
    except BrokenPipeError:  # piped into head: the reader has what it wanted
        sys.stderr.close()
        sys.exit(0)
