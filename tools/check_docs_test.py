#!/usr/bin/env python3
"""The docs check's own test (//tools:check_docs_test): check_docs.py on small temporary trees.

A good tree passes; then each kind of problem the check must catch (a broken file link, a broken
anchor, a link out of the repository, an undescribed room) is put into a copy of it, and the check
must fail, naming the file and line of each. Also GitHub's anchors for a few headings.
"""
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
CHECK = os.path.join(HERE, "check_docs.py")
sys.path.insert(0, HERE)
import check_docs  # noqa: E402  (found beside this file, in the source tree or Bazel's runfiles)

ROOMS_BZL = """\
# The rooms, lowest first.
ROOMS = [
    "proto",  # the wire
    "ps",  # the parameter servers
]

TOP = ["tools"]
"""

README = """\
# toy

See [the architecture](docs/architecture.md), its [rooms](docs/architecture.md#rooms-lowest-first),
the [order of rooms](tools/rooms.bzl) and [the project's site](https://example.com/nowhere).

```sh
# not a heading, and [not a link](nowhere.md)
```

A `[code span](nowhere.md)` is not a link either.
"""

ARCHITECTURE = """\
# Architecture

Back to the [README](../README.md); the [ps room](#the-ps-room-whats-in-it), the second
[Notes](#notes-1) and a [source file](../tools/rooms.bzl#L2).

## Rooms, lowest first

| room | what lives there |
|---|---|
| `proto/` | the wire |
| `ps/` | the parameter servers |
| `tools/` | scripts |

## The `ps/` room: what's in it

## Notes

## Notes
"""


def write(root, rel, text):
    path = os.path.join(root, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def line_of(text, needle):
    """1-based number of the first line of text containing needle."""
    for number, line in enumerate(text.splitlines(), start=1):
        if needle in line:
            return number
    raise AssertionError(f"{needle!r} not in the text")


class CheckDocsTest(unittest.TestCase):

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(dir=os.environ.get("TEST_TMPDIR"))
        self.root = self.tmp.name
        self.files = {"README.md": README, "docs/architecture.md": ARCHITECTURE,
                      "tools/rooms.bzl": ROOMS_BZL}

    def tearDown(self):
        self.tmp.cleanup()

    def run_check(self):
        for rel, text in self.files.items():
            write(self.root, rel, text)
        result = subprocess.run([sys.executable, CHECK, self.root], capture_output=True,
                                text=True, check=False)
        return result.returncode, result.stdout + result.stderr

    def test_GoodTree_Passes(self):
        rc, out = self.run_check()
        self.assertEqual(rc, 0, out)
        self.assertIn("docs: ok (2 pages", out)

    def test_BrokenFileLink_FailsNamingFileAndLine(self):
        page = ARCHITECTURE + "\nSee also [the gone page](gone.md).\n"
        self.files["docs/architecture.md"] = page
        rc, out = self.run_check()
        self.assertEqual(rc, 1, out)
        self.assertIn(f"docs/architecture.md:{line_of(page, 'gone.md')}: link to gone.md: "
                      f"no file or folder docs/gone.md", out)
        self.assertIn("docs: 1 problem(s)", out)

    def test_BrokenAnchorInOtherPage_FailsNamingIt(self):
        readme = README + "\nThe [old name](docs/architecture.md#layout).\n"
        self.files["README.md"] = readme
        rc, out = self.run_check()
        self.assertEqual(rc, 1, out)
        self.assertIn(f"README.md:{line_of(readme, '#layout')}: link to "
                      f"docs/architecture.md#layout: no heading of docs/architecture.md has the "
                      f"anchor #layout", out)

    def test_BrokenAnchorInSamePage_FailsNamingIt(self):
        page = ARCHITECTURE + "\nThe third [Notes](#notes-2).\n"
        self.files["docs/architecture.md"] = page
        rc, out = self.run_check()
        self.assertEqual(rc, 1, out)
        self.assertIn(f"docs/architecture.md:{line_of(page, '#notes-2')}: link to #notes-2: "
                      f"no heading of docs/architecture.md has the anchor #notes-2", out)

    def test_LinkOutOfTheRepository_Fails(self):
        readme = README + "\nThe [design](../outside/DESIGN.md).\n"
        self.files["README.md"] = readme
        rc, out = self.run_check()
        self.assertEqual(rc, 1, out)
        self.assertIn(f"README.md:{line_of(readme, 'outside')}: link to ../outside/DESIGN.md: "
                      f"outside the repository", out)

    def test_UndescribedRoom_FailsNamingItsLineInRoomsBzl(self):
        rooms = ROOMS_BZL.replace('    "ps",  # the parameter servers\n',
                                  '    "ps",  # the parameter servers\n'
                                  '    "serving",  # models out\n')
        self.files["tools/rooms.bzl"] = rooms
        rc, out = self.run_check()
        self.assertEqual(rc, 1, out)
        self.assertIn(f"tools/rooms.bzl:{line_of(rooms, 'serving')}: room serving/ is described "
                      f"by no page of docs/", out)
        self.assertNotIn("room ps/", out)

    def test_RoomRowOnlyInReadme_DoesNotCount(self):
        self.files["docs/architecture.md"] = ARCHITECTURE.replace("| `tools/` | scripts |\n", "")
        self.files["README.md"] = README + "\n| `tools/` | scripts |\n"
        rc, out = self.run_check()
        self.assertEqual(rc, 1, out)
        self.assertIn("room tools/ is described by no page of docs/", out)

    def test_EveryProblemListed(self):
        self.files["docs/architecture.md"] = ARCHITECTURE + "\n[a](gone.md) [b](#nope)\n"
        self.files["tools/rooms.bzl"] = ROOMS_BZL.replace('TOP = ["tools"]',
                                                          'TOP = ["tools", "bench"]')
        rc, out = self.run_check()
        self.assertEqual(rc, 1, out)
        self.assertIn("link to gone.md", out)
        self.assertIn("link to #nope", out)
        self.assertIn("room bench/", out)
        self.assertIn("docs: 3 problem(s)", out)

    def test_Slug_GitHubRules(self):
        self.assertEqual(check_docs.slug("Training on your own data (`--model=tabular`)"),
                         "training-on-your-own-data---modeltabular")
        self.assertEqual(check_docs.slug("The `ps/` room: what's in it"),
                         "the-ps-room-whats-in-it")
        self.assertEqual(check_docs.slug("Models (2-vCPU VM)"), "models-2-vcpu-vm")
        self.assertEqual(check_docs.slug("`movielens_mf`"), "movielens_mf")
        self.assertEqual(check_docs.slug("[Linked](x.md) and **bold**"), "linked-and-bold")
        self.assertEqual(check_docs.anchors("# A\n## A\n```\n# A\n```\n## A\n"),
                         {"a", "a-1", "a-2"})


if __name__ == "__main__":
    unittest.main()
