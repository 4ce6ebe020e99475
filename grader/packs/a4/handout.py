"""The numbers the A4 handout fixes, stated once for both sides (no imports: ranks load it too).

``global_batch_size = 128``, ``input_dim = 64``, ``output_dim = 32``, ``seed = 42``, and the SGD
learning rate 0.5 every part uses.
"""

GLOBAL_BATCH, INPUT_DIM, OUTPUT_DIM = 128, 64, 32
LR = 0.5
HANDOUT_SEED = 42
