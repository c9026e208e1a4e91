#!/usr/bin/env python3
"""Runs the commands README.md and every docs/*.md page show and compares what they print with what the page
says they print.

A command is a line starting with "$ " inside a fenced code block; its output is the lines after it up to the
next command or the end of the block. A line "..." in the shown output stands for any number of lines the
page leaves out. Commands run in the repository root, README.md first and then the docs/ pages in name order,
each page's in page order (a later command may read a file an earlier one of the same page wrote), with
./build/ replaced by --build-dir, in a scratch folder that links to the repository's top-level entries (so
nothing a command writes lands in the worktree). Commands whose program is not built there
(vramsim-replay without CUDA), and the slow ones listed in SLOW (each with its reason), are reported as
skipped, never as passed.

  check_readme.py --build-dir build            # exit 1 on any difference, listing each
  check_readme.py --build-dir build --update   # rewrite the outputs in place, keeping each "..."
  check_readme.py --build-dir build docs/serving.md   # one page (or several)

Every relative link of a page must name a file that exists and, for a .md page, a heading or <a name> it has
(a broken link counts as a difference).

Exit status: 0 all checked commands match and no link is broken, 1 a difference, 77 nothing could be checked
(CTest: skipped).
"""
import argparse
import difflib
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Commands too slow for the test suite on 2 cores (seconds measured on the development VM), or needing what the
# suite does not have. Matched as substrings of the command.
SLOW = {
    "plan --model llama-3-8b --gpu h100 --gpus 8": "about 40 s of CPU",
    "plan --model llama-2-70b --gpu h100 --gpus 64": "several minutes on 2 cores",
    "--steps 200": "200 simulated steps of every policy, minutes",
    "--steps 50": "50 simulated steps of every policy, about a minute",
    "vramsim trace ": "runs PyTorch; tests/tracer covers the tracer",
    "validate_on_gpu.sh": "kernels/validate_on_gpu.sh has its own test",
    # What the README shows from another machine or that changes run to run.
    "vramsim-replay": "prints host timings and needs the README's GPU; tests/kernels covers it",
    "echo $?": "the exit status of the command before it",
    # Hostile inputs the errors section describes; the files live in the tests, not at these paths.
    "replay trunc.pickle": "an example file, not in the repository (tests/traces covers the case)",
    "replay evil.pickle": "an example file, not in the repository (tests/traces covers the case)",
    "replay unknown_free.vtrace": "an example file, not in the repository (tests/traces covers the case)",
    "replay bad_utf8.vtrace": "an example file, not in the repository (tests/traces covers the case)",
    "--model huge_layers.json": "an example file, not in the repository (tests/cli covers the case)",
    "merge numbers.json": "an example file, not in the repository (tests/cli covers the case)",
    "live12000.vtrace": "an example file, not in the repository (tests/cli covers the case)",
}


def blocks(lines):
    """Yields (command_line_index, command, expected_output_lines, end_index) for every command."""
    in_block = False
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("```"):
            in_block = not in_block
            i += 1
            continue
        if in_block and line.startswith("$ "):
            j = i + 1
            while j < len(lines) and not lines[j].startswith("$ ") and not lines[j].startswith("```"):
                j += 1
            yield i, line[2:], lines[i + 1 : j], j
            i = j
            continue
        i += 1


def matches(expected, actual):
    """Whether `actual` fits `expected`, where a "..." line matches any run of lines."""
    parts = [[]]
    for line in expected:
        if line.strip() == "...":
            parts.append([])
        else:
            parts[-1].append(line)
    if len(parts) == 1:
        return expected == actual
    pos = 0
    for k, part in enumerate(parts):
        if k == 0:
            if actual[: len(part)] != part:
                return False
            pos = len(part)
            continue
        if k == len(parts) - 1:
            return len(actual) - len(part) >= pos and (not part or actual[len(actual) - len(part) :] == part)
        found = -1
        for start in range(pos, len(actual) - len(part) + 1):
            if actual[start : start + len(part)] == part:
                found = start
                break
        if found < 0:
            return False
        pos = found + len(part)
    return True


def label(line):
    """A report line's label: the text before its first run of two spaces ("  where", "peak", ...)."""
    m = re.match(r"^(\s*\S+(?: \S+)*?)(?:\s{2,}|$)", line)
    return m.group(1) if m else line


def updated(expected, actual):
    """`actual` with the README's elisions kept: each "..." still stands for the lines between the part
    before it (up to the line with its last line's label) and the part after it (from the line with its
    first line's label). None when the labels are not found in order."""
    parts = [[]]
    for line in expected:
        if line.strip() == "...":
            parts.append([])
        else:
            parts[-1].append(line)
    out, pos = [], 0
    for k, part in enumerate(parts):
        if k > 0:
            if not part:
                out.append("...")
                pos = len(actual)
                continue
            start = next((i for i in range(pos, len(actual)) if label(actual[i]) == label(part[0])), None)
            if start is None:
                return None
            out.append("...")
            pos = start
        if k == len(parts) - 1:
            out.extend(actual[pos:])
            return out
        if not part:
            continue
        end = next((i for i in range(pos, len(actual)) if label(actual[i]) == label(part[-1])), None)
        if end is None:
            return None
        out.extend(actual[pos : end + 1])
        pos = end + 1
    return out


