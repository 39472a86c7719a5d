"""The name each rank unlinks at exit is the one DeepSpeed's shared-memory all-reduce creates (its C++ source, as
installed); the integration side: test_training's test_a_run_leaves_no_shared_memory_behind."""
import os
import re
from pathlib import Path

import deepspeed

from trl_ds.worker.shm_buffers import own_buffer

SOURCE = Path(deepspeed.__file__).parent / "ops/csrc/cpu/comm"


def test_the_buffer_name_is_the_one_deepspeeds_source_builds():
    shm, interface = (SOURCE / "shm.cpp").read_text(), (SOURCE / "shm_interface.cpp").read_text()
    assert re.search(r'#define SHM_BUFFER_NAME "deepspeed_allreduce_buffer"', shm)
    # prefix: name, uid, MASTER_ADDR, MASTER_PORT; then the rank
    assert re.search(r'"%s_%d_%s_%s",\s*SHM_BUFFER_NAME,\s*getuid\(\),\s*addr_string,\s*port_string', shm)
    assert re.search(r'snprintf\(shm_name, NAME_BUF_SIZE, "%s_%d", shm_name_prefix, rank\);\s*shared_create', shm)
    assert 'getenv("MASTER_ADDR")' in interface and 'getenv("MASTER_PORT")' in interface
    env = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500", "RANK": "1"}
    assert own_buffer(env) == f"/dev/shm/deepspeed_allreduce_buffer_{os.getuid()}_127.0.0.1_29500_1"
