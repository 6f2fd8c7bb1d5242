#!/usr/bin/env python3
"""Print per-tool structural differences between two captured tool lists.

    tests/real/show_diff.py SERVER OLD NEW      # one pair
    tests/real/show_diff.py --summary           # every consecutive pair in lists/: changed-tool counts
    tests/real/show_diff.py --check             # pairs.json covers exactly the tools that differ

It only shows what changed (JSON paths, old -> new); the verdicts in
pairs.json were written by hand from this output and the files themselves.
"""

import difflib
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
LISTS = HERE / "lists"


def vkey(v):
    out = []
    for part in v.replace("-", ".").split("."):
        out.append((0, int(part), "") if part.isdigit() else (1, 0, part))
    return out


def load(server, version):
    tools = json.loads((LISTS / server / f"{version}.json").read_text())
    return {t["name"]: t for t in tools}


def short(v, n=160):
    s = json.dumps(v, ensure_ascii=False)
    return s if len(s) <= n else s[: n - 3] + "..."


def text_diff(a, b):
    wa, wb = a.split(" "), b.split(" ")
    sm = difflib.SequenceMatcher(None, wa, wb, autojunk=False)
    parts = []
    for op, i1, i2, j1, j2 in sm.get_opcodes():
        if op == "equal":
            continue
        parts.append(f"[{op}] {' '.join(wa[i1:i2])!r} -> {' '.join(wb[j1:j2])!r}")
    return "; ".join(parts)[:1500]


def diff(a, b, path, out):
    if type(a) is not type(b):
        out.append(f"{path}: {short(a)} -> {short(b)}")
    elif isinstance(a, dict):
        if list(a) != list(b) and set(a) == set(b):
            out.append(f"{path}: key order changed")
        for k in a:
            if k not in b:
                out.append(f"{path}.{k}: REMOVED {short(a[k])}")
            else:
                diff(a[k], b[k], f"{path}.{k}", out)
        for k in b:
            if k not in a:
                out.append(f"{path}.{k}: ADDED {short(b[k])}")
    elif isinstance(a, list):
        if all(isinstance(x, str) for x in a + b) and (a or b):
            if a != b:
                if set(a) == set(b):
                    out.append(f"{path}: reordered {short(a)} -> {short(b)}")
                else:
                    out.append(f"{path}: -{sorted(set(a) - set(b))} +{sorted(set(b) - set(a))}")
        elif len(a) != len(b):
            out.append(f"{path}: list {short(a, 300)} -> {short(b, 300)}")
        else:
            for i, (x, y) in enumerate(zip(a, b)):
                diff(x, y, f"{path}[{i}]", out)
    elif a != b:
        if isinstance(a, str) and (len(a) > 80 or len(b) > 80):
            out.append(f"{path}: text changed: {text_diff(a, b)}")
        else:
            out.append(f"{path}: {short(a)} -> {short(b)}")


def changed_tools(server, old, new):
    a, b = load(server, old), load(server, new)
    res = {}
    for name in list(a) + [n for n in b if n not in a]:
        if name not in b:
            res[name] = ["TOOL REMOVED"]
        elif name not in a:
            res[name] = ["TOOL ADDED"]
        elif a[name] != b[name]:
            out = []
            diff(a[name], b[name], "", out)
            res[name] = out or ["key order only"]
    return res


def versions(server):
    return sorted((p.stem for p in (LISTS / server).glob("*.json")), key=vkey)


def main(argv):
    if argv and argv[0] == "--summary":
        for d in sorted(LISTS.iterdir()):
            vs = versions(d.name)
            for o, n in zip(vs, vs[1:]):
                ch = changed_tools(d.name, o, n)
                print(f"{d.name:22} {o:>11} -> {n:<11} {len(ch):3} changed of {len(load(d.name, n))}")
        return 0
    if argv and argv[0] == "--check":
        pairs = json.loads((HERE / "pairs.json").read_text())
        bad = 0
        for p in pairs:
            want = set(changed_tools(p["server"], p["old"], p["new"]))
            got = set(p["tools"])
            if want != got:
                bad += 1
                print(f"{p['server']} {p['old']}->{p['new']}: missing {sorted(want - got)} extra {sorted(got - want)}")
            for t, j in p["tools"].items():
                if j.get("worst") not in ("BREAKING", "WARNING", "COMPATIBLE", "NONE"):
                    bad += 1
                    print(f"{p['server']} {p['old']}->{p['new']} {t}: bad worst {j.get('worst')!r}")
        print(f"{len(pairs)} pairs, {sum(len(p['tools']) for p in pairs)} judged tools, {bad} problem(s)")
        return 1 if bad else 0
    server, old, new = argv
    for name, lines in changed_tools(server, old, new).items():
        print(f"== {name}")
        for line in lines:
            print(f"   {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
