"""The rank sandbox: everything between "run this case on N ranks" and the bytes that come back.

Session side (the matrix session, which holds the expected values): ``launcher`` asks a zygote for
rank groups and exchanges frames with them.  Rank side (a zygote, forked before its session was
told anything, and the processes forked from it, which never hold anything that decides a grade):
``zygote``, ``rank``, ``guard``, ``isolation``.  Both sides speak ``wire`` and share ``status`` slots.
"""
