"""Which offload each ZeRO stage supports: the one rule the checks enforce and the planner's grid follows."""
from typing import List


def zero_offload_problems(stage: int, optimizer: str, param: str) -> List[str]:
    """Optimizer offload needs ZeRO >= 1; parameter and NVMe offload ZeRO-3. One message each, with the fix."""
    problems = []
    if param != "none" and stage != 3:
        problems.append(f"offload.param={param} needs zero=stage3 (got zero.stage={stage}); DeepSpeed would "
                        f"silently ignore it. Use zero=stage3 or offload.param=none.")
    if optimizer == "nvme" and stage != 3:
        problems.append(f"offload.optimizer=nvme needs zero=stage3 (got zero.stage={stage}). "
                        f"Use zero=stage3 or offload.optimizer=cpu.")
    elif optimizer != "none" and stage == 0:
        problems.append(f"offload.optimizer={optimizer} needs a ZeRO stage of 1 or more (got zero.stage=0). "
                        f"Use zero=stage2 or offload=none.")
    return problems
