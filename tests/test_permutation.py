"""The O(1)-memory permutation: a bijection, seeded by (seed, epoch) only."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from rayform.permutation import Permutation


@pytest.mark.parametrize("n", [1, 2, 3, 7, 64, 1000, 4097])
@pytest.mark.parametrize("epoch", [0, 1, 5])
def test_is_a_permutation(n, epoch):
    out = Permutation(n, seed=3, epoch=epoch)(np.arange(n))
    assert sorted(out.tolist()) == list(range(n))


def test_same_seed_and_epoch_same_order_other_epoch_other_order():
    a = Permutation(500, 1, 0)(np.arange(500))
    assert np.array_equal(a, Permutation(500, 1, 0)(np.arange(500)))
    assert not np.array_equal(a, Permutation(500, 1, 1)(np.arange(500)))
    assert not np.array_equal(a, Permutation(500, 2, 0)(np.arange(500)))
    assert not np.array_equal(a, np.arange(500))


def test_same_order_in_a_new_process():
    code = ("import numpy as np; from rayform.permutation import Permutation; "
            "print(Permutation(300, 9, 4)(np.arange(300)).tolist())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert eval(out) == Permutation(300, 9, 4)(np.arange(300)).tolist()


def test_memory_does_not_grow_with_n():
    big = Permutation(10**12, 0, 0)
    assert all(not isinstance(v, np.ndarray) or v.size <= 8 for v in vars(big).values())
    assert 0 <= int(big(np.array([10**12 - 1]))[0]) < 10**12
    with pytest.raises(IndexError):
        big(np.array([10**12]))
