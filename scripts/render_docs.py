"""Regenerate the sample outputs in README.md and docs/*.md from real runs of the documented commands.

    python scripts/render_docs.py            # re-run the cheap samples (planner, dry runs, errors: < 1 s each)
    python scripts/render_docs.py --runs     # also the samples of real training runs (minutes)
    python scripts/render_docs.py --check    # change nothing; exit 1 naming every cheap sample that is stale

A sample is an HTML comment naming its kind and command, followed by a fenced block that this script owns:

    <!-- sample check: trl-ds plan model=llama3-8b cluster=1x8 -->
    ```text
    $ trl-ds plan model=llama3-8b cluster=1x8
    ...what it printed...
    ```

Kinds: `check` is cheap and deterministic: tests/unit/test_docs.py re-runs it and fails when the block no longer
matches. `run` trains for real: regenerated with --runs only; the test checks that its command still composes
(dry_run=true). `setup` runs for real with --runs, and its block shows the command without its output (a sweep that
a later sample reports on). `<!-- sample file: SRC -> DEST -->` copies a file the page's runs wrote (SRC, relative
to their folder) to DEST in the repo, with --runs (a report's plot).

Every page runs in its own empty folder (with hostfiles/ linked in), samples in page order, so a later run sample
can read what an earlier one wrote; a check sample gets a folder of its own (two dry runs in one second would share
Hydra's run dir). That folder's path, the repo's path, run-dir timestamps and torch's log lines (time and pid) are
normalised away, so the pages hold no machine's paths. Timings a run prints (samples/s, seconds) are kept: they are
one real run's, which is why training samples are regenerated, not compared.
"""
import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Iterator, List, NamedTuple

REPO = Path(__file__).resolve().parents[1]
PAGES = ("README.md", "docs/*.md")
KINDS = ("check", "run", "setup")
MARKER = re.compile(r"^<!-- sample (\w+): (.+?) -->\n```text\n(.*?)```\n", re.M | re.S)
FILE = re.compile(r"^<!-- sample file: (\S+) -> (\S+) -->$", re.M)  # a file a run wrote, copied into the repo
STAMP = re.compile(r"\d{4}-\d\d-\d\d/\d\d-\d\d-\d\d(?:\.\d{3}-[0-9a-f]{4})?")  # run_name.py's milliseconds and tag
GLOG = re.compile(r"^[WIEF]\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ .*\n?", re.M)  # torch's log lines: time and pid
LINKED = ("hostfiles",)  # repo folders the documented commands name by relative path


class Sample(NamedTuple):
    page: Path
    kind: str
    command: str
    block: str  # the fenced block's text as it stands


def pages() -> List[Path]:
    found = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    return [p for p in found if p.exists()]


def samples(page: Path) -> Iterator[Sample]:
    for m in MARKER.finditer(page.read_text()):
        if m.group(1) not in KINDS:
            raise SystemExit(f"{page}: unknown sample kind {m.group(1)!r} (one of {', '.join(KINDS)})")
        yield Sample(page, m.group(1), m.group(2), m.group(3))


def workdir() -> tempfile.TemporaryDirectory:
    """An empty folder to run a page's commands in: run dirs land there, not in the repo."""
    tmp = tempfile.TemporaryDirectory(prefix="trl_ds_docs_")
    for name in LINKED:
        os.symlink(REPO / name, Path(tmp.name) / name)
    return tmp


def normalise(text: str, cwd: str) -> str:
    """What a reader should see: paths relative to where the command ran, no timestamps of one day."""
    text = text.replace(os.path.realpath(cwd) + "/", "").replace(cwd + "/", "")
    text = text.replace(str(REPO) + "/", "").replace(str(REPO), ".")
    text = STAMP.sub("<date>/<time>", GLOG.sub("", text))
    return "\n".join(line.rstrip() for line in text.rstrip("\n").split("\n")) + "\n"


def run(command: str, cwd: str, timeout: float = 1800) -> str:
    """Run a documented command as a user would (`python` is this interpreter, the repo on PYTHONPATH);
    stdout and stderr together, in the order printed. `trl-ds` is `python -m trl_ds.cli`, the main the console
    script calls: an installed script may belong to another checkout of the repo."""
    env = {**os.environ, "PYTHONPATH": str(REPO),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    script = f'trl-ds() {{ python -m trl_ds.cli "$@"; }}\n{command}'
    proc = subprocess.Popen(["bash", "-c", script], cwd=cwd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        return proc.communicate(timeout=timeout)[0]
    except subprocess.TimeoutExpired:  # end the whole group: a launch left running holds ports and CPUs
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise


def render(sample: Sample, cwd: str) -> str:
    """The block's new text: the command, then (except for setup) what it printed."""
    shown = f"$ {sample.command}\n"
    output = run(sample.command, cwd)
    return shown if sample.kind == "setup" else shown + normalise(output, cwd)


def rewrite(page: Path, new_blocks: dict) -> bool:
    """Replace the blocks of the samples in new_blocks (keyed by command); True if the page changed."""
    old = page.read_text()

    def sub(m):
        block = new_blocks.get((m.group(1), m.group(2)), m.group(3))
        return f"<!-- sample {m.group(1)}: {m.group(2)} -->\n```text\n{block}```\n"

    new = MARKER.sub(sub, old)
    if new != old:
        page.write_text(new)
    return new != old


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", action="store_true", help="also re-run the real training samples")
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if a cheap sample is stale")
    parser.add_argument("pages", nargs="*", help="only these pages (default: README.md and docs/*.md)")
    args = parser.parse_args(argv)
    chosen = [Path(p).resolve() for p in args.pages] or pages()
    stale = []
    for page in chosen:
        wanted = [s for s in samples(page) if s.kind == "check" or (args.runs and not args.check)]
        if not wanted:
            continue
        with workdir() as shared:
            blocks = {}
            for s in wanted:
                print(f"{page.relative_to(REPO)}: {s.kind}: {s.command}", flush=True)
                with workdir() as own:
                    blocks[(s.kind, s.command)] = render(s, own if s.kind == "check" else shared)
                if blocks[(s.kind, s.command)] != s.block:
                    stale.append(f"{page.relative_to(REPO)}: {s.command}")
            if args.runs and not args.check:
                for src, dest in FILE.findall(page.read_text()):
                    shutil.copyfile(Path(shared) / src, REPO / dest)
        if not args.check:
            rewrite(page, blocks)
    if args.check and stale:
        print("stale samples (python scripts/render_docs.py rewrites them):\n  " + "\n  ".join(stale))
        return 1
    print(f"{len(stale)} sample(s) {'stale' if args.check else 'changed'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
