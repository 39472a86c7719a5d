"""The pages say what the commands print: every cheap sample in README.md and docs/*.md is re-run and compared
(normalised as scripts/render_docs.py writes it), every training sample's command still composes, and every
relative link resolves. A failure here means: run `python scripts/render_docs.py` (or fix the page), and read the
diff before committing it."""
import difflib
import re
from pathlib import Path

import pytest
from conftest import REPO, read_json, run_app

from scripts import render_docs

# every documented sample rendered and every documented command checked: make test only (not make test-fast)
pytestmark = pytest.mark.slow

SAMPLES = [s for page in render_docs.pages() for s in render_docs.samples(page)]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
EXTERNAL = ("http://", "https://", "mailto:")


def sample_id(s):
    return f"{s.page.relative_to(REPO)}: {s.command[:70]}"


def test_pages_hold_samples_of_every_kind():
    assert {s.kind for s in SAMPLES} == {"check", "run", "setup"}
    readme = [s for s in SAMPLES if s.page.name == "README.md"]
    assert len([s for s in readme if s.kind == "check"]) >= 3


@pytest.mark.parametrize("sample", [s for s in SAMPLES if s.kind == "check"], ids=sample_id)
def test_cheap_sample_matches_what_its_command_prints(sample):
    with render_docs.workdir() as cwd:
        printed = render_docs.normalise(render_docs.run(sample.command, cwd, timeout=120), cwd)
    expected = sample.block.split("\n", 1)[1]  # after the `$ command` line
    diff = "\n".join(difflib.unified_diff(expected.splitlines(), printed.splitlines(), "page", "printed", lineterm=""))
    assert printed == expected, f"{sample_id(sample)} is stale (python scripts/render_docs.py rewrites it):\n{diff}"
    assert "Traceback" not in printed


@pytest.mark.parametrize("sample", [s for s in SAMPLES if s.kind != "check"], ids=sample_id)
def test_training_sample_is_rendered_and_its_command_composes(sample):
    """Real runs are regenerated with `render_docs.py --runs`, not re-run here: check the block holds the command
    (and its output), and that the command still composes and passes every check, as a dry run."""
    assert sample.block.startswith(f"$ {sample.command}\n")
    if sample.kind == "run":
        assert sample.block.count("\n") > 2, "never rendered: python scripts/render_docs.py --runs"
    if sample.command.split()[:3] != ["python", "-m", "trl_ds"]:
        return  # the report of a sweep: only a real sweep gives it something to read
    with render_docs.workdir() as cwd:
        done = render_docs.run(f"{sample.command} dry_run=true; echo exit=$?", cwd, timeout=300)
    assert done.rstrip().endswith("exit=0"), done[-3000:]


def test_normalise_removes_the_folder_timestamps_and_torch_log_lines():
    text = ("W1204 13:31:21.671000 8871 torch/distributed/run.py:874] Setting OMP_NUM_THREADS ...\n"
            "  run dir: /tmp/w/outputs/2026-12-04/13-31-04.123-7f3a   \n"
            f"  wrote {REPO}/docs/x.md\n")
    assert render_docs.normalise(text, "/tmp/w") == "  run dir: outputs/<date>/<time>\n  wrote docs/x.md\n"


def relative_links(page: Path):
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)  # code blocks hold commands, not links
    for target in LINK.findall(text):
        if not target.startswith(EXTERNAL) and not target.startswith("#"):
            yield target


def test_every_relative_link_resolves():
    broken = [f"{page.relative_to(REPO)}: {target}" for page in render_docs.pages()
              for target in relative_links(page)
              if not (page.parent / target.split("#")[0]).exists()]
    assert not broken, "links to nothing:\n  " + "\n  ".join(broken)


def test_the_readme_stays_a_front_door():
    assert (REPO / "README.md").stat().st_size <= 15 * 1024


@pytest.mark.parametrize("stage,bytes_per_param", [(0, 12), (1, 7), (2, 7), (3, 5)])
def test_readme_memory_study_arithmetic(tmp_path, stage, bytes_per_param):
    """The README's study (tiny model, fp32, 4 ranks, persistence threshold 0), by hand: stage 0 holds weights 4 +
    Adam 8; stages 1-2 weights 4 + (fp32 master 4 + Adam 8) / 4; stage 3 (weights 4 + gradients 4 + 12) / 4. The
    estimate in plan.json is held to the engine's bytes by tests/integration/test_memory_measured.py."""
    done = run_app([f"zero=stage{stage}", "cluster.gpus_per_node=4", "zero.stage3_param_persistence_threshold=0",
                    "dry_run=true"], tmp_path, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    plan = read_json(tmp_path / "plan.json")
    held = sum(sum(places.values()) for places in plan["current"]["after_step_bytes"].values())
    # embeddings 2 × 512 × 128 + 4 layers × (attention 128 × (128 + 64 + 64 + 128) + MLP 3 × 128 × 352
    # + norms 256) + final norm 128
    assert plan["parameters"] == 2 * 512 * 128 + 4 * (128 * 384 + 3 * 128 * 352 + 256) + 128 == 869_504
    assert held == pytest.approx(bytes_per_param * 869_504, abs=8)


def documented_launches():
    """`python -m trl_ds ...` lines in the pages' code blocks that are not samples: the commands users copy.
    Left out: sweeps (-m), lines continued or holding placeholders (<...>, $VAR, N, the reader's paths), and the files
    a user brings (recipes, DeepSpeed JSONs, accelerate configs:
    tests/unit/check/test_deepspeed_json.py and its siblings)."""
    found = []
    for page in render_docs.pages():
        text = render_docs.MARKER.sub("", page.read_text())
        for line in re.findall(r"^(?:    )?(python -m trl_ds [^#\n]*)", text, flags=re.M):
            line = line.strip()
            reader_specific = (r" -m |\\$|<|\$|=N\b|/models/|/local_nvme|dry_run=|from_trl_config=|from_file=|"
                               r"from_accelerate=")
            if not re.search(reader_specific, line[len("python -m trl_ds"):]):
                found.append((page.relative_to(REPO), line))
    return found


@pytest.mark.parametrize("page,command", documented_launches(), ids=[c[:80] for _, c in documented_launches()])
def test_documented_command_passes_every_check(page, command):
    with render_docs.workdir() as cwd:
        done = render_docs.run(f"{command} dry_run=true; echo exit=$?", cwd, timeout=120)
    assert done.rstrip().endswith("exit=0"), f"{page}: {command}\n{done[-3000:]}"
