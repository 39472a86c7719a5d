"""One error type for user mistakes: every problem at once, each with the override that fixes it."""
from typing import Iterable, List


class ConfigError(Exception):
    """Raised before anything spawns; the app prints it and exits with code 2 (no traceback)."""

    def __init__(self, problems: Iterable[str]):
        self.problems: List[str] = list(problems)
        super().__init__(self.render())

    def render(self) -> str:
        if len(self.problems) == 1:
            return self.problems[0]
        lines = [f"{len(self.problems)} problems in the config:"]
        lines += [f"  - {p}" for p in self.problems]
        return "\n".join(lines)


EXIT_USER_ERROR = 2
