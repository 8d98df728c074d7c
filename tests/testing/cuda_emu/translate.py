#!/usr/bin/env python3
"""Rewrites a CUDA source of kernels/cuda for the host compiler (tests/testing/cuda_emu).

Two constructs of CUDA C++ have no host spelling that a header could supply:
  kernel<<<grid, block, smem, stream>>>(args);
      -> ::ty_emu::Launch("kernel", ::ty_emu::Config(grid, block, smem, stream),
                          [=, a = std::make_tuple(args)]() mutable {
                            std::apply([=](auto&... v) { kernel(v...); }, a); });
     (the arguments are evaluated and copied at the launch, as CUDA's are; the kernel runs later,
     on the stream's thread)
  extern __shared__ __align__(16) T name[];
      -> T* const name = reinterpret_cast<T*>(::ty_emu::DynamicShared());
  __shared__ float a[8][32], b[8][32];
      -> the same, then ::ty_emu::FreshShared(&a, sizeof(a)); and so for b, on the same line
         (static shared memory reads as NaN bytes until a thread of the block writes it).
Everything else is left as it is, so line numbers in errors and traces stay those of the source.

usage: translate.py IN.cu OUT.cc
"""
import re
import sys

# A launch: the kernel's name (with template arguments, one level of nesting), the
# configuration and the arguments, up to the statement's end.
LAUNCH = re.compile(
    r"(?P<kernel>[A-Za-z_][\w:]*(?:<(?:[^<>;]|<[^<>;]*>)*>)?)\s*<<<(?P<config>.*?)>>>"
    r"\s*\((?P<args>.*?)\)\s*;",
    re.S)
DYNAMIC_SHARED = re.compile(
    r"extern\s+__shared__\s+(?:__align__\(\s*\d+\s*\)\s+)?(?P<type>[\w:]+(?:\s+[\w:]+)*?)"
    r"\s+(?P<name>\w+)\s*\[\s*\]\s*;")


STATIC_SHARED = re.compile(r"(?<!extern )__shared__[ \t]+(?P<decl>[^;\n]*);")


def declared_names(decl):
    """The names a declaration such as 'float a[8][32], b[4]' declares."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(decl):
        depth += ch in "[(<"
        depth -= ch in "])>"
        if ch == "," and depth == 0:
            parts.append(decl[start:i])
            start = i + 1
    parts.append(decl[start:])
    return [re.findall(r"\w+", p.split("[")[0])[-1] for p in parts]


def rewrite_static_shared(m):
    fresh = " ".join(f"::ty_emu::FreshShared(&{n}, sizeof({n}));"
                     for n in declared_names(m.group("decl")))
    return f"{m.group(0)} {fresh}"


def rewrite_launch(m):
    kernel = m.group("kernel")
    return (f'::ty_emu::Launch("{kernel}", ::ty_emu::Config({m.group("config")}), '
            f'[=, ty_args = ::std::make_tuple({m.group("args")})]() mutable {{ '
            f'::std::apply([=](auto&... ty_v) {{ {kernel}(ty_v...); }}, ty_args); }});')


def rewrite_shared(m):
    t = m.group("type")
    return f"{t}* const {m.group('name')} = reinterpret_cast<{t}*>(::ty_emu::DynamicShared());"


def main():
    src, out = sys.argv[1], sys.argv[2]
    with open(src) as f:
        text = f.read()
    text, launches = LAUNCH.subn(rewrite_launch, text)
    text, shared = DYNAMIC_SHARED.subn(rewrite_shared, text)
    text = STATIC_SHARED.sub(rewrite_static_shared, text)
    if "<<<" in text or "extern __shared__" in text:
        sys.exit(f"translate.py: {src}: a launch or dynamic shared array was not rewritten")
    with open(out, "w") as f:
        f.write(f'#line 1 "{src}"\n' + text)


if __name__ == "__main__":
    main()
