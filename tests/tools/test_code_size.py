#!/usr/bin/env python3
"""The size rules of the codebase (STYLE.md "Size"), checked on every tracked source file:
no source file over 600 lines, and no function over 150 lines outside GPU kernels
(`__global__` / `__device__` functions in .cu/.cuh files and headers they include).

A function is a brace block opened outside any other function whose head (the text since the
previous ';', '{' or '}') has a parameter list and is not a namespace, class, struct, enum,
union, extern "C" block or an initializer. Strings, character literals and comments are
skipped. The check is deliberately simple: it is a guard for the rule, not a C++ parser.
Run from the repository root: python3 tests/tools/test_code_size.py [--list]
"""
import re
import subprocess
import sys

MAX_FILE_LINES = 600
MAX_FUNCTION_LINES = 150
SOURCE_SUFFIXES = (".cpp", ".cc", ".h", ".hpp", ".cu", ".cuh", ".py", ".js", ".mjs", ".sh")
CXX_SUFFIXES = (".cpp", ".cc", ".h", ".hpp", ".cu", ".cuh")
# Generated or third-party-format data that is not code to read (none today).
EXEMPT_FILES = set()

# Applied to a head with its leading `template <...>` removed.
NOT_FUNCTION_HEAD = re.compile(r"^\s*(namespace|class|struct|enum|union)\b|^\s*extern\s+\"\"|=\s*$")
CONTROL_HEAD = re.compile(r"^\s*(if|for|while|switch|catch|do|else|try)\b")
GPU_FUNCTION = re.compile(r"\b(__global__|__device__)\b")


def tracked_sources():
    out = subprocess.run(["git", "ls-files"], capture_output=True, text=True, check=True).stdout
    return [p for p in out.splitlines()
            if p.endswith(SOURCE_SUFFIXES) and not p.startswith(("tests/fixtures/", "node_modules/"))]


def strip_literals(text):
    """The text with comments, strings and char literals blanked (newlines kept)."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("\n" * text.count("\n", i, j))
            i = j
        elif text.startswith('R"', i):
            m = re.match(r'R"([^(\s]*)\(', text[i:])
            if not m:
                out.append(c)
                i += 1
                continue
            end = ")" + m.group(1) + '"'
            j = text.find(end, i + m.end())
            j = n if j < 0 else j + len(end)
            out.append('""' + "\n" * text.count("\n", i, j))
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            out.append(c + c)
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def without_template_prefix(head):
    """The head after its preprocessor lines and a leading `template <...>` (nested brackets)."""
    head = "\n".join(l for l in head.splitlines() if not l.lstrip().startswith("#")).strip()
    while head.startswith("template"):
        depth, i = 0, head.find("<")
        if i < 0:
            return head
        for j in range(i, len(head)):
            depth += {"<": 1, ">": -1}.get(head[j], 0)
            if depth == 0:
                head = head[j + 1:].strip()
                break
        else:
            return head
    return head


def long_functions(path, text):
    """(name, first line, lines) of each function body longer than the limit."""
    code = strip_literals(text)
    found = []
    stack = []  # per open brace: "function", "inside" (a block in a function) or "scope"
    head_start = 0
    line = 1
    starts = []
    for i, c in enumerate(code):
        if c == "\n":
            line += 1
        elif c in ";":
            head_start = i + 1
        elif c == "{":
            head = without_template_prefix(code[head_start:i])
            if any(kind in ("function", "inside") for kind in stack):
                kind = "inside"
            elif ")" in head and not NOT_FUNCTION_HEAD.search(head) and not CONTROL_HEAD.match(head):
                kind = "function"
            else:
                kind = "scope"
            stack.append(kind)
            starts.append((line, head))
            head_start = i + 1
        elif c == "}":
            if stack:
                kind = stack.pop()
                first, head = starts.pop()
                if kind == "function":
                    length = line - first + 1
                    gpu = path.endswith((".cu", ".cuh")) or "kernels/" in path
                    if length > MAX_FUNCTION_LINES and not (gpu and GPU_FUNCTION.search(head)):
                        name = " ".join(head.split())[-90:]
                        found.append((name, first, length))
            head_start = i + 1
    return found


def main():
    problems = []
    for path in tracked_sources():
        if path in EXEMPT_FILES:
            continue
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
        num_lines = text.count("\n") + (0 if text.endswith("\n") or not text else 1)
        if num_lines > MAX_FILE_LINES:
            problems.append(f"{path}: {num_lines} lines (at most {MAX_FILE_LINES})")
        if path.endswith(CXX_SUFFIXES):
            for name, first, length in long_functions(path, text):
                problems.append(f"{path}:{first}: function of {length} lines (at most "
                                f"{MAX_FUNCTION_LINES}): {name}")
    for p in problems:
        print(p)
    if problems:
        print(f"test_code_size: {len(problems)} problem(s)")
        return 1
    print("test_code_size: all files and functions within the size rules")
    return 0


if __name__ == "__main__":
    sys.exit(main())
