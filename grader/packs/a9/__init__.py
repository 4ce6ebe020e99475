"""Assignment 9: collectives with send/recv on Gloo, tensor-parallel and Ulysses forwards.

Session side: ``catalog`` (the cases, pure data), ``expected`` and ``reference_model`` (what each
rank must return).  Rank side: ``bodies`` (calls the student's functions), the only module of this
pack a rank process ever imports.
"""
