"""The local data files a run reads (the train split, and the evaluation split when evaluating), read through before
launch and in a dry run: a file that is not UTF-8, empty, without the columns the trainer needs, or with a bad
record is named with its line or row and the fix, instead of in a rank's traceback. A path that does not exist here
is skipped (check_local_files names it at launch; a dry run may be for another machine).
"""
import os
from typing import List, Optional, Sequence, Tuple

from trl_ds.check.data_readers import BadRecord, ColumnSets, DataProblem, EmptyFile, read_file
from trl_ds.check.trainer_rules import EXAMPLE_RECORD, NEEDED_COLUMNS
from trl_ds.config.data_files import named_for_split, split_files
from trl_ds.config.values import LOCAL_DATA_SUFFIXES, is_local_path, value


def local_reads(cfg) -> List[Tuple[str, str, str, str]]:
    """(key, name, path, split) of each local split the run reads that exists here (train, and eval when on)."""
    t = cfg.trainer
    reads = [("trainer.dataset_name", t.dataset_name, t.dataset_train_split)]
    if value(t.eval_strategy) != "no":  # the worker's evaluation data (rundir/trainer_config.py eval_dataset_path)
        reads.append(("trainer.eval_dataset_name", t.eval_dataset_name, t.dataset_test_split) if t.eval_dataset_name
                     else ("trainer.dataset_name", t.dataset_name, t.dataset_test_split))
    return [(key, name, os.path.expanduser(name), split) for key, name, split in reads
            if name != "tiny" and is_local_path(name) and os.path.exists(os.path.expanduser(name))]


def check_data_files(cfg) -> List[str]:
    """The train data and, when evaluating, the evaluation data: the first problem of each, one line each."""
    trainer = value(cfg.trainer.name)
    problems, read = [], set()
    for key, name, path, split in local_reads(cfg):
        files = data_files(path, split)
        judged = split_members(path, split, files)
        if (tuple(files), tuple(judged)) in read:  # one file for both splits: read once
            continue
        read.add((tuple(files), tuple(judged)))
        problem = split_problem(path, split, NEEDED_COLUMNS[trainer], files, judged)
        if problem:
            problems.append(message(key, name, trainer, *problem))
    return problems


def data_files(path: str, split: str) -> List[str]:
    """The files the worker loads for `split` (config/data_files.py). Where it leaves a folder to datasets, every
    data file in it and below (datasets builds all splits of a folder, so a broken test.jsonl fails the train split's
    load too); hidden names skipped, as datasets skips them."""
    files = split_files(path, split)
    if files or not os.path.isdir(path):
        return files
    found = []
    for root, dirs, files in os.walk(path):
        dirs[:] = sorted(d for d in dirs if not d.startswith((".", "_")))
        found += [os.path.join(root, f) for f in sorted(files)
                  if f.endswith(LOCAL_DATA_SUFFIXES) and not f.startswith((".", "_"))]
    return found


def split_members(path: str, split: str, files: Sequence[str]) -> List[str]:
    """The files whose columns and records the split's trainer reads. In a folder left to datasets, those with a
    folder or file name for the split (sub/test.jsonl, test/part-0.jsonl), else, for a train split, all: datasets
    makes files named for no split its train split."""
    if split_files(path, split) or not os.path.isdir(path):
        return list(files)
    named = [f for f in files if any(p == split or named_for_split(p, split)
                                     for p in os.path.relpath(f, path).split(os.sep))]
    return named or (list(files) if split == "train" else [])


def split_problem(path: str, split: str, column_sets: ColumnSets, files: Sequence[str],
                  judged: Sequence[str]) -> Optional[Tuple[str, DataProblem]]:
    """(file, first problem) or None; empty JSON files are one only when all of the split's are."""
    rows = {}
    for file in files:
        try:
            rows[file] = read_file(file, column_sets if file in judged else ())
        except DataProblem as problem:
            problem.removable = len(files) > 1
            return file, problem
        except OSError as err:
            return file, BadRecord(None, f"cannot be read ({err.strerror})")
    if judged and not any(rows[f] for f in judged):
        why = "0 bytes" if os.path.getsize(judged[0]) == 0 else "no records"
        others = f", nor do the split's {len(judged) - 1} other files" if len(judged) > 1 else ""
        return judged[0], EmptyFile(why + others)
    return None


def first_bad_record(path: str, column_sets: ColumnSets, split: str = "train") -> Optional[str]:
    """'line N <why>' ('<file> line N <why>' in a folder) of the split's first bad record, or None."""
    files = data_files(path, split)
    problem = split_problem(path, split, column_sets, files, split_members(path, split, files))
    if problem is None or not isinstance(problem[1], BadRecord):
        return None
    return at_record(path, *problem)


def at_record(path: str, file: str, bad: BadRecord) -> str:
    name = f"{file} " if file != path else ""
    where = f"{'row' if file.endswith('.parquet') else 'line'} {bad.line} " if bad.line else ""
    return f"{name}{where}{bad.why}"


def message(key: str, name: str, trainer: str, file: str, problem: DataProblem) -> str:
    """One line: the setting, the file (in a folder), the line or row, what is wrong, and the fix."""
    path = os.path.expanduser(name)
    if isinstance(problem, BadRecord):
        return f"{key}={name}: {at_record(path, file, problem)}. {problem.fix}, or give another {key}."
    what = f"{key}={name}" + (f": {file}" if file != path else "")
    if isinstance(problem, EmptyFile):
        fix = "Write records into it" + (" or remove it" if problem.removable else "")
        return f"{what} is empty ({problem.why}). {fix}, or give another {key}."
    options = NEEDED_COLUMNS[trainer]
    missing = [c for c in options[0] if c not in problem.columns]
    needs = " or ".join(" and ".join(option) for option in options)
    return (f"{what} has columns {', '.join(problem.columns) or '(none)'}; trainer={trainer} needs {needs} (missing "
            f"{', '.join(missing)}). Give records like {EXAMPLE_RECORD[trainer]}, or {key}=tiny.")
