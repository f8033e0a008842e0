"""Every link in the README and docs/ leads somewhere: the file exists and, for `file#anchor`, a heading of that
file makes the anchor (GitHub's rule: lower case, punctuation dropped, spaces to hyphens)."""
import re

import pytest

from tests.conftest import REPO

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def anchors(path):
    out = set()
    for line in path.read_text().splitlines():
        if line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            out.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return out


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_local_link_resolves(doc):
    broken = []
    in_code = False
    for line in doc.read_text().splitlines():
        if line.startswith("```"):
            in_code = not in_code
        if in_code:
            continue
        for target in LINK.findall(line):
            if re.match(r"[a-z]+:", target):
                continue  # http(s), mailto, file: not ours to check here
            path, _, anchor = target.partition("#")
            dest = (doc.parent / path).resolve() if path else doc
            if not dest.exists():
                broken.append(f"{target}: no such file")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                broken.append(f"{target}: no heading makes #{anchor}")
    assert not broken, f"{doc.name}: " + "; ".join(broken)
