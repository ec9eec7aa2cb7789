#!/usr/bin/env python3
"""Reads a `pylon_bench_vulkan --timeline-csv DIR` file (DIR/timeline_<quant>.csv) and prints, per
attention head, when its q and k rows were stored and when the workgroup that attends it saw them,
then per event the earliest, median and latest workgroup. Times are medians over the file's
(token, block) samples, in the file's unit (µs where the bench could time the dispatch).

Which workgroups store a head's rows follows decode_layer.comp's phase 1: logical rows 0 .. 2D - 1
are q's and k's, head by head (2·hd a head), and workgroup g takes rows g·R .. g·R + R - 1 in its
first round (R = --rows-per-group: its subgroups x rows per subgroup / split; 32 at the seed size
in f16 with 512-thread workgroups). A head of one attention item is attended by workgroup
G - 1 - head (items go from the last workgroup down). "stored" is the last storer's end of phase 1
(event 2): of both rounds, where a storer has a second one (v's rows), so only an upper bound there.

Usage: bench/timeline_by_head.py FILE.csv [--heads 16] [--head-dim 128] [--rows-per-group 32]
"""
import argparse
import csv
import statistics


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv")
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--rows-per-group", type=int, default=32)
    a = ap.parse_args()

    with open(a.csv) as f:
        rows = list(csv.reader(line for line in f if not line.startswith("#")))
    header, data = rows[0], rows[1:]
    if len(header) < 4 or header[:3] != ["token", "block", "workgroup"]:
        raise SystemExit(f"{a.csv}: not a --timeline-csv file (header {header[:3]})")
    events = header[3:]  # event k + 1's end, from each workgroup's block start
    samples = {}  # (token, block) -> {workgroup: [event times]}
    for r in data:
        samples.setdefault((int(r[0]), int(r[1])), {})[int(r[2])] = [float(x) for x in r[3:]]
    groups = max(len(s) for s in samples.values())

    def median(f):
        return statistics.median(f(s) for s in samples.values())

    def at(event):  # column of event `event` (1-based, as in decode_layer.comp)
        return event - 1

    print(f"{a.csv}: {groups} workgroups, {len(samples)} (token, block) samples")
    print("head  attends  storers      stored (last storer)  seen  softmax  stored out")
    for head in range(a.heads):
        attend = groups - 1 - head
        first, last = 2 * a.head_dim * head, 2 * a.head_dim * (head + 1) - 1
        storers = sorted({(row // a.rows_per_group) % groups for row in range(first, last + 1)})
        stored = median(lambda s: max(s[g][at(2)] for g in storers))
        seen, soft, out = (median(lambda s, e=e: s[attend][at(e)]) for e in (3, 4, 5))
        print(f"{head:4d} {attend:8d}  {storers[0]:3d}-{storers[-1]:<3d}  {stored:20.2f}  {seen:5.2f}  "
              f"{soft:7.2f}  {out:10.2f}")
    print("event (ends)                                   earliest  median  latest workgroup")
    for e, name in enumerate(events, start=1):
        per_group = [statistics.median(s[g][at(e)] for s in samples.values()) for g in range(groups)]
        print(f"{e:2d} {name[:44]:44s} {min(per_group):8.2f} {statistics.median(per_group):7.2f} "
              f"{max(per_group):7.2f}")


if __name__ == "__main__":
    main()
