"""Every PNG committed under docs/ fits a screen: at most 1,000 px tall, read from the PNG header (IHDR)."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
MAX_HEIGHT = 1000  # px
# Drawn before the figures were held to MAX_HEIGHT (bnexp/report/figures.py: at most 8 configurations per legend,
# percentiles.png two settings). A held-out sweep's figure draws its evaluation seeds only, which report.json does
# not store per configuration, so it goes when `bnexp report` redraws it from its re-run sweep (an archived
# one-stage sweep's is redrawn from its report.json: figures.stability_figure_of). The TensorBoard screenshots are
# retaken with docs/tensorboard.md's screenshots.
DRAWN_BEFORE = {
    "docs/studies/batch_size/stability.png": "stability.png with more than 8 configurations",
}


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
    if path in DRAWN_BEFORE:  # the list shrinks: a redrawn figure leaves it
        assert height > MAX_HEIGHT, f"{path} is {height} px tall now: remove it from DRAWN_BEFORE"
    else:
        assert height <= MAX_HEIGHT, f"{path} is {height} px tall (at most {MAX_HEIGHT})"
