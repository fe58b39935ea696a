#!/usr/bin/env python3
"""The per-file table scripts/pjdfstest prints: pjdfstest's TAP outputs of a PTStore mount, each failed
assertion classified (docs/pjdfstest.md).

    pjdfstest_table.py ROOT_DIR NS_DIR    (directories of <group>-<nn>.tap files)
"""

import collections
import glob
import os
import re
import sys

_TRIED = re.compile(r"^not ok \d+ - tried '(?P<call>[^']*)', expected (?P<want>.*), got (?P<got>\S+)$")


def classify(line: str) -> str:
    """refused: the mount's design refusal (EPERM/EROFS where the call would make or change something);
    follow-on: an assertion about what a refused step would have made (ENOENT of it, a later check of its
    mode, owner, times or contents: the untitled 'not ok' lines are pjdfstest's stat comparisons);
    other: anything else."""
    m = _TRIED.match(line)
    if m is None:
        return "follow-on" if re.match(r"^not ok \d+\s*$", line) else "other"
    want, got = m.group("want"), m.group("got")
    if got in ("EPERM", "EROFS") and got not in want.split("|"):
        return "refused"
    if got == "ENOENT" and "ENOENT" not in want.split("|"):
        return "follow-on"
    if got == "EACCES" and m.group("call").startswith(("-u ", "-g ")):
        return "follow-on"
    return "other"


def rows(directory: str):
    for path in sorted(glob.glob(os.path.join(directory, "*.tap"))):
        lines = open(path).read().splitlines()
        results = [ln for ln in lines if re.match(r"^(not )?ok ", ln) and "# TODO" not in ln]
        failed = [ln for ln in results if ln.startswith("not ok")]
        kinds = collections.Counter(classify(ln) for ln in failed)
        others = sorted({_TRIED.sub(lambda m: f"{m.group('call').split()[0]} wants {m.group('want')}, got "
                                              f"{m.group('got')}", ln)[:90] for ln in failed if classify(ln) == "other"})
        yield os.path.basename(path)[:-4].replace("-", "/", 1) + ".t", len(results), len(results) - len(failed), \
            kinds, others


def main() -> int:
    print("| where | test file | tests | passed | refused | follow-on | other |")
    print("|---|---|---:|---:|---:|---:|---|")
    totals = collections.Counter()
    for where, directory in (("/", sys.argv[1]), ("/ns", sys.argv[2])):
        for name, n, ok, kinds, others in rows(directory):
            totals.update({"tests": n, "passed": ok, **kinds})
            other = f"{kinds['other']}: " + "; ".join(others) if kinds["other"] else "0"
            print(f"| {where} | {name} | {n} | {ok} | {kinds['refused']} | {kinds['follow-on']} | {other} |")
    print(f"| all | | {totals['tests']} | {totals['passed']} | {totals['refused']} | {totals['follow-on']} | "
          f"{totals['other']} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
