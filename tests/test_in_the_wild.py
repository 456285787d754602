"""research/in_the_wild.py, docs/in-the-wild.md and its runs' page, without a GPU and without the wheels.

The script itself needs a CUDA GPU and the releases' wheels; here it must refuse with exit 2 and
say why, refuse bad arguments the same way, keep its case table consistent (each trap one the
checker names, each link the library's own tracker, each case's setup present), build the
download command pinned as the GPU machine needs, and judge verdicts by its stated rule. The
reader's page, and the page of the runs behind it (benchmarks/results/in-the-wild-diary.md), must
quote only what the committed logs say.
"""
import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
TOOL = REPO / "research" / "in_the_wild.py"
DOC = REPO / "docs" / "in-the-wild.md"
DIARY = REPO / "benchmarks" / "results" / "in-the-wild-diary.md"
LOG = REPO / "benchmarks" / "results" / "in_the_wild_h100.log"
CPU_LOG = REPO / "benchmarks" / "results" / "in_the_wild_cpu_interpreter.log"
sys.path.insert(0, str(REPO / "practice"))

spec = importlib.util.spec_from_file_location("in_the_wild", TOOL)
wild = importlib.util.module_from_spec(spec)
spec.loader.exec_module(wild)

TRACKERS = {"liger-kernel": "linkedin/Liger-Kernel", "fla-core": "fla-org/flash-linear-attention",
            "unsloth": "unslothai/unsloth", "flash-attn": "Dao-AILab/flash-attention", "mamba-ssm": "state-spaces/mamba",
            "cut-cross-entropy": "unslothai/cut-cross-entropy"}
CASE_HEADS = ("case", "release", "checker (traps)", "gradcheck", "opcheck", "verdict")
SWEEP_HEADS = ("op", "Function", "forward vs reference", "checker (traps)")


def release_key(version):
    return [int(part) for part in re.findall(r"\d+", version)]


def run_tool(*args):
    return subprocess.run([sys.executable, str(TOOL), *args], capture_output=True, text=True, timeout=120)


def cuda_available():
    import torch
    return torch.cuda.is_available()


@pytest.mark.skipif(cuda_available(), reason="this machine has a CUDA GPU")
def test_without_a_gpu_it_exits_2_and_says_why():
    done = run_tool()
    assert done.returncode == 2
    assert "needs a CUDA GPU" in done.stderr and "interpreter is not the truth" in done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""


@pytest.mark.parametrize("args", [["--case", "no-such-case"], ["--jobs", "0"], ["--no-such-flag"],
                                  ["--case", "liger-ce-none", "--library", "fla"],   # a selection of nothing
                                  ["--sweep-only", "--case", "fla-l2warp"]])        # a case the sweeps drop
def test_bad_arguments_exit_2_without_a_traceback(args):
    """Refused before the GPU is asked for, so the same on every machine: never '0 cases and 0 sweeps', exit 0."""
    done = run_tool(*args)
    assert done.returncode == 2
    assert "error:" in done.stderr and "Traceback" not in done.stderr and "needs a CUDA GPU" not in done.stderr


def test_the_table_of_no_rows_is_its_head():
    """A run whose every release timed out has no rows: the table is its head, not a TypeError."""
    assert wild.table(["case", "verdict"], []).splitlines()[0] == "case | verdict"


def test_missing_wheels_exit_2_naming_them(tmp_path):
    done = run_tool("--interpret", "--wheels", str(tmp_path), "--case", "fla-l2warp")
    assert done.returncode == 2
    assert "fla-core 0.5.1" in done.stderr and "fla-core 0.5.2" in done.stderr and "--download" in done.stderr


def test_list_names_every_case_with_its_releases():
    done = run_tool("--list")
    assert done.returncode == 0
    for case in wild.CASES:
        assert f"{case.name}: {case.dist} {case.buggy} (buggy) -> {case.fixed} (fixed)" in done.stdout


def test_the_case_table_is_consistent():
    from backward_checker import TRAPS
    assert len(wild.CASES) >= 5
    assert len({c.name for c in wild.CASES}) == len(wild.CASES)
    assert len({c.trap_class.split(" (")[0] for c in wild.CASES}) >= 4, "cases of at least four trap classes"
    for case in wild.CASES:
        assert case.expected in TRAPS, case.name
        assert all(trap in TRAPS for trap, _ in case.known), case.name
        assert release_key(case.buggy) < release_key(case.fixed), case.name
        assert callable(getattr(wild.CASE_MODULE[case.name], case.setup)), case.name
        for link in case.links + tuple(link for _, link in case.known):
            assert re.fullmatch(rf"https://github.com/{TRACKERS[case.dist]}/((issues|pull)/\d+|commit/[0-9a-f]{{40}}|"
                                rf"blob/v[\d.]+/[\w/]+\.py(#L\d+)?)", link), link
        assert case.hid.strip() and len(case.hid) > 60, f"{case.name}: say how the bug hid"


