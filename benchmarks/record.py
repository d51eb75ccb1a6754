"""What every benchmark result file records besides its measurements, and where it goes.

A benchmark script calls ``start()`` when it begins and ``write(script, payload, begun)`` when
it is done: the file ``benchmarks/results/<script>-<YYYYMMDD-HHMMSS>-<commit>.json`` gets the
payload plus the machine (platform, CPU model, cores), the versions of the libraries involved,
the git commit and the files that differed from it, and the UTC date, all as the run began. ``report.py`` renders the
Markdown reports from the latest file of each script.

    >>> name = file_name("run", "20260102-030405", "abc1234")
    >>> name
    'run-20260102-030405-abc1234.json'
    >>> parse_file_name(name)
    ('run', '20260102-030405', 'abc1234')
"""
from __future__ import annotations

import datetime
import json
import os
import platform
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
SCHEMA = 1
# distribution names, as pip knows them; a missing one is recorded as null
DISTRIBUTIONS = ("tensoralg", "numpy", "scipy", "llvmlite", "onnx", "onnxruntime", "sparse",
                 "tensora", "torch", "sparse-dot-mkl", "mkl", "threadpoolctl", "opt_einsum",
                 "pytest", "pytest-timeout")
_NUMBER_LIST = re.compile(r"\[\s*((?:-?[0-9][0-9.eE+-]*,\s*)*-?[0-9][0-9.eE+-]*)\s*\]")
_NAME = re.compile(r"^(?P<script>.+)-(?P<stamp>\d{8}-\d{6})-(?P<commit>[0-9a-f]+|nogit)\.json$")


def file_name(script: str, stamp: str, commit: str) -> str:
    return f"{script}-{stamp}-{commit}.json"


def parse_file_name(name: str) -> tuple[str, str, str] | None:
    """``(script, stamp, commit)`` of a result file's name, or None for another file."""
    match = _NAME.match(name)
    return None if match is None else (match["script"], match["stamp"], match["commit"])


def machine() -> dict[str, Any]:
    """Platform, CPU model and its vector extensions (from /proc/cpuinfo), core count."""
    model, flags = None, set()
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                key, _, value = line.partition(":")
                key = key.strip()
                if key == "model name" and model is None:
                    model = value.strip()
                elif key == "flags" and not flags:
                    flags = set(value.split())
    except OSError:
        pass
    return {
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu_model": model or platform.processor() or None,
        "cpu_vector_flags": sorted(flags & {"avx", "avx2", "fma", "avx512f", "avx512_bf16",
                                            "amx_tile"}),
        "cores": os.cpu_count(),
    }


def versions() -> dict[str, str | None]:
    """Python and the installed version of each library a benchmark may use (None if absent)."""
    found: dict[str, str | None] = {"python": platform.python_version()}
    for name in DISTRIBUTIONS:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = None
    return found


def blas_threadpools() -> list[dict[str, Any]] | str:
    """The BLAS/OpenMP thread pools loaded in this process (threadpoolctl), for the record."""
    try:
        import threadpoolctl
    except ImportError:
        return "threadpoolctl not installed"
    return [{k: pool.get(k) for k in ("user_api", "internal_api", "num_threads", "version",
                                      "architecture")}
            for pool in threadpoolctl.threadpool_info()]


def limit_blas_threads(count: int) -> list[int] | str:
    """Limit NumPy's BLAS to ``count`` threads for the rest of the process; return the thread
    counts it reports, or why it could not be limited."""
    try:
        import threadpoolctl
    except ImportError:
        return "threadpoolctl not installed: NumPy's BLAS keeps its default"
    threadpoolctl.threadpool_limits(limits=count, user_api="blas")   # stays in force
    return [p["num_threads"] for p in threadpoolctl.threadpool_info() if p["user_api"] == "blas"]


def format_time(t: float | None, micro_digits: int = 1) -> str:
    """A duration for the console: ``-``, microseconds, milliseconds or seconds."""
    if t is None:
        return "-"
    if t < 1e-3:
        return f"{t * 1e6:.{micro_digits}f}us"
    if t < 1:
        return f"{t * 1e3:.2f}ms"
    return f"{t:.2f}s"


def provenance() -> str:
    """Today's date, the commit (and whether the tree differs from it), the CPU and its cores:
    the line a generated page opens with."""
    state, host = git_state(), machine()
    return (f"{datetime.date.today().isoformat()}, commit {state['short']}"
            f"{' with local changes' if state['dirty'] else ''}; {host['cpu_model']}, "
            f"{host['cores']} cores")


def git_state(root: Path = HERE.parent) -> dict[str, Any]:
    """The commit checked out in ``root`` and the files that differ from it (read-only git)."""
    def git(*args: str) -> str | None:
        try:
            proc = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True,
                                  timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return proc.stdout if proc.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    if commit is None:
        return {"commit": None, "short": "nogit", "dirty": None, "changed": []}
    status = git("status", "--porcelain", "--untracked-files=normal") or ""
    changed = [line[3:] for line in status.splitlines() if line.strip()]
    return {"commit": commit.strip(), "short": commit.strip()[:7], "dirty": bool(changed),
            "changed": changed[:100]}


def environment_variables() -> dict[str, str | None]:
    """The variables that change what the libraries do (threads, BLAS kernel choice)."""
    names = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS",
             "MKL_NUM_THREADS", "MKL_RT", "TENSORALG_NUM_THREADS", "PYTHONDONTWRITEBYTECODE")
    return {name: os.environ.get(name) for name in names}


def rounded(times: list[float], digits: int = 5) -> list[float]:
    """Times kept to ``digits`` significant digits (timer noise is far above that)."""
    return [float(f"{t:.{digits}g}") for t in times]


def start() -> dict[str, Any]:
    """The date and the git state when a run starts (commits made during a run don't count)."""
    return {"date": datetime.datetime.now(datetime.timezone.utc), "git": git_state()}


def write(script: str, payload: dict[str, Any], begun: dict[str, Any] | None = None,
          out: str | os.PathLike | None = None) -> Path:
    """Write ``payload`` with the machine, versions, commit and date; return the file's path.

    ``begun`` is what ``start()`` returned when the run began (default: now).
    """
    begun = begun or start()
    git = begun["git"]
    record = {
        "schema": SCHEMA,
        "script": script,
        "command": " ".join(["python", f"benchmarks/{Path(sys.argv[0]).name}", *sys.argv[1:]]),
        "date": begun["date"].isoformat(timespec="seconds"),
        "git": git,
        "machine": machine(),
        "versions": versions(),
        "environment": environment_variables(),
        **payload,
    }
    if out is None:
        stamp = begun["date"].strftime("%Y%m%d-%H%M%S")
        path = RESULTS / file_name(script, stamp, git["short"])
    else:
        path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(dumps(record), encoding="utf-8")
    return path


def dumps(record: dict[str, Any]) -> str:
    """Indented JSON with each list of numbers on one line (a file stays small and diffable).

    >>> print(dumps({"times": [1.5, 2.0], "name": "spmv"}), end="")
    {
     "times": [1.5, 2.0],
     "name": "spmv"
    }
    """
    text = json.dumps(record, indent=1, default=_plain)
    return _NUMBER_LIST.sub(lambda m: "[" + " ".join(m.group(1).split()) + "]", text) + "\n"


def _plain(value: Any) -> Any:
    """JSON for NumPy scalars and small objects (dataclasses become dicts)."""
    if hasattr(value, "item"):
        return value.item()
    if hasattr(value, "__dataclass_fields__"):
        return {k: getattr(value, k) for k in value.__dataclass_fields__}
    return str(value)
