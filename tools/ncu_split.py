#!/usr/bin/env python3
"""ncu_split.py — read the per-SASS-line CSV of bench/cuda/ncu_lightning.sh (ncu --page source --csv
--print-source sass) for lightning_wg and print where each role's warps spend their time: the warp
stall samples split at the branch to the producers (the first branch after BAR.SYNC 0x0), then by
region between synchronisation points (barriers, mbarrier waits, wgmma waits, fences), each with its
share of all samples and its top stall reasons.

Usage: tools/ncu_split.py ncu_source.csv"""
import csv
import sys

SYNC = ("BAR.", "SYNCS.PHASECHK", "DEPBAR", "EXIT", "MEMBAR")


def main(path):
    rows = list(csv.reader(open(path)))
    hdr, data = rows[1], rows[2:]
    ix = {h: i for i, h in enumerate(hdr)}
    stalls = [h for h in hdr if h.startswith("stall_") and "Not Issued" not in h]
    total_key = "Warp Stall Sampling (All Samples)"

    def val(r, h):
        try:
            return float(r[ix[h]].replace(",", ""))
        except ValueError:
            return 0.0

    base = int(data[0][0], 16)
    split = None
    for i, r in enumerate(data):
        if "BAR.SYNC.DEFER_BLOCKING 0x0" in r[1]:
            for r2 in data[i:i + 6]:
                if "BRA" in r2[1]:
                    split = int(r2[1].split("0x")[-1].split()[0], 16) - base
                    break
            break
    if split is None:
        sys.exit("no BAR.SYNC 0x0 followed by a branch: not lightning_wg's SASS?")
    total = sum(val(r, total_key) for r in data)
    for role, lo, hi in (("state warps", 0, split), ("producers", split, 1 << 62)):
        mine = [r for r in data if lo <= int(r[0], 16) - base < hi]
        n = sum(val(r, total_key) for r in mine)
        by = {s: sum(val(r, s) for r in mine) for s in stalls}
        top = sorted(by.items(), key=lambda kv: -kv[1])[:6]
        print(f"{role}: {n / total * 100:.1f}% of samples, {sum(val(r, 'Instructions Executed') for r in mine):.0f} "
              f"warp instructions; " + ", ".join(f"{k[6:]} {v / max(n, 1) * 100:.0f}%" for k, v in top))
    print("\nregions ending at a synchronisation point (share of all samples, top stall reasons):")
    acc = {s: 0.0 for s in stalls}
    for r in data:
        for s in stalls:
            acc[s] += val(r, s)
        if any(k in r[1] for k in SYNC):
            n = sum(acc.values())
            if n > total * 0.004:
                a = int(r[0], 16) - base
                top = sorted(acc.items(), key=lambda kv: -kv[1])[:3]
                print(f"  {'P' if a >= split else 'S'} {a:05x} {n / total * 100:5.1f}%  {r[1].strip()[:44]:44s} "
                      + ", ".join(f"{k[6:]} {v / n * 100:.0f}%" for k, v in top))
            acc = {s: 0.0 for s in stalls}


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
