#!/usr/bin/env python3
"""bench/sass_loops.py SASS FUNCTION: the loops of one function of an nvdisasm listing (its backward
branches), innermost first, each with its length and its instruction mix (bench/sass.sh runs it)."""
import collections
import re
import sys


def main():
    text, fn = open(sys.argv[1]).read().split('\n'), sys.argv[2]
    start = next((i for i, l in enumerate(text) if l.startswith(fn + ':')), None)
    if start is None:
        sys.exit('sass_loops.py: no function %s' % fn)
    ins, labels, pending = [], {}, []
    for l in text[start + 2:]:
        if l.startswith('.text.'):
            break
        m = re.match(r'^(\.L_x_\d+):', l)
        if m:
            pending.append(m.group(1))
            continue
        m = re.match(r'\s*/\*([0-9a-f]{4,})\*/\s+(@!?U?P[T0-9]\s+)?([A-Z0-9_.]+)(.*?);', l)
        if m:
            at = int(m.group(1), 16)
            for p in pending:
                labels[p] = at
            pending = []
            ins.append((at, m.group(3).split('.')[0], m.group(4)))
    loops = []
    for at, op, args in ins:
        t = re.search(r'(\.L_x_\d+)', args) if op == 'BRA' else None
        if t and labels.get(t.group(1), at + 1) <= at:
            lo = labels[t.group(1)]
            mix = collections.Counter(o for a, o, _ in ins if lo <= a <= at)
            loops.append((sum(mix.values()), lo, at, mix))
    for n, lo, at, mix in sorted(loops):
        print('loop %#x..%#x: %d instructions; %s' % (lo, at, n, ' '.join('%s %d' % kv for kv in mix.most_common(14))))


if __name__ == '__main__':
    main()
