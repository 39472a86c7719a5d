"""One recorder (#60 item 2): the end-of-train memory and summary files are written from one call site, the recording
callback's on_train_end (worker/records.py EndOfTrain), which trl_ds's worker and a user's script both get."""
import ast
from pathlib import Path

from trl_ds.worker.records import EndOfTrain, recording_callbacks, train_metrics

WORKER = Path(__file__).resolve().parents[3] / "trl_ds" / "worker"
WRITERS = {"write_rank_memory", "summarize"}


def callers(name: str):
    for path in sorted(WORKER.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) == name:
                yield path.name


def test_the_end_of_train_files_have_one_call_site():
    assert {name: sorted(callers(name)) for name in WRITERS} == {name: ["records.py"] for name in WRITERS}


def test_every_trainer_gets_the_end_of_train_writer():
    """recording_callbacks is what both add to each trainer (worker/train.py, worker/script_hooks.py)."""
    tree = ast.parse((WORKER / "records.py").read_text())
    made = next(node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name == "recording_callbacks")
    assert EndOfTrain.__name__ in {n.func.id for n in ast.walk(made) if isinstance(n, ast.Call)
                                   and isinstance(n.func, ast.Name)}
    for user in ("train.py", "script_hooks.py"):
        assert any(isinstance(n, ast.Call) and getattr(n.func, "id", None) == recording_callbacks.__name__
                   for n in ast.walk(ast.parse((WORKER / user).read_text()))), user


def test_train_metrics_are_the_last_train_row():
    """transformers logs train()'s metrics (train_runtime, train_loss, ...) as the last row before on_train_end;
    a resumed launch's log_history holds the earlier launch's rows too."""
    history = [{"loss": 2.0, "step": 5}, {"train_runtime": 9.0, "train_loss": 2.1, "step": 5},
               {"loss": 1.5, "step": 10}, {"train_runtime": 4.0, "train_loss": 1.6, "step": 10}]
    assert train_metrics(history) == {"train_runtime": 4.0, "train_loss": 1.6, "step": 10}
    assert train_metrics([{"loss": 2.0, "step": 1}]) == {}
