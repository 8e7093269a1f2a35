"""The original harnessx's built-in tool bundles.

Only ``harnessx.builtin.planning`` (the task list an agent gets with
``AgentConfig(planning=True)``) is here; the other bundles (filesystem, bash, web, memory,
ask) are not supported yet, and importing one says so (docs/compatibility.md).
"""
