"""Where `grader grade` runs: in this process (`--backend local`) or in a locked-down container (`docker`)."""
