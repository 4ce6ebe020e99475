"""Assignment 9: collectives from point-to-point messages (Task 1), a parallel Transformer block (Task 2)."""
