#!/usr/bin/env python3
"""Merges, subtracts and reports lcov tracefiles (the .info files geninfo writes).

  coverage.py merge OUT IN... --keep PREFIX...   sum the runs, keep the project's files
  coverage.py diff OUT AFTER BEFORE              what ran between two snapshots of one boot
  coverage.py report INFO --metric NAME [--uncovered FILE]
      per-file table, METRIC NAME_line_coverage / NAME_branch_coverage lines, and the list of
      functions, error-path labels and catch blocks that no run reached.

Source paths are resolved (realpath) while merging: the debug module is built from symlinks
in build/kernel-debug, and its report should name kernel/*.c.
"""
import argparse
import os
import re
import subprocess
import sys
from collections import defaultdict


class FileCov:
    def __init__(self):
        self.lines = defaultdict(int)  # line -> count
        self.funcs = {}  # name -> first line
        self.fcount = defaultdict(int)  # name -> count
        self.branches = {}  # (line, block, branch) -> count, None when never evaluated

    def add_branch(self, key, taken):
        old = self.branches.get(key)
        if taken is None:
            self.branches.setdefault(key, None)
        else:
            self.branches[key] = (old or 0) + taken


def parse(path):
    files, cur = {}, None
    with open(path, encoding="utf-8", errors="replace") as f:
        for raw in f:
            line = raw.rstrip("\n")
            tag, _, val = line.partition(":")
            if tag == "SF":
                cur = files.setdefault(os.path.realpath(val), FileCov())
            elif cur is None:
                continue
            elif tag == "DA":
                ln, cnt = val.split(",")[:2]
                cur.lines[int(ln)] += int(cnt)
            elif tag == "FN":
                ln, name = val.split(",", 1)
                cur.funcs.setdefault(name, int(ln))
            elif tag == "FNDA":
                cnt, name = val.split(",", 1)
                cur.fcount[name] += int(cnt)
            elif tag == "BRDA":
                ln, block, br, taken = val.split(",")
                cur.add_branch((int(ln), int(block), int(br)), None if taken == "-" else int(taken))
            elif line == "end_of_record":
                cur = None
    return files


def merge_into(dst, src):
    for path, fc in src.items():
        d = dst.setdefault(path, FileCov())
        for ln, c in fc.lines.items():
            d.lines[ln] += c
        for name, ln in fc.funcs.items():
            d.funcs.setdefault(name, ln)
        for name, c in fc.fcount.items():
            d.fcount[name] += c
        for key, taken in fc.branches.items():
            d.add_branch(key, taken)


def write(path, files):
    with open(path, "w", encoding="utf-8") as f:
        for sf in sorted(files):
            fc = files[sf]
            f.write("TN:\nSF:%s\n" % sf)
            for name, ln in sorted(fc.funcs.items(), key=lambda x: x[1]):
                f.write("FN:%d,%s\n" % (ln, name))
            for name in fc.funcs:
                f.write("FNDA:%d,%s\n" % (fc.fcount.get(name, 0), name))
            f.write("FNF:%d\nFNH:%d\n" % (len(fc.funcs), sum(1 for n in fc.funcs if fc.fcount.get(n, 0))))
            for (ln, block, br), taken in sorted(fc.branches.items()):
                f.write("BRDA:%d,%d,%d,%s\n" % (ln, block, br, "-" if taken is None else taken))
            f.write("BRF:%d\nBRH:%d\n" % (len(fc.branches), sum(1 for t in fc.branches.values() if t)))
            for ln in sorted(fc.lines):
                f.write("DA:%d,%d\n" % (ln, fc.lines[ln]))
            f.write("LF:%d\nLH:%d\nend_of_record\n" % (len(fc.lines), sum(1 for c in fc.lines.values() if c)))


def cmd_merge(a):
    files = {}
    for p in a.inputs:
        merge_into(files, parse(p))
    keep = [os.path.realpath(k) + os.sep for k in a.keep]
    files = {sf: fc for sf, fc in files.items() if any(sf.startswith(k) for k in keep)}
    if a.exclude:
        files = {sf: fc for sf, fc in files.items() if not re.search(a.exclude, sf)}
    write(a.out, files)


def cmd_diff(a):
    after, before = parse(a.after), parse(a.before)
    out = {}
    for sf, fc in after.items():
        b = before.get(sf, FileCov())
        d = out.setdefault(sf, FileCov())
        for ln, c in fc.lines.items():
            d.lines[ln] = max(0, c - b.lines.get(ln, 0))
        d.funcs = dict(fc.funcs)
        for name in fc.funcs:
            d.fcount[name] = max(0, fc.fcount.get(name, 0) - b.fcount.get(name, 0))
        for key, taken in fc.branches.items():
            bt = b.branches.get(key) or 0
            d.branches[key] = None if taken is None else max(0, taken - bt)
    write(a.out, out)