def slug(heading):
    """GitHub's anchor of a heading: lower case, punctuation but "-" and "_" dropped, spaces as "-"."""
    text = heading.strip().lstrip("#").strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path):
    """The anchors a page defines: its headings outside code blocks and its <a name> tags."""
    found, fence = set(), False
    with open(path, encoding="utf-8") as f:
        for line in f.read().split("\n"):
            if line.startswith("```"):
                fence = not fence
            if not fence and re.match(r"^#+ ", line):
                found.add(slug(line))
            found.update(re.findall(r'<a name="([^"]+)"></a>', line))
    return found


def broken_links(path):
    """Relative links of a page whose file or anchor does not exist, as "page:line: link" strings."""
    name = os.path.relpath(path, ROOT)
    out, fence = [], False
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    for number, line in enumerate(lines, 1):
        if line.startswith("```"):
            fence = not fence
        if fence:
            continue
        for target in re.findall(r"\]\(([^)\s]+)\)", line):
            if re.match(r"^[a-z]+:", target):
                continue
            file, _, anchor = target.partition("#")
            where = os.path.normpath(os.path.join(os.path.dirname(path), file)) if file else path
            if not os.path.exists(where) or (anchor and where.endswith(".md") and anchor not in anchors(where)):
                out.append(f"{name}:{number}: {target}")
    return out


def pages():
    """README.md, then every docs/*.md page in name order."""
    return [os.path.join(ROOT, "README.md")] + sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))


def check_page(path, args, build, scratch):
    """Checks (and with --update rewrites) one page; returns (checked, failed, skipped)."""
    name = os.path.relpath(path, ROOT)
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    checked = failed = skipped = 0
    replacements = []
    for index, command, expected, end in blocks(lines):
        if args.only and args.only not in command:
            continue
        reason = next((why for key, why in SLOW.items() if key in command), None)
        program = re.search(r"\./build/(\S+)", command)
        if reason is None and program and not os.path.exists(os.path.join(build, program.group(1))):
            reason = f"{program.group(1)} is not built in {build}"
        if reason is not None:
            skipped += 1
            print(f"SKIPPED {name}:{index + 1}: {command[:100]} ({reason})")
            continue
        run = command.replace("./build/", build + "/")
        proc = subprocess.run(["bash", "-c", run], cwd=scratch, capture_output=True, text=True, timeout=600)
        actual = (proc.stdout + proc.stderr).rstrip("\n").split("\n") if (proc.stdout + proc.stderr) else []
        checked += 1
        if matches(expected, actual):
            continue
        fresh = updated(expected, actual) if args.update else None
        if fresh is not None:
            replacements.append((index + 1, end, fresh))
            print(f"UPDATED {name}:{index + 1}: {command[:100]}")
            continue
        failed += 1
        print(f"DIFFERS {name}:{index + 1}: {command}")
        sys.stdout.writelines(
            l + "\n" for l in difflib.unified_diff(expected, actual, name, "actual", lineterm="", n=1)
        )
    for start, end, actual in reversed(replacements):
        lines[start:end] = actual
    if replacements:
        with open(path, "w", encoding="utf-8") as f:
            f.write("\n".join(lines))
    return checked, failed, skipped


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build-dir", required=True)
    ap.add_argument("pages", nargs="*", help="the pages to check (default: README.md and docs/*.md)")
    ap.add_argument("--update", action="store_true")
    ap.add_argument("--only", default="", help="check only commands containing this text")
    args = ap.parse_args()
    build = os.path.abspath(args.build_dir)
    # Commands run in a scratch folder that links to the repository's top-level entries, so relative paths
    # resolve as in the repository root while the files a command writes (sweep_1.json, ...) land outside it.
    scratch = tempfile.mkdtemp(prefix="vramsim-readme-")
    for entry in os.listdir(ROOT):
        if not entry.startswith("."):
            os.symlink(os.path.join(ROOT, entry), os.path.join(scratch, entry))
    checked = failed = skipped = 0
    for path in [os.path.abspath(p) for p in args.pages] or pages():
        for link in broken_links(path):
            failed += 1
            print(f"BROKEN LINK {link}")
        c, f, s = check_page(path, args, build, scratch)
        checked, failed, skipped = checked + c, failed + f, skipped + s
    shutil.rmtree(scratch, ignore_errors=True)
    print(f"{checked} commands checked, {failed} differ, {skipped} skipped")
    if checked == 0:
        return 77
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
