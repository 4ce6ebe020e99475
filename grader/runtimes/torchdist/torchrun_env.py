"""The environment ``torchrun`` gives each worker, for a launch of ``nodes`` x ``per_node`` processes.

A rank of the grader is not started by torchrun, but handout code reads what torchrun sets (A4's
``init_distributed`` reads ``RANK``, ``LOCAL_RANK`` and ``WORLD_SIZE``), so every case's rank is
told exactly what torchrun would tell it on the case's layout.  The names and values follow
torch's elastic agent (``torch/distributed/elastic/agent/server/local_elastic_agent.py``,
``_start_workers``): one role, ranks numbered node by node, the agent's defaults for everything a
course's launch line does not set (no restarts, the rendezvous id ``none``, port 29500).
``NODE_RANK`` is torchrun's command-line option, not a worker variable, so it is not set, nor is
``TORCHELASTIC_ERROR_FILE`` (a file in the agent's own temporary directory).
``tests/test_torchrun_env.py`` holds these against a real two-node torchrun launch.
Both sides use this module: the session names the layout, the rank sets the variables.
"""

from __future__ import annotations

MASTER_ADDR = "127.0.0.1"  # the group's own loopback: every "node" of a grading is this namespace
MASTER_PORT = 29500  # torchrun's default --master-port


def torchrun_env(rank: int, nodes: int, per_node: int) -> dict[str, str]:
    """What torchrun sets for global ``rank`` on ``nodes`` nodes of ``per_node`` processes each."""
    world_size = nodes * per_node
    if not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} is not in a launch of {nodes} x {per_node}")
    return {
        "RANK": str(rank),
        "GROUP_RANK": str(rank // per_node),  # the node's index (torchrun's --node-rank)
        "ROLE_RANK": str(rank),  # one role ("default"): its ranks are the global ranks
        "ROLE_NAME": "default",
        "LOCAL_RANK": str(rank % per_node),
        "LOCAL_WORLD_SIZE": str(per_node),
        "WORLD_SIZE": str(world_size),
        "GROUP_WORLD_SIZE": str(nodes),
        "ROLE_WORLD_SIZE": str(world_size),
        "MASTER_ADDR": MASTER_ADDR,
        "MASTER_PORT": str(MASTER_PORT),
        "TORCHELASTIC_RESTART_COUNT": "0",
        "TORCHELASTIC_MAX_RESTARTS": "0",
        "TORCHELASTIC_RUN_ID": "none",
        "TORCHELASTIC_USE_AGENT_STORE": "True",
        "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1",
        "TORCHELASTIC_SIGNALS_TO_HANDLE": "SIGTERM,SIGINT,SIGHUP,SIGQUIT",
    }