LABEL = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*):\s*(/[/*].*)?$")
GOTO = re.compile(r"\bgoto\s+([A-Za-z_][A-Za-z0-9_]*)\s*;")
CATCH = re.compile(r"^\s*(\}\s*)?catch\s*\(")


def first_counted(fc, start, stop):
    """The count of the first instrumented line in [start, stop), or None."""
    for ln in range(start, stop):
        if ln in fc.lines:
            return fc.lines[ln]
    return None


def unreached_paths(sf, fc):
    """Gotos never taken, and goto labels and catch blocks whose first statement never ran
    (a label reached by falling through counts as reached: its gotos are listed apart)."""
    try:
        with open(sf, encoding="utf-8", errors="replace") as f:
            src = f.read().split("\n")
    except OSError:
        return []
    found = []
    for i, text in enumerate(src, start=1):
        g = GOTO.search(text)
        if g and fc.lines.get(i) == 0:
            found.append((i, "goto %s" % g.group(1)))
            continue
        m = LABEL.match(text)
        kind = "label %s" % m.group(1) if m and m.group(1) != "default" else None
        if kind is None and CATCH.match(text):
            kind = text.strip().lstrip("} ").rstrip(" {")
        if kind is None:
            continue
        if first_counted(fc, i + 1, i + 6) == 0:
            found.append((i, kind))
    return found


def demangle(names):
    """C++ symbols as a reader writes them (c++filt from binutils); C names pass through."""
    if not names:
        return {}
    try:
        out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True, check=True)
        return dict(zip(names, out.stdout.split("\n")))
    except (OSError, subprocess.CalledProcessError):
        return {n: n for n in names}


def pct(hit, total):
    return 100.0 * hit / total if total else 0.0


def cmd_report(a):
    files = parse(a.info)
    root = os.path.commonpath(list(files)) if len(files) > 1 else os.path.dirname(next(iter(files), "/"))
    tot = [0, 0, 0, 0, 0, 0]
    rows = []
    for sf in sorted(files):
        fc = files[sf]
        lh, lf = sum(1 for c in fc.lines.values() if c), len(fc.lines)
        bh, bf = sum(1 for t in fc.branches.values() if t), len(fc.branches)
        fh, ff = sum(1 for n in fc.funcs if fc.fcount.get(n, 0)), len(fc.funcs)
        for i, v in enumerate((lh, lf, bh, bf, fh, ff)):
            tot[i] += v
        rows.append((os.path.relpath(sf, root), lh, lf, bh, bf, fh, ff))
    w = max([len(r[0]) for r in rows] + [len(a.metric) + 7])
    print("%-*s %15s %15s %11s" % (w, "file (%s)" % a.metric, "lines", "branches", "functions"))
    fmt = "%-*s %5.1f%% %4d/%-4d %5.1f%% %4d/%-4d %4d/%-4d"
    for name, lh, lf, bh, bf, fh, ff in rows:
        print(fmt % (w, name, pct(lh, lf), lh, lf, pct(bh, bf), bh, bf, fh, ff))
    lh, lf, bh, bf, fh, ff = tot
    print(fmt % (w, "total", pct(lh, lf), lh, lf, pct(bh, bf), bh, bf, fh, ff))
    print("METRIC %s_line_coverage %.1f pct" % (a.metric, pct(lh, lf)))
    print("METRIC %s_branch_coverage %.1f pct" % (a.metric, pct(bh, bf)))
    if a.uncovered:
        with open(a.uncovered, "w", encoding="utf-8") as f:
            f.write("# Not reached by any run of this report (%s): functions, then gotos never\n"
                    "# taken, goto labels and catch blocks whose first statement never ran.\n" % a.metric)
            for sf in sorted(files):
                fc = files[sf]
                funcs = sorted((ln, n) for n, ln in fc.funcs.items() if not fc.fcount.get(n, 0))
                paths = unreached_paths(sf, fc)
                if not funcs and not paths:
                    continue
                f.write("\n%s\n" % os.path.relpath(sf, root))
                names = demangle([n for _, n in funcs])
                for ln, n in funcs:
                    f.write("  %5d  function %s\n" % (ln, names.get(n, n)))
                for ln, kind in paths:
                    f.write("  %5d  %s\n" % (ln, kind))
        print("unreached functions, gotos, labels and catch blocks: %s" % a.uncovered)
    return 0 if files else 1


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("merge")
    m.add_argument("out")
    m.add_argument("inputs", nargs="+")
    m.add_argument("--keep", nargs="+", required=True, help="directories whose files are kept")
    m.add_argument("--exclude", help="regex of paths to drop")
    d = sub.add_parser("diff")
    d.add_argument("out")
    d.add_argument("after")
    d.add_argument("before")
    r = sub.add_parser("report")
    r.add_argument("info")
    r.add_argument("--metric", required=True)
    r.add_argument("--uncovered")
    a = p.parse_args()
    rc = {"merge": cmd_merge, "diff": cmd_diff, "report": cmd_report}[a.cmd](a)
    sys.exit(rc or 0)


if __name__ == "__main__":
    main()
