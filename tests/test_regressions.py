"""Bugs found by random testing, kept as plain tests."""
import numpy as np

import tensoralg as ta


def test_dense_output_with_a_permuted_mode_order_comes_back_in_mode_order():
    # hypothesis (deep profile): 'ilj->ijl' with out_format ('ddd', (2, 1, 0)) was transposed
    a = np.random.default_rng(0).standard_normal((1, 2, 2))
    got = ta.einsum("ilj->ijl", a, out_format=ta.Format("ddd", order=(2, 1, 0)))
    np.testing.assert_allclose(got, np.einsum("ilj->ijl", a))
    kernel = ta.compile("B(i,j) = A(j,i)", formats={"B": ta.Format("dd", order=(1, 0))})
    m = np.arange(12.0).reshape(3, 4)
    np.testing.assert_allclose(kernel(A=m), m.T)
