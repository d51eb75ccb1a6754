"""Contraction paths: NumPy's paths on dense operands, sparsity-aware choices on sparse ones,
execution through a per-step callback, and one test per mistake."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import tensoralg as ta
from tensoralg.contract_path import (
    OperandInfo,
    PathError,
    PathTypeError,
    UnknownPathError,
    contract_by_path,
    einsum_path,
    operand_info,
    plan_contraction,
)
from tensoralg.notation.interleaved import SubscriptTypeError, from_interleaved

SIZES = dict(zip("abcdefghij", [2, 3, 4, 5, 4, 3, 2, 6, 5, 4]))

# NumPy's own path test cases (test_einsum.py, TestEinsumPath) and a few more
DENSE_CASES = [
    "acdf,jbje,gihb,hfac,gfac,gifabc,hfac",
    "chd,bde,agbc,hiad,bdi,cgh,agdb",
    "eb,cb,fb->cef",
    "dd,fb,be,cdb->cef",
    "bca,cdb,dbf,afc->",
    "dcc,fce,ea,dbf->ab",
    "ea,fb,abcd,gc,hd->efgh",
    "ab,bc,cd,de->ae",
    "a,b,c->abc",
    "a,ab,abc->abc",
    "ab,ab,c->",
    "...ab,...b->...a",
]


def dense_operands(subscripts: str, sizes: dict[str, int] = SIZES) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    terms = subscripts.split("->")[0].split(",")
    return [rng.random(tuple(sizes.get(c, 3) for c in term.replace("...", "hh"))) for term in terms]


@pytest.mark.parametrize("optimize", ["greedy", "optimal", True, False, ("greedy", 0),
                                      ("optimal", 0), ("greedy", 50)])
@pytest.mark.parametrize("subscripts", DENSE_CASES)
def test_dense_paths_are_numpys(subscripts, optimize):
    operands = dense_operands(subscripts)
    expected = np.einsum_path(subscripts, *operands, optimize=optimize)[0]
    assert einsum_path(subscripts, *operands, optimize=optimize)[0] == expected


def test_memory_limit_leaves_one_kernel_as_numpy_does():
    operands = dense_operands("a,ac,ab,ad,cd,bd,bc->", {c: 20 for c in "abcd"})
    for optimize in ("greedy", "optimal"):
        path, _ = einsum_path("a,ac,ab,ad,cd,bd,bc->", *operands, optimize=optimize)
        assert path == ["einsum_path", (0, 1), (0, 1, 2, 3, 4, 5)]


def test_report_reads_like_numpys():
    operands = dense_operands("ij,jk,kl->il", {"i": 2, "j": 8, "k": 8, "l": 2})
    path, report = einsum_path("ij,jk,kl->il", *operands)
    assert path == ["einsum_path", (0, 1), (0, 1)]
    lines = report.splitlines()
    assert lines[0] == "  Complete contraction:  ij,jk,kl->il"
    assert "Naive scaling:  4" in report and "Optimized scaling:  3" in report
    assert lines[-2].split() == ["3", "ij,jk->ik", "kl,ik->il"]
    assert lines[-1].split() == ["3", "kl,ik->il", "il->il"]    # the new term goes last
    assert "Sparse operand" not in report


def test_interleaved_form_and_letters_as_numpy_numbers_them():
    x = np.ones((1,) * 27)
    path, report = einsum_path(x, list(range(27)))
    assert path == ["einsum_path", (0,)]
    assert report.splitlines()[0].endswith("->ABCDEFGHIJKLMNOPQRSTUVWXYZa")
    assert from_interleaved(("a", [0, Ellipsis], "b", [1], [Ellipsis, 0])) == (
        "A...,B->...A", ["a", "b"])


def test_ellipsis_gets_unused_letters():
    a, b = np.ones((2, 3, 4)), np.ones((2, 4))
    plan = plan_contraction("...ij,...j->...i", [a, b])
    inputs, output = plan.subscripts.split("->")
    assert inputs.split(",")[0][1:] == "ij" and output[1:] == "i" and output[0] not in "ij"


# ---------------------------------------------------------------------------------------------
# sparse operands


def test_chain_with_a_sparse_matrix_contracts_the_dense_pair_first():
    n = 300
    A = sp.random_array((n, n), density=0.01, format="csr", random_state=0)
    plan = plan_contraction("ij,jk,k->i", [A, np.ones((n, n)), np.ones(n)])
    assert plan.path == ["einsum_path", (1, 2), (0, 1)]
    assert [s.subscripts for s in plan.steps] == ["jk,k->j", "ij,j->i"]
    # the second step iterates A's stored entries only: 2 x nnz, not 2 x n^2
    assert plan.steps[1].flops == pytest.approx(2 * A.nnz, rel=0.01)


def test_sparse_operands_change_the_order():
    """Two very sparse factors: their product is sparser still, so contract them first;
    NumPy, counting dense sizes, contracts the dense pair first."""
    n, m = 1000, 100
    A = sp.random_array((n, n), density=0.0005, format="csr", random_state=0)
    B = sp.random_array((n, n), density=0.0005, format="csr", random_state=1)
    C = np.ones((n, m))
    dense = [A.toarray(), B.toarray(), C]
    for optimize in ("greedy", "optimal"):
        assert np.einsum_path("ij,jk,kl->il", *dense, optimize=optimize)[0] == \
            ["einsum_path", (1, 2), (0, 1)]
        plan = plan_contraction("ij,jk,kl->il", [A, B, C], optimize)
        assert plan.path == ["einsum_path", (0, 1), (0, 1)]
        assert plan.steps[0].sparse and not plan.steps[1].sparse


def test_sddmm_stays_one_kernel():
    n, rank = 500, 16
    A = sp.random_array((n, n), density=0.01, format="csr", random_state=0)
    X, Y = np.ones((n, rank)), np.ones((rank, n))
    assert np.einsum_path("ij,ik,kj->ij", A.toarray(), X, Y)[0] == ["einsum_path", (1, 2), (0, 1)]
    for optimize in ("greedy", "optimal"):
        plan = plan_contraction("ij,ik,kj->ij", [A, X, Y], optimize)
        assert plan.path == ["einsum_path", (0, 1, 2)]
        # the masked product: one multiply-add per stored entry and rank, no n x n temporary
        assert plan.steps[0].stored == pytest.approx(A.nnz, rel=0.01)
        assert plan.steps[0].sparse


def test_optimal_fuses_a_masked_triple_inside_a_longer_chain():
    """``(A ⊙ (X Y)) Z``: the SDDMM part as one step, then the sparse-dense product."""
    n, rank = 400, 8
    A = sp.random_array((n, n), density=0.005, format="csr", random_state=0)
    ops = [A, np.ones((n, rank)), np.ones((rank, n)), np.ones((n, rank))]
    plan = plan_contraction("ij,ik,kj,jl->il", ops, "optimal")
    assert plan.path == ["einsum_path", (0, 1, 2), (0, 1)]


def test_sparse_report_shows_the_estimates():
    A = sp.random_array((100, 100), density=0.05, format="csr", random_state=0)
    _, report = einsum_path("ij,jk,k->i", A, np.ones((100, 100)), np.ones(100))
    assert f"Sparse operand:  0 (ij), {A.nnz:.3e} stored" in report
    assert "estimated nonzeros" in report


def test_operand_info_reads_nonzeros_of_every_sparse_kind():
    A = sp.random_array((10, 20), density=0.1, format="csr", random_state=0)
    assert operand_info(A) == OperandInfo((10, 20), A.nnz)
    assert operand_info(sp.coo_matrix(A)) == OperandInfo((10, 20), A.nnz)
    assert operand_info(ta.Tensor.from_scipy(A)) == OperandInfo((10, 20), A.nnz)
    assert operand_info(ta.Tensor.from_numpy(np.ones((2, 2)))) == OperandInfo((2, 2))
    assert operand_info([[1, 2, 3]]) == OperandInfo((1, 3))
    assert operand_info(3.0) == OperandInfo(())
    sparse = pytest.importorskip("sparse")
    assert operand_info(sparse.COO.from_scipy_sparse(A)) == OperandInfo((10, 20), A.nnz)


# ---------------------------------------------------------------------------------------------
# running a path


def test_contract_by_path_calls_one_step_per_contraction():
    rng = np.random.default_rng(1)
    a, b, c, d = (rng.random(s) for s in ((3, 4), (4, 5), (5, 6), (6, 3)))
    calls = []

    def step(subscripts, operands):
        calls.append(("step", subscripts, len(operands)))
        return np.einsum(subscripts, *operands)

    def final(subscripts, operands):
        calls.append(("final", subscripts, len(operands)))
        return np.einsum(subscripts, *operands)

    path = einsum_path("ij,jk,kl,li->", a, b, c, d, optimize="optimal")[0]
    got = contract_by_path("ij,jk,kl,li->", [a, b, c, d], path, step, final)
    np.testing.assert_allclose(got, np.einsum("ij,jk,kl,li->", a, b, c, d))
    assert [kind for kind, *_ in calls] == ["step", "step", "final"]
    assert calls[-1][1].endswith("->")


@pytest.mark.parametrize("subscripts", ["cab,cdd->ab", "ab,bc,cd,de->ae", "...ij,...jk->...ik",
                                        "i,i,i->i", "ii,ij,jk->k"])
@pytest.mark.parametrize("optimize", ["greedy", "optimal"])
def test_contract_by_path_with_ta_einsum_matches_numpy(subscripts, optimize):
    sizes = {"a": 2, "b": 3, "c": 4, "d": 4, "e": 2, "i": 3, "j": 3, "k": 2}
    operands = dense_operands(subscripts, sizes)
    path, _ = einsum_path(subscripts, *operands, optimize=optimize)
    got = contract_by_path(subscripts, operands, path,
                           lambda text, ops: ta.einsum(text, *ops))
    np.testing.assert_allclose(got, np.einsum(subscripts, *operands), rtol=1e-12)


def test_contract_by_path_on_a_sparse_chain():
    n = 50
    A = sp.random_array((n, n), density=0.1, format="csr", random_state=0)
    B, x = np.random.default_rng(0).random((n, n)), np.ones(n)
    path = plan_contraction("ij,jk,k->i", [A, B, x]).path
    got = contract_by_path("ij,jk,k->i", [A, B, x], path, lambda s, ops: ta.einsum(s, *ops))
    np.testing.assert_allclose(got, A @ (B @ x))


def test_explicit_paths_with_and_without_the_head():
    operands = dense_operands("cab,cdd->ab")
    for path in (["einsum_path", (1,), (0, 1)], [(1,), (0, 1)]):
        plan = plan_contraction("cab,cdd->ab", operands, path)
        assert plan.path == ["einsum_path", (1,), (0, 1)]
        assert [s.subscripts for s in plan.steps] == ["cdd->c", "cab,c->ab"]


# ---------------------------------------------------------------------------------------------
# mistakes: a ta error that is also NumPy's exception


@pytest.mark.parametrize("args", [(), ("",), ("", 0, 0), (",", 0, [0], [0]), (",", [0]),
                                  ("i", 0), ("ij", [0, 0]), ("...i", 0), ("i..", [0, 0]),
                                  (".i...", [0, 0]), ("j->..j", [0, 0]), ("i%...", [0, 0]),
                                  ("i->&", [0, 0]), ("i->ij", [0, 0]),
                                  ("ij->jij", [[0, 0], [0, 0]]), ("ii", np.ones((2, 3)))])
def test_bad_subscripts_are_value_errors(args):
    with pytest.raises(ValueError) as info:
        einsum_path(*args)
    assert isinstance(info.value, ta.TensorAlgebraError)


def test_size_mismatch_names_the_index():
    with pytest.raises(ta.ShapeError, match="'b'"):
        einsum_path("aabcb,abc", np.ones((3, 3, 4, 5, 6)), np.ones((3, 4, 5)))


@pytest.mark.parametrize("args", [(0, 0), (None,) * 63, (np.ones(2), [0.5])])
def test_subscripts_of_the_wrong_type_are_type_errors(args):
    with pytest.raises(TypeError) as info:
        einsum_path(*args)
    assert isinstance(info.value, (SubscriptTypeError, ta.TensorAlgebraError))


def test_sublist_numbers_out_of_range_are_value_errors():
    with pytest.raises(ta.NotationError, match=r"\[0, 52\)"):
        einsum_path(np.ones((2, 3)), [0, 52])


def test_optimize_values_nobody_can_read():
    ops = dense_operands("ab,bc,cd->ad")
    with pytest.raises(TypeError) as info:
        einsum_path("ab,bc,cd->ad", *ops, optimize=3.5)
    assert isinstance(info.value, PathTypeError)
    with pytest.raises(KeyError) as info:
        einsum_path("ab,bc,cd->ad", *ops, optimize="fastest")
    assert isinstance(info.value, UnknownPathError) and "'fastest'" in str(info.value)


@pytest.mark.parametrize("subscripts, path", [("ab,bc,cd,de->ae", ["einsum_path", (2, 3), (0, 1)]),
                                              ("a,a,a->a", ["einsum_path", (1,), (0, 1)])])
def test_paths_that_leave_operands_are_runtime_errors(subscripts, path):
    with pytest.raises(RuntimeError) as info:
        einsum_path(subscripts, *dense_operands(subscripts), optimize=path)
    assert isinstance(info.value, PathError) and "more to contract" in str(info.value)


@pytest.mark.parametrize("path", [["einsum_path", (0, 3)], ["einsum_path", (0, 0)],
                                  ["einsum_path", ("x",)], ["einsum_path", ()]])
def test_bad_path_steps_name_the_step(path):
    with pytest.raises(PathError, match="step 0 of the path"):
        einsum_path("ab,bc,cd->ad", *dense_operands("ab,bc,cd->ad"), optimize=path)


def test_opt_einsum_names_are_understood():
    ops = dense_operands("ab,bc,cd->ad")
    expected = np.einsum_path("ab,bc,cd->ad", *ops, optimize="optimal")[0]
    for name in ("auto", "dp", "branch-2", "random-greedy"):
        assert einsum_path("ab,bc,cd->ad", *ops, optimize=name)[0] == expected


def test_einsum_logs_the_path_it_takes(caplog):
    import logging

    import tensoralg as ta

    a, b, c = np.ones((30, 40)), np.ones((40, 50)), np.ones(50)
    with caplog.at_level(logging.INFO, logger="tensoralg"):
        np.testing.assert_allclose(ta.einsum("ij,jk,k->i", a, b, c), a @ b @ c)
    assert "contracted in 2 steps along ['einsum_path', (1, 2), (0, 1)]" in caplog.text


@pytest.mark.parametrize("dtype", ["float64", "int64"])
def test_a_step_that_sums_everything_hands_on_an_array_the_next_step_replays(monkeypatch,
                                                                             dtype):
    """``b,a,a->`` runs ``a,a->`` (a scalar) then ``b,->``: the scalar goes on as a 0-d
    array, so a repeated call replays both steps; the result is still a NumPy scalar."""
    from tensoralg import api
    from tensoralg.codegen import tiered

    rng = np.random.default_rng(5)
    x, y, w = (rng.integers(-4, 5, n).astype(dtype) for n in (6, 7, 7))
    want = np.einsum("b,a,a->", x, y, w)
    ta.einsum("b,a,a->", x, y, w)
    assert tiered.finish(timeout=60)         # steps are recorded once optimised
    first = ta.einsum("b,a,a->", x, y, w)
    monkeypatch.setattr(api, "execute", lambda *a, **k: pytest.fail("general path"))
    second = ta.einsum("b,a,a->", x, y, w)
    assert isinstance(first, np.generic) and isinstance(second, np.generic)
    assert first == want and second == want


def test_presum_steps_sum_large_operands_over_their_own_indices_first():
    from tensoralg.contract_path import presum_steps

    assert presum_steps("dceb,bac->eca", [(32, 128, 32, 8), (8, 8, 128)], 1 << 17) == \
        [((0,), "dceb->ceb"), ((0, 1), "bac,ceb->eca")]
    # under the threshold, or no index of its own: no steps
    assert presum_steps("dceb,bac->eca", [(2, 4, 4, 8), (8, 8, 4)], 1 << 17) is None
    assert presum_steps("ij,jk->ik", [(600, 600), (600, 600)], 1) is None
    # an index in the output is not summed; a diagonal operand is left to the kernel
    assert presum_steps("abc,c->ab", [(60, 60, 60), (60,)], 1) is None
    assert presum_steps("aab,b->", [(60, 60, 60), (60,)], 1) is None
    # two operands summed first, then the three left contracted along NumPy's greedy path
    steps = presum_steps("ax,by,ab,b->a", [(50, 40), (60, 30), (50, 60), (60,)], 1000)
    assert steps[:2] == [((0,), "ax->a"), ((0,), "by->b")]
    assert steps[-1][1].endswith("->a")


@pytest.mark.parametrize("subscripts, shapes", [
    ("dceb,bac->eca", [(32, 128, 32, 8), (8, 8, 128)]),
    ("cbea,eb,b->abe", [(400, 128, 8, 3), (8, 128), (128,)]),
    ("cd,adbc->c", [(48, 64), (50, 64, 16, 48)]),
    ("abc,ad->d", [(100, 100, 110), (100, 7)]),
])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64])
def test_einsum_with_presum_steps_matches_numpy(subscripts, shapes, dtype):
    rng = np.random.default_rng(3)
    operands = [(rng.standard_normal(s) * 3).astype(dtype) for s in shapes]
    assert ta.api._presummed(subscripts, tuple(operands)) is not None
    expected = np.einsum(subscripts, *[op.astype(np.float64) for op in operands])
    tolerance = 1e-3 if dtype == np.float32 else 1e-9
    for _ in range(3):                      # planned, then replayed
        got = ta.einsum(subscripts, *operands)
        assert got.dtype == np.result_type(*operands)
        np.testing.assert_allclose(got, expected, rtol=tolerance,
                                   atol=tolerance * max(1.0, np.abs(expected).max()))
