"""Assignment packs: the assignment-specific code (cases, rank-side bodies, expected values)."""
