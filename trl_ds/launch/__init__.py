"""Launch commands as argument lists (pure), the launch.sh script, and the one function that spawns them."""
