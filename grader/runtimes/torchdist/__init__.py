"""The torch.distributed runtime: student code in rank processes talking through torch.distributed
on Gloo.

Session side: what a session sets up once (``session``: sandboxing, the zygote's handle), rank
groups (``launcher``: one case at a time; ``runs``: what a case's run returned; ``procfs``), the
portable launcher where the Linux sandbox cannot be built (``portable``), the packet
capture of a group's traffic (``traffic``), the checks of a rank's reply (``replies``), the policy
of built-in collectives (``policy``) and the static analysis of torch.distributed use (``static``),
and ``bench``.  Rank side: the zygote every group is forked from (``zygote``), a rank's life
(``rank``) and its guard (``guard``).  The isolation layers they build on are ``grader.sandbox``'s.
"""
