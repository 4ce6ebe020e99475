"""The two kinds of failure the CLI tells apart."""


class UserError(Exception):
    """Bad input the user can fix: a malformed rubric, a missing path.  Exit status 1."""


class GraderError(Exception):
    """The grader itself could not run.  Exit status 2; never blamed on a student."""
