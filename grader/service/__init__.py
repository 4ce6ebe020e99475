"""The grading service (``grader serve``): one more door onto the same pipeline.

A push arrives as a git bundle with a token that proves who sends it (``oidc``, ``tokens``); it is
taken as data and queued before the answer (``intake``, ``queue``, ``db``); the batch's warm graders
grade it under the grade of record's secret and the assignment's rubric (``workers``); the API
(``app``) answers its status, results, report and the instructor's gradebook (``read``).  The
configuration is YAML checked against ``grader/schemas/service-config.schema.json`` (``config``).
"""
