"""Where a training step's time goes: perf samples grouped into GEMM, the other tensor
kernels (elementwise, reductions, optimizers), memory copies, the allocator, thread pools,
the framework (autograd, dispatch, tensor bookkeeping: whatever else runs in Trainyard's or
PyTorch's own code), the Python interpreter and the operating system, for Trainyard and
PyTorch alike (scripts/profile-train.sh).

Arguments: the sampling rate (Hz), the step count, and label=path for each side, the path
holding `perf report -n --stdio --no-children --sort dso,sym` of a run whose samples cover its
timed steps only (TY_PERF_CONTROL in the benches). The table gives milliseconds of CPU per step
and the share of the step per category, side by side. The categories come from symbol and
library names, the same rules for both sides.
"""
import re
import sys

# First match wins. Patterns are tried against "library symbol".
CATEGORIES = [
    ("gemm", r"sgemm|dgemm|gemm_|_kernel_ZEN|_kernel_HASWELL|oncopy|otcopy|itcopy|incopy|"
             r"mkl_blas|brgemm|dnnl|Gemm|Matmul|sgemv"),
    ("memcpy/memset", r"memcpy|memset|memmove"),
    ("allocator", r"malloc|free\b|realloc|calloc|memalign|tcache|unlink_chunk|Allocator|"
                  r"alloc_cpu|c10::alloc|c10::free|CachingHost"),
    ("os kernel", r"^\[kernel|^\[vdso\]"),
    ("python", r"python3|libpython|_PyEval|Py[A-Z_]"),
    ("threads", r"gomp|omp_|Pool::Run|Pool::DoChunks|Pool::WorkerLoop|ThreadPool::|sched_yield"),
    ("kernels", r"trainyard::kernels|at::native|at::vec|Sleef|vml|VectorizedLoop|Vectorized<|"
                r"cpu_kernel|_foreach|^\[JIT\]"),  # [JIT]: oneDNN's generated kernels
    ("framework", r"autograd|Dispatcher|c10::|at::|torch::|std::|trainyard|libtorch"),
]


def categorize(dso, sym):
    text = f"{dso} {sym}"
    for name, pattern in CATEGORIES:
        if re.search(pattern, text):
            return name
    return "other"


def counts(path):
    """Samples per (library, symbol) of one `perf report -n` listing."""
    out = {}
    line_re = re.compile(r"^\s*[\d.]+%\s+(\d+)\s+(.+?)\s+\[.\]\s+(.*)$")  # "[JIT] tid 12" too
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            m = line_re.match(line)
            if m:
                key = (m.group(2), m.group(3).strip())
                out[key] = out.get(key, 0) + int(m.group(1))
    return out


def main():
    # bench/perf_categories.py HZ STEPS label=report ...
    hz, steps = float(sys.argv[1]), int(sys.argv[2])
    tables = []
    for arg in sys.argv[3:]:
        label, path = arg.split("=", 1)
        totals = {}
        for key, n in counts(path).items():
            cat = categorize(*key)
            totals[cat] = totals.get(cat, 0) + n
        tables.append((label, totals))
    names = [name for name, _ in CATEGORIES] + ["other"]
    ms = lambda n: 1e3 * n / hz / steps  # samples -> milliseconds per step
    print(f"{'ms per step (% of it)':24}" + "".join(f"{label:>18}" for label, _ in tables))
    for name in names + ["total"]:
        row = f"{name:24}"
        for _, t in tables:
            whole = sum(t.values()) or 1
            n = whole if name == "total" else t.get(name, 0)
            row += f"{ms(n):10.2f} ({100 * n / whole:4.1f}%)"
        print(row)


if __name__ == "__main__":
    main()
