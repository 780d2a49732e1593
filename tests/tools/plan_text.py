#!/usr/bin/env python3
"""tests/tools/plan_text.py PLAN: a plan file (runtime/core/plan.c, format 11 or 12) as text, one record a line,
for tests/same_emit.sh to compare what two glmc binaries wrote. The parts that format 12 spells differently
print alike: a collective launch (11: a kernel name "@allreduce" / "@allgather"; 12: a launch kind) prints as
"kind=allreduce" with no kernel name, the mark that the next kernel may do an allreduce itself (11: a fourth
KA_INT argument of 1; 12: its own field) as "inside_next=1", and the fusion reasons (11: metadata keys
"fusion.NNNN"; 12: their own list) as "fusion:" lines. The cubin is left out: NVRTC makes it from the
source and the arch, which are printed."""
import struct
import sys


class Rd:
    """A little-endian reader over the payload; any overrun raises."""

    def __init__(self, b):
        self.b, self.at = b, 0

    def take(self, n):
        if self.at + n > len(self.b):
            raise ValueError("truncated plan at byte %d" % self.at)
        s = self.b[self.at:self.at + n]
        self.at += n
        return s

    def u8(self):
        return self.take(1)[0]

    def u32(self):
        return struct.unpack("<I", self.take(4))[0]

    def i32(self):
        return struct.unpack("<i", self.take(4))[0]

    def i64(self):
        return struct.unpack("<q", self.take(8))[0]

    def f64(self):
        return struct.unpack("<d", self.take(8))[0]

    def str(self):
        n = self.u32()
        return None if n == 0xFFFFFFFF else self.take(n).decode("utf-8", "replace")

    def size(self):
        return "(%d,%d,%d,%d)" % (self.i32(), struct.unpack("<b", self.take(1))[0],
                                  struct.unpack("<b", self.take(1))[0], self.i64())


KA_INT = 1
KINDS = {0: "kernel", 1: "allreduce", 2: "allgather"}


def main(path):
    b = open(path, "rb").read()
    if b[:8] != b"GLMPLAN\n":
        raise ValueError("%s: not a plan" % path)
    ver = struct.unpack("<I", b[8:12])[0]
    if ver not in (11, 12):
        raise ValueError("%s: format %d, this reads 11 and 12" % (path, ver))
    r = Rd(b[24:])
    out = []
    fusion = []
    for _ in range(r.u32()):
        k, v = r.str(), r.str()
        if ver == 11 and k.startswith("fusion."):
            fusion.append(v)
        else:
            out.append("meta %s = %s" % (k, v))
    if ver >= 12:
        fusion = [r.str() for _ in range(r.u32())]
    out += ["fusion: " + f for f in fusion]
    nn = r.u32()
    for i in range(nn):
        op, dt, kind, nd = r.u8(), r.u8(), r.u8(), r.u8()
        dims = [r.i64() for _ in range(nd)]
        ins = [r.i32() for _ in range(r.u8())]
        ia = [r.i64() for _ in range(10)]
        fa = [repr(r.f64()) for _ in range(10)]
        name = r.str()
        sh = (r.u8(), r.u8())
        src = r.str()
        line, layer = r.i32(), r.i32()
        mreg, moff = r.u8(), r.i64()
        fi, fp = r.i32(), r.u8()
        out.append("node %d op=%d dt=%d kind=%d dims=%s in=%s ia=%s fa=%s name=%s shard=%s src=%s:%d layer=%d "
                   "mem=%d@%d fused_into=%d pattern=%d" % (i, op, dt, kind, dims, ins, ia, fa, name, sh, src, line,
                                                           layer, mreg, moff, fi, fp))
    nw = r.u32()
    for i in range(nw):
        f = [r.u32(), r.str(), r.str(), r.u8(), r.u32(), r.i64(), r.i64(), r.i64(), r.u32(), r.u8(), r.i64(),
             r.i64(), r.u32(), r.i32()]
        out.append("weight %d %s" % (i, f))
    for _ in range(r.u32()):
        out.append("output %s %d" % (r.str(), r.u32()))
    out.append("mem planned=%d %d %d %d %d" % (r.u8(), r.i64(), r.i64(), r.i64(), r.i64()))
    if r.u8():
        arch, act, wconv, src = r.str(), r.u8(), r.u8() - 1, r.str()
        cubin = r.take(r.i64())
        out.append("cuda arch=%s act=%d wconv=%d" % (arch, act, wconv))
        out.append("sampler %s" % r.str())
        nl = r.u32()
        for i in range(nl):
            node = r.u32()
            if ver >= 12:
                kind = KINDS[r.u8()]
                kern = r.str()
                inside = r.u8()
            else:
                kern = r.str()
                kind = kern[1:] if kern.startswith("@") else "kernel"
                inside = 0
            tmin, tmax, flags = r.u32(), r.u32(), r.u8()
            grid = [r.size() for _ in range(3)]
            block, smem, narg = r.u32(), r.u32(), r.u8()
            args = []
            for _ in range(narg):
                args.append((r.u8(), r.size(), r.size(), repr(r.f64())))
            if ver == 11 and kind == "allreduce" and narg == 4 and args[3][0] == KA_INT:
                inside = 1
                args = args[:3]
            if kind != "kernel":
                kern = "-"
            out.append("launch %d node=%d kind=%s kernel=%s inside_next=%d t=[%d,%d] flags=%d grid=%s block=%d "
                       "smem=%d args=%s" % (i, node, kind, kern, inside, tmin, tmax, flags, grid, block, smem, args))
        out.append("wq %s" % [r.u8() - 1 for _ in range(nw)])
        out.append("source:")
        out.append(src)
    if r.at != len(r.b):
        raise ValueError("%s: %d trailing bytes" % (path, len(r.b) - r.at))
    sys.stdout.write("\n".join(out) + "\n")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: plan_text.py PLAN")
    main(sys.argv[1])
