"""Which files of a local dataset a split loads: the worker hands exactly these to datasets, the check reads them."""
import os
import re
from typing import List

from trl_ds.config.values import LOCAL_DATA_SUFFIXES

# datasets' own convention (datasets/data_files.py, KEYWORDS_IN_FILENAME_BASE_PATTERNS with NON_WORDS_CHARS): a file
# of a split is named for it, then "-", ".", "_", a space or a digit (train.jsonl, train-00000-of-00002.parquet)
SPLIT_NAME_END = "[-._ 0-9]"


def named_for_split(filename: str, split: str) -> bool:
    return re.match(re.escape(split) + SPLIT_NAME_END, filename) is not None


def split_files(path: str, split: str) -> List[str]:
    """The local files `split` loads: the file itself, or the folder's top-level files named for the split, sorted,
    when all are of one data format. [] leaves the path to datasets (no such files, mixed formats, not local)."""
    if os.path.isfile(path):
        files = [path]
    elif os.path.isdir(path):
        files = sorted(os.path.join(path, f) for f in os.listdir(path)
                       if named_for_split(f, split) and os.path.isfile(os.path.join(path, f)))
    else:
        return []
    return files if any(files and all(f.endswith(suffix) for f in files) for suffix in LOCAL_DATA_SUFFIXES) else []
