#!/usr/bin/env python3
"""The docs check: the documentation's links lead somewhere, and every room has its page.

    python3 tools/check_docs.py [REPO_ROOT]      (also runs in the suite: //tools:docs_test)

Reads README.md and every docs/**/*.md (outside fenced code blocks and inline code) and fails on:

  - a relative link (`[text](path)`, `![alt](path)`, `[ref]: path`, `<a href="path">`) to a file or
    folder that doesn't exist, or that lies outside the repository; a path is taken from the linking
    file's folder, or from the repository root when it starts with `/`;
  - a link to an anchor (`#anchor` in the same file, `other.md#anchor`) that is not a heading of
    the target page, by GitHub's rules: the heading's text without its markup (backquotes,
    emphasis, link targets, HTML tags), lowercased, every character that is not a letter, digit,
    space, hyphen or underscore dropped, each space made a hyphen; a repeated heading gets -1, -2,
    ... (an explicit `<a name="...">` or `id="..."` counts too). Anchors of files that are not
    Markdown (source lines, `#L10`) are not checked;
  - a room of tools/rooms.bzl (its ROOMS and TOP lists, read by parsing the file) that no page of
    docs/ describes. A page describes a room when a table row's first cell is the room's folder in
    backquotes, like docs/architecture.md's table of rooms: | `ps/` | ... |

External links (any `scheme:` such as http, https, mailto) are not checked. Prints one line per
problem, `file:line: what`, and exits 1; prints a summary and exits 0 when the docs are clean.
"""
import ast
import os
import re
import sys
import unicodedata
import urllib.parse

FENCE = re.compile(r"^\s{0,3}(`{3,}|~{3,})")
HEADING = re.compile(r"^\s{0,3}(#{1,6})[ \t]+(.*?)(?:[ \t]+#+)?[ \t]*$")
CODE_SPAN = re.compile(r"(`+)(.+?)\1")
# [text](target) or ![alt](target), with an optional "title"; the target may be in <...>.
INLINE_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]"  # [text], one level of [] inside
                         r"\(\s*(<[^>]*>|[^\s)]*)"  # (target or (<target>
                         r"(?:\s+(?:\"[^\"]*\"|'[^']*'))?\s*\)")  # an optional "title", then )
REFERENCE_DEFINITION = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*(<[^>]*>|\S+)")
HTML_HREF = re.compile(r"<a\s[^>]*href=\"([^\"]*)\"", re.IGNORECASE)
HTML_ANCHOR = re.compile(r"<a\s[^>]*(?:name|id)=\"([^\"]+)\"", re.IGNORECASE)
SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
ROOM_ROW = re.compile(r"^\s*\|\s*`([^`/]+)/`\s*\|")


def load_rooms(path):
    """[(folder, line)] of ROOMS and TOP in a .bzl file (its lists are Python literals too)."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    rooms = {}
    for node in tree.body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)
                and node.targets[0].id in ("ROOMS", "TOP") and isinstance(node.value, ast.List)):
            rooms[node.targets[0].id] = [(ast.literal_eval(e), e.lineno) for e in node.value.elts]
    for name in ("ROOMS", "TOP"):
        if name not in rooms:
            raise ValueError(f"{path}: no {name} = [...] list")
    return rooms["ROOMS"] + rooms["TOP"]


def strip_code_spans(line):
    """The line with every inline code span's content blanked (same length, backquotes kept)."""
    return CODE_SPAN.sub(lambda m: m.group(1) + " " * len(m.group(2)) + m.group(1), line)


def prose_lines(text):
    """(line number, line) of every line outside fenced code blocks."""
    fence = None
    for number, line in enumerate(text.splitlines(), start=1):
        match = FENCE.match(line)
        if fence is None:
            if match:
                fence = match.group(1)
                continue
            yield number, line
        elif match and match.group(1)[0] == fence[0] and len(match.group(1)) >= len(fence) \
                and line.strip() == match.group(1):
            fence = None


def heading_text(raw):
    """A heading's text as GitHub renders it, without its markup."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", raw)  # links and images: their text
    text = re.sub(r"<[^>]+>", "", text)  # HTML tags
    text = text.replace("`", "")
    text = re.sub(r"(\*+)(.+?)\1", r"\2", text)  # *emphasis*, **strong**
    return text


def slug(raw_heading):
    """GitHub's anchor for a heading, before duplicates are numbered."""
    out = []
    for ch in heading_text(raw_heading).strip().lower():
        if ch == " ":
            out.append("-")
        elif ch in "-_" or ch.isalnum() or unicodedata.category(ch).startswith("M"):
            out.append(ch)
    return "".join(out)


