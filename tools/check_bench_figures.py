#!/usr/bin/env python3
"""The benchmarks' honesty check: no program in bench/ prints a figure it did not measure.

Every C++ and Python source under bench/ (its peers' drivers in bench/peers/ too) is read. A
benchmark's JSON may carry numbers written in its source only as settings (workers, rows) or
goals (target, aim); a figure (a value, a limit, a peer's result, a rate, a ratio) must be computed
in the run. A peer that doesn't run here is named in the docs with where its figure comes from,
never printed as a JSON number. This check reads every C++ and Python source of bench/ and fails on:

  - a numeric literal given to a figure's key: "value", "peer", "limit", "ratio", and keys naming
    a rate, a bandwidth, a latency, a duration or a model metric (examples_per_s, GBps, M rows,
    us_per_request, seconds, p99, auc, loss, rmse, ...), in C++ ({"key", 1.5} or j["key"] = 1.5)
    or Python ("key": 1.5 or d["key"] = 1.5);
  - a "peer" or a "limit" given a numeric literal, directly or as any field of the object it is
    given (its arithmetic may hold literals: a unit's 1e6).

Keys named as goals (target, *_target, target_*, aim) are settings and may hold literals.

    python3 tools/check_bench_figures.py [ROOT]   # ROOT: the repository (default: this file's)

Prints each finding as "file:line: ..." and exits 1 if there is one.
"""
import os
import re
import sys

GOAL = re.compile(r"^(target\w*|\w*_target|aim)$", re.I)
FIGURE = re.compile(
    r"^(value|peer|limit|ratio|ratio_\w+|\w+_ratio|\w*per_s\w*|\w*per_sec\w*|\w*gbps\w*|"
    r"\w*mbps\w*|\w*mrows\w*|\w*_us|us_\w*|\w*latency\w*|\w*seconds\w*|p\d\d|\w*auc\w*|"
    r"\w*loss\w*|\w*rmse\w*|\w*accuracy\w*|\w*throughput\w*|\w*bandwidth\w*|busbw\w*)$", re.I)
NUMBER = r"-?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?"
# C++: {"key", 1.5} and j["key"] = 1.5;  Python: "key": 1.5 and d["key"] = 1.5
PAIRS = [
    re.compile(r'\{\s*"(\w+)"\s*,\s*(' + NUMBER + r')\s*\}'),
    re.compile(r'\[\s*"(\w+)"\s*\]\s*=\s*(' + NUMBER + r')\s*[;\n]'),
    re.compile(r'"(\w+)"\s*:\s*(' + NUMBER + r')\s*[,}\n]'),
]
# A "peer" or "limit" key being given something: the rest of its statement is checked for numbers.
PEER_OR_LIMIT = re.compile(r'(?:\[\s*"(?:peer|limit)"\s*\]\s*=|\{\s*"(?:peer|limit)"\s*,|'
                           r'"(?:peer|limit)"\s*:)')
RHS_LITERAL = re.compile(r"\s*(" + NUMBER + r")\s*[;,}\n]")


def strip_comments_and_strings(text, python):
    """The text with comments blanked (keeping line breaks), and string contents other than the
    keys left as they are (keys are what the patterns look for)."""
    if python:
        text = re.sub(r'"""[\s\S]*?"""', lambda m: "\n" * m.group(0).count("\n"), text)
        return re.sub(r"#[^\n]*", "", text)
    text = re.sub(r"/\*[\s\S]*?\*/", lambda m: "\n" * m.group(0).count("\n"), text)
    return re.sub(r"//[^\n]*", "", text)


def statement_end(text, start, python):
    """Where the statement starting at `start` ends: C++ at its ';', Python where its brackets
    close at the end of a line."""
    if not python:
        end = text.find(";", start)
        return len(text) if end < 0 else end
    depth = 0
    for i in range(start, len(text)):
        c = text[i]
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
            if depth < 0:
                return i
        elif c == "\n" and depth <= 0:
            return i
    return len(text)


def check_file(path, rel):
    python = path.endswith(".py")
    try:
        text = strip_comments_and_strings(open(path, encoding="utf-8").read(), python)
    except (OSError, UnicodeDecodeError) as e:
        return [f"{rel}:1: can't read: {e}"]
    problems = []

    def line_of(pos):
        return text.count("\n", 0, pos) + 1

    for pattern in PAIRS:
        for m in pattern.finditer(text):
            key, number = m.group(1), m.group(2)
            if GOAL.match(key) or not FIGURE.match(key):
                continue
            problems.append(f"{rel}:{line_of(m.start())}: the figure \"{key}\" is the literal "
                            f"{number}, not measured in the run")
    for m in PEER_OR_LIMIT.finditer(text):
        end = statement_end(text, m.end(), python)
        found = []
        direct = RHS_LITERAL.match(text, m.end())
        if direct:
            found.append((m.end(), direct.group(1)))
        statement = text[m.end():end]
        for pattern in PAIRS:
            for p in pattern.finditer(statement):
                if not GOAL.match(p.group(1)):
                    found.append((m.end() + p.start(), f'{p.group(2)} (its "{p.group(1)}")'))
        for pos, what in found:
            problems.append(f"{rel}:{line_of(pos)}: a peer or limit given the literal {what}: "
                            f"its figures must be measured in the run (a peer that doesn't run "
                            f"here belongs in the docs)")
    return sorted(set(problems))


def check(root):
    bench = os.path.join(root, "bench")
    problems, files = [], 0
    for folder, dirs, names in os.walk(bench):
        dirs.sort()
        for name in sorted(names):
            if not (name.endswith(".cc") or name.endswith(".py")):
                continue
            files += 1
            path = os.path.join(folder, name)
            problems += check_file(path, os.path.relpath(path, root))
    return problems, files


def main():
    here = os.path.dirname(os.path.realpath(__file__))
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(here)
    problems, files = check(root)
    for p in problems:
        print(p)
    print(f"check_bench_figures: {files} bench sources, {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
