"""Assignment 5: pipeline parallelism with the all-forward-all-backward schedule, graded from the
Markdown report students hand in.

The report's snippets are placed at the TODO sites of the grader's own CPU/Gloo copy of the starter
(``starter/``, ``splice``) and run in the grader's ranks (``bodies``).  Session side: ``pack`` (the
AssignmentPack), ``catalog`` (the cases), ``expected`` (the trusted baseline) and ``judge`` (what
only this assignment checks: answers, and the schedule read off the wire).
"""