def anchors(text):
    """The set of anchors a page has: its headings' slugs (repeats numbered) and HTML names."""
    seen = {}
    found = set()
    for _, line in prose_lines(text):
        match = HEADING.match(line)
        if match:
            base = slug(match.group(2))
            count = seen.get(base, 0)
            seen[base] = count + 1
            found.add(base if count == 0 else f"{base}-{count}")
        for name in HTML_ANCHOR.findall(line):
            found.add(name)
    return found


def link_targets(line):
    """The link targets on one line of prose (code spans ignored)."""
    line = strip_code_spans(line)
    targets = [m.group(1) for m in INLINE_LINK.finditer(line)]
    definition = REFERENCE_DEFINITION.match(line)
    if definition:
        targets.append(definition.group(1))
    targets.extend(HTML_HREF.findall(line))
    return [t[1:-1] if t.startswith("<") and t.endswith(">") else t for t in targets]


def doc_files(root):
    """Repository-relative paths of README.md and every Markdown file under docs/, sorted."""
    files = ["README.md"]
    docs = os.path.join(root, "docs")
    for dirpath, dirnames, filenames in os.walk(docs):
        dirnames.sort()
        for name in sorted(filenames):
            if name.endswith(".md"):
                rel = os.path.relpath(os.path.join(dirpath, name), root)
                files.append(rel.replace(os.sep, "/"))
    return files


def check(root):
    """Returns (problems, number of pages, number of relative links checked, rooms described)."""
    root = os.path.realpath(root)
    problems = []
    texts = {}
    anchor_cache = {}

    def read(path):
        if path not in texts:
            with open(path, encoding="utf-8", errors="replace") as f:
                texts[path] = f.read()
        return texts[path]

    def anchors_of(path):
        if path not in anchor_cache:
            anchor_cache[path] = anchors(read(path))
        return anchor_cache[path]

    pages = doc_files(root)
    links = 0
    described = {}  # room folder -> first page that describes it
    for page in pages:
        path = os.path.join(root, page)
        if not os.path.isfile(path):
            problems.append(f"{page}:1: missing (the repository's front page)")
            continue
        for number, line in prose_lines(read(path)):
            if page.startswith("docs/"):
                row = ROOM_ROW.match(line)
                if row:
                    described.setdefault(row.group(1), page)
            for target in link_targets(line):
                if not target or SCHEME.match(target):
                    continue  # an empty link, or an external one (http:, https:, mailto:, ...)
                links += 1
                file_part, _, anchor = target.partition("#")
                file_part = urllib.parse.unquote(file_part)
                anchor = urllib.parse.unquote(anchor)
                if file_part:
                    base = root if file_part.startswith("/") else os.path.dirname(path)
                    resolved = os.path.normpath(os.path.join(base, file_part.lstrip("/")))
                else:
                    resolved = path
                where = f"{page}:{number}"
                inside = resolved == root or resolved.startswith(root + os.sep)
                if not inside:
                    problems.append(f"{where}: link to {target}: outside the repository")
                    continue
                if not os.path.exists(resolved):
                    problems.append(f"{where}: link to {target}: no file or folder "
                                    f"{os.path.relpath(resolved, root)}")
                    continue
                if anchor and os.path.isfile(resolved) and resolved.endswith(".md"):
                    if anchor not in anchors_of(resolved):
                        problems.append(f"{where}: link to {target}: no heading of "
                                        f"{os.path.relpath(resolved, root)} has the anchor "
                                        f"#{anchor}")

    rooms_file = os.path.join(root, "tools", "rooms.bzl")
    try:
        rooms = load_rooms(rooms_file)
    except (OSError, SyntaxError, ValueError) as e:
        problems.append(f"tools/rooms.bzl:1: can't read the rooms: {e}")
        rooms = []
    for room, number in rooms:
        if room not in described:
            problems.append(f"tools/rooms.bzl:{number}: room {room}/ is described by no page of "
                            f"docs/ (a table row whose first cell is `{room}/`, as in "
                            f"docs/architecture.md's table of rooms)")
    return problems, len(pages), links, len(rooms)


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(
        os.path.dirname(os.path.realpath(__file__)))  # the real tree, also from Bazel's runfiles
    problems, pages, links, rooms = check(root)
    for p in problems:
        print(p)
    if problems:
        print(f"docs: {len(problems)} problem(s) in {pages} pages")
        return 1
    print(f"docs: ok ({pages} pages, {links} relative links checked, {rooms} rooms each described)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
