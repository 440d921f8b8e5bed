from __future__ import annotations

import numpy as np
import pytest

from safecert.bnn.networks import ReluNetwork, load_policy
from safecert.bnn.plot import can_plot, plot_invariant
from safecert.bnn.system import get_benchmark


def _disk_like(r: float) -> ReluNetwork:
    # g(x) = r - |x0| - |x1| written as a ReLU network: |t| = relu(t) + relu(-t)
    w0 = np.array([[1.0, -1.0, 0.0, 0.0], [0.0, 0.0, 1.0, -1.0]])
    return ReluNetwork([(w0, np.zeros(4)), (-np.ones((4, 1)), np.array([r]))])


PROVED = np.array([0x8F, 0xD9, 0xC0]) / 255  # Okabe–Ito bluish green, light
CANDIDATE = np.array([0xDD, 0xD5, 0xC7]) / 255  # neutral sand: nothing is claimed


def _share(img: np.ndarray, colour: np.ndarray) -> float:
    return float(np.all(np.abs(img - colour) < 0.04, axis=-1).mean())


@pytest.mark.parametrize("system", ["lds", "pend"])
def test_png_is_written_and_shows_the_invariant(tmp_path, system):
    import matplotlib.image as mpimg

    bench = get_benchmark(system)
    g = _disk_like(0.8)
    cex = [(np.array([0.5, 0.2]), np.array([0.7, 0.3])), (np.array([-0.3, 0.1]), None)]
    path = plot_invariant(tmp_path / "inv.png", bench, load_policy(system), g, cex, proved=True)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    img = mpimg.imread(path)[..., :3]
    assert _share(img, PROVED) > 0.005 and _share(img, CANDIDATE) == 0
    black = np.all(img < 0.1, axis=-1)
    assert black.sum() > 10  # the boundary and the counterexample markers


def test_an_unproved_candidate_is_never_filled_as_an_invariant(tmp_path):
    """An UNKNOWN run's last candidate is drawn in neutral grey, dashed: nothing is claimed."""
    import matplotlib.image as mpimg

    bench = get_benchmark("lds")
    path = plot_invariant(tmp_path / "c.png", bench, load_policy("lds"), _disk_like(0.8))
    img = mpimg.imread(path)[..., :3]
    assert _share(img, PROVED) == 0 and _share(img, CANDIDATE) > 0.005


def test_only_two_dimensional_continuous_systems_are_plotted(tmp_path):
    car = get_benchmark("car")
    assert can_plot(get_benchmark("lds")) and not can_plot(car)
    with pytest.raises(ValueError, match="2-D"):
        plot_invariant(tmp_path / "x.png", car, load_policy("car"), _disk_like(1.0))


def test_an_unsafe_trajectory_is_drawn(tmp_path):
    import matplotlib.image as mpimg

    bench = get_benchmark("pend")
    path_xy = [np.array([-0.5, 0.2]), np.array([-0.3, 1.0]), np.array([-0.1, 2.1])]
    args = (bench, load_policy("pend"), _disk_like(0.8))
    plain = mpimg.imread(plot_invariant(tmp_path / "plain.png", *args))[..., :3]
    drawn = mpimg.imread(plot_invariant(tmp_path / "path.png", *args, trajectory=path_xy))[..., :3]
    purple = np.array([0xCC, 0x79, 0xA7]) / 255  # Okabe–Ito reddish purple
    near = lambda img: np.all(np.abs(img - purple) < 0.1, axis=-1).sum()  # noqa: E731
    assert near(plain) == 0 and near(drawn) > 30


def test_no_candidate_no_invariant_drawn(tmp_path):
    import matplotlib.image as mpimg

    bench = get_benchmark("pend")
    img = mpimg.imread(plot_invariant(tmp_path / "n.png", bench, load_policy("pend"), None))
    assert _share(img[..., :3], PROVED) == 0 and _share(img[..., :3], CANDIDATE) == 0
