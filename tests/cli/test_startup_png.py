"""``distributions.png`` without ``Image.save``: :func:`safecert.report.plots.png_bytes` writes the
bytes Pillow's PNG writer writes (same encoder, same chunks), without importing Pillow's
file-format plugins (issue 28, item 3: start-up)."""

from __future__ import annotations

import io
import json
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

from safecert.report.plots import _draw_distributions, png_bytes


def _saved(image: Image.Image, level: int) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, "PNG", compress_level=level)
    return buffer.getvalue()


@settings(max_examples=60, deadline=None)
@given(
    width=st.integers(1, 700),
    height=st.integers(1, 120),
    kind=st.sampled_from(["noise", "sparse", "bands"]),
    level=st.sampled_from([1, 6, 9]),
    seed=st.integers(0, 2**32 - 1),
)
def test_png_bytes_are_what_image_save_writes(width, height, kind, level, seed):
    """Noise (every row filter in play, several IDAT chunks at large sizes), a white picture
    with a few dots (rows repeated: the Up filter) and flat grey bands (Sub), at three zlib
    levels: the same file, byte for byte."""
    rng = np.random.default_rng(seed)
    if kind == "noise":
        pixels = rng.integers(0, 256, (height, width, 3), dtype=np.uint8)
    elif kind == "sparse":
        pixels = np.full((height, width, 3), 255, np.uint8)
        pixels[rng.integers(0, height, 20), rng.integers(0, width, 20)] = (0, 114, 178)
    else:
        pixels = (rng.integers(0, 4, (height, width, 1)) * 60).astype(np.uint8).repeat(3, axis=2)
    image = Image.fromarray(pixels, "RGB")
    assert png_bytes(image, level) == _saved(image, level)


@pytest.mark.parametrize("width", [800, 16385])
def test_png_bytes_cut_idat_chunks_where_pillow_does(width):
    """Noise compresses to more than one encoder buffer: the IDAT chunks are cut at
    ``max(65536, 4 × width)`` bytes, as Pillow's writer cuts them (a row wider than 16,384
    pixels takes the larger buffer)."""
    pixels = np.random.default_rng(width).integers(0, 256, (120, width, 3), dtype=np.uint8)
    image = Image.fromarray(pixels, "RGB")
    data = png_bytes(image, 1)
    assert data == _saved(image, 1)
    assert data.count(b"IDAT") >= 2


@pytest.mark.parametrize("cells", [1, 4, 30])
def test_the_distributions_picture_is_the_one_image_save_wrote(cells):
    rng = np.random.default_rng(cells)
    costs = [list(rng.normal(5.0, 3.0, 25)) for _ in range(cells)]
    returns = [list(rng.normal(100.0, 30.0, 25)) for _ in range(cells)]
    image = _draw_distributions(costs, returns, 5.0)
    assert png_bytes(image, 1) == _saved(image, 1)


def test_other_modes_are_refused():
    with pytest.raises(ValueError, match="RGB"):
        png_bytes(Image.new("L", (4, 4)), 1)


def test_writing_the_picture_imports_no_file_format_plugin(tmp_path):
    """``distributions_png`` in a fresh interpreter: the picture is written and no Pillow
    file-format plugin is loaded (``Image.save`` imports ``PngImagePlugin``)."""
    script = f"""
import json, sys
from pathlib import Path
from types import SimpleNamespace
from safecert.blackbox.jobs import EpisodeRecord
from safecert.report.plots import distributions_png
result = SimpleNamespace(cells=[object()], budget=2.0)
records = [EpisodeRecord(cell=0, index=0, seed=1, ret=3.0, cost=1.0, goal=True,
                         terminated=False, truncated=True, steps=5)]
out = distributions_png(result, records, Path({str(tmp_path)!r}))
plugins = sorted(m for m in sys.modules if m.startswith("PIL.") and m.endswith("ImagePlugin"))
print(json.dumps([str(out[1]), plugins]))
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    )
    path, plugins = json.loads(done.stdout)
    assert plugins == []
    assert Image.open(path).size[0] >= 640  # a PNG Pillow reads back
