"""The error every pd2bw-torch command raises for bad input."""


class UsageError(Exception):
    """A bad flag, file or combination: __main__ prints it as one 'pd2bw-torch: error: ...' line, exit 2."""


class RunFailure(Exception):
    """A run that started and then failed (a diverged step): 'pd2bw-torch: error: ...', exit 1."""