def test_download_pins_the_gpu_machines_python_and_fetches_one_release_a_call(monkeypatch, tmp_path):
    calls = []

    class Done:
        returncode = 0
    monkeypatch.setattr(wild.subprocess, "run", lambda command, **kw: calls.append(command) or Done())
    fetched = []
    monkeypatch.setattr(wild, "fetch_vendored", lambda wheels, dist, version, files: fetched.append(
        f"{dist}=={version}") if files else pytest.fail("a release with no file named is installed whole"))
    assert wild.download(tmp_path) == 0
    specs = [c[-1] for c in calls] + fetched
    for case in wild.CASES:
        assert f"{case.dist}=={case.buggy}" in specs and f"{case.dist}=={case.fixed}" in specs
    for module in wild.SWEEPS.values():
        assert f"{module.SWEEP.dist}=={module.SWEEP.version}" in specs
    for command in calls:
        assert "--no-deps" in command and "--only-binary=:all:" in command
        assert command[command.index("--python-version") + 1] == "3.12"
        assert "manylinux_2_17_x86_64" in command

    class Failed:
        returncode = 1
    monkeypatch.setattr(wild.subprocess, "run", lambda command, **kw: Failed())
    assert wild.download(tmp_path) == 2


def test_the_verdict_rule():
    case = next(c for c in wild.CASES if c.known)
    known = case.known[0][0]

    def checker(*traps):
        return {"checker": {"traps": list(traps)}}
    assert wild.judge(case, "buggy", checker(case.expected, known)) == "as expected"
    assert wild.judge(case, "buggy", checker(known)).startswith("NO")
    assert wild.judge(case, "fixed", checker(known)) == "as expected"
    assert wild.judge(case, "fixed", checker()) == "as expected"
    assert wild.judge(case, "fixed", checker("crashes")).startswith("NO")
    assert wild.judge(case, "fixed", {"error": "exit 1"}).startswith("NO")


def test_arguments_bind_to_the_real_signature_with_defaults():
    import torch

    class Op(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, target, weight=None, reduction="mean", eps=1e-6):
            return x.clone()
    assert wild.positional(Op, (1, 2), {"eps": 3}) == [1, 2, None, "mean", 3]


def rows_under(text, heads):
    """The rows of every table, in the log's plain form or the page's markdown, whose header is heads."""
    rows, inside = [], False
    for line in text.splitlines():
        cells = [c.strip().strip("`") for c in line.strip().strip("|").split("|")]
        if tuple(cells) == heads:
            inside = True
        elif inside and line.strip() and set(line.strip()) <= set("-+|: "):
            continue  # the line under the header
        elif inside and "|" in line and len(cells) == len(heads):
            rows.append(cells)
        else:
            inside = False
    return rows


def table_rows(text):
    return rows_under(text, CASE_HEADS)


def sweep_rows(text):
    return rows_under(text, SWEEP_HEADS)


def tree_of(log):
    """The log's tree, as a commit abbreviated to 7 hex digits where the stamp gave it whole (STAMP_TREE set to a full
    sha on the GPU machine), since provenance names commits by 7."""
    tree = next(line for line in log.splitlines() if line.startswith("tree: "))[len("tree: "):]
    return re.sub(r"^([0-9a-f]{7})[0-9a-f]{33}\b", r"\1", tree)


def test_the_page_quotes_only_what_the_logs_say():
    log, cpu, doc, diary = LOG.read_text(), CPU_LOG.read_text(), DOC.read_text(), DIARY.read_text()
    sys.path.insert(0, str(REPO / "tools"))
    import stamp
    stamped = re.search(r"^checker: ([0-9a-f]{12}) ", log, flags=re.M)
    if stamped is None or stamped.group(1) != stamp.checker_hash():
        pytest.skip("the committed GPU log is of another checker, or of other cases: test_logs_are_current "
                    "warns of it until the GPU command runs again (tools/gpu_check.sh)")
    provenance = (REPO / "docs" / "provenance.md").read_text()
    assert tree_of(log).split()[0] in provenance and tree_of(cpu).split("-")[0] in provenance, \
        "provenance names the trees the page's logs measured"
    assert len(table_rows(log)) == 2 * len(wild.CASES)
    assert table_rows(doc) == table_rows(log), "the page's table is the GPU log's"
    assert table_rows(diary) == table_rows(cpu), "the runs' page has the interpreter's table"
    assert sweep_rows(diary) == sweep_rows(log) and len({row[1] for row in sweep_rows(log)}) >= 40, \
        "the runs' page has every swept call, of at least 40 Functions"
    assert sweep_rows(doc) == [row for row in sweep_rows(log) if row[3] != "clean"], \
        "the page's sweep table is the log's flagged calls"
    assert len({dist for dist in wild.SWEEPS}) >= 4, "sweeps of at least four libraries"
    for case in wild.CASES:
        assert all(link in doc for link in case.links), case.name
    for quoted in re.findall(r"^> (.+)$", doc + diary, flags=re.M):  # quoted report lines are the log's lines
        assert quoted.strip() in log, quoted
    assert "/work/" not in doc + diary and "/tmp/" not in doc + diary
