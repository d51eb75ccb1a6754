"""benchmarks/report.py renders the right numbers from a small hand-made result file."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))
import record  # noqa: E402
import report  # noqa: E402

# words a repository hook refuses in the reports (history belongs in git, not in them)
FORBIDDEN = re.compile(r"\b(sessions?|set [a-h])\b", re.IGNORECASE)


def sample(*times: float) -> dict:
    return {"number": 1, "times": list(times)}


def run_fixture(scale: float = 1.0) -> dict:
    """Two SpMV rows (ratios 2 and 0.5 against scipy), one WRONG row, one bad baseline."""
    return {
        "schema": 1, "script": "run", "command": "python benchmarks/run.py --threads 1",
        "date": "2026-01-02T03:04:05+00:00",
        "git": {"commit": "abc1234" + "0" * 33, "short": "abc1234", "dirty": False,
                "changed": []},
        "machine": {"platform": "Linux-test", "cpu_model": "Test CPU", "cores": 2,
                    "cpu_vector_flags": ["avx2"]},
        "versions": {"python": "3.11.7", "tensoralg": "0.1.0", "torch": None},
        "environment": {}, "seed": 0, "threads": {"requested": 1, "tensoralg": 1},
        "columns": ["tensoralg", "scipy", "torch"], "elapsed_s": 12.0,
        "method": {"budget_s": 0.2, "samples": 3, "min_samples": 3},
        "measurements": [
            {"kernel": "spmv", "data": "m1", "shape": [10, 10], "nnz": 20, "status": "ok",
             "tensoralg": sample(1e-4 * scale, 2e-4 * scale, 3e-4 * scale),
             "baselines": {"scipy": sample(4e-4, 4e-4, 5e-4),
                           "torch": sample(8e-4, 8e-4, 8e-4)}},
            {"kernel": "spmv", "data": "m2", "shape": [5, 7], "nnz": 9, "status": "ok",
             "tensoralg": sample(1e-3, 1e-3, 1e-3),
             "baselines": {"scipy": sample(5e-4, 5e-4, 5e-4),
                           "torch": dict(sample(1e-4, 1e-4, 1e-4), bad=True)}},
            {"kernel": "spmv", "data": "m3", "shape": [3, 3], "nnz": 3, "status": "WRONG",
             "tensoralg": sample(1e-3, 1e-3, 1e-3),
             "baselines": {"scipy": sample(9.0, 9.0, 9.0), "torch": {"skip": "no API"}}},
            {"kernel": "spgemm", "data": "m1", "shape": [10, 10], "nnz": 20, "status": "ok",
             "tensoralg": sample(2e-3, 2e-3, 2e-3),
             "baselines": {"scipy": sample(3e-3, 3e-3, 3e-3), "torch": {"skip": "no API"}}},
        ],
        "compile": {"spmv": {"first_call_s": 0.1, "warm_s": 2e-4, "compile_s": 0.0998,
                             "kernels_compiled": 1, "on": "m1"}},
        "probes": {},
    }


def onnx_row(model: str, batch: int, ort1: list, l3: list, ort0: list, ln: list) -> dict:
    return {"model": model, "batch": batch, "prune": 0.0, "wrong": [], "compile_s": 1.5,
            "samples": {"L3": l3, "ort1": ort1, "LN": ln, "ort0": ort0}}


def onnx_fixture() -> dict:
    dense = [onnx_row("mlp", 1, [2e-3, 4e-3, 6e-3], [1e-3, 2e-3, 3e-3],
                      [3e-3, 3e-3, 3e-3], [1e-3, 1.5e-3, 3e-3]),
             onnx_row("fm", 1, [8e-3, 8e-3, 8e-3], [1e-3, 1e-3, 1e-3],
                      [1e-3, 1e-3, 1e-3], [1e-3, 1e-3, 1e-3])]
    pruned = [dict(onnx_row("mlp", 1, [1e-3] * 3, [1e-3] * 3, [1e-3] * 3, [1e-3] * 3),
                   prune=0.9, wrong=["L3"])]
    return {"schema": 1, "script": "onnx_models", "command": "python benchmarks/onnx_models.py",
            "date": "2026-01-02T03:04:05+00:00",
            "git": {"short": "abc1234", "dirty": True, "changed": ["x.py"]},
            "machine": {"cpu_model": "Test CPU", "cores": 2}, "versions": {}, "seed": 1,
            "threads": {}, "method": {"rounds": 3, "budget_s": 0.25}, "elapsed_s": 5.0,
            "runs": [{"dense": dense, "pruned": pruned}]}


def write(folder: Path, script: str, stamp: str, data: dict) -> Path:
    path = folder / record.file_name(script, stamp, "abc1234")
    path.write_text(record.dumps(data))
    return path


def table_row(text: str, first_cell: str) -> list[str]:
    """The cells of the first Markdown table row that starts with ``first_cell``."""
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and cells[0] == first_cell:
            return cells
    raise AssertionError(f"no table row starting with {first_cell!r}")


def section(text: str, heading: str) -> str:
    start = text.index(heading)
    end = text.find("\n## ", start + 1)
    return text[start:end if end >= 0 else None]


@pytest.fixture
def rendered(tmp_path):
    results = tmp_path / "results"
    results.mkdir()
    write(results, "run", "20260101-000000", run_fixture(scale=10.0))    # older: not used
    write(results, "run", "20260102-030405", run_fixture())
    write(results, "onnx_models", "20260102-030405", onnx_fixture())
    out = tmp_path / "out"
    assert report.main(["--results", str(results), "--out", str(out), "--no-plots"]) == 0
    return out


def test_kernel_tables_show_medians_ratios_and_geomeans(rendered):
    text = (rendered / "RESULTS.md").read_text()
    assert "commit `abc1234`" in text and "20260102-030405" in text
    spmv = section(text, "## SpMV")
    # m1: tensoralg median 200 µs (IQR 150-250 µs: ±25%), scipy 400 µs -> 2.00, torch 4.00
    assert table_row(spmv, "m1") == ["m1", "10x10", "20", "200 µs", "2.00", "4.00", "ok"]
    assert table_row(spmv.split("Median times")[1], "m1") == [
        "m1", "200 µs ±25%", "400 µs ±6%", "800 µs ±0%"]
    # m2: scipy 0.50; torch disagreed with scipy: shown, marked, left out of the geomean
    assert table_row(spmv, "m2")[4:6] == ["0.50", "0.10 (bad)"]
    assert table_row(spmv, "m3")[4:] == ["9000", "no API", "WRONG"]
    summary = section(text, "## Summary")
    # geomeans over ok rows only: scipy sqrt(2 * 0.5) = 1; torch 4 (m2 bad, m3 WRONG)
    assert table_row(summary, "`spmv`") == ["`spmv`", "1.00 (2)", "4.00 (1)"]
    assert table_row(summary, "`spgemm`") == ["`spgemm`", "1.50 (1)", "-"]
    assert table_row(summary, "all")[1] == f"{(2 * 0.5 * 1.5) ** (1 / 3):.2f} (3)"
    assert "## Problems" in text and "spmv on m3: WRONG" in text
    assert not FORBIDDEN.search(text)


def test_onnx_tables_pair_the_rounds(rendered):
    text = (rendered / "ONNX_RESULTS.md").read_text()
    dense = section(text, "## Dense models")
    cells = table_row(dense, "mlp")
    # L3 median 2 ms; ort1 / L3 per round: 2, 2, 2; ortN / LN per round: 3, 2, 1
    assert cells[5] == "2.000 ±25%" and cells[7] == "4.000 ±25%"
    assert cells[9:11] == ["2.00 ±0%", "2.00 ±25%"]
    assert table_row(dense, "fm")[9] == "8.00 ±0%"
    summary = section(text, "## Summary")
    assert table_row(summary, "dense") == ["dense", "1", "4.00", f"{2 ** 0.5:.2f}"]
    pruned = section(text, "## 90%-pruned")
    assert table_row(pruned, "mlp")[3] == "WRONG"
    assert table_row(summary, "90% pruned")[2] == "-"       # the WRONG level is not a ratio
    assert not FORBIDDEN.search(text)


def test_plots_are_written_and_linked(tmp_path):
    pytest.importorskip("matplotlib")
    results = tmp_path / "results"
    results.mkdir()
    write(results, "run", "20260102-030405", run_fixture())
    write(results, "onnx_models", "20260102-030405", onnx_fixture())
    report.main(["--results", str(results), "--out", str(tmp_path)])
    text = (tmp_path / "RESULTS.md").read_text()
    for name in ("results-geomean.png", "results-per-matrix.png"):
        assert f"]({name})" in text
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "](onnx-results.png)" in (tmp_path / "ONNX_RESULTS.md").read_text()


def test_latest_picks_the_newest_file_of_each_script(tmp_path):
    for stamp in ("20250101-000000", "20260301-000000", "20251231-235959"):
        write(tmp_path, "run", stamp, {})
    write(tmp_path, "run_other", "20270101-000000", {})
    (tmp_path / "run-notes.json").write_text("{}")
    assert report.latest(tmp_path, "run").name == "run-20260301-000000-abc1234.json"
    assert report.latest(tmp_path, "onnx_models") is None


def test_result_files_keep_numbers_on_one_line(tmp_path):
    path = write(tmp_path, "run", "20260102-030405", run_fixture())
    assert "[0.0004, 0.0004, 0.0005]" in path.read_text()
    assert json.loads(path.read_text()) == run_fixture()


# ---------------------------------------------------------------------------------------------
# overhead.py: fixed costs and the targets table


def process(first_call_s: float, compiles: int = 1, llvm: bool = True,
            optimised_s: float | None = None) -> dict:
    record = {"import_s": 0.5, "first_call_s": first_call_s, "compiles": compiles,
              "llvm_loaded": llvm, "ok": True}
    return record if optimised_s is None else {**record, "optimised_s": optimised_s}


def overhead_fixture() -> dict:
    """Per-call cost (einsum exactly 2x scipy: holds; kernel 1.6x: does not), first calls
    (spmv within 60 ms, gemm not; both hits within 5 ms, one process that missed the cache),
    routes (1.05 holds; 1.20 and 0.85 do not; one WRONG), dense GEMM (1.05 holds, 1.20 does
    not)."""
    return {
        "schema": 1, "script": "overhead", "command": "python benchmarks/overhead.py",
        "date": "2026-01-02T04:05:06+00:00",
        "git": {"commit": "def5678" + "0" * 33, "short": "def5678", "dirty": False,
                "changed": []},
        "machine": {"cpu_model": "Test CPU", "cores": 2}, "versions": {"python": "3.11.7"},
        "environment": {"OPENBLAS_CORETYPE": "Haswell"}, "seed": 0,
        "threads": {"requested": 2, "tensoralg": 2, "scipy": 1, "blas": [2]},
        "method": {"budget_s": 0.2, "gemm_budget_s": 0.6, "samples": 3, "min_samples": 3,
                   "processes": 3},
        "elapsed_s": 30.0,
        "blas_threadpools": [{"user_api": "blas", "internal_api": "openblas",
                              "num_threads": 2, "version": "0.3.31", "architecture": "Haswell"}],
        "dispatch": {"shape": [100, 100], "nnz": 500, "density": 0.05, "status": "ok",
                     "samples": {"scipy": sample(4e-6, 4e-6, 4e-6),
                                 "einsum": sample(7e-6, 8e-6, 9e-6),
                                 "kernel": sample(6.4e-6, 6.4e-6, 6.4e-6),
                                 "bound": sample(2e-6, 2e-6, 2e-6)}},
        "first_call": {
            "processes": 3, "sizes": {"n": 100, "density": 0.05, "columns": 16, "tensor": 30,
                                      "tensor_nnz": 800, "gemm": 64},
            "kernels": {
                "spmv": {"statement": "y(i) = A(i,j) * x(j)", "formats": {"A": "csr"},
                         "cold": [process(0.04, optimised_s=0.12),
                                  process(0.05, optimised_s=0.2),
                                  process(0.09, optimised_s=0.15)],
                         "hit": [process(0.002, 0, False), process(0.003, 0, False),
                                 process(0.2, 1, True)]},
                "gemm": {"statement": "C(i,j) = A(i,k) * B(k,j)", "formats": {},
                         "cold": [process(0.5), process(0.7), {"error": "boom"}],
                         "hit": [process(0.004, 0, True)] * 3}},
            "warm": [{"compiles": 2, "linked": 0}, {"compiles": 0, "linked": 2}]},
        "routes": [
            {"kernel": "spmv", "subscripts": "ij,j->i", "shape": [20, 20], "nnz": 40,
             "rank": None, "status": "ok", "einsum": sample(1.05e-3, 1.05e-3, 1.05e-3),
             "compiled": sample(1e-3, 1e-3, 1e-3)},
            {"kernel": "mttkrp", "subscripts": "ijk,jr,kr->ir", "shape": [10, 20, 30],
             "nnz": 100, "rank": 32, "status": "ok", "einsum": sample(1.2e-3, 1.2e-3, 1.2e-3),
             "compiled": sample(1e-3, 1e-3, 1e-3)},
            {"kernel": "add", "subscripts": "-", "shape": [20, 20], "nnz": 40, "rank": None,
             "status": "ok", "einsum": sample(0.85e-3, 0.85e-3, 0.85e-3),
             "compiled": sample(1e-3, 1e-3, 1e-3)},
            {"kernel": "sddmm", "subscripts": "ij,ik,kj->ij", "shape": [20, 20], "nnz": 40,
             "rank": 32, "status": "WRONG einsum", "einsum": sample(1e-3, 1e-3, 1e-3),
             "compiled": sample(1e-3, 1e-3, 1e-3)}],
        "gemm": [
            {"n": 1024, "dtype": "float64", "status": "ok",
             "tensoralg": sample(0.0105, 0.0105, 0.0105), "numpy": sample(0.01, 0.01, 0.01),
             "generated": sample(0.026, 0.026, 0.026)},
            {"n": 1024, "dtype": "float32", "status": "ok",
             "tensoralg": sample(0.012, 0.012, 0.012), "numpy": sample(0.01, 0.01, 0.01)}],
        "problems": [],
    }


@pytest.fixture
def rendered_overhead(tmp_path, monkeypatch):
    monkeypatch.setattr(report, "TARGET_NOTES", {"spgemm vs scipy": "a note kept by hand",
                                                 "einsum call vs scipy, small SpMV": "unused"})
    results = tmp_path / "results"
    results.mkdir()
    run = run_fixture()      # plus tensora, faster than tensoralg on m1 (ratio 0.5)
    run["columns"].append("tensora")
    for row, entry in zip(run["measurements"], (sample(1e-4, 1e-4, 1e-4), {"skip": "x"},
                                                {"skip": "x"}, {"skip": "no kernel"})):
        row["baselines"]["tensora"] = entry
    write(results, "run", "20260102-030405", run)
    older = overhead_fixture()
    older["dispatch"]["samples"]["kernel"] = sample(1e-6, 1e-6, 1e-6)
    write(results, "overhead", "20260101-000000", older)          # older: not used
    write(results, "overhead", "20260102-040506", overhead_fixture())
    out = tmp_path / "out"
    assert report.main(["--results", str(results), "--out", str(out), "--no-plots"]) == 0
    return (out / "RESULTS.md").read_text()


def test_overhead_tables_show_medians_spreads_and_ratios(rendered_overhead):
    text = rendered_overhead
    assert text.index("## SpMV") < text.index("## Fixed costs") < text.index("## Targets")
    assert text.index("## Targets") < text.index("## Problems")     # run.py's WRONG row
    fixed = section(text, "## Fixed costs")
    assert "commit `def5678`" in fixed and "overhead-20260102-040506-abc1234.json" in fixed
    # einsum: median 8 µs, IQR 7.5-8.5 µs (±6%), 2.00 x scipy's 4 µs
    assert table_row(fixed, '`ta.einsum("ij,j->i", A, x)`')[1:] == ["8.00 µs", "±6%", "2.00"]
    assert table_row(fixed, "compiled kernel `k(A=A, x=x)`")[3] == "1.60"
    assert table_row(fixed, "bound call `k.bind(A=A, x=x)()`")[3] == "0.50"
    # first calls: spmv cold 40/50/90 ms -> 50 ms, IQR 45-70 (±25%); hits: the process that
    # compiled is not a hit, 2 of 3 counted (2.5 ms), both without LLVM; the optimised code
    # in place after 120/200/150 ms -> 150 (a run from before quick builds says nothing: -)
    assert table_row(fixed, "`spmv`")[3:] == ["50.0 ms ±25%", "150 ms", "3 of 3",
                                              "2.50 ms ±10%", "2 of 3", "2 of 2"]
    assert table_row(fixed, "`gemm`")[2:] == ["all dense", "600 ms ±8%", "-", "2 of 3",
                                              "4.00 ms ±0%", "3 of 3", "0 of 3"]
    assert "left 2 linked shared object(s)" in fixed
    routes = section(text, "### The einsum route")
    assert table_row(routes, "`spmv`")[5:] == ["1.05", "ok"]
    assert table_row(routes, "`mttkrp`")[2] == "10x20x30 CSF, nnz 100, rank 32"
    gemm = section(text, "### Dense GEMM")
    assert "openblas 0.3.31, kernel Haswell, 2 thread(s)" in gemm
    assert "`OPENBLAS_CORETYPE=Haswell`" in gemm
    # 2 * 1024^3 flops in 10.5 ms: 204.5 GFLOP/s; the generated GEMM's 26 ms: 82.6
    assert table_row(gemm, "1024^3")[5:10] == ["1.05", "2.60", "204.5", "82.6", "214.7"]
    float32 = [line for line in gemm.splitlines() if "| float32 |" in line]
    assert [c.strip() for c in float32[0].split("|")][7] == "-"   # no generated time: no ratio
    assert not FORBIDDEN.search(text)


def test_targets_hold_or_not_from_the_numbers(rendered_overhead):
    targets = section(rendered_overhead, "## Targets")

    def verdict(name):
        cells = table_row(targets, name)
        return cells[2], cells[3], cells[4]

    # kernels, from run.py: spmv geomean scipy/tensoralg 1.0 -> tensoralg/scipy 1.00 > 0.50
    assert verdict("spmv vs scipy") == ("1.00 (2 rows)", "does not hold", "")
    # spgemm: 1 / 1.5 = 0.667 > 0.6, with the hand-kept note
    assert verdict("spgemm vs scipy") == ("0.667 (1 rows)", "does not hold",
                                          "a note kept by hand")
    # spmv: tensoralg / torch 0.25 (m2's torch is bad), tensoralg / tensora 2.0: the fastest
    # other system is tensora
    assert verdict("spmv vs fastest other system") == ("2.00 (tensora)", "does not hold", "")
    assert verdict("spgemm vs fastest other system") == ("-", "not measured", "")
    assert verdict("mttkrp vs scipy") == ("-", "not measured", "")
    # fixed costs, from overhead.py
    assert verdict("einsum call vs scipy, small SpMV") == ("2.00", "holds", "")
    assert verdict("kernel call vs scipy, small SpMV") == ("1.60", "does not hold", "")
    assert verdict("first call, new process, empty cache") == (
        "slowest 600 ms (`gemm`); 1 of 2 kernels within", "does not hold", "")
    assert verdict("first call, new process, cache hit") == (
        "slowest 4.00 ms (`gemm`); 2 of 2 kernels within", "holds", "")
    assert verdict("einsum vs compiled kernel, spmv") == ("1.05", "holds", "")
    assert verdict("einsum vs compiled kernel, mttkrp") == ("1.20", "does not hold", "")
    assert verdict("einsum vs compiled kernel, add") == ("0.850", "does not hold", "")
    assert verdict("einsum vs compiled kernel, sddmm") == ("WRONG einsum", "does not hold", "")
    assert verdict("dense GEMM 1024^3 float64") == ("1.05", "holds", "")
    assert verdict("dense GEMM 1024^3 float32") == ("1.20", "does not hold", "")
    assert "4 of 13 measured targets hold; 11 not measured." in targets
    # a value just past a goal is not printed as the goal itself
    assert report.fmt_value(1.1012, 0.9, 1.1) == "1.101" and report.fmt_value(1.1012) == "1.10"


def test_targets_without_a_kernel_run(tmp_path):
    results = tmp_path / "results"
    results.mkdir()
    write(results, "overhead", "20260102-040506", overhead_fixture())
    assert report.main(["--results", str(results), "--out", str(tmp_path), "--no-plots"]) == 0
    text = (tmp_path / "RESULTS.md").read_text()
    assert "No `run.py` result file" in text and "## SpMV" not in text
    targets = section(text, "## Targets")
    assert table_row(targets, "sddmm vs scipy")[3] == "not measured"
    assert table_row(targets, "dense GEMM 1024^3 float64")[3] == "holds"


def test_overhead_script_writes_what_the_report_reads(tmp_path):
    """``overhead.py --quick --only dispatch`` end to end (about a second): its JSON renders,
    and both per-call targets get a verdict. No assertion on the times themselves."""
    results = tmp_path / "results"
    path = results / record.file_name("overhead", "20260102-040506", "abc1234")
    proc = subprocess.run([sys.executable, str(BENCHMARKS / "overhead.py"), "--quick",
                           "--only", "dispatch", "--threads", "1", "--out", str(path)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads(path.read_text())
    assert data["script"] == "overhead" and data["dispatch"]["status"] == "ok"
    assert set(data["dispatch"]["samples"]) == {"scipy", "einsum", "kernel", "bound"}
    assert data["threads"]["tensoralg"] == 1 and "blas_threadpools" in data
    assert report.main(["--results", str(results), "--out", str(tmp_path), "--no-plots"]) == 0
    targets = section((tmp_path / "RESULTS.md").read_text(), "## Targets")
    for name in ("einsum call vs scipy, small SpMV", "kernel call vs scipy, small SpMV"):
        assert table_row(targets, name)[3] in ("holds", "does not hold")


# ---------------------------------------------------------------------------------------------
# einsum_suites.py: the libraries' einsum tests with ta.einsum in place of their einsum


def suites_fixture() -> dict:
    """numpy: 4 counted (2 pass, a wrong number, a refusal); opt_einsum: 6 counted, all pass;
    sparse: not installed."""
    wrong_call = ("numpy.einsum('ij,jk->ik', ndarray(3, 3) int64, ndarray(3, 3) int64, "
                  "out=ndarray(3, 3) int64): out: 3 of 9 values differ, e.g. 0 for 15")
    return {
        "schema": 1, "script": "einsum_suites", "command": "python benchmarks/einsum_suites.py",
        "date": "2026-01-02T05:06:07+00:00",
        "git": {"short": "abc1234", "dirty": False, "changed": []},
        "machine": {"cpu_model": "Test CPU", "cores": 2}, "versions": {},
        "method": {"timeout_s": 60.0}, "elapsed_s": 50.0,
        "suites": {
            "numpy": {
                "tests": 6, "counted": 4,
                "left_out": {"no call of the replaced function": 1,
                             "skipped with the original": 1},
                "outcomes": {"passed": 2, "failed": 1, "error": 1, "timeout": 0, "missing": 0},
                "kinds": {"wrong number": 1, "refusal": 1, "no error raised": 0,
                          "precision": 0, "assertion": 0, "timeout": 0, "other": 0},
                "categories": [
                    {"kind": "refusal", "category": "UnsupportedError: dtype <dtype> is not "
                     "supported", "count": 1, "examples": ["t.py::test_dtypes"]},
                    {"kind": "wrong number", "category": "AssertionError: Arrays are not equal",
                     "count": 1, "examples": ["t.py::test_overlap"]}],
                "wrong_numbers": [{"test": "t.py::test_overlap", "calls": [wrong_call],
                                   "failure": "AssertionError: Arrays are not equal"}],
                "dtype_differences": []},
            "opt_einsum": {
                "tests": 6, "counted": 6, "left_out": {},
                "outcomes": {"passed": 6, "failed": 0, "error": 0, "timeout": 0, "missing": 0},
                "kinds": {"wrong number": 0, "refusal": 0, "no error raised": 0,
                          "precision": 0, "assertion": 0, "timeout": 0, "other": 0},
                "categories": [], "wrong_numbers": [], "dtype_differences": []},
            "sparse": {"skipped": "sparse is not installed"}},
    }


def render_with(tmp_path: Path, **files: dict) -> str:
    """RESULTS.md as the report renders it from ``run_fixture()`` and ``files`` (script name:
    its result file's data)."""
    results = tmp_path / "results"
    results.mkdir()
    write(results, "run", "20260102-030405", run_fixture())
    for k, (script, data) in enumerate(files.items()):
        write(results, script, f"20260102-0{5 + k}0607", data)
    assert report.main(["--results", str(results), "--out", str(tmp_path), "--no-plots"]) == 0
    return (tmp_path / "RESULTS.md").read_text()


def test_einsum_suites_section_counts_and_lists_wrong_numbers(tmp_path):
    text = render_with(tmp_path, einsum_suites=suites_fixture())
    assert text.index("## Targets") < text.index("## Einsum drop-in") < text.index("## Problems")
    suites = section(text, "## Einsum drop-in")
    assert "einsum_suites-20260102-050607-abc1234.json" in suites
    assert table_row(suites, "NumPy `test_einsum.py`")[1:] == ["4", "2", "1", "1", "0",
                                                               "50.0%", "1"]
    # 8 of 10 counted tests pass: below 95%, and a wrong number
    assert table_row(suites, "all")[1:] == ["10", "8", "1", "1", "0", "80.0%", "1"]
    assert "**does not hold** (80.0% pass, 1 test(s) with a wrong number)" in suites
    assert "not counted: 1 no call of the replaced function, 1 skipped with the original" in suites
    assert "pydata sparse `test_einsum.py`: not run (sparse is not installed)" in suites
    kinds = section(text, "### Kinds of failure")
    assert table_row(kinds, "NumPy `test_einsum.py`")[1:3] == ["1", "1"]
    categories = section(text, "### Failure categories")
    # equal counts: the worse kind first
    rows = [line for line in categories.splitlines() if line.startswith("| 1 |")]
    assert [row.split(" | ")[2] for row in rows] == ["wrong number", "refusal"]
    assert "`UnsupportedError: dtype <dtype> is not supported`" in rows[1]
    wrong = section(text, "### Wrong numbers")
    assert "`t.py::test_overlap`" in wrong and "out: 3 of 9 values differ" in wrong
    detail = (tmp_path / "EINSUM_SUITES.md").read_text()
    assert detail.startswith("# Einsum drop-in") and "test_overlap" in detail
    assert not FORBIDDEN.search(text + detail)


def test_einsum_suites_alone_render_without_kernel_files(tmp_path):
    results = tmp_path / "results"
    results.mkdir()
    data = suites_fixture()
    data["suites"]["numpy"].update(wrong_numbers=[], kinds=dict(
        data["suites"]["numpy"]["kinds"], **{"wrong number": 0}))
    write(results, "einsum_suites", "20260102-050607", data)
    assert report.main(["--results", str(results), "--out", str(tmp_path), "--no-plots"]) == 0
    text = (tmp_path / "RESULTS.md").read_text()
    assert "No `run.py` result file" in text
    assert "No call returned a number different from the original function's." in text


def generated_fixture() -> dict:
    """run.py --generated: SpMV on two inputs in two dtypes, the large one with its bytes."""
    data = run_fixture()
    data.update(script="generated", command="python benchmarks/run.py --generated",
                options={"dtypes": ["float64", "float32"], "generated": True},
                columns=["tensoralg", "scipy", "mkl"],
                probes={"read_bandwidth_bytes_s": 1e10})
    data["method"] = dict(data["method"], rank={"spmm": 32, "sddmm": 32, "mttkrp": 16})

    def row(name, dtype, ours, scipy, mkl, **extra):
        return {"kernel": "spmv", "data": name, "dtype": dtype, "shape": [8, 8], "nnz": 10,
                "status": "ok", "tensoralg": sample(ours, ours, ours),
                "baselines": {"scipy": sample(scipy, scipy, scipy),
                              "mkl": sample(mkl, mkl, mkl)}, **extra}

    data["measurements"] = [
        row("power-law-2e4", "float64", 1e-3, 4e-3, 2e-3),    # 0.25 of scipy, 0.5 of MKL
        row("power-law-2e4", "float32", 2e-3, 4e-3, 1e-3),    # 0.5 (goal 0.40), 2.0 of MKL
        row("uniform-1e6", "float64", 1e-3, 4e-3, 2e-3, matrix_bytes=5e6),   # 5 GB/s: 50%
        row("uniform-1e6", "float32", 1e-3, 4e-3, 2e-3, matrix_bytes=3e6),   # 30%
    ]
    return data


def test_generated_inputs_get_a_section_and_their_targets(tmp_path):
    text = render_with(tmp_path, generated=generated_fixture())
    generated = section(text, "## Generated inputs")
    assert "SpMM with 32 dense columns" in generated and "### float32" in generated
    assert "5.0 GB/s in float64 (50%), 3.0 GB/s in float32 (30%)" in generated
    targets = section(text, "## Targets")
    # the power-law SpMV's own goal (0.40): float32 misses it, so the row does not hold
    assert table_row(targets, "spmv power-law-2e4 vs scipy")[1:4] == [
        "tensoralg / scipy.sparse <= 0.40", "float64 0.250, float32 0.500", "does not hold"]
    assert table_row(targets, "spmv uniform-1e6 vs scipy")[2:4] == [
        "float64 0.250, float32 0.250", "holds"]
    assert table_row(targets, "spmv power-law-2e4 vs fastest other system")[2:4] == [
        "float64 0.500 (mkl), float32 2.00 (mkl)", "does not hold"]
    assert table_row(targets, "spmv uniform-1e6, share of the read bandwidth")[2:4] == [
        "float64 50%, float32 30%", "does not hold"]
    assert not FORBIDDEN.search(generated)
