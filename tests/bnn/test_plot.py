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


@pytest.mark.parametrize("system", ["lds", "pend"])
def test_png_is_written_and_shows_the_invariant(tmp_path, system):
    import matplotlib.image as mpimg

    bench = get_benchmark(system)
    g = _disk_like(0.8)
    cex = [(np.array([0.5, 0.2]), np.array([0.7, 0.3])), (np.array([-0.3, 0.1]), None)]
    path = plot_invariant(tmp_path / "inv.png", bench, load_policy(system), g, cex)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    img = mpimg.imread(path)[..., :3]
    green = np.all(np.abs(img - np.array([0x9F, 0xD8, 0x9F]) / 255) < 0.08, axis=-1)
    orange = np.all(np.abs(img - np.array([0xF6, 0xC2, 0x8B]) / 255) < 0.08, axis=-1)
    assert green.mean() > 0.005 and orange.mean() > 0.005  # both sides of g = 0 are drawn
    red = (img[..., 0] > 0.7) & (img[..., 1] < 0.2) & (img[..., 2] < 0.2)
    assert red.sum() > 10  # the counterexample markers


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
    purple = np.array([0x7B, 0x2C, 0xBF]) / 255
    near = lambda img: np.all(np.abs(img - purple) < 0.1, axis=-1).sum()  # noqa: E731
    assert near(plain) == 0 and near(drawn) > 30


def test_no_candidate_no_invariant_drawn(tmp_path):
    import matplotlib.image as mpimg

    bench = get_benchmark("pend")
    img = mpimg.imread(plot_invariant(tmp_path / "n.png", bench, load_policy("pend"), None))
    green = np.all(np.abs(img[..., :3] - np.array([0x9F, 0xD8, 0x9F]) / 255) < 0.08, axis=-1)
    assert green.sum() == 0
