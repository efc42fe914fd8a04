#!/usr/bin/env python3
"""The layering check: each room includes only the rooms below it, and no product code includes tests/.

    python3 tools/check_layering.py [REPO_ROOT]      (also runs in the suite: //tools:layering_test)

Reads every C++/CUDA source and .proto file in the repository (skipping third_party/, data/, runs/,
hidden and bazel-* folders) and its `#include "..."` / `import "..."` lines. A folder may include its
own room and the rooms listed before it in ROOMS (tools/rooms.bzl). The folders in TOP (tests,
benchmarks, tools) sit above every room; of them only tests/ holds test code, and a file may include
tests/ only if it is in tests/ or is itself a test (`*_test.cc`). A source file in a folder that is in neither list is an
error too, so that a new folder is placed in the order before it grows. Prints one line per
violation, naming the file, the line and the include, and exits 1; prints a summary and exits 0
when the tree is clean.
"""
import ast
import os
import re
import sys


def load_rooms(path):
    """ROOMS and TOP from a .bzl file: its list assignments are Python literals too."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    found = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(
                node.targets[0], ast.Name) and node.targets[0].id in ("ROOMS", "TOP"):
            found[node.targets[0].id] = ast.literal_eval(node.value)
    return found["ROOMS"], found["TOP"]


# The order of rooms and the top folders, from tools/rooms.bzl (the one place they are kept; the
# root BUILD.bazel makes Bazel visibility from the same list).
ROOMS, TOP = load_rooms(os.path.join(os.path.dirname(os.path.realpath(__file__)), "rooms.bzl"))
# Not ours, or not source: never read.
SKIPPED = {"third_party", "data", "runs"}

SOURCE_SUFFIXES = (".h", ".cc", ".cu", ".cuh", ".proto")
INCLUDE = re.compile(r'^\s*(?:#\s*include|import)\s+"([^"]+)"')


def is_test_file(path):
    return path.startswith("tests/") or path.endswith("_test.cc")


def source_files(root):
    """Repository-relative paths of every source file, sorted."""
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = os.path.relpath(dirpath, root)
        if rel_dir == ".":
            dirnames[:] = [d for d in dirnames
                           if not d.startswith(".") and not d.startswith("bazel-")
                           and d not in SKIPPED]
        for name in filenames:
            if name.endswith(SOURCE_SUFFIXES):
                rel = os.path.normpath(os.path.join(rel_dir, name))
                out.append(rel.replace(os.sep, "/"))
    return sorted(out)


def check(root):
    """Returns (violations, number of files, number of includes checked)."""
    rank = {room: i for i, room in enumerate(ROOMS)}
    order = " < ".join(ROOMS)
    violations = []
    files = source_files(root)
    checked = 0
    for path in files:
        folder = path.split("/")[0] if "/" in path else ""
        if folder not in rank and folder not in TOP:
            where = f"folder {folder}/" if folder else "the repository root"
            violations.append(f"{path}: {where} is not in the room list; add it to ROOMS or TOP in "
                              f"tools/rooms.bzl, in its place in the order")
            continue
        with open(os.path.join(root, path), encoding="utf-8", errors="replace") as f:
            lines = f.readlines()
        for number, line in enumerate(lines, start=1):
            match = INCLUDE.match(line)
            if not match:
                continue
            target = match.group(1)
            top = target.split("/")[0] if "/" in target else ""
            if top not in rank and top not in TOP:
                continue  # a system or third-party header, or one beside the file ("reference.h")
            checked += 1
            if top == "tests" and not is_test_file(path):
                violations.append(f"{path}:{number}: includes {target}: only tests may include "
                                  f"tests/ (move what product code needs out of tests/)")
            elif folder in rank and top in rank and rank[top] > rank[folder]:
                violations.append(f"{path}:{number}: includes {target}, but {top}/ is above "
                                  f"{folder}/ in the order of rooms ({order})")
            elif folder in ("bench", "tools") and top in ("bench", "tools") and top != folder:
                violations.append(f"{path}:{number}: includes {target}: {folder}/ and {top}/ "
                                  f"don't include each other")
    return violations, len(files), checked


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(
        os.path.dirname(os.path.realpath(__file__)))  # the real tree, also from Bazel's runfiles
    violations, files, checked = check(root)
    if files == 0:
        print(f"layering: no source files under {root}", file=sys.stderr)
        return 1
    for v in violations:
        print(v)
    if violations:
        print(f"layering: {len(violations)} violation(s) in {files} files")
        return 1
    print(f"layering: ok ({files} files, {checked} includes of our rooms checked; "
          f"rooms, lowest first: {', '.join(ROOMS)}; then {', '.join(TOP)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
