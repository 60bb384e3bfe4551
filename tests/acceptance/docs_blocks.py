#!/usr/bin/env python3
"""Runs the command blocks of a docs page as a reader would type them, and
checks what each line's comment promises (tests/acceptance/test_docs_blocks.sh).

A block is run when it is fenced ```sh and every command in it is an `sbx`
command (or a shell line around one: `id=$(sbx ...)`, `echo data | sbx ...`,
`scripts/...`): synopsis blocks full of NAME/ID placeholders and `make`
blocks are left alone. All runnable blocks of a page run in order in ONE
bash, so a variable set in one block is there in the next; `sbx` is the
build's CLI. Each line's trailing comment is its promise:

  # prints X / prints "X" / # "X"   X is what the line printed (last line), or in its stderr
  # ..., exit N / exits N            its exit status is N
  # N   (after `; echo $?`)          the last line printed is N
  # anything else                    it exits 0

Usage: docs_blocks.py PAGE.md SBX WORKDIR  -> TAP on stdout.
"""

import os
import re
import subprocess
import sys

page, sbx, work = sys.argv[1], sys.argv[2], sys.argv[3]
text = open(page, encoding="utf-8").read()
# A block right after `<!-- docs-test: skip (why) -->` is not run (it follows a server forever, say).
blocks = [b for skip, b in re.findall(r"(<!-- docs-test: skip[^>]*-->\n)?^```sh\n(.*?)^```", text, re.S | re.M)
          if not skip]

CMD = re.compile(r"(^|[|$(;&]\s*)(sbx|build/sbx|scripts/[\w./-]+)\b")
PLACEHOLDER = re.compile(r"\b(NAME|ID|CMD|SRC|DST|PORT|REF|IMAGE|N)\b(?![=\w])")


def runnable(block):
    lines = [l for l in block.splitlines() if l.strip() and not l.lstrip().startswith("#")]
    if not lines:
        return False
    for l in lines:
        code = l.split("  #")[0]
        if not CMD.search(code) and not re.match(r"^\s*(echo|cat|mkdir|cd)\b", code):
            return False
        if PLACEHOLDER.search(code.replace("$ID", "").replace("$N", "")):
            return False
    return True


def promise(comment, code):
    """(exit status wanted, texts wanted in the output)."""
    want_rc, texts = 0, []
    if not comment:
        return want_rc, texts
    m = re.search(r"\bexits? (\d+)", comment)
    if m:
        want_rc = int(m.group(1))
    texts += re.findall(r'"([^"]+)"', comment)
    p = re.search(r"\bprints (\S+)", comment)
    if p and not p.group(1).startswith(('"', "the", "its", "a", "an")):
        texts.append(p.group(1).rstrip(",."))
    if code.rstrip().endswith("echo $?"):
        e = re.search(r"(\d+)\s*$", comment)
        if e:
            texts.append(e.group(1))
    elif re.fullmatch(r"\s*[\w-]+\s*", comment):
        texts.append(comment.strip())
    return want_rc, texts


n = fails = 0
env = dict(os.environ)
sh = subprocess.Popen(["bash", "--noprofile", "--norc"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                      stderr=subprocess.STDOUT, cwd=work, env=env, text=True, bufsize=1)
# sbx is the build's CLI, as an installed one would be on PATH.
sh.stdin.write(f"sbx() {{ {sbx!s} \"$@\"; }}\nexport -f sbx 2>/dev/null\n")
MARK = "__sbx_docs_line_done__"
for block in blocks:
    if not runnable(block):
        continue
    for line in block.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        code, _, comment = line.partition("  #")
        code, comment = code.rstrip(), comment.strip()
        want_rc, texts = promise(comment, code)
        # In braces: its variables stay in this shell; stdin is /dev/null but for its own pipes.
        sh.stdin.write(f"{{ {code}\n}} </dev/null 2>&1\nprintf '\\n{MARK} %s\\n' $?\n")
        sh.stdin.flush()
        out = []
        rc = None
        for got in sh.stdout:
            if got.startswith(MARK):
                rc = int(got.split()[1])
                break
            out.append(got.rstrip("\n"))
        printed = [o for o in out if o != ""]
        n += 1
        ok = rc == want_rc and all(any(t in o for o in printed) for t in texts)
        name = f"{os.path.basename(page)}: {code}"
        if ok:
            print(f"ok {n} - {name}")
        else:
            fails += 1
            print(f"not ok {n} - {name}")
            print(f"# exit {rc} (wanted {want_rc}); wanted {texts!r} printed; printed:")
            for o in printed[-8:]:
                print(f"#   {o[:200]}")
sh.stdin.close()
sh.wait()
print(f"1..{n}")
sys.exit(1 if fails or n == 0 else 0)
