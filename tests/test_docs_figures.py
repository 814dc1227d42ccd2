"""Every PNG committed under docs/ fits a screen: at most 1,000 px tall, read from the PNG header (IHDR)."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
MAX_HEIGHT = 1000  # px


def png_size(path: Path) -> tuple[int, int]:
    """(width, height) in px from a PNG's IHDR chunk (bytes 16-24, big-endian); ValueError for another file."""
    head = path.read_bytes()[:24]
    if head[:8] != b"\x89PNG\r\n\x1a\n" or head[12:16] != b"IHDR":
        raise ValueError(f"{path} is not a PNG")
    return struct.unpack(">II", head[16:24])


def test_png_size_reads_the_header(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig = plt.figure(figsize=(3.0, 2.5))
    fig.savefig(tmp_path / "f.png", dpi=100)
    plt.close(fig)
    assert png_size(tmp_path / "f.png") == (300, 250)
    (tmp_path / "x.png").write_bytes(b"GIF89a" + bytes(30))
    with pytest.raises(ValueError):
        png_size(tmp_path / "x.png")


@pytest.mark.parametrize("path", sorted(str(p.relative_to(REPO)) for p in (REPO / "docs").rglob("*.png")))
def test_every_docs_png_is_at_most_1000_px_tall(path):
    height = png_size(REPO / path)[1]
    assert height <= MAX_HEIGHT, f"{path} is {height} px tall (at most {MAX_HEIGHT})"
