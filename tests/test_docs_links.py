"""Every image linked from README.md and docs/ exists in the repository."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote

REPO = Path(__file__).resolve().parent.parent
# ![alt](path "title") and <img src="path">
IMAGE_LINK = re.compile(r"!\[[^\]]*\]\(\s*(?:<([^>]+)>|([^)\s]+))(?:\s+\"[^\"]*\")?\s*\)"
                        r"|<img[^>]*\bsrc=[\"']([^\"']+)[\"']")


def _markdown_files() -> list[Path]:
    files = [REPO / "README.md"] + sorted((REPO / "docs").rglob("*.md"))
    return [f for f in files if f.exists()]


def image_links(text: str) -> list[str]:
    """Local image targets of a markdown text (web links and anchors left out)."""
    out = []
    for m in IMAGE_LINK.finditer(text):
        target = unquote((m.group(1) or m.group(2) or m.group(3)).split("#")[0])
        if target and not re.match(r"^[a-z]+://|^data:", target):
            out.append(target)
    return out


def test_link_pattern_on_known_cases():
    text = ('![a](x/y.png) ![b](<z w.png> "t") <img src="i.png" width=3> ![c](https://e.org/p.png) '
            "[not an image](r.md)")
    assert image_links(text) == ["x/y.png", "z w.png", "i.png"]


def test_every_image_link_in_readme_and_docs_resolves():
    missing = []
    for md in _markdown_files():
        base = md.parent
        for target in image_links(md.read_text()):
            path = (REPO / target.lstrip("/")) if target.startswith("/") else (base / target)
            if not path.resolve().is_file():
                missing.append(f"{md.relative_to(REPO)}: {target}")
    assert not missing, "image links that do not resolve:\n" + "\n".join(missing)

