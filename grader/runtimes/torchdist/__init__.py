"""The torch.distributed runtime: student code in rank processes talking through torch.distributed
on Gloo.

Session side: the launcher (``launcher``: zygote, rank groups, one case at a time), the packet
capture of a group's traffic (``traffic``), the checks of a rank's reply (``replies``), the policy
of built-in collectives (``policy``) and the static analysis of torch.distributed use (``static``),
and ``bench``.  Rank side: the zygote every group is forked from (``zygote``), a rank's life
(``rank``) and its guard (``guard``).  The isolation layers they build on are ``grader.sandbox``'s.
"""
