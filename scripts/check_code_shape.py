#!/usr/bin/env python3
"""The house limits on the C++ and CUDA sources git tracks (../shared/STYLE.md asks for less:
files under 500 lines, functions under 40): no file over 1,000 lines, no function over 80, and
nothing clang-format (.clang-format) would change. Exits 1 naming every breach.

usage: check_code_shape.py [--no-format] [REPO_DIR] | --self-test

A function is a brace block opened at namespace or class level after a parameter list; its
length runs from the line its signature starts on to its closing brace. Lambdas and blocks
inside count towards the function around them.
"""
import os
import re
import shutil
import subprocess
import sys

MAX_FILE_LINES = 1000
MAX_FUNCTION_LINES = 80
SOURCE = re.compile(r"\.(cc|h|cu|cuh)$")


def strip(text):
    """`text` with comments, string and character literals blanked; newlines kept."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == "R" and text.startswith('R"', i) and (i == 0 or not text[i - 1].isalnum()):
            m = re.match(r'R"([^(\s]*)\(', text[i:])
            end = text.find(")" + m.group(1) + '"', i) if m else -1
            j = n if end < 0 else end + len(m.group(1)) + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c in "\"'" and not (c == "'" and i > 0 and text[i - 1].isalnum()):
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            out.append(c + " " * (min(j, n) - i - 1) + (c if j < n else ""))
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def block_kind(head):
    """What a brace opened after `head` (the text since the last ; { or }) starts."""
    h = " ".join(head.split())
    if re.search(r"\bnamespace\b|\bextern\s*\"", h) or h.startswith('extern "'):
        return "scope"
    if re.search(r"\b(class|struct|union)\b", h) and "(" not in h.split(":")[0]:
        return "scope"
    if re.search(r"\benum\b", h) or ("=" in h.split("(")[0] and "operator" not in h):
        return "other"
    if re.search(r"\)\s*(const|override|final|noexcept|mutable|->[^{]*|:.*|\s)*$", h) and "(" in h:
        if re.match(r"^(if|for|while|switch|catch|do|else)\b", h):
            return "other"
        return "function"
    return "other"


def functions(text):
    """(name, first line, length) of every function in C++ source `text`."""
    s = strip(text)
    stack = []  # kinds of the open blocks
    found, head_start = [], 0
    for i, c in enumerate(s):
        if c in ";":
            head_start = i + 1
        elif c == "{":
            inside_scope = all(k == "scope" for k in stack)
            kind = block_kind(s[head_start:i]) if inside_scope else "other"
            if kind == "function":
                head = s[head_start:i]
                label = re.match(r"\s*(?:(?:public|private|protected)\s*:(?!:)\s*)*", head)
                first = head_start + label.end()
                name = re.findall(r"(operator\s*[^\s(]+|[~\w:]+)\s*\(", head)
                stack.append(("function", s.count("\n", 0, first) + 1, name[0] if name else "?"))
            else:
                stack.append(kind)
            head_start = i + 1
        elif c == "}":
            if stack:
                top = stack.pop()
                if isinstance(top, tuple):
                    last = s.count("\n", 0, i) + 1
                    found.append((top[2], top[1], last - top[1] + 1))
            head_start = i + 1
    return found


def tracked_sources(repo):
    """The sources git tracks; outside a git checkout, every source below `repo` but build*/."""
    r = subprocess.run(["git", "-C", repo, "ls-files"], capture_output=True, text=True)
    if r.returncode == 0:
        files = r.stdout.split()
    else:
        files = [os.path.relpath(os.path.join(d, f), repo)
                 for d, dirs, names in os.walk(repo)
                 for f in names
                 if not os.path.relpath(d, repo).startswith(("build", ".", "data"))]
    return sorted(f for f in files if SOURCE.search(f))


def self_test():
    """The counting rules, on samples: what the guard would miss if they broke."""
    body = "\n".join("  x += %d;" % i for i in range(79))
    long_fn = "namespace a {\nint F(int x) {\n" + body + "\n  return x;\n}\n}  // namespace a\n"
    assert functions(long_fn) == [("F", 2, 82)], functions(long_fn)
    sample = (
        "class C {\n public:\n  int G() const { return 1; }\n"
        "  void H(int y) {\n    if (y) {\n      auto f = [&](int z) { return z; };\n    }\n  }\n};\n"
        "const char* s = \"not { a block\";  // nor { this\n"
        "bool operator==(const C& a, const C& b) {\n  return true;\n}\n"
        "enum class E { kA, kB };\n"
        "TEST_F(Suite, Case) {\n  EXPECT_TRUE(true);\n}\n")
    got = functions(sample)
    assert got == [("G", 3, 1), ("H", 4, 5), ("operator==", 11, 3), ("TEST_F", 15, 3)], got
    print("self-test passed")
    return 0


def main(argv):
    if "--self-test" in argv:
        return self_test()
    check_format = "--no-format" not in argv
    args = [a for a in argv if a != "--no-format"]
    repo = os.path.abspath(args[0] if args else os.path.join(os.path.dirname(__file__), ".."))
    problems = []
    sources = tracked_sources(repo)
    for rel in sources:
        text = open(os.path.join(repo, rel), encoding="utf-8", errors="replace").read()
        lines = text.count("\n")
        if lines > MAX_FILE_LINES:
            problems.append(f"{rel}: {lines} lines; a file has at most {MAX_FILE_LINES}: split it "
                            "along its concepts")
        for name, first, length in functions(text):
            if length > MAX_FUNCTION_LINES:
                problems.append(f"{rel}:{first}: {name} is {length} lines; a function has at most "
                                f"{MAX_FUNCTION_LINES}: split it")
    if check_format:
        clang_format = shutil.which("clang-format")
        if clang_format is None:
            problems.append("clang-format is not installed (apt-get install clang-format)")
        else:
            for rel in sources:
                r = subprocess.run([clang_format, "--dry-run", "--Werror", rel], cwd=repo,
                                   capture_output=True, text=True)
                if r.returncode != 0:
                    problems.append(f"{rel}: clang-format would change it; run "
                                    f"clang-format -i {rel}")
    for p in problems:
        print(p)
    print(f"{len(sources)} files checked: {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
