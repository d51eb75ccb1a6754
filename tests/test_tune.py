"""ta.autotune: the search space, the log, the stored winner that later calls use, bad input."""
from __future__ import annotations

import json
import random
import warnings

import numpy as np
import pytest
import scipy.sparse as sp

import tensoralg as ta
from tensoralg import tune
from tensoralg.schedule import Schedule
from tensoralg.schedule.store import TunedSchedules, shape_class


@pytest.fixture
def tuned(tmp_path, monkeypatch):
    """A store of tuned schedules of this test's own, so no other test sees its winners."""
    store = TunedSchedules(tmp_path)
    monkeypatch.setattr(ta.api.kernel_cache(), "tuned", store)
    return store


def test_search_space_is_fixed_by_the_seed_and_starts_with_the_compilers_choice():
    default = Schedule().reorder("i", "k", "j")
    one = tune.search_space(default, ("i", "j"), 2, random.Random(5))
    two = tune.search_space(default, ("i", "j"), 2, random.Random(5))
    other = tune.search_space(default, ("i", "j"), 2, random.Random(6))
    assert [str(s) for s in one] == [str(s) for s in two] != [str(s) for s in other]
    assert str(one[0]) == "reorder(i, k, j)"
    assert len({str(s) for s in one}) == len(one)
    assert any("reduction=partials" in str(s) for s in one)       # k outer sums
    assert any("split(i, 16" in str(s) for s in one)
    assert any("split(j, 64, j0, j1, guard); reorder(j0, i, k, j1)" in str(s) for s in one)


def test_cache_block_candidates_are_tried():
    # SpMM: blocks of the dense output's columns are among the trials, and run.
    A = sp.random_array((200, 150), density=0.05, format="csr", random_state=1)
    B = np.random.default_rng(1).random((150, 40))
    result = ta.autotune("ij,jk->ik", [A, B], budget_s=30, max_trials=400, repeats=1,
                         progress=False, store=False)
    blocked = [t for t in result.trials if "reorder(k0" in t.schedule]
    assert blocked and any(t.times_s for t in blocked)
    np.testing.assert_allclose(ta.einsum("ij,jk->ik", A, B, schedule=result.best), A @ B,
                               rtol=1e-12)


def test_autotune_logs_every_trial_and_stores_a_winner_einsum_uses(tuned, tmp_path):
    A = sp.random_array((300, 200), density=0.05, format="csr", random_state=0)
    x = np.random.default_rng(0).random(200)
    log = tmp_path / "trials.jsonl"
    result = ta.autotune("ij,j->i", [A, x], budget_s=5, max_trials=6, repeats=2, log=log,
                         progress=False)
    assert 1 <= len(result.trials) <= 6
    assert result.best_s <= result.default_s
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(records) == len(result.trials)
    assert {"schedule", "times_s", "compile_s", "environment", "seed", "key"} <= set(records[0])
    assert records[0]["environment"]["threads"] == ta.get_num_threads()
    assert tuned.get(result.key) == result.best
    assert shape_class({"i": 300, "j": 200}, [A.nnz]) in result.key
    got = ta.einsum("ij,j->i", A, x)
    np.testing.assert_allclose(got, A @ x, rtol=1e-12)
    used = [k for k in ta.api.kernel_cache().kernels if k.schedule == str(result.best)
            and k.statement == result.key.split(" | ")[0]]
    assert used, "einsum did not compile the tuned schedule"


def test_autotune_on_a_statement_serves_compiled_kernels(tuned):
    A = sp.random_array((120, 90), density=0.1, format="csc", random_state=1)
    x = np.random.default_rng(1).random(90)
    result = ta.autotune("y(i) = A(i,j) * x(j)", {"A": A, "x": x}, formats={"A": ta.CSC},
                         budget_s=5, max_trials=4, repeats=2, progress=False)
    assert tuned.get(result.key) is not None
    kernel = ta.compile("y(i) = A(i,j) * x(j)", formats={"A": ta.CSC})
    np.testing.assert_allclose(kernel(A=A, x=x), A @ x, rtol=1e-12)
    assert any(p.key.schedule == str(result.best) for p in kernel._programs.values())


