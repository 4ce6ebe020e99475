"""Rubrics: what is graded and how, loaded from YAML and checked before any submission is graded.

A rubric is checked twice: its shape against ``schemas/rubric.schema.json``, then the rules a schema
cannot state (point sums, every case pattern matching a matrix case, references between sections).
Both report ``FILE:LINE:COL: reason`` at the YAML node at fault.  One concern per module:

    model      the dataclasses the engine reads, and case patterns (``matches``, ``paired``)
    source     the YAML with every value's position; the schema check
    build      schema-valid data -> the model, with every cross-field check
    load       ``load_rubric``: the above in order, against the rubric's pack
    validate   ``grader rubric validate``
"""

from grader.rubric.load import default_rubric_path, load_rubric
from grader.rubric.model import (
    Advice,
    Assignment,
    Bonus,
    CasesScoring,
    CaseWeight,
    Component,
    Condition,
    Deliverable,
    DeliverableScoring,
    Item,
    LatePolicy,
    ManualScoring,
    Rubric,
    Scoring,
    Task,
    Threshold,
    TraceCheck,
    TraceScoring,
    Visibility,
    WrittenQuestion,
    WrittenScoring,
    case_params,
    matches,
    paired,
)
from grader.rubric.validate import main_validate

__all__ = [
    "Advice",
    "Assignment",
    "Bonus",
    "CaseWeight",
    "CasesScoring",
    "Component",
    "Condition",
    "Deliverable",
    "DeliverableScoring",
    "Item",
    "LatePolicy",
    "ManualScoring",
    "Rubric",
    "Scoring",
    "Task",
    "Threshold",
    "TraceCheck",
    "TraceScoring",
    "Visibility",
    "WrittenQuestion",
    "WrittenScoring",
    "case_params",
    "default_rubric_path",
    "load_rubric",
    "main_validate",
    "matches",
    "paired",
]
