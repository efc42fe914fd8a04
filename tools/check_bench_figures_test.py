#!/usr/bin/env python3
"""The benchmarks' honesty check's own test: tools/check_bench_figures.py on small temporary
trees, one good and others each carrying one kind of figure that was not measured, which the check
must catch (among them the peer literal ps_bench once printed)."""
import os
import subprocess
import sys
import tempfile
import unittest

CHECK = os.path.join(os.path.dirname(os.path.realpath(__file__)), "check_bench_figures.py")

GOOD_CC = r'''
// {"value", 3.0} in a comment is not code.
json Line(double measured, const RunResult& peer) {
  json j = Base("sparse_pull", measured / 1e6, "M rows/s");
  j["target"] = 15.0;
  j["aim"] = 22;
  j["workers"] = 2;
  j["peer"] = {{"name", "flat_hash_map"}, {"value", Round(peer.per_sec() * 16384 / 1e6)}};
  j["limit"] = {{"name", "limit.gather"}, {"value", Round(limit)}, {"unit", "M rows/s"}};
  Emit({{"name", "target.busbw"}, {"value", Round(busbw / tcp)}, {"target", 0.5}});
  return j;
}
'''

GOOD_PY = '''
"""A docstring may say "value": 3.0."""
setup = {"batch": 4096, "ps": 2, "learning_rate": 0.01}
print(json.dumps(dict(setup, value=rate, target_ratio=0.8, cpp_client=summary(native))))
'''

BAD = {
    # What ps_bench printed until issue 41: a peer's figure copied from notes.
    "peer_literal.cc": r'''
    j["peer"] = {{"what", "ps-lite push, 16,384 64-byte rows (PERF_NOTES)"},
                 {"value", 15.0},
                 {"unit", "M rows/s"}};
''',
    "value_assigned.cc": '  j["value"] = 41.5;\n',
    "limit_literal.cc": '  j["limit"] = 5.9;\n',
    "rate_pair.cc": '  Emit({{"name", "x"}, {"examples_per_sec", 51800}});\n',
    "latency_pair.cc": '  line["p99_latency_us"] = 4870;\n',
    "python_rate.py": 'print(json.dumps({"name": "x", "examples_per_s": 98014}))\n',
    "python_peer.py": 'out["peer"] = {"name": "ps-lite", "rows_per_s": 40.1e6}\n',
    "python_auc.py": 'result = {"test_auc": 0.7568}\n',
}


def run(root):
    return subprocess.run([sys.executable, CHECK, root], capture_output=True, text=True)


def tree(files):
    root = tempfile.mkdtemp(prefix="bench-check-")
    os.makedirs(os.path.join(root, "bench"))
    for name, text in files.items():
        with open(os.path.join(root, "bench", name), "w") as f:
            f.write(text)
    return root


class CheckBenchFiguresTest(unittest.TestCase):
    def test_measured_figures_settings_and_goals_pass(self):
        result = run(tree({"good.cc": GOOD_CC, "good.py": GOOD_PY}))
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        self.assertIn("2 bench sources, 0 problem(s)", result.stdout)

    def test_each_unmeasured_figure_is_caught_and_located(self):
        for name, text in BAD.items():
            with self.subTest(name=name):
                result = run(tree({"good.cc": GOOD_CC, name: text}))
                self.assertEqual(result.returncode, 1, result.stdout)
                self.assertIn(f"bench/{name}:", result.stdout)
                self.assertNotIn("bench/good.cc:", result.stdout)


if __name__ == "__main__":
    unittest.main()