def test_calls_replayed_before_the_tuning_use_the_winner_after_it(tuned):
    """A kernel and an einsum call that ran (and recorded their replays) before autotune look
    again afterwards, in the same process: they run the tuned schedule, not the old replay."""
    A = sp.random_array((300, 200), density=0.05, format="csr", random_state=3)
    x = np.random.default_rng(3).random(200)
    kernel = ta.compile("y(i) = A(i,j) * x(j)", formats={"A": "csr"})
    for _ in range(3):                                  # replays recorded (optimised code)
        kernel(A=A, x=x)
        ta.einsum("ij,j->i", A, x)
        ta.wait_for_optimised()
    assert kernel._recent is not None and ta.api.kernel_cache().dispatch
    statement = ta.autotune("y(i) = A(i,j) * x(j)", {"A": A, "x": x}, budget_s=5,
                            max_trials=3, repeats=1, progress=False)
    subscripts = ta.autotune("ij,j->i", [A, x], budget_s=5, max_trials=3, repeats=1,
                             progress=False)
    cache = ta.api.kernel_cache()
    assert not cache.recent and not cache.dispatch     # einsum's replays were dropped
    np.testing.assert_allclose(kernel(A=A, x=x), A @ x, rtol=1e-12)
    assert any(p.key.schedule == str(statement.best) for p in kernel._programs.values())
    np.testing.assert_allclose(ta.einsum("ij,j->i", A, x), A @ x, rtol=1e-12)
    assert any(k.schedule == str(subscripts.best) for k in ta.api.kernel_cache().kernels)


def test_statement_operands_without_formats_are_tuned_in_their_own_formats(tuned):
    A = sp.random_array((200, 100), density=0.05, format="csr", random_state=4)
    x = np.ones(100)
    with warnings.catch_warnings():
        warnings.simplefilter("error")        # no "converting it on every call"
        result = ta.autotune("y(i) = A(i,j) * x(j)", {"A": A, "x": x}, budget_s=5,
                             max_trials=2, repeats=1, progress=False)
    assert "A=csr (ds)" in result.key


def test_a_schedule_that_changes_the_result_stops_the_search(tuned, monkeypatch):
    measure = tune._measure
    calls = []

    def corrupting(run, schedule, repeats):
        trial, result = measure(run, schedule, repeats)
        calls.append(schedule)
        return trial, (None if result is None else (result + 1 if len(calls) > 1 else result))

    monkeypatch.setattr(tune, "_measure", corrupting)
    A = sp.random_array((50, 40), density=0.2, format="csr", random_state=2)
    with pytest.raises(ta.TensorAlgebraError, match=r"gave a different result .* compiler bug"):
        ta.autotune("ij,j->i", [A, np.ones(40)], budget_s=5, max_trials=5, repeats=1,
                    progress=False, store=False)


@pytest.mark.parametrize("kwargs, message", [
    ({"budget_s": 0}, r"budget_s > 0"),
    ({"repeats": 0}, r"repeats >= 1"),
])
def test_bad_autotune_arguments(kwargs, message):
    with pytest.raises(ta.InputError, match=message):
        ta.autotune("ij,j->i", [np.eye(3), np.ones(3)], **kwargs)


def test_operands_of_the_wrong_kind():
    with pytest.raises(ta.InputError, match=r"a dict by tensor name .* or a list"):
        ta.autotune("ij,j->i", np.eye(3))
    with pytest.raises(ta.InputError, match=r"as a string"):
        ta.autotune(3, [np.eye(3)])


def test_an_unreadable_store_counts_as_empty(tmp_path):
    (tmp_path / "tuned-schedules.json").write_text("{not json")
    store = TunedSchedules(tmp_path)
    assert len(store) == 0 and store.get("anything") is None
    store.put("k", Schedule().serial(), {"median_s": 1.0})
    assert TunedSchedules(tmp_path).get("k") == Schedule().serial()


def test_the_tune_command(tuned, tmp_path, capsys):
    import scipy.io

    from tensoralg.cli import main

    path = tmp_path / "m.mtx"
    scipy.io.mmwrite(str(path), sp.random_array((80, 60), density=0.1, random_state=3))
    log = tmp_path / "log.jsonl"
    assert main(["tune", "y(i) = A(i,j) * x(j)", "--tensor", f"A={path}", "-f", "A:csr",
                 "--budget", "1", "--log", str(log)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("autotune y(i) = A(i,j) * x(j):") and "compiler" in out
    assert log.read_text().count("\n") >= 1 and len(tuned) == 1
    assert main(["tune", "y(i) = A(i,j) * x(j)", "--tensor", f"A={tmp_path / 'no.mtx'}"]) == 2
    assert "no such file" in capsys.readouterr().err
    assert main(["tune", "y(i) = A(i,j) * x(j)", "--tensor", f"A={path}", "--budget", "0"]) == 2
