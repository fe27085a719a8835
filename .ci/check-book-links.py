#!/usr/bin/env python3
"""Checks the links of the built book (docs/book, after `mdbook build docs`).

    python3 .ci/check-book-links.py [BOOK_DIR]

Every relative `href` and `src` of every page of docs/book/**/*.html must
name a file that exists, and a `#fragment` an `id` (or `<a name>`) of the
page it points at. Links that leave the book point into the repository
(`../../../config/demo.toml` from docs/src/how-to/x.md, GitHub-style): the
file or directory they name must exist in the repository. http(s), mailto
and other absolute URLs are not checked. Prints every broken link and exits
1 when there is one. Standard library only.
"""

import html.parser
import pathlib
import posixpath
import re
import sys
import urllib.parse

ROOT = pathlib.Path(__file__).resolve().parents[1]
SOURCES = ROOT / "docs" / "src"


class Page(html.parser.HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.ids = set()
        self.links = []  # (line, attribute, value)
        self.base = None

    def handle_starttag(self, tag, attrs):
        for name, value in attrs:
            if value is None:
                continue
            if name == "id" or (tag == "a" and name == "name"):
                self.ids.add(value)
            elif name in ("href", "src"):
                if tag == "base" and name == "href":
                    self.base = value
                else:
                    self.links.append((self.getpos()[0], name, value))

    handle_startendtag = handle_starttag


def parse(path, cache={}):
    if path not in cache:
        page = Page()
        page.feed(path.read_text(encoding="utf-8"))
        cache[path] = page
    return cache[path]


def markdown_anchors(path, cache={}):
    """The anchors GitHub gives a Markdown file's headings."""
    if path not in cache:
        anchors, seen, fenced = set(), {}, False
        for text in path.read_text(encoding="utf-8").splitlines():
            if text.startswith("```"):
                fenced = not fenced
            if fenced or not re.match(r"#{1,6} ", text):
                continue
            title = text.lstrip("#").strip().lower()
            slug = re.sub(r"[^\w\- ]", "", title).replace(" ", "-")
            count = seen.get(slug, 0)
            seen[slug] = count + 1
            anchors.add(slug if count == 0 else f"{slug}-{count}")
        cache[path] = anchors
    return cache[path]


def main():
    book = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ROOT / "docs" / "book").resolve()
    if not book.is_dir():
        print(f"error: {book} does not exist: run `mdbook build docs` first", file=sys.stderr)
        return 1
    problems = []
    pages = sorted(book.rglob("*.html"))
    checked = 0
    for source in pages:
        page = parse(source)
        where = source.relative_to(book)
        # The page's folder inside the book, which mirrors docs/src.
        folder = where.parent
        if page.base is not None:
            # 404.html: links are relative to the site's root, the book.
            if page.base.startswith(("http://", "https://")):
                continue
            folder = pathlib.PurePosixPath(".") if page.base.startswith("/") else folder / page.base
        for line, attribute, value in page.links:
            parts = urllib.parse.urlsplit(value)
            if parts.scheme or parts.netloc:  # http(s), mailto, javascript, data, //host
                continue
            target_path = urllib.parse.unquote(parts.path)
            fragment = urllib.parse.unquote(parts.fragment)
            if target_path.startswith("/"):
                problems.append(f"{where}:{line}: {attribute}={value!r} is an absolute path")
                continue
            checked += 1
            in_book = posixpath.normpath(posixpath.join(folder.as_posix(), target_path or where.name))
            if in_book == ".." or in_book.startswith("../"):
                # Leaves the book: a file of the repository, as GitHub shows
                # it from the page's source in docs/src.
                target = pathlib.Path(posixpath.normpath(posixpath.join(SOURCES.as_posix(), in_book)))
                if ROOT not in target.parents:
                    problems.append(f"{where}:{line}: {value!r} points outside the repository")
                    continue
                if not target.exists() and target.suffix == ".html":
                    # mdbook turns every `x.md` link into `x.html`, also one
                    # to a repository file: the source names the `.md`.
                    target = target.with_suffix(".md")
                if not target.exists():
                    problems.append(f"{where}:{line}: {value!r}: no such repository file {target.relative_to(ROOT)}")
                elif fragment and target.suffix == ".md" and fragment not in markdown_anchors(target):
                    problems.append(f"{where}:{line}: {value!r}: no heading {fragment!r} in {target.relative_to(ROOT)}")
                continue
            target = book / in_book
            if target.is_dir():
                target = target / "index.html"
            if not target.is_file():
                problems.append(f"{where}:{line}: {value!r}: no such file {target.relative_to(book)}")
                continue
            if fragment and target.suffix == ".html" and fragment not in parse(target).ids:
                problems.append(f"{where}:{line}: {value!r}: no id {fragment!r} in {target.relative_to(book)}")
    for problem in problems:
        print(problem)
    print(f"{len(pages)} pages, {checked} relative links checked, {len(problems)} broken")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
