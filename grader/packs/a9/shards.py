"""The tensor-parallel attributes the handout names (``*_shard``) and the full parameters they
shard: the handout's public contract, shared by the session (``expected``) and the ranks
(``bodies``), which must never import the catalog."""

#: The attributes the handout names for ``init_tensor_parallel_shards``: the only state of an
#: initialised block that reaches its tensor-parallel forward (see ``expected.carry``).
SHARD_NAMES = (
    "q_proj_shard",
    "k_proj_shard",
    "v_proj_shard",
    "o_proj_shard",
    "fc1_shard",
    "fc1_bias_shard",
    "fc2_shard",
)
#: The full parameters those attributes shard: NaN in the forward's block, never sent to its process.
SHARDED = ("q_proj.weight", "k_proj.weight", "v_proj.weight", "o_proj.weight", "fc1.weight", "fc1.bias", "fc2.weight")
